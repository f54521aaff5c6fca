"""REST API of wait steps: definitions with kinds (read back as written), a job's waiting steps
(`status` waiting with `waiting_for`), signals (202, replays, 400/403/404/409/422) and approvals
(200, 403 outside the role or group, 409 when nothing waits)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from agents.fake import FakeRemote
from scheduler.models import Event, EventKind, Job, JobStatus, Signal, Step, StepStatus
from tests.api.support import V1, client_for, make_user, submit
from tests.factories import make_policy, make_pool, make_workflow, step

pytestmark = pytest.mark.django_db

ORDER_STEPS = [
    step("reserve"),
    {
        "name": "approve",
        "kind": "approval",
        "timeout_seconds": 3600,
        "on_timeout": "fail",
        "depends_on": ["reserve"],
    },
    {
        "name": "shipped",
        "kind": "signal",
        "signal": "shipped",
        "timeout_seconds": 600,
        "on_timeout": "continue",
        "default_output": {"carrier": "unknown"},
        "depends_on": ["approve"],
    },
    {"name": "settle", "kind": "timer", "wait_seconds": 0, "depends_on": ["shipped"]},
]


@pytest.fixture
def admin() -> APIClient:
    return client_for(make_user("ada", "administrators"))


@pytest.fixture
def olga() -> APIClient:
    return client_for(make_user("olga", "operators"))


@pytest.fixture
def sam() -> APIClient:
    return client_for(make_user("sam", "submitters"))


def define_order(admin: APIClient) -> None:
    make_pool()
    make_policy()
    response = admin.post(f"{V1}/workflows/", {"name": "order", "steps": ORDER_STEPS}, format="json")
    assert response.status_code == 201, response.json()


def waiting_job(sam: APIClient, olga: APIClient, drain: Callable[[], int]) -> str:
    """An order job past its approval, waiting for its `shipped` signal."""
    job_id = str(submit(sam, "order").json()["id"])
    drain()
    assert olga.post(f"{V1}/jobs/{job_id}/steps/approve/approve/", {}, format="json").status_code == 200
    drain()
    return job_id


@pytest.mark.sqlite
def test_wait_steps_are_read_back_as_written_and_a_patch_without_steps_keeps_them(
    admin: APIClient,
) -> None:
    define_order(admin)
    steps = admin.get(f"{V1}/workflows/order/").json()["steps"]
    by_name = {s["name"]: s for s in steps}
    assert by_name["reserve"]["kind"] == "call" and by_name["reserve"]["pool"] == "local"
    assert by_name["approve"] == {
        "name": "approve",
        "kind": "approval",
        "group": "",
        "allow_self_approval": False,
        "escalation": [],
        "timeout_seconds": 3600.0,
        "on_timeout": "fail",
        "default_output": None,
        "depends_on": ["reserve"],
        "policy": None,
        "when": "",
        "run_if_skipped": False,
    }
    assert by_name["settle"] == {
        "name": "settle",
        "kind": "timer",
        "wait_seconds": 0.0,
        "until": "",
        "depends_on": ["shipped"],
        "when": "",
        "run_if_skipped": False,
    }
    response = admin.patch(f"{V1}/workflows/order/", {"description": "v2"}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["version"] == 2 and response.json()["steps"] == steps
    # What was read can be sent back as it is.
    again = admin.patch(f"{V1}/workflows/order/", {"description": "v3", "steps": steps}, format="json")
    assert again.status_code == 200, again.json()


def test_a_wrong_wait_definition_is_a_400_naming_the_step(admin: APIClient) -> None:
    make_pool()
    make_policy()
    bad = [step("a"), {"name": "w", "kind": "timer", "until": "b.at", "depends_on": ["a"]}]
    response = admin.post(f"{V1}/workflows/", {"name": "bad", "steps": bad}, format="json")
    assert response.status_code == 400
    assert "step 'w': until reads 'b'" in response.json()["detail"]


@pytest.mark.sqlite
def test_a_waiting_step_shows_what_it_waits_for_and_an_approval_moves_the_job_on(
    admin: APIClient, olga: APIClient, sam: APIClient, drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    define_order(admin)
    job_id = str(submit(sam, "order").json()["id"])
    drain()
    steps = {s["name"]: s for s in sam.get(f"{V1}/jobs/{job_id}/").json()["steps"]}
    approve = steps["approve"]
    assert (approve["status"], approve["type"], approve["pool"]) == ("waiting", "approval", None)
    assert approve["waiting_for"]["kind"] == "approval" and approve["waiting_for"]["group"] is None
    assert approve["waiting_for"]["timeout_at"] is not None
    assert steps["reserve"]["waiting_for"] is None and steps["reserve"]["type"] == "call"
    # A submitter is no operator: 403, and nothing changes.
    refused = sam.post(f"{V1}/jobs/{job_id}/steps/approve/approve/", {"comment": "me"}, format="json")
    assert refused.status_code == 403
    assert Step.objects.get(job_id=job_id, name="approve").status == StepStatus.WAITING
    response = olga.post(f"{V1}/jobs/{job_id}/steps/approve/approve/", {"comment": "ok"}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "succeeded"
    assert response.json()["output"]["by"] == "olga"
    again = olga.post(f"{V1}/jobs/{job_id}/steps/approve/reject/", {}, format="json")
    assert again.status_code == 409
    drain()
    shipped = {s["name"]: s for s in sam.get(f"{V1}/jobs/{job_id}/").json()["steps"]}["shipped"]
    assert shipped["waiting_for"]["kind"] == "signal" and shipped["waiting_for"]["signal"] == "shipped"


@pytest.mark.sqlite
def test_a_submitter_signals_its_job_once_per_key(
    admin: APIClient, olga: APIClient, sam: APIClient, drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    define_order(admin)
    job_id = waiting_job(sam, olga, drain)
    url = f"{V1}/jobs/{job_id}/signals/"
    body = {"name": "shipped", "payload": {"tracking": "T1"}}
    first = sam.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="ship-1")
    assert first.status_code == 202, first.json()
    assert first.json()["consumed_by"] == "shipped" and first.json()["sender"] == "sam"
    replay = sam.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="ship-1")
    assert replay.status_code == 200 and replay.json()["id"] == first.json()["id"]
    assert replay["Idempotent-Replayed"] == "true" and not first.has_header("Idempotent-Replayed")
    conflict = sam.post(url, {**body, "payload": {}}, format="json", HTTP_IDEMPOTENCY_KEY="ship-1")
    assert conflict.status_code == 422 and conflict.json()["code"] == "idempotency_conflict"
    drain()
    job = Job.objects.get(pk=job_id)
    assert job.status == JobStatus.SUCCEEDED and job.result["shipped"] == {"tracking": "T1"}
    settled = sam.post(url, body, format="json")
    assert settled.status_code == 409
    listed = sam.get(url).json()
    assert [s["name"] for s in listed["results"]] == ["shipped"]
    assert Signal.objects.filter(job_id=job_id).count() == 1


def test_signals_are_refused_for_unknown_names_other_users_jobs_and_viewers(
    admin: APIClient, olga: APIClient, sam: APIClient, drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    define_order(admin)
    job_id = str(submit(sam, "order").json()["id"])
    url = f"{V1}/jobs/{job_id}/signals/"
    unknown = sam.post(url, {"name": "delivered"}, format="json")
    assert unknown.status_code == 400 and "delivered" in unknown.json()["detail"]
    assert sam.post(url, {"name": "bad name!"}, format="json").status_code == 400
    other = client_for(make_user("tom", "submitters"))
    assert other.post(url, {"name": "shipped"}, format="json").status_code == 404
    viewer = client_for(make_user("vic", "viewers"))
    assert viewer.post(url, {"name": "shipped"}, format="json").status_code == 403
    # An operator may signal any job; the early signal waits for its step.
    early = olga.post(url, {"name": "shipped", "payload": 1}, format="json")
    assert early.status_code == 202 and early.json()["consumed_by"] is None
    assert Signal.objects.filter(job_id=job_id).count() == 1
    assert Event.objects.get(job_id=job_id, kind=EventKind.SIGNAL_RECEIVED).actor.username == "olga"


def test_an_approval_naming_a_group_answers_403_to_an_operator_outside_it(
    admin: APIClient, olga: APIClient, sam: APIClient, drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    make_pool()
    make_policy()
    Group.objects.create(name="finance")
    steps: list[dict[str, Any]] = [{"name": "ok", "kind": "approval", "group": "finance"}]
    assert admin.post(f"{V1}/workflows/", {"name": "gated", "steps": steps}, format="json").status_code == 201
    job_id = str(submit(sam, "gated").json()["id"])
    assert olga.post(f"{V1}/jobs/{job_id}/steps/ok/approve/", {}, format="json").status_code == 403
    fiona = make_user("fiona")
    fiona.groups.add(Group.objects.get(name="finance"))
    response = client_for(fiona).post(
        f"{V1}/jobs/{job_id}/steps/ok/reject/", {"comment": "no"}, format="json"
    )
    # Fiona may decide but not read the job: the decision, not the job.
    assert response.status_code == 200 and response.json()["status"] == "failed"
    stranger = client_for(make_user("x"))
    assert stranger.post(f"{V1}/jobs/{job_id}/steps/ok/approve/", {}, format="json").status_code == 404
    assert olga.post(f"{V1}/jobs/{job_id}/steps/nope/approve/", {}, format="json").status_code == 404


@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.sqlite
def test_a_job_whose_input_holds_an_impossible_timer_time_is_a_400_naming_the_field(
    sam: APIClient, fake_remote: FakeRemote, settings: Any, fast_path: bool
) -> None:
    settings.SAS_FAST_PATH = fast_path
    make_workflow(
        "deliver",
        step("reserve"),
        {"name": "at", "kind": "timer", "until": "input.at", "depends_on": ["reserve"]},
    )
    response = submit(sam, "deliver", {"at": "2024-02-30T00:00:00Z"}, HTTP_IDEMPOTENCY_KEY="k1")
    assert response.status_code == 400, response.json()
    body = response.json()
    assert body["field"] == "input.at"
    assert "cannot read the time at input.at: '2024-02-30T00:00:00Z'" in body["detail"]
    assert not Job.objects.exists() and not Step.objects.exists() and not Event.objects.exists()
    assert fake_remote.calls == []
    # The same key with a readable time is a new request, not a replay of the refused one.
    ok = submit(sam, "deliver", {"at": "2024-02-29T00:00:00Z"}, HTTP_IDEMPOTENCY_KEY="k1")
    assert ok.status_code == 201, ok.json()
