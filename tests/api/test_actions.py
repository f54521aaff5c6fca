"""REST API: operator actions on jobs and steps. Each answers the updated job (or step), refuses
with a 409 what the state does not allow, and names the operator in the job's history."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.fake import FakeRemote
from scheduler.models import Attempt, Event, Job, JobStatus, StepStatus
from tests.api.support import V1, client_for, held_step, make_user, submit
from tests.factories import chain, make_pool

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
