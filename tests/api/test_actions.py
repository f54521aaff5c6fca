"""REST API: operator actions on jobs and steps. Each answers the updated job (or step), refuses
with a 409 what the state does not allow, and names the operator in the job's history. Also a
rerun from a step, a retry with an edited input, and the attention list with its bulk actions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.fake import FakeRemote
from scheduler.models import Attempt, Event, EventKind, Job, JobStatus, Outcome, Step, StepStatus
from scheduler.services import job_submit
from tests.api.support import V1, client_for, failed_at_s2, held_step, make_user, submit
from tests.factories import chain, make_policy, make_pool, make_workflow, step

pytestmark = pytest.mark.django_db


@pytest.fixture
def olga() -> APIClient:
    return client_for(make_user("olga", "operators"))


def running_job(client: APIClient, n: int = 2) -> str:
    chain(n=n)
    response = submit(client, "chain")
    assert response.status_code == 201
    return str(response.json()["id"])


# --- job actions ------------------------------------------------------------------------------


def test_cancel_answers_the_job_and_records_the_operator_and_reason(
    olga: APIClient, drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    job_id = running_job(olga)
    response = olga.post(f"{V1}/jobs/{job_id}/cancel/", {"reason": "customer called"}, format="json")
    assert response.status_code == 200
    assert response.json()["id"] == job_id and response.json()["status"] == JobStatus.COMPENSATING
    assert response.json()["compensation_reason"] == "cancel"
    event = Event.objects.get(job_id=job_id, kind="operator_cancel")
    assert event.actor.username == "olga" and event.reason == "customer called"
    drain()
    assert olga.get(f"{V1}/jobs/{job_id}/").json()["status"] == JobStatus.CANCELLED


def test_a_second_cancel_is_a_409_and_changes_nothing(olga: APIClient) -> None:
    job_id = running_job(olga)
    assert olga.post(f"{V1}/jobs/{job_id}/cancel/").status_code == 200
    events = Event.objects.filter(job_id=job_id).count()
    again = olga.post(f"{V1}/jobs/{job_id}/cancel/")
    assert again.status_code == 409
    assert again.json()["code"] == "not_allowed" and "cannot be cancelled now" in again.json()["detail"]
    assert Event.objects.filter(job_id=job_id).count() == events


def test_compensate_starts_compensation_with_the_operator_as_reason(
    olga: APIClient, drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    job_id = running_job(olga)
    response = olga.post(f"{V1}/jobs/{job_id}/compensate/", {"reason": "wrong address"}, format="json")
    assert response.status_code == 200
    assert response.json()["status"] == JobStatus.COMPENSATING
    assert response.json()["compensation_reason"] == "operator"
    assert Event.objects.get(job_id=job_id, kind="operator_compensate").actor.username == "olga"
    drain()
    assert Job.objects.get(pk=job_id).status == JobStatus.COMPENSATED


def test_a_finished_job_cannot_be_compensated(
    olga: APIClient, drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    job_id = running_job(olga, n=1)
    drain()
    response = olga.post(f"{V1}/jobs/{job_id}/compensate/")
    assert response.status_code == 409 and "succeeded" in response.json()["detail"]


def test_pause_and_resume_toggle_paused_and_refuse_a_repeat(olga: APIClient) -> None:
    job_id = running_job(olga)
    paused = olga.post(f"{V1}/jobs/{job_id}/pause/", {"reason": "investigating"}, format="json")
    assert paused.status_code == 200 and paused.json()["paused"] is True
    again = olga.post(f"{V1}/jobs/{job_id}/pause/")
    assert again.status_code == 409 and "already paused" in again.json()["detail"]
    resumed = olga.post(f"{V1}/jobs/{job_id}/resume/")
    assert resumed.status_code == 200 and resumed.json()["paused"] is False
    assert olga.post(f"{V1}/jobs/{job_id}/resume/").status_code == 409
    paused_event = Event.objects.get(job_id=job_id, kind="job_paused")
    assert paused_event.actor.username == "olga" and paused_event.reason == "investigating"
    assert Event.objects.get(job_id=job_id, kind="job_resumed").actor.username == "olga"
    assert Job.objects.get(pk=job_id).paused_at is None


@pytest.mark.parametrize("verb", ["cancel", "compensate", "pause", "resume"])
def test_an_action_on_an_unknown_job_is_a_404(olga: APIClient, verb: str) -> None:
    response = olga.post(f"{V1}/jobs/00000000-0000-0000-0000-000000000000/{verb}/")
    assert response.status_code == 404 and response.json()["code"] == "not_found"


@pytest.mark.parametrize(
    ("body", "field"),
    [({"reason": ["x"]}, "reason"), ({"reason": "x" * 2001}, "reason"), ({"why": "x"}, "why"), ([1], None)],
)
def test_a_bad_action_body_is_a_400_and_changes_nothing(
    olga: APIClient, body: Any, field: str | None
) -> None:
    job_id = running_job(olga)
    events = Event.objects.filter(job_id=job_id).count()
    response = olga.post(f"{V1}/jobs/{job_id}/cancel/", body, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert Event.objects.filter(job_id=job_id).count() == events
    assert Job.objects.get(pk=job_id).status == JobStatus.RUNNING


# --- step actions -----------------------------------------------------------------------------


def test_retry_dispatches_a_held_step_and_the_job_then_succeeds(
    olga: APIClient, drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    held = held_step(olga, drain, fake_remote, supervise)
    response = olga.post(f"{V1}/steps/{held.pk}/retry/", {"reason": "remote is back"}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["id"] == held.pk and body["job"] == str(held.job_id)
    assert body["status"] == StepStatus.DISPATCHED and body["attempt_count"] == 2
    event = Event.objects.get(step=held, kind="operator_retry")
    assert event.actor.username == "olga" and event.reason == "remote is back"
    drain()
    assert Job.objects.get(pk=held.job_id).status == JobStatus.SUCCEEDED


def test_retry_on_another_pool_moves_the_step(
    olga: APIClient, drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    held = held_step(olga, drain, fake_remote, supervise)
    make_pool("spare")
    response = olga.post(f"{V1}/steps/{held.pk}/retry/", {"pool": "spare"}, format="json")
    assert response.status_code == 200 and response.json()["pool"] == "spare"
    assert response.json()["attempts"][-1]["pool"] == "spare"


def test_retry_on_an_unknown_pool_is_a_400_naming_it(
    olga: APIClient, drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    held = held_step(olga, drain, fake_remote, supervise)
    response = olga.post(f"{V1}/steps/{held.pk}/retry/", {"pool": "nowhere"}, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "pool" and "unknown pool 'nowhere'" in response.json()["detail"]
    held.refresh_from_db()
    assert held.status == StepStatus.HELD


def test_a_double_retry_is_a_409_making_one_attempt(
    olga: APIClient, drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    held = held_step(olga, drain, fake_remote, supervise)
    assert olga.post(f"{V1}/steps/{held.pk}/retry/").status_code == 200
    again = olga.post(f"{V1}/steps/{held.pk}/retry/")
    assert again.status_code == 409 and "nothing to retry" in again.json()["detail"]
    assert Attempt.objects.filter(step=held).count() == 2


def test_resolve_completes_a_held_step_with_the_given_output(
    olga: APIClient, drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    held = held_step(olga, drain, fake_remote, supervise)
    response = olga.post(
        f"{V1}/steps/{held.pk}/resolve/",
        {"output": {"ref": "manual-42"}, "reason": "confirmed by phone"},
        format="json",
    )
    assert response.status_code == 200
    assert response.json()["status"] == StepStatus.SUCCEEDED
    assert response.json()["output"] == {"ref": "manual-42"}
    event = Event.objects.get(step=held, kind="operator_resolve")
    assert event.actor.username == "olga" and event.reason == "confirmed by phone"
    drain()
    assert Job.objects.get(pk=held.job_id).status == JobStatus.SUCCEEDED


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({}, "output", "This field is required."),
        ({"output": [1]}, "output", "Expected a dictionary"),
        ({"output": {}, "reason": ["x"]}, "reason", "Not a valid string."),
    ],
)
def test_a_bad_resolve_is_a_400_and_changes_nothing(
    olga: APIClient,
    drain: Callable[[], int],
    fake_remote: FakeRemote,
    supervise: Callable[..., Any],
    body: dict[str, Any],
    field: str,
    message: str,
) -> None:
    held = held_step(olga, drain, fake_remote, supervise)
    response = olga.post(f"{V1}/steps/{held.pk}/resolve/", body, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == field and message in response.json()["detail"]
    held.refresh_from_db()
    assert held.status == StepStatus.HELD


def test_resolving_a_finished_step_is_a_409(
    olga: APIClient, drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    job_id = running_job(olga, n=1)
    drain()
    step_id = Job.objects.get(pk=job_id).steps.get().pk
    response = olga.post(f"{V1}/steps/{step_id}/resolve/", {"output": {}}, format="json")
    assert response.status_code == 409 and "nothing to resolve" in response.json()["detail"]


@pytest.mark.parametrize("step_id", ["999999", str(2**63), str(2**70), "0"])
@pytest.mark.parametrize("verb", ["retry", "resolve"])
def test_an_action_on_an_unknown_step_is_a_404(olga: APIClient, step_id: str, verb: str) -> None:
    body = {"output": {}} if verb == "resolve" else {}
    response = olga.post(f"{V1}/steps/{step_id}/{verb}/", body, format="json")
    assert response.status_code == 404 and response.json()["code"] == "not_found"


def test_a_malformed_step_id_is_a_json_404(olga: APIClient) -> None:
    response = olga.post(f"{V1}/steps/abc/retry/")
    assert response.status_code == 404 and response.json()["code"] == "not_found"


# --- rerun ----------------------------------------------------------------------------------------


Supervise = Callable[..., Any]


def steps_of(job: Job) -> dict[str, Step]:
    return {s.name: s for s in Step.objects.filter(job=job, kind="action")}


@pytest.mark.sqlite
def test_a_rerun_reuses_what_came_before_and_runs_the_rest_with_new_operation_ids(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    original = failed_at_s2(drain, fake_remote, supervise)
    before = steps_of(original)
    ops = client_for(make_user("olga", "operators"))
    response = ops.post(
        f"{V1}/jobs/{original.pk}/rerun/",
        {"from_step": "s2", "input": {"order": 1, "card": "new"}, "reason": "card replaced"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["rerun_of"] == str(original.pk) and response["Location"] == f"{V1}/jobs/{body['id']}/"
    rerun = Job.objects.get(pk=body["id"])
    assert rerun.input == {"order": 1, "card": "new"}
    drain()
    rerun.refresh_from_db()
    assert rerun.status == JobStatus.SUCCEEDED
    after = steps_of(rerun)
    # s1 was reused: not called again, its output kept; s2 and s3 ran with new operation IDs.
    assert after["s1"].reused_from_id == before["s1"].pk and after["s1"].output == before["s1"].output
    assert after["s1"].attempt == 0
    assert [c.payload["step"] for c in fake_remote.calls].count("s1") == 1
    assert after["s2"].operation_id != before["s2"].operation_id
    assert {after["s2"].operation_id, after["s3"].operation_id}.isdisjoint(
        {s.operation_id for s in before.values()}
    )
    # Both jobs record who and why; the original lists its rerun.
    submitted = Event.objects.get(job=rerun, kind=EventKind.JOB_SUBMITTED)
    assert submitted.actor.username == "olga" and submitted.reason == "card replaced"
    assert submitted.data["rerun_of"] == str(original.pk) and submitted.data["reused"] == ["s1"]
    noted = Event.objects.get(job=original, kind=EventKind.OPERATOR_RERUN)
    assert noted.actor.username == "olga" and noted.data["rerun_job"] == str(rerun.pk)
    assert ops.get(f"{V1}/jobs/{original.pk}/").json()["reruns"] == [str(rerun.pk)]


def test_a_rerun_does_not_compensate_what_it_reused(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    original = failed_at_s2(drain, fake_remote, supervise)
    from supervisor.services import job_compensate, job_rerun

    olga = make_user("olga", "operators")
    fake_remote.script("s2", Outcome.BUSINESS_FAILURE)
    rerun = job_rerun(actor=olga, job_id=original.pk, from_step="s2")
    drain()
    job_compensate(actor=olga, job_id=rerun.pk, reason="give up")
    drain()
    rerun.refresh_from_db()
    assert rerun.status == JobStatus.COMPENSATED
    assert fake_remote.compensations() == []  # s1's effect is the original job's


@pytest.mark.parametrize(
    ("body", "status"),
    [({"from_step": "nope"}, 400), ({}, 400), ({"from_step": "s2", "input": [1]}, 400)],
)
def test_a_bad_rerun_is_refused_and_changes_nothing(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise, body: dict[str, Any], status: int
) -> None:
    original = failed_at_s2(drain, fake_remote, supervise)
    ops = client_for(make_user("olga", "operators"))
    jobs = Job.objects.count()
    assert ops.post(f"{V1}/jobs/{original.pk}/rerun/", body, format="json").status_code == status
    assert Job.objects.count() == jobs


def test_a_live_job_is_not_rerun(fake_remote: FakeRemote) -> None:
    chain(n=2)
    job = job_submit(workflow="chain", input={}).job
    ops = client_for(make_user("olga", "operators"))
    response = ops.post(f"{V1}/jobs/{job.pk}/rerun/", {"from_step": "s1"}, format="json")
    assert response.status_code == 409 and "settled" in response.json()["detail"]


def test_only_operators_rerun(drain: Callable, fake_remote: FakeRemote, supervise: Supervise) -> None:
    original = failed_at_s2(drain, fake_remote, supervise)
    for role in ("submitters", "viewers"):
        client = client_for(make_user(f"u-{role}", role))
        assert (
            client.post(f"{V1}/jobs/{original.pk}/rerun/", {"from_step": "s2"}, format="json").status_code
            == 403
        )


# --- retry with an edited input -------------------------------------------------------------------


@pytest.mark.sqlite
def test_a_refused_step_is_retried_with_an_edited_input_and_a_new_operation_id(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_policy("holding", max_attempts=1, on_exhausted="hold", retry_on=["transient_failure"])
    make_workflow("pay", step("charge", policy="holding"))
    fake_remote.script("charge", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="pay", input={"card": "old"}).job
    drain()
    supervise()
    charge = job.steps.get()
    assert charge.status == StepStatus.HELD
    old_operation = charge.operation_id
    ops = client_for(make_user("olga", "operators"))
    response = ops.post(
        f"{V1}/steps/{charge.pk}/retry/", {"input": {"card": "new"}, "reason": "card updated"}, format="json"
    )
    assert response.status_code == 200, response.json()
    drain()
    charge.refresh_from_db()
    assert charge.status == StepStatus.SUCCEEDED and charge.operation_id != old_operation
    assert fake_remote.calls[-1].payload["input"] == {"card": "new"}
    assert fake_remote.calls[-1].operation_id == charge.operation_id
    event = Event.objects.get(step=charge, kind=EventKind.OPERATOR_RETRY)
    assert event.data["input"] == {"old": {"card": "old"}, "new": {"card": "new"}}
    assert event.data["operation_id"]["old"] == old_operation and event.actor.username == "olga"


def test_the_undo_of_a_step_retried_with_an_edited_input_gets_that_input(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_policy("holding", max_attempts=1, on_exhausted="hold", retry_on=["transient_failure"])
    make_workflow("pay", step("charge", policy="holding"), step("ship", "charge"))
    fake_remote.script("charge", Outcome.BUSINESS_FAILURE)
    fake_remote.script("ship", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="pay", input={"card": "old"}).job
    drain()
    supervise()
    charge = job.steps.get(name="charge")
    ops = client_for(make_user("olga", "operators"))
    ops.post(f"{V1}/steps/{charge.pk}/retry/", {"input": {"card": "new"}}, format="json")
    drain()
    assert job.steps.get(name="charge").status == StepStatus.SUCCEEDED
    for _ in range(3):  # ship is refused: the job is compensated
        supervise()
        drain()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPENSATED
    refund = [c for c in fake_remote.calls if c.payload.get("compensates")]
    assert refund and refund[-1].payload["input"] == {"card": "new"}  # what was charged is undone


def test_an_edited_retry_is_refused_when_the_old_request_may_have_happened(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_policy("holding", max_attempts=1, on_exhausted="hold")
    make_workflow("pay", step("charge", policy="holding"))
    fake_remote.script("charge", Outcome.NO_ANSWER)
    job = job_submit(workflow="pay", input={}).job
    drain()
    supervise()
    charge = job.steps.get()
    ops = client_for(make_user("olga", "operators"))
    response = ops.post(f"{V1}/steps/{charge.pk}/retry/", {"input": {"x": 1}}, format="json")
    assert response.status_code == 409 and "may have taken effect" in response.json()["detail"]
    charge.refresh_from_db()
    assert charge.input_override is None and charge.status == StepStatus.HELD


# --- the console's lists and actions in the API ---------------------------------------------------


def test_attention_supervisor_and_bulk_actions_in_the_api(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_policy("holding", on_exhausted="hold", max_attempts=1)
    make_workflow("h", step("s1", policy="holding"))
    fake_remote.script("s1", Outcome.TRANSIENT_FAILURE, Outcome.TRANSIENT_FAILURE)
    jobs = [job_submit(workflow="h", input={"n": n}).job for n in range(2)]
    drain()
    supervise()
    ops = client_for(make_user("olga", "operators"))
    listed = ops.get(f"{V1}/attention/?workflow=h").json()
    assert listed["count"] == 2
    item = listed["results"][0]
    assert item["step"]["status"] == "held" and item["why"] and item["can_retry"] is True
    assert ops.get(f"{V1}/attention/?workflow=nothing").json()["count"] == 0
    status = ops.get(f"{V1}/supervisor/").json()
    assert status["lease"]["holder"] == "test-supervisor" and status["stale"] is False
    step_ids = [i["step"]["id"] for i in listed["results"]]
    preview = ops.post(
        f"{V1}/attention/bulk/", {"action": "retry", "step_ids": step_ids, "dry_run": True}, format="json"
    ).json()
    assert preview["dry_run"] is True and preview["done"] == 2
    assert set(Step.objects.filter(pk__in=step_ids).values_list("status", flat=True)) == {"held"}
    ran = ops.post(f"{V1}/attention/bulk/", {"action": "cancel", "step_ids": step_ids}, format="json").json()
    assert ran["done"] == 2 and {i["detail"] for i in ran["items"]} == {"cancelled"}
    drain()
    assert set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("status", flat=True)) == {
        "cancelled"
    }


def test_a_rerun_on_the_current_version_uses_its_fixed_steps_and_says_so(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    original = failed_at_s2(drain, fake_remote, supervise)
    before = steps_of(original)
    # During the incident s2's path was fixed and a step added after it: version 2.
    make_workflow(
        "three",
        step("s1"),
        step("s2", "s1", path="agents.builtin.echo"),
        step("s3", "s2"),
        step("s4", "s3"),
    )
    ops = client_for(make_user("olga", "operators"))
    response = ops.post(
        f"{V1}/jobs/{original.pk}/rerun/", {"from_step": "s2", "version": "current"}, format="json"
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["workflow_version"] == 2 and original.workflow.version == 1
    drain()
    rerun = Job.objects.get(pk=body["id"])
    rerun.refresh_from_db()
    assert rerun.status == JobStatus.SUCCEEDED
    after = steps_of(rerun)
    assert after["s1"].reused_from_id == before["s1"].pk  # reused by name across versions
    assert set(after) == {"s1", "s2", "s3", "s4"}
    assert after["s2"].definition.path == "agents.builtin.echo"
    noted = Event.objects.get(job=original, kind=EventKind.OPERATOR_RERUN)
    assert noted.data["version"] == 2
    # The job's own version stays the default.
    again = ops.post(f"{V1}/jobs/{original.pk}/rerun/", {"from_step": "s2"}, format="json")
    assert again.json()["workflow_version"] == 1


def test_a_rerun_on_a_version_without_the_step_is_a_409_and_changes_nothing(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    original = failed_at_s2(drain, fake_remote, supervise)
    make_workflow("three", step("s1"), step("s3", "s1"))  # s2 is gone in version 2
    ops = client_for(make_user("olga", "operators"))
    jobs = Job.objects.count()
    response = ops.post(
        f"{V1}/jobs/{original.pk}/rerun/", {"from_step": "s2", "version": "current"}, format="json"
    )
    assert response.status_code == 409 and "version 2" in response.json()["detail"]
    assert Job.objects.count() == jobs
    bad = ops.post(f"{V1}/jobs/{original.pk}/rerun/", {"from_step": "s2", "version": "3"}, format="json")
    assert bad.status_code == 400 and Job.objects.count() == jobs
