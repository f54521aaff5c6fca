"""Definitions: validated workflows (versions, cycles, unknown names) and pools (where agents call)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User

from agents.models import AgentEndpoint, AgentPool
from agents.services import pool_save
from sas_project.errors import InvalidInput
from scheduler.definitions import step_plain, workflow_create
from scheduler.models import Workflow
from tests.factories import make_policy, make_pool, step
from tests.processes import ROOT

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _basics() -> None:
    make_pool()
    make_policy()


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([step("a", "b"), step("b", "a")], "cycle"),
        ([step("a", "a")], "depends on itself"),
        ([step("a", "ghost")], "unknown step 'ghost'"),
        ([step("a", pool="nowhere")], "unknown pool 'nowhere'"),
        ([step("a", policy="nothing")], "unknown policy 'nothing'"),
        ([step("a"), step("a")], "appears twice"),
        ([], "non-empty list"),
        ([{"name": "a"}], "unknown pool"),
        ([step("a", path="not a dotted path")], "dotted path"),
        ([{**step("a"), "surprise": 1}], "unknown fields"),
        ("steps", "non-empty list"),
    ],
)
def test_a_bad_workflow_is_refused_naming_the_problem_and_nothing_is_stored(
    steps: object, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        workflow_create(name="bad", steps=steps)
    assert not Workflow.objects.filter(name="bad").exists()


def test_saving_a_workflow_again_makes_the_next_version_and_records_who() -> None:
    ada = User.objects.create_user("ada")
    first = workflow_create(name="w", steps=[step("a")], actor=ada)
    second = workflow_create(name="w", steps=[step("a"), step("b", "a")], actor=ada)
    assert (first.version, second.version) == (1, 2)
    assert second.created_by == ada
    assert LogEntry.objects.filter(object_id=str(second.pk), user=ada).exists()
    assert list(first.steps.values_list("name", flat=True)) == ["a"]


def test_steps_are_stored_in_an_order_that_respects_their_dependencies() -> None:
    workflow = workflow_create(name="w", steps=[step("c", "b"), step("b", "a"), step("a")])
    assert list(workflow.steps.order_by("position").values_list("name", flat=True)) == ["a", "b", "c"]


@pytest.mark.parametrize(
    "url",
    [
        "ftp://payments.internal",
        "file:///etc/passwd",
        "gopher://x",
        "http://user:pw@payments.internal",
        "http://",
        "http://payments.internal/?q=1",
        "not a url",
        "",
    ],
)
def test_an_endpoint_that_is_not_plain_http_is_refused(url: str) -> None:
    with pytest.raises(InvalidInput):
        pool_save(name="web", kind="http", endpoints=[url])
    assert not AgentPool.objects.filter(name="web").exists()


def test_hosts_outside_the_allowed_list_are_refused(settings: object) -> None:
    settings.SAS_AGENT_ALLOWED_HOSTS = ["payments.internal", "127.0.0.1:8100"]  # type: ignore[attr-defined]
    pool_save(name="ok", kind="http", endpoints=["https://payments.internal", "http://127.0.0.1:8100"])
    for url in ("http://169.254.169.254/latest", "http://127.0.0.1:5432", "http://evil.example"):
        with pytest.raises(InvalidInput, match="SAS_AGENT_ALLOWED_HOSTS"):
            pool_save(name="bad", kind="http", endpoints=[url])


def test_a_secret_left_empty_on_update_is_kept_and_recorded_nowhere() -> None:
    admin = User.objects.create_user("root")
    pool = pool_save(
        name="pay",
        kind="http",
        actor=admin,
        endpoints=[
            {
                "url": "http://pay.internal",
                "secret_header_name": "Authorization",
                "secret_header_value": "Bearer s3cret",
            }
        ],
    )
    pool_save(
        name="pay",
        kind="http",
        pool=pool,
        actor=admin,
        endpoints=[{"url": "http://pay.internal", "secret_header_name": "Authorization"}],
    )
    endpoint = AgentEndpoint.objects.get(pool=pool)
    assert endpoint.secret_header_value == "Bearer s3cret"
    assert not LogEntry.objects.filter(change_message__contains="s3cret").exists()


def test_a_python_pool_has_no_endpoints_and_an_alternate_is_of_the_same_kind() -> None:
    with pytest.raises(InvalidInput, match="no endpoints"):
        pool_save(name="py", kind="python", endpoints=["http://x.internal"])
    pool_save(name="web", kind="http", endpoints=["http://x.internal"])
    with pytest.raises(InvalidInput, match="same kind"):
        pool_save(name="py", kind="python", alternate="web")
    with pytest.raises(InvalidInput, match="own alternate"):
        pool_save(name="web2", kind="http", alternate="web2")


def _check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.django_db(transaction=False)
def test_check_deploy_passes_with_production_settings() -> None:
    env = {
        **os.environ,
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),
        "DJANGO_SECURE": "1",
        "DJANGO_DEBUG": "0",
        "DJANGO_ALLOWED_HOSTS": "sas.example.com",
    }
    result = _check_deploy(env)
    assert result.returncode == 0, result.stdout + result.stderr
    # And the check bites: the demo defaults are not production settings.
    demo = {k: v for k, v in env.items() if k not in ("DJANGO_SECRET_KEY", "DJANGO_SECURE")}
    assert _check_deploy(demo).returncode != 0


@pytest.mark.parametrize("name", ["has space", "x" * 101, "", "semi;colon"])
def test_a_policy_name_must_be_usable_in_a_url(name: str) -> None:
    from supervisor.policies import policy_create

    with pytest.raises(InvalidInput, match="policy name"):
        policy_create(name=name, actor=None)


def test_an_operation_path_or_a_secret_too_long_for_its_column_is_refused() -> None:
    with pytest.raises(InvalidInput, match="300 characters"):
        workflow_create(name="long", steps=[step("a", path="agents." + "x" * 300)])
    with pytest.raises(InvalidInput, match="500 characters"):
        pool_save(
            name="web",
            kind="http",
            endpoints=[
                {"url": "http://x.internal", "secret_header_name": "X-Key", "secret_header_value": "k" * 501}
            ],
        )


def test_a_pool_saved_unchanged_writes_no_audit_entry() -> None:
    admin = User.objects.create_user("root")
    pool = pool_save(name="web", kind="http", endpoints=["http://x.internal"], actor=admin)
    pool_save(name="web", kind="http", endpoints=["http://x.internal"], pool=pool, actor=admin)
    pool_save(name="web", kind="http", endpoints=["http://y.internal"], pool=pool, actor=admin)
    entries = list(LogEntry.objects.filter(object_id=str(pool.pk)).order_by("id"))
    assert [e.action_flag for e in entries] == [1, 2]
    assert "endpoints" in entries[1].change_message


@pytest.mark.sqlite
@pytest.mark.parametrize(
    ("feature", "outcome_plain"),
    [
        ({"when": "input.go"}, True),
        ({"for_each": "input.lines"}, True),
        ({"for_each": "input.lines", "join": {"mode": "any"}}, False),
        ({"output": "output.id"}, False),
    ],
)
def test_a_step_with_a_feature_the_fast_path_does_not_run_makes_the_version_not_plain(
    feature: dict[str, object], outcome_plain: bool
) -> None:
    plain = workflow_create(name="plain", steps=[step("a"), step("b", "a", path="agents.builtin.echo")])
    assert plain.plain and all(d.plain_outcome for d in plain.steps.all())
    featured = workflow_create(name="featured", steps=[step("a"), {**step("b", "a"), **feature}])
    assert not featured.plain
    assert {d.name: d.plain_outcome for d in featured.steps.all()} == {"a": True, "b": outcome_plain}


@pytest.mark.sqlite
def test_a_wait_or_a_sub_workflow_step_makes_the_version_not_plain() -> None:
    workflow_create(name="child", steps=[step("a")])
    for name, other in [
        ("signalled", {"name": "w", "kind": "signal", "signal": "go"}),
        ("timed", {"name": "w", "kind": "timer", "wait_seconds": 5}),
        ("parent", {"name": "w", "kind": "workflow", "workflow": "child"}),
    ]:
        assert not workflow_create(name=name, steps=[step("a"), other]).plain, name


@pytest.mark.sqlite
def test_a_field_the_fast_path_does_not_know_makes_a_step_not_plain() -> None:
    """What a later feature of the language adds to a step is not plain until PLAIN_FIELDS says
    the SQL runs it: no SQL needs to learn to refuse it."""
    spec = {
        "name": "a",
        "kind": "call",
        "pool": None,
        "policy": None,
        "path": "x",
        "when": "",
        "depends_on": [],
    }
    assert step_plain(spec)
    assert not step_plain({**spec, "some_later_feature": "on"})
    assert step_plain({**spec, "some_later_feature": None})
