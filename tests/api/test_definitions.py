"""REST API: remediation policies, agent pools and workflows. Administrators create and change
them, through the same services as the admin; every change records who made it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.utils import timezone
from rest_framework.test import APIClient

from agents.fake import FakeRemote
from agents.models import AgentEndpoint, AgentPool
from scheduler.models import Attempt, Job, PolicyRevision, RemediationPolicy, StepDefinition, Workflow
from scheduler.services import job_submit
from tests.api.support import V1, client_for, make_user, submit
from tests.factories import chain, make_policy, make_pool, make_workflow, step

pytestmark = pytest.mark.django_db


@pytest.fixture
def ada() -> APIClient:
    return client_for(make_user("ada", "administrators"))


@pytest.fixture
def olga() -> APIClient:
    return client_for(make_user("olga", "operators"))


@pytest.fixture
def alice() -> APIClient:
    return client_for(make_user("alice", "submitters"))


def logged(obj: Any, flag: int) -> list[str]:
    return [e.user.username for e in LogEntry.objects.filter(object_id=str(obj.pk), action_flag=flag)]


# --- policies ---------------------------------------------------------------------------------

STANDARD = {
    "name": "standard",
    "timeout_seconds": 5,
    "max_attempts": 4,
    "backoff_initial_seconds": 1,
    "backoff_multiplier": 2,
    "backoff_max_seconds": 10,
    "backoff_jitter": 0.5,
    "retry_on": ["transient_failure", "no_answer"],
    "reassign_after_attempts": None,
    "on_exhausted": "hold",
    "reconcile_before_retry": True,
    "step_budget_seconds": 120,
}


def test_creating_a_policy_makes_version_1_recorded_with_its_author(ada: APIClient) -> None:
    response = ada.post(f"{V1}/policies/", STANDARD, format="json")
    assert response.status_code == 201
    assert response["Location"] == f"{V1}/policies/standard/"
    body = response.json()
    assert body["version"] == 1
    assert {k: body[k] for k in STANDARD} == {
        **STANDARD,
        "timeout_seconds": 5.0,
        "step_budget_seconds": 120.0,
    }
    policy = RemediationPolicy.objects.get(name="standard")
    revision = PolicyRevision.objects.get(policy=policy)
    assert revision.version == 1 and revision.changed_by.username == "ada"
    assert logged(policy, ADDITION) == ["ada"]


def test_settings_left_out_take_their_defaults(ada: APIClient) -> None:
    body = ada.post(f"{V1}/policies/", {"name": "plain"}, format="json").json()
    assert body["max_attempts"] == 3 and body["on_exhausted"] == "compensate"
    assert body["retry_on"] == ["transient_failure", "no_answer"]


def test_a_policy_is_read_by_name_and_listed(olga: APIClient) -> None:
    make_policy("standard")
    make_policy("fast")
    assert olga.get(f"{V1}/policies/standard/").json()["name"] == "standard"
    assert [p["name"] for p in olga.get(f"{V1}/policies/").json()["results"]] == ["fast", "standard"]
    assert olga.get(f"{V1}/policies/nope/").status_code == 404


def test_patch_makes_a_new_version_and_records_who_changed_what(ada: APIClient) -> None:
    ada.post(f"{V1}/policies/", STANDARD, format="json")
    response = ada.patch(f"{V1}/policies/standard/", {"max_attempts": 6}, format="json")
    assert response.status_code == 200
    assert response.json()["version"] == 2 and response.json()["max_attempts"] == 6
    assert response.json()["timeout_seconds"] == 5
    revisions = ada.get(f"{V1}/policies/standard/revisions/").json()
    assert revisions["count"] == 2
    latest = revisions["results"][0]
    assert latest["version"] == 2 and latest["changed_by"] == "ada"
    assert latest["changes"] == {"max_attempts": [4, 6]} and latest["settings"]["max_attempts"] == 6
    assert logged(RemediationPolicy.objects.get(name="standard"), CHANGE) == ["ada"]


def test_a_heartbeat_interval_is_a_setting_of_the_policy_and_of_its_revisions(ada: APIClient) -> None:
    body = ada.post(f"{V1}/policies/", {**STANDARD, "heartbeat_seconds": 2}, format="json").json()
    assert body["heartbeat_seconds"] == 2.0
    response = ada.patch(f"{V1}/policies/standard/", {"heartbeat_seconds": None}, format="json")
    assert response.status_code == 200 and response.json()["heartbeat_seconds"] is None
    first, second = PolicyRevision.objects.filter(policy__name="standard").order_by("version")
    assert first.settings["heartbeat_seconds"] == 2
    assert second.settings["heartbeat_seconds"] is None and second.changes == {"heartbeat_seconds": [2, None]}


def test_a_policy_needs_no_heartbeat_interval(ada: APIClient) -> None:
    assert ada.post(f"{V1}/policies/", STANDARD, format="json").json()["heartbeat_seconds"] is None


@pytest.mark.parametrize("value", [0, -1, 1e12])
def test_a_heartbeat_interval_must_be_positive_and_sensible(ada: APIClient, value: float) -> None:
    response = ada.post(f"{V1}/policies/", {**STANDARD, "heartbeat_seconds": value}, format="json")
    assert response.status_code == 400 and response.json()["field"] == "heartbeat_seconds"
    assert not RemediationPolicy.objects.filter(name="standard").exists()


def test_a_patch_that_changes_nothing_makes_no_version(ada: APIClient) -> None:
    ada.post(f"{V1}/policies/", STANDARD, format="json")
    assert ada.patch(f"{V1}/policies/standard/", {"max_attempts": 4}, format="json").json()["version"] == 1


def test_put_needs_every_setting_and_accepts_the_representation_back(ada: APIClient) -> None:
    created = ada.post(f"{V1}/policies/", STANDARD, format="json").json()
    partial = ada.put(f"{V1}/policies/standard/", {"max_attempts": 6}, format="json")
    assert partial.status_code == 400 and partial.json()["field"] == "timeout_seconds"
    response = ada.put(f"{V1}/policies/standard/", {**created, "on_exhausted": "fail"}, format="json")
    assert response.status_code == 200
    assert response.json()["on_exhausted"] == "fail" and response.json()["version"] == 2


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"name": "bad name"}, "name", "does not match"),
        ({"name": "p", "timeout_seconds": 0}, "timeout_seconds", "greater than 0"),
        ({"name": "p", "timeout_seconds": "soon"}, "timeout_seconds", "A valid number is required."),
        ({"name": "p", "max_attempts": 0}, "max_attempts", "at least 1"),
        ({"name": "p", "max_attempts": 2**40}, "max_attempts", "less than or equal to"),
        ({"name": "p", "backoff_jitter": 2}, "backoff_jitter", "between 0 and 1"),
        ({"name": "p", "retry_on": ["everything"]}, "retry_on", "not a valid choice"),
        ({"name": "p", "on_exhausted": "panic"}, "on_exhausted", "not a valid choice"),
        ({"name": "p", "colour": "red"}, "colour", "Unknown field."),
        ({"timeout_seconds": 1}, "name", "This field is required."),
    ],
)
def test_a_bad_policy_is_a_400_naming_the_field_and_creates_nothing(
    ada: APIClient, body: dict[str, Any], field: str, message: str
) -> None:
    response = ada.post(f"{V1}/policies/", body, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == field and message in response.json()["detail"]
    assert RemediationPolicy.objects.count() == 0 and PolicyRevision.objects.count() == 0


def test_a_policy_name_in_use_is_a_400(ada: APIClient) -> None:
    make_policy("standard")
    response = ada.post(f"{V1}/policies/", {"name": "standard"}, format="json")
    assert response.status_code == 400 and "already exists" in response.json()["detail"]


def test_a_bad_change_is_a_400_and_keeps_the_version(ada: APIClient) -> None:
    ada.post(f"{V1}/policies/", STANDARD, format="json")
    for body in ({"backoff_max_seconds": 0.5}, {"name": "renamed"}, {"max_attempts": None}):
        response = ada.patch(f"{V1}/policies/standard/", body, format="json")
        assert response.status_code == 400, body
    assert RemediationPolicy.objects.get(name="standard").version == 1
    assert ada.patch(f"{V1}/policies/unknown/", {"max_attempts": 2}, format="json").status_code == 404


# --- pools ------------------------------------------------------------------------------------


def test_creating_a_pool_keeps_its_secret_write_only(ada: APIClient) -> None:
    body = {
        "name": "payments",
        "kind": "http",
        "endpoints": [
            "http://127.0.0.1:9000/",
            {
                "url": "https://pay.example.com",
                "secret_header_name": "Authorization",
                "secret_header_value": "Bearer s3cret",
            },
        ],
    }
    response = ada.post(f"{V1}/pools/", body, format="json")
    assert response.status_code == 201
    assert "s3cret" not in response.content.decode()
    pool = response.json()
    assert pool["name"] == "payments" and pool["kind"] == "http" and pool["alternate"] is None
    assert [e["url"] for e in pool["endpoints"]] == ["http://127.0.0.1:9000", "https://pay.example.com"]
    assert [e["secret_header_set"] for e in pool["endpoints"]] == [False, True]
    assert pool["endpoints"][1]["secret_header_name"] == "Authorization"
    assert "secret_header_value" not in pool["endpoints"][1]
    assert pool["endpoints"][0]["circuit_open_until"] is None and pool["endpoints"][0]["recent_calls"] == 0
    stored = AgentEndpoint.objects.get(url="https://pay.example.com")
    assert stored.secret_header_value == "Bearer s3cret"
    assert logged(AgentPool.objects.get(name="payments"), ADDITION) == ["ada"]
    assert "s3cret" not in ada.get(f"{V1}/pools/payments/").content.decode()
    assert "s3cret" not in ada.get(f"{V1}/pools/").content.decode()


def test_a_pool_shows_the_health_of_its_endpoints(olga: APIClient, ada: APIClient) -> None:
    ada.post(f"{V1}/pools/", {"name": "inventory", "endpoints": ["http://127.0.0.1:9000"]}, format="json")
    endpoint = AgentEndpoint.objects.get()
    chain(n=1)
    job = Job.objects.get(pk=submit(olga, "chain").json()["id"])
    now = timezone.now()
    for number, outcome in enumerate(["transient_failure", "no_answer", "succeeded"], start=2):
        Attempt.objects.create(
            step=job.steps.get(),
            number=number,
            pool=endpoint.pool,
            endpoint=endpoint,
            policy_version=1,
            dispatched_at=now,
            deadline=now,
            finished_at=now,
            outcome=outcome,
        )
    AgentEndpoint.objects.filter(pk=endpoint.pk).update(circuit_open_until=now)
    shown = olga.get(f"{V1}/pools/inventory/").json()["endpoints"][0]
    assert (shown["recent_calls"], shown["recent_bad"]) == (3, 2)
    assert shown["circuit_open_until"] is not None


def test_patch_of_a_pool_keeps_what_it_does_not_mention(ada: APIClient) -> None:
    make_pool("backup", kind="http", endpoints=["http://127.0.0.1:9001"])
    ada.post(
        f"{V1}/pools/",
        {
            "name": "payments",
            "endpoints": [
                {"url": "http://127.0.0.1:9000", "secret_header_name": "X-Key", "secret_header_value": "k"}
            ],
        },
        format="json",
    )
    response = ada.patch(f"{V1}/pools/payments/", {"alternate": "backup"}, format="json")
    assert response.status_code == 200 and response.json()["alternate"] == "backup"
    endpoint = AgentEndpoint.objects.get(pool__name="payments")
    assert (endpoint.url, endpoint.secret_header_name, endpoint.secret_header_value) == (
        "http://127.0.0.1:9000",
        "X-Key",
        "k",
    )
    assert logged(AgentPool.objects.get(name="payments"), CHANGE) == ["ada"]


def test_put_replaces_the_endpoints_and_can_rename_the_pool(ada: APIClient) -> None:
    ada.post(f"{V1}/pools/", {"name": "old", "endpoints": ["http://127.0.0.1:9000"]}, format="json")
    current = ada.get(f"{V1}/pools/old/").json()
    response = ada.put(
        f"{V1}/pools/old/",
        {**current, "name": "new", "endpoints": [*current["endpoints"], "http://127.0.0.1:9002"]},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert response.json()["name"] == "new"
    assert [e["url"] for e in response.json()["endpoints"]] == [
        "http://127.0.0.1:9000",
        "http://127.0.0.1:9002",
    ]
    assert ada.get(f"{V1}/pools/old/").status_code == 404
    missing = ada.put(f"{V1}/pools/new/", {"kind": "http"}, format="json")
    assert missing.status_code == 400 and missing.json()["field"] in {"endpoints", "alternate"}


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"name": "p", "endpoints": ["ftp://host"]}, "endpoints", "must use http or https"),
        ({"name": "p", "endpoints": ["http://user:pw@host"]}, "endpoints", "credentials"),
        ({"name": "p", "endpoints": [5]}, "endpoints", "Expected a URL or an object"),
        ({"name": "p", "endpoints": [{"link": "http://host"}]}, "endpoints", "Unknown field."),
        ({"name": "p", "endpoints": "http://host"}, "endpoints", "Expected a list"),
        ({"name": "p", "kind": "smtp"}, "kind", "not a valid choice"),
        ({"name": "p", "kind": "python", "endpoints": ["http://host"]}, "endpoints", "no endpoints"),
        ({"name": "p", "alternate": "nowhere"}, "alternate", "unknown alternate pool 'nowhere'"),
        ({"name": "bad name!"}, "name", "letters, digits"),
        (
            {"name": "p", "endpoints": [{"url": "http://h", "secret_header_value": "v" * 501}]},
            "endpoints",
            "no more than 500 characters",
        ),
    ],
)
def test_a_bad_pool_is_a_400_naming_the_field_and_creates_nothing(
    ada: APIClient, body: dict[str, Any], field: str, message: str
) -> None:
    response = ada.post(f"{V1}/pools/", body, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == field and message in response.json()["detail"]
    assert AgentPool.objects.count() == 0 and AgentEndpoint.objects.count() == 0


@pytest.mark.parametrize(
    "header",
    [
        "Host",
        "content-length",
        "Transfer-Encoding",
        "CONNECTION",
        "Content-Type",
        "Idempotency-Key",
        "X-SAS-Attempt",
        "x-sas-callback-url",
        "Proxy-Authorization",
    ],
)
def test_a_secret_header_with_a_reserved_name_is_a_400_naming_the_field(ada: APIClient, header: str) -> None:
    endpoint = {"url": "https://pay.example.com", "secret_header_name": header, "secret_header_value": "v"}
    response = ada.post(f"{V1}/pools/", {"name": "p", "endpoints": [endpoint]}, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["field"] == "endpoints"
    assert "secret_header_name" in response.json()["detail"] and "reserved" in response.json()["detail"]
    assert AgentPool.objects.count() == 0


def test_a_queue_pools_broker_user_name_is_not_held_to_header_names(ada: APIClient, settings: Any) -> None:
    settings.SAS_OUTBOUND_INTERNAL_HOSTS = ["mq.internal"]
    endpoint = {
        "url": "redis://mq.internal:6379/0",
        "secret_header_name": "app.user@example",
        "secret_header_value": "pw",
    }
    response = ada.post(
        f"{V1}/pools/", {"name": "mq", "kind": "queue", "endpoints": [endpoint]}, format="json"
    )
    assert response.status_code == 201, response.json()


def test_an_endpoint_replaced_by_one_on_another_host_takes_no_secret_along(ada: APIClient) -> None:
    secret = {"secret_header_name": "Authorization", "secret_header_value": "Bearer s3cret"}
    ada.post(
        f"{V1}/pools/",
        {"name": "pay", "endpoints": [{"url": "https://pay.example.com", **secret}]},
        format="json",
    )
    moved = {"url": "https://elsewhere.example.net", "secret_header_name": "Authorization"}
    response = ada.patch(f"{V1}/pools/pay/", {"endpoints": [moved]}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["endpoints"][0]["secret_header_set"] is False
    assert AgentEndpoint.objects.get().secret_header_value == ""


def test_an_endpoint_host_outside_the_allowed_hosts_is_refused(ada: APIClient, settings: Any) -> None:
    settings.SAS_AGENT_ALLOWED_HOSTS = ["agents.internal"]
    response = ada.post(f"{V1}/pools/", {"name": "p", "endpoints": ["http://evil.example"]}, format="json")
    assert response.status_code == 400 and "SAS_AGENT_ALLOWED_HOSTS" in response.json()["detail"]
    ok = ada.post(f"{V1}/pools/", {"name": "p", "endpoints": ["http://agents.internal:8000"]}, format="json")
    assert ok.status_code == 201


# --- workflows --------------------------------------------------------------------------------


def order_steps(**overrides: Any) -> list[dict[str, Any]]:
    return [
        {"name": "reserve", "pool": "local", "path": "agents.builtin.noop", "policy": "default"},
        {
            "name": "charge",
            "pool": "local",
            "path": "agents.builtin.noop",
            "compensation_path": "agents.builtin.noop",
            "depends_on": ["reserve"],
            "policy": "default",
            **overrides,
        },
    ]


@pytest.fixture
def definitions() -> None:
    make_pool()
    make_policy()


@pytest.mark.usefixtures("definitions")
def test_creating_a_workflow_makes_version_1_by_its_author(ada: APIClient) -> None:
    body = {"name": "order", "description": "Orders.", "deadline_seconds": 600, "steps": order_steps()}
    response = ada.post(f"{V1}/workflows/", body, format="json")
    assert response.status_code == 201, response.json()
    created = response.json()
    assert created["version"] == 1 and created["created_by"] == "ada" and created["deadline_seconds"] == 600
    assert [s["name"] for s in created["steps"]] == ["reserve", "charge"]
    assert created["steps"][1] == {
        "name": "charge",
        "kind": "call",
        "pool": "local",
        "path": "agents.builtin.noop",
        "status_path": "",
        "compensation_path": "agents.builtin.noop",
        "cancel_path": None,
        "depends_on": ["reserve"],
        "policy": "default",
        "when": "",
        "run_if_skipped": False,
        "input": None,
        "output": "",
        "for_each": "",
        "item_key": "",
        "max_parallel": None,
        "join": None,
        "concurrency": None,
        "rate": None,
    }
    workflow = Workflow.objects.get(name="order")
    assert workflow.created_by.username == "ada"
    assert logged(workflow, ADDITION) == ["ada"]


@pytest.mark.usefixtures("definitions")
def test_a_submitter_reads_workflows_to_know_what_to_submit(alice: APIClient, ada: APIClient) -> None:
    ada.post(f"{V1}/workflows/", {"name": "order", "steps": order_steps()}, format="json")
    assert [w["name"] for w in alice.get(f"{V1}/workflows/").json()["results"]] == ["order"]
    assert alice.get(f"{V1}/workflows/order/").json()["version"] == 1
    assert (
        alice.post(f"{V1}/workflows/", {"name": "x", "steps": order_steps()}, format="json").status_code
        == 403
    )


@pytest.mark.usefixtures("definitions")
def test_put_and_patch_make_the_next_version_and_old_jobs_keep_theirs(ada: APIClient) -> None:
    ada.post(f"{V1}/workflows/", {"name": "order", "steps": order_steps()}, format="json")
    job_id = submit(ada, "order").json()["id"]
    put = ada.put(
        f"{V1}/workflows/order/",
        {"description": "v2", "deadline_seconds": None, "steps": order_steps(depends_on=[])},
        format="json",
    )
    assert put.status_code == 200 and put.json()["version"] == 2
    patch = ada.patch(f"{V1}/workflows/order/", {"description": "v3"}, format="json")
    assert patch.status_code == 200
    assert patch.json()["version"] == 3 and patch.json()["description"] == "v3"
    assert patch.json()["steps"] == put.json()["steps"]
    assert [w["version"] for w in ada.get(f"{V1}/workflows/").json()["results"]] == [3]
    assert ada.get(f"{V1}/workflows/order/", {"version": 1}).json()["description"] == ""
    assert ada.get(f"{V1}/workflows/order/", {"version": 9}).status_code == 404
    assert ada.get(f"{V1}/workflows/order/", {"version": "latest"}).status_code == 400
    assert ada.get(f"{V1}/jobs/{job_id}/").json()["workflow_version"] == 1
    assert submit(ada, "order").json()["workflow_version"] == 3
    assert logged(Workflow.objects.get(name="order", version=3), ADDITION) == ["ada"]


@pytest.mark.usefixtures("definitions")
def test_put_needs_every_field_and_the_same_name(ada: APIClient) -> None:
    ada.post(f"{V1}/workflows/", {"name": "order", "steps": order_steps()}, format="json")
    missing = ada.put(f"{V1}/workflows/order/", {"steps": order_steps()}, format="json")
    assert missing.status_code == 400 and missing.json()["field"] in {"description", "deadline_seconds"}
    renamed = ada.patch(f"{V1}/workflows/order/", {"name": "other"}, format="json")
    assert renamed.status_code == 400 and renamed.json()["field"] == "name"
    assert ada.patch(f"{V1}/workflows/nope/", {"description": "x"}, format="json").status_code == 404
    assert Workflow.objects.filter(name="order").count() == 1


@pytest.mark.usefixtures("definitions")
def test_a_workflow_name_in_use_is_a_400_pointing_at_put(ada: APIClient) -> None:
    make_workflow("order", step("a"))
    response = ada.post(f"{V1}/workflows/", {"name": "order", "steps": order_steps()}, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "name" and "PUT or PATCH" in response.json()["detail"]


@pytest.mark.usefixtures("definitions")
@pytest.mark.parametrize(
    ("steps", "message"),
    [
        (order_steps(depends_on=["ghost"]), "depends on unknown step 'ghost'"),
        (order_steps(pool="nowhere"), "unknown pool 'nowhere'"),
        (order_steps(policy="lenient"), "unknown policy 'lenient'"),
        (
            [
                {
                    "name": "a",
                    "pool": "local",
                    "path": "agents.builtin.noop",
                    "policy": "default",
                    "depends_on": ["b"],
                },
                {
                    "name": "b",
                    "pool": "local",
                    "path": "agents.builtin.noop",
                    "policy": "default",
                    "depends_on": ["a"],
                },
            ],
            "cycle",
        ),
        (order_steps(path="/not/dotted"), "not a dotted path"),
        (order_steps(path="x" * 301), "no more than 300 characters"),
        (order_steps(colour="red"), "Unknown field."),
        ([], "non-empty list of steps"),
        ("reserve", "Expected a list"),
        ([{"name": "a"}], "This field is required."),
    ],
)
def test_a_bad_workflow_is_a_400_naming_the_problem_and_creates_nothing(
    ada: APIClient, steps: Any, message: str
) -> None:
    response = ada.post(f"{V1}/workflows/", {"name": "order", "steps": steps}, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "steps" and message in response.json()["detail"], response.json()
    assert Workflow.objects.count() == 0 and StepDefinition.objects.count() == 0


@pytest.mark.usefixtures("definitions")
def test_the_error_names_the_step_in_error(ada: APIClient) -> None:
    response = ada.post(f"{V1}/workflows/", {"name": "order", "steps": order_steps(pool=None)}, format="json")
    assert response.status_code == 400
    assert response.json()["detail"] == "steps[1].pool: This field may not be null."
    assert response.json()["steps"]["1"] == {"pool": ["This field may not be null."]}
    assert json.loads(response.content)["code"] == "invalid"


# --- deleting definitions, and optional fields ----------------------------------------------------


def test_definitions_no_job_uses_are_deleted_and_used_ones_name_a_job(fake_remote: FakeRemote) -> None:
    chain(n=1)
    make_workflow("unused", step("a"))
    make_policy("spare")
    admin = client_for(make_user("ada", "administrators"))
    job = job_submit(workflow="chain", input={}).job
    assert admin.delete(f"{V1}/workflows/unused/").status_code == 204
    refused = admin.delete(f"{V1}/workflows/chain/")
    assert refused.status_code == 409 and str(job.pk) in refused.json()["detail"]
    assert admin.delete(f"{V1}/policies/spare/").status_code == 204
    assert admin.delete(f"{V1}/policies/default/").status_code == 409
    pool = admin.delete(f"{V1}/pools/local/")
    assert pool.status_code == 409 and "job" in pool.json()["detail"]
    admin.post(f"{V1}/pools/", {"name": "spare", "kind": "python"}, format="json")
    assert admin.delete(f"{V1}/pools/spare/").status_code == 204


@pytest.mark.sqlite
def test_optional_definition_fields_accept_null(fake_remote: FakeRemote) -> None:
    make_pool()
    make_policy()
    admin = client_for(make_user("ada", "administrators"))
    body = {
        "name": "nulls",
        "description": None,
        "deadline_seconds": None,
        "steps": [
            {
                "name": "a",
                "pool": "local",
                "path": "agents.builtin.noop",
                "policy": "default",
                "status_path": None,
                "compensation_path": None,
                "depends_on": None,
            }
        ],
    }
    response = admin.post(f"{V1}/workflows/", body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["steps"][0]["status_path"] == ""
    assert (
        admin.post(
            f"{V1}/pools/",
            {"name": "p2", "kind": "python", "alternate": None, "endpoints": None},
            format="json",
        ).status_code
        == 201
    )
    # A required field is still required.
    assert admin.post(f"{V1}/workflows/", {**body, "name": None}, format="json").status_code == 400
