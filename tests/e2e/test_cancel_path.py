"""End to end, with a real `qcluster` and the sandbox remote: a job cancelled over the REST API
while the remote holds a 5-s call sends one cancel to the step's `cancel_path`, with the call's
operation ID, while the call is still held; the call's answer then comes and is undone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agents.outcome import AttemptKind, Outcome
from scheduler.models import Attempt, Event, EventKind, Job, JobStatus, Step, StepStatus
from scheduler.services import job_submit
from testbed.definitions import ensure_policy, ensure_pool, ensure_workflow
from tests.api.support import V1, client_for, make_user
from tests.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_cancel_during_a_five_second_call_reaches_cancel_path_once(
    sandbox: Any, clusters: Callable[..., Any]
) -> None:
    ensure_pool("remote", kind="http", endpoints=[sandbox.url])
    ensure_policy(
        "patient", timeout_seconds=30, max_attempts=3, backoff_initial_seconds=0.1, backoff_max_seconds=1
    )
    ensure_workflow(
        "charge",
        [
            {
                "name": "charge",
                "pool": "remote",
                "path": "/payments/charge",
                "compensation_path": "/payments/refund",
                "cancel_path": "/cancel/payments/charge",
                "policy": "patient",
            }
        ],
    )
    sandbox.config(script={"/payments/charge": ["slow:5000"]})
    clusters("c1", SAS_Q_WORKERS=2)
    job_id = job_submit(workflow="charge", input={"amount": 5}).job_id
    wait_until(
        lambda: Attempt.objects.filter(step__job_id=job_id, number=1, started_at__isnull=False).exists(),
        timeout=60,
        interval=0.1,
        message="the charge's call went out",
    )
    olga = client_for(make_user("olga", "operators"))
    response = olga.post(f"{V1}/jobs/{job_id}/cancel/", {"reason": "customer called"}, format="json")
    assert response.status_code == 200, response.json()
    wait_until(
        lambda: Job.objects.get(pk=job_id).status == JobStatus.CANCELLED,
        timeout=90,
        interval=0.2,
        message="the job ended cancelled",
    )
    charge = Step.objects.get(job_id=job_id, name="charge")
    assert sandbox.stats()["cancels"] == [[charge.operation_id, "/cancel/payments/charge", 1]]
    call = Attempt.objects.get(step=charge, number=1)
    cancel = Attempt.objects.get(step=charge, kind=AttemptKind.CANCEL)
    assert (cancel.outcome, cancel.status_code) == (Outcome.SUCCEEDED, 200)
    # Sent while the remote still held the call, whose answer then came and was recorded as ever.
    assert cancel.finished_at < call.finished_at
    assert call.outcome == Outcome.SUCCEEDED and charge.status == StepStatus.COMPENSATED
    requested = Event.objects.get(job_id=job_id, kind=EventKind.STEP_CANCEL_REQUESTED)
    assert requested.actor is not None and requested.actor.username == "olga"
    assert sandbox.stats()["effects_by_kind"] == {"charge": 1, "refund": 1}
