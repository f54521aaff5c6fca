"""The Django admin: audited policy edits, validated and versioned workflows, pools with write-only
secrets, read-only jobs and steps whose actions go through the operator services, and schedules
held to the same rules as the API."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, User
from django.test import Client, RequestFactory
from django_q.models import Failure

from agents.fake import FakeRemote
from agents.models import AgentEndpoint, AgentPool
from sas_project.permissions import role_groups_ensure
from scheduler.models import (
    Delivery,
    DeliveryKind,
    Event,
    Job,
    JobStatus,
    Outcome,
    PolicyRevision,
    RemediationPolicy,
    Schedule,
    Step,
    StepStatus,
    Workflow,
)
from scheduler.services import job_submit
from tests.api.support import make_user
from tests.factories import chain, make_policy, make_pool, make_workflow, step
from tests.supervisor.test_console import console_for

pytestmark = pytest.mark.django_db

SECRET = "s3cr3t-token-value-XYZ"


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def root() -> User:
    return User.objects.create_superuser("root", "root@example.invalid", "root-password-1")


@pytest.fixture
def admin_client(client: Client, root: User) -> Client:
    client.force_login(root)
    return client


def policy_form(policy: RemediationPolicy, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "timeout_seconds": policy.timeout_seconds,
        "max_attempts": policy.max_attempts,
        "backoff_initial_seconds": policy.backoff_initial_seconds,
        "backoff_multiplier": policy.backoff_multiplier,
        "backoff_max_seconds": policy.backoff_max_seconds,
        "backoff_jitter": policy.backoff_jitter,
        "retry_on": list(policy.retry_on),
        "reassign_after_attempts": policy.reassign_after_attempts or "",
        "on_exhausted": policy.on_exhausted,
        "step_budget_seconds": policy.step_budget_seconds or "",
        "revisions-TOTAL_FORMS": "0",
        "revisions-INITIAL_FORMS": str(policy.revisions.count()),
        "revisions-MIN_NUM_FORMS": "0",
        "revisions-MAX_NUM_FORMS": "1000",
    }
    if policy.reconcile_before_retry:
        data["reconcile_before_retry"] = "on"
    data.update(changes)
    return data


def steps_formset(*steps: dict[str, Any], prefix: str = "steps") -> dict[str, Any]:
    data = {
        f"{prefix}-TOTAL_FORMS": str(len(steps)),
        f"{prefix}-INITIAL_FORMS": "0",
        f"{prefix}-MIN_NUM_FORMS": "0",
        f"{prefix}-MAX_NUM_FORMS": "1000",
    }
    for i, spec in enumerate(steps):
        for key, value in spec.items():
            data[f"{prefix}-{i}-{key}"] = value
    return data


def step_row(
    name: str, depends_on: str = "", pool: AgentPool | None = None, policy: Any = None
) -> dict[str, Any]:
    return {
        "name": name,
        "pool": (pool or make_pool()).pk,
        "path": "agents.builtin.noop",
        "status_path": "",
        "compensation_path": "",
        "depends_on": depends_on,
        "policy": (policy or make_policy()).pk,
    }


# --- policies -------------------------------------------------------------------------------------


def test_a_policy_edit_in_the_admin_makes_a_revision_naming_the_user(
    admin_client: Client, root: User
) -> None:
    policy = make_policy("pay", max_attempts=3)
    response = admin_client.post(
        f"/admin/scheduler/remediationpolicy/{policy.pk}/change/", policy_form(policy, max_attempts=5)
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    policy.refresh_from_db()
    assert policy.version == 2 and policy.max_attempts == 5
    revision = PolicyRevision.objects.get(policy=policy, version=2)
    assert revision.changed_by == root and revision.changes == {"max_attempts": [3, 5]}
    # One log entry for the change (the service's), not a second one from the admin.
    entries = LogEntry.objects.filter(object_id=str(policy.pk), content_type__model="remediationpolicy")
    assert entries.count() == 1 and entries.get().user == root
    page = admin_client.get(f"/admin/scheduler/remediationpolicy/{policy.pk}/change/").content.decode()
    assert "change history" in page.lower() and "max_attempts" in page


def test_a_heartbeat_interval_is_edited_in_the_admin_and_must_be_positive(admin_client: Client) -> None:
    policy = make_policy("pay")
    url = f"/admin/scheduler/remediationpolicy/{policy.pk}/change/"
    refused = admin_client.post(url, policy_form(policy, heartbeat_seconds=0))
    assert refused.status_code == 200 and "heartbeat_seconds must be empty" in refused.content.decode()
    assert admin_client.post(url, policy_form(policy, heartbeat_seconds=3)).status_code == 302
    policy.refresh_from_db()
    assert (policy.version, policy.heartbeat_seconds) == (2, 3)
    assert PolicyRevision.objects.get(policy=policy, version=2).changes == {"heartbeat_seconds": [None, 3.0]}


def test_an_invalid_policy_edit_is_refused_with_a_message(admin_client: Client) -> None:
    policy = make_policy("pay")
    response = admin_client.post(
        f"/admin/scheduler/remediationpolicy/{policy.pk}/change/",
        policy_form(policy, backoff_max_seconds=-1),
    )
    assert response.status_code == 200
    assert "backoff_max_seconds must be at least backoff_initial_seconds" in response.content.decode()
    policy.refresh_from_db()
    assert policy.version == 1


# --- workflows ------------------------------------------------------------------------------------


def test_a_workflow_with_a_cycle_is_refused_with_a_message(admin_client: Client) -> None:
    data = {
        "name": "loop",
        "description": "",
        "deadline_seconds": "",
        **steps_formset(step_row("a", "b"), step_row("b", "a")),
    }
    response = admin_client.post("/admin/scheduler/workflow/add/", data)
    assert response.status_code == 200
    assert "the steps form a cycle" in response.content.decode()
    assert not Workflow.objects.filter(name="loop").exists()


def test_a_workflow_with_an_unknown_dependency_is_refused(admin_client: Client) -> None:
    data = {"name": "w", "description": "", "deadline_seconds": "", **steps_formset(step_row("a", "ghost"))}
    response = admin_client.post("/admin/scheduler/workflow/add/", data)
    assert response.status_code == 200
    assert "depends on unknown step &#x27;ghost&#x27;" in response.content.decode()


def test_saving_a_workflow_creates_a_version_and_saving_again_the_next(
    admin_client: Client, root: User
) -> None:
    data = {
        "name": "ship",
        "description": "first",
        "deadline_seconds": "60",
        **steps_formset(step_row("a"), step_row("b", "a"), step_row("c", "a, b")),
    }
    response = admin_client.post("/admin/scheduler/workflow/add/", data)
    assert response.status_code == 302, response.content.decode()[-3000:]
    first = Workflow.objects.get(name="ship")
    assert first.version == 1 and first.created_by == root and first.deadline_seconds == 60
    assert list(first.steps.order_by("position").values_list("name", "depends_on")) == [
        ("a", []),
        ("b", ["a"]),
        ("c", ["a", "b"]),
    ]
    assert LogEntry.objects.filter(content_type__model="workflow", object_id=str(first.pk)).count() == 1
    # The change page of a version is read-only and offers the next version.
    page = admin_client.get(f"/admin/scheduler/workflow/{first.pk}/change/").content.decode()
    assert 'name="_save"' not in page and f"?from={first.pk}" in page
    assert admin_client.post(f"/admin/scheduler/workflow/{first.pk}/change/", data).status_code == 403
    prefilled = admin_client.get(f"/admin/scheduler/workflow/add/?from={first.pk}").content.decode()
    assert 'value="ship"' in prefilled and 'value="a, b"' in prefilled
    data["description"] = "second"
    assert admin_client.post(f"/admin/scheduler/workflow/add/?from={first.pk}", data).status_code == 302
    second = Workflow.objects.get(name="ship", version=2)
    assert second.description == "second" and second.steps.count() == 3
    first.refresh_from_db()
    assert first.description == "first"


def test_the_workflow_form_edits_the_sla_and_refuses_a_bad_warn_fraction_naming_it(
    admin_client: Client,
) -> None:
    data = {
        "name": "ship",
        "description": "",
        "deadline_seconds": "",
        "sla_seconds": "600",
        "warn_fraction": "1.5",
        **steps_formset(step_row("a")),
    }
    refused = admin_client.post("/admin/scheduler/workflow/add/", data)
    assert refused.status_code == 200
    assert "warn_fraction must be a number greater than 0 and at most 1" in refused.content.decode()
    assert not Workflow.objects.filter(name="ship").exists()
    data["warn_fraction"] = "0.5"
    assert admin_client.post("/admin/scheduler/workflow/add/", data).status_code == 302
    saved = Workflow.objects.get(name="ship")
    assert (saved.sla_seconds, saved.warn_fraction) == (600, 0.5)
    prefilled = admin_client.get(f"/admin/scheduler/workflow/add/?from={saved.pk}").content.decode()
    assert 'name="sla_seconds" value="600.0"' in prefilled


def test_workflows_are_for_administrators(client: Client) -> None:
    role_groups_ensure()
    user = User.objects.create_user("opal", is_staff=True)
    user.groups.add(Group.objects.get(name="operators"))
    client.force_login(user)
    assert client.get("/admin/scheduler/workflow/add/").status_code == 403
    manager = User.objects.create_user("ada", is_staff=True)
    manager.groups.add(Group.objects.get(name="administrators"))
    client.force_login(manager)
    assert client.get("/admin/scheduler/workflow/add/").status_code == 200


# --- pools and endpoints ----------------------------------------------------------------------------


def pool_form(
    name: str, kind: str = "http", alternate: str = "", *endpoints: dict[str, Any], initial: int = 0
) -> dict[str, Any]:
    data: dict[str, Any] = {"name": name, "kind": kind, "alternate": alternate}
    data.update(
        {
            "endpoints-TOTAL_FORMS": str(len(endpoints)),
            "endpoints-INITIAL_FORMS": str(initial),
            "endpoints-MIN_NUM_FORMS": "0",
            "endpoints-MAX_NUM_FORMS": "1000",
        }
    )
    for i, spec in enumerate(endpoints):
        for key, value in spec.items():
            data[f"endpoints-{i}-{key}"] = value
    return data


def test_an_endpoint_secret_is_stored_but_never_shown_back(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/agents/agentpool/add/",
        pool_form(
            "pay",
            "http",
            "",
            {
                "url": "http://pay.example/",
                "enabled": "on",
                "secret_header_name": "Authorization",
                "secret_header_value": SECRET,
            },
        ),
    )
    assert response.status_code == 302, response.content.decode()[-3000:]
    pool = AgentPool.objects.get(name="pay")
    endpoint = pool.endpoints.get()
    assert endpoint.url == "http://pay.example" and endpoint.secret_header_value == SECRET
    page = admin_client.get(f"/admin/agents/agentpool/{pool.pk}/change/").content.decode()
    assert SECRET not in page and "stored" in page
    # Saving again with the field left empty keeps the stored secret.
    response = admin_client.post(
        f"/admin/agents/agentpool/{pool.pk}/change/",
        pool_form(
            "pay",
            "http",
            "",
            {
                "id": endpoint.pk,
                "pool": pool.pk,
                "url": "http://pay.example",
                "enabled": "on",
                "secret_header_name": "Authorization",
                "secret_header_value": "",
            },
            {
                "url": "http://pay2.example",
                "enabled": "on",
                "secret_header_name": "",
                "secret_header_value": "",
            },
            initial=1,
        ),
    )
    assert response.status_code == 302, response.content.decode()[-3000:]
    assert AgentEndpoint.objects.get(url="http://pay.example").secret_header_value == SECRET
    assert pool.endpoints.count() == 2
    assert SECRET not in admin_client.get(f"/admin/agents/agentpool/{pool.pk}/change/").content.decode()


def test_a_secret_header_value_http_cannot_send_is_refused_in_the_admin_without_quoting_it(
    admin_client: Client,
) -> None:
    secret = SECRET + " "
    response = admin_client.post(
        "/admin/agents/agentpool/add/",
        pool_form(
            "pay",
            "http",
            "",
            {
                "url": "http://pay.example/",
                "enabled": "on",
                "secret_header_name": "Authorization",
                "secret_header_value": secret,
            },
        ),
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "printable ASCII, with no space or tab at either end" in page
    assert SECRET not in page
    assert not AgentPool.objects.filter(name="pay").exists()


def test_an_endpoint_url_is_validated(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/agents/agentpool/add/",
        pool_form(
            "bad",
            "http",
            "",
            {
                "url": "ftp://files.example",
                "enabled": "on",
                "secret_header_name": "",
                "secret_header_value": "",
            },
        ),
    )
    assert response.status_code == 200
    assert "must use http or https" in response.content.decode()
    assert not AgentPool.objects.filter(name="bad").exists()


def test_a_queue_pool_is_saved_in_the_admin_with_its_broker_and_user_name(
    admin_client: Client, settings: Any
) -> None:
    settings.SAS_OUTBOUND_INTERNAL_HOSTS = ["mq.internal"]
    broker = {
        "url": "redis://mq.internal:6379/0",
        "enabled": "on",
        "secret_header_name": "app.user",
        "secret_header_value": "broker-password",
    }
    response = admin_client.post("/admin/agents/agentpool/add/", pool_form("mq", "queue", "", broker))
    assert response.status_code == 302, response.content.decode()[-3000:]
    endpoint = AgentEndpoint.objects.get(pool__name="mq")
    assert (endpoint.url, endpoint.secret_header_name) == ("redis://mq.internal:6379/0", "app.user")
    assert endpoint.secret_header_value == "broker-password"
    # And an HTTP URL is no broker.
    http = {**broker, "url": "http://mq.internal"}
    refused = admin_client.post("/admin/agents/agentpool/add/", pool_form("mq2", "queue", "", http))
    assert refused.status_code == 200 and "must use redis" in refused.content.decode()
    assert not AgentPool.objects.filter(name="mq2").exists()


@pytest.mark.parametrize("header", ["Host", "idempotency-key", "X-SAS-Attempt", "Content-Length"])
def test_a_reserved_secret_header_name_is_refused_in_the_admin(admin_client: Client, header: str) -> None:
    row = {
        "url": "http://pay.example",
        "enabled": "on",
        "secret_header_name": header,
        "secret_header_value": SECRET,
    }
    response = admin_client.post("/admin/agents/agentpool/add/", pool_form("pay", "http", "", row))
    assert response.status_code == 200
    page = response.content.decode()
    assert "secret_header_name" in page and "is reserved" in page and SECRET not in page
    assert not AgentPool.objects.filter(name="pay").exists()


def edit_endpoint_url(admin_client: Client, pool: AgentPool, url: str) -> Any:
    endpoint = pool.endpoints.get()
    row = {
        "id": endpoint.pk,
        "pool": pool.pk,
        "url": url,
        "enabled": "on",
        "secret_header_name": "Authorization",
        "secret_header_value": "",
    }
    return admin_client.post(
        f"/admin/agents/agentpool/{pool.pk}/change/", pool_form(pool.name, "http", "", row, initial=1)
    )


def test_an_endpoint_moved_to_another_host_in_the_admin_loses_its_secret_and_the_log_says_so(
    admin_client: Client,
) -> None:
    pool = make_pool(
        "pay",
        kind="http",
        endpoints=[
            {
                "url": "https://pay.example",
                "secret_header_name": "Authorization",
                "secret_header_value": SECRET,
            }
        ],
    )
    response = edit_endpoint_url(admin_client, pool, "https://attacker.example/collect")
    assert response.status_code == 302, response.content.decode()[-3000:]
    endpoint = pool.endpoints.get()
    assert endpoint.url == "https://attacker.example/collect" and endpoint.secret_header_value == ""
    entry = LogEntry.objects.filter(object_id=str(pool.pk)).latest("action_time")
    assert "secret_dropped" in entry.change_message


def test_an_endpoint_moved_on_its_own_host_in_the_admin_keeps_its_secret(admin_client: Client) -> None:
    pool = make_pool(
        "pay",
        kind="http",
        endpoints=[
            {
                "url": "https://pay.example/v1",
                "secret_header_name": "Authorization",
                "secret_header_value": SECRET,
            }
        ],
    )
    for url in ("https://pay.example/v2", "https://pay.example:443/v3"):
        response = edit_endpoint_url(admin_client, pool, url)
        assert response.status_code == 302, response.content.decode()[-3000:]
        assert pool.endpoints.get().secret_header_value == SECRET
    # A change of scheme or port is another origin: the secret stays behind.
    edit_endpoint_url(admin_client, pool, "http://pay.example/v3")
    assert pool.endpoints.get().secret_header_value == ""


def test_a_python_pool_has_no_endpoints_and_an_alternate_must_match_its_kind(admin_client: Client) -> None:
    web = make_pool("web", kind="http", endpoints=["http://web.example"])
    response = admin_client.post(
        "/admin/agents/agentpool/add/",
        pool_form(
            "py",
            "python",
            str(web.pk),
            {"url": "http://x.example", "enabled": "on", "secret_header_name": "", "secret_header_value": ""},
        ),
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "The alternate pool must be of the same kind." in html


# --- jobs and steps -------------------------------------------------------------------------------


def held_job(drain: Callable, fake_remote: FakeRemote, supervise: Callable) -> Job:
    make_policy("holding", on_exhausted="hold", max_attempts=1)
    if not Workflow.objects.filter(name="h").exists():
        make_workflow("h", step("s1", policy="holding"), step("s2", "s1"))
    fake_remote.script("s1", Outcome.TRANSIENT_FAILURE)
    job = job_submit(workflow="h", input={}).job
    drain()
    supervise()
    return job


def test_jobs_and_steps_are_read_only(admin_client: Client) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    assert admin_client.get("/admin/scheduler/job/add/").status_code == 403
    assert admin_client.get(f"/admin/scheduler/job/{job.pk}/delete/").status_code == 403
    page = admin_client.get(f"/admin/scheduler/job/{job.pk}/change/").content.decode()
    assert 'name="_save"' not in page and "s1" in page
    assert admin_client.get(f"/admin/scheduler/job/?q={job.pk}").status_code == 200
    assert admin_client.get("/admin/scheduler/job/?q=not-a-uuid").status_code == 200
    assert admin_client.get("/admin/scheduler/step/").status_code == 200


def test_the_compensate_and_cancel_actions_call_the_operator_services(
    admin_client: Client, root: User, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    held, other = held_job(drain, fake_remote, supervise), held_job(drain, fake_remote, supervise)
    chain(n=1)
    finished = job_submit(workflow="chain", input={}).job
    drain()
    response = admin_client.post(
        "/admin/scheduler/job/",
        {"action": "compensate_jobs", "index": "0", "_selected_action": [str(held.pk), str(finished.pk)]},
        follow=True,
    )
    html = response.content.decode()
    assert f"Job {held.pk}: compensating" in html
    assert f"Job {finished.pk}: refused: job {finished.pk} is succeeded" in html
    assert Event.objects.get(job=held, kind="operator_compensate").actor == root
    admin_client.post(
        "/admin/scheduler/job/", {"action": "cancel_jobs", "index": "0", "_selected_action": [str(other.pk)]}
    )
    drain()
    held.refresh_from_db()
    other.refresh_from_db()
    assert (held.status, other.status) == (JobStatus.COMPENSATED, JobStatus.CANCELLED)
    assert Event.objects.get(job=other, kind="operator_cancel").actor == root


def test_the_retry_action_on_steps_calls_the_operator_service(
    admin_client: Client, root: User, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    s1, s2 = job.steps.get(name="s1"), job.steps.get(name="s2")
    response = admin_client.post(
        "/admin/scheduler/step/",
        {"action": "retry_steps", "index": "0", "_selected_action": [str(s1.pk), str(s2.pk)]},
        follow=True,
    )
    html = response.content.decode()
    assert f"Step s1 #{s1.pk}: retried" in html
    assert f"Step s2 #{s2.pk}: refused: step s2 is pending: nothing to retry" in html
    assert Event.objects.get(step=s1, kind="operator_retry").actor == root
    s1.refresh_from_db()
    assert s1.status == StepStatus.DISPATCHED


def test_operators_see_jobs_but_cannot_act_without_the_permission(client: Client) -> None:
    role_groups_ensure()
    clerk = User.objects.create_user("clerk", is_staff=True)
    clerk.groups.add(Group.objects.get(name="submitters"))
    client.force_login(clerk)
    assert client.get("/admin/scheduler/job/").status_code == 403
    operator = User.objects.create_user("opal", is_staff=True)
    operator.groups.add(Group.objects.get(name="operators"))
    client.force_login(operator)
    page = client.get("/admin/scheduler/job/").content.decode()
    assert "Compensate the selected jobs" in page


def test_django_q_resubmit_is_not_offered(root: User) -> None:
    request = RequestFactory().get("/admin/django_q/failure/")
    request.user = root
    actions = admin.site.get_model_admin(Failure).get_actions(request)
    assert "resubmit_task" not in actions


def test_the_step_changelist_filters_by_status(
    admin_client: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    page = admin_client.get("/admin/scheduler/step/?status__exact=held").content.decode()
    assert f"/ops/jobs/{job.pk}/" in page
    assert Step.objects.filter(status=StepStatus.HELD).count() == 1


# --- schedules ------------------------------------------------------------------------------------


def test_schedules_are_administered_through_the_same_rules(fake_remote: FakeRemote) -> None:
    chain(n=1)
    ada = make_user("ada", "administrators")
    ada.is_staff = True
    ada.save(update_fields=["is_staff"])
    admin = console_for(ada)
    form = {
        "name": "nightly",
        "workflow": "chain",
        "input": "{}",
        "business_key": "",
        "priority": "0",
        "cron": "61 * * * *",
        "timezone": "UTC",
        "catch_up": "once",
    }
    refused = admin.post("/admin/scheduler/schedule/add/", form)
    errors = re.findall(r"errorlist[^>]*>(.*?)</ul>", refused.content.decode(), re.S)
    assert refused.status_code == 200 and any("is not a cron expression" in e for e in errors), errors
    assert not Schedule.objects.exists()
    saved = admin.post("/admin/scheduler/schedule/add/", {**form, "cron": "0 3 * * *"})
    assert saved.status_code == 302, saved.content[:2000]
    schedule = Schedule.objects.get(name="nightly")
    assert schedule.next_fire_at is not None and schedule.created_by.username == "ada"
    assert LogEntry.objects.filter(object_repr="nightly").count() == 1


def test_a_workflow_with_wait_steps_is_saved_in_the_admin_and_prefills_the_next_version(
    admin_client: Client,
) -> None:
    wait = {**step_row("ok", "a"), "kind": "approval", "pool": "", "path": "", "policy": ""}
    wait.update(timeout_seconds="600", on_timeout="fail")
    timer = {
        **step_row("later", "ok"),
        "kind": "timer",
        "pool": "",
        "path": "",
        "policy": "",
        "wait_seconds": "5",
    }
    data = {
        "name": "gate",
        "description": "",
        "deadline_seconds": "",
        **steps_formset(step_row("a"), wait, timer),
    }
    response = admin_client.post("/admin/scheduler/workflow/add/", data)
    assert response.status_code == 302, response.content.decode()[-3000:]
    steps = {d.name: d for d in Workflow.objects.get(name="gate").steps.all()}
    assert (steps["ok"].kind, steps["ok"].pool, steps["ok"].timeout_seconds) == ("approval", None, 600)
    assert (steps["later"].kind, steps["later"].wait_seconds) == ("timer", 5)
    prefilled = admin_client.get(
        f"/admin/scheduler/workflow/add/?from={steps['ok'].workflow_id}"
    ).content.decode()
    assert 'value="600.0"' in prefilled or 'value="600"' in prefilled
    # A wait step naming a pool is refused, as over the API.
    bad = {**wait, "pool": str(make_pool().pk)}
    refused = admin_client.post(
        "/admin/scheduler/workflow/add/", {**data, "name": "bad", **steps_formset(step_row("a"), bad)}
    )
    assert refused.status_code == 200 and not Workflow.objects.filter(name="bad").exists()


def test_a_workflows_input_schema_is_checked_in_the_admin(admin_client: Client) -> None:
    data = {
        "name": "typed",
        "description": "",
        "deadline_seconds": "",
        "input_schema": '{"type": "objekt"}',
        **steps_formset(step_row("a")),
    }
    refused = admin_client.post("/admin/scheduler/workflow/add/", data)
    assert refused.status_code == 200 and not Workflow.objects.filter(name="typed").exists()
    assert "not a JSON Schema" in refused.content.decode()
    data["input_schema"] = '{"type": "object", "required": ["order"]}'
    assert admin_client.post("/admin/scheduler/workflow/add/", data).status_code == 302
    assert Workflow.objects.get(name="typed").input_schema == {"type": "object", "required": ["order"]}


def test_a_fan_out_with_input_mapping_is_saved_in_the_admin_and_a_bad_expression_refused(
    admin_client: Client,
) -> None:
    fan_out = {
        **step_row("ship", "a"),
        "for_each": "input.lines",
        "item_key": "item.sku",
        "max_parallel": "5",
        "join_mode": "at_least",
        "join_count": "2",
        "input_map": '{"line.$": "item", "order.$": "input.order"}',
        "output_map": "output.id",
    }
    data = {
        "name": "lines",
        "description": "",
        "deadline_seconds": "",
        **steps_formset(step_row("a"), fan_out),
    }
    response = admin_client.post("/admin/scheduler/workflow/add/", data)
    assert response.status_code == 302, response.content.decode()[-3000:]
    ship = Workflow.objects.get(name="lines").steps.get(name="ship")
    assert (ship.for_each, ship.item_key, ship.max_parallel) == ("input.lines", "item.sku", 5)
    assert (ship.join_mode, ship.join_count, ship.output_map) == ("at_least", 2, "output.id")
    assert ship.input_map == {"line.$": "item", "order.$": "input.order"}
    bad = {**fan_out, "input_map": '{"line.$": "item +"}'}
    refused = admin_client.post(
        "/admin/scheduler/workflow/add/", {**data, "name": "bad", **steps_formset(step_row("a"), bad)}
    )
    assert refused.status_code == 200 and not Workflow.objects.filter(name="bad").exists()
    assert "step &#x27;ship&#x27; input.line.$: not a JMESPath expression" in refused.content.decode()


# --- the outbox -----------------------------------------------------------------------------------


def test_operators_see_only_the_scheme_and_host_of_a_deliverys_url(client: Client) -> None:
    role_groups_ensure()
    delivery = Delivery.objects.create(
        kind=DeliveryKind.WEBHOOK,
        key="alert:event-1:1:webhook",
        target="https://ops.example.com/services/T000/B000/very-secret-path",
        payload={"alert": "job_failed"},
    )
    operator = User.objects.create_user("opal", is_staff=True)
    operator.groups.add(Group.objects.get(name="operators"))
    client.force_login(operator)
    listing = client.get("/admin/scheduler/delivery/").content.decode()
    detail = client.get(f"/admin/scheduler/delivery/{delivery.pk}/change/").content.decode()
    for page in (listing, detail):
        assert "https://ops.example.com/(hidden)" in page and "very-secret-path" not in page
    # Nor can a search tell the hidden part a character at a time.
    assert "ops.example.com" not in client.get("/admin/scheduler/delivery/?q=very-secret").content.decode()
    # Administrators, who read the subscriptions too, see it whole.
    manager = User.objects.create_user("ada", is_staff=True)
    manager.groups.add(Group.objects.get(name="administrators"))
    client.force_login(manager)
    assert "very-secret-path" in client.get("/admin/scheduler/delivery/").content.decode()
    assert (
        "very-secret-path" in client.get(f"/admin/scheduler/delivery/{delivery.pk}/change/").content.decode()
    )
