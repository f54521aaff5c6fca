"""A step's `cancel_path`: a call still running at its remote when its job is cancelled or
compensated is cancelled there, once, with the call's operation ID, retried by the step's policy;
the answer is an attempt of kind `cancel` and the history says who stopped the job. The remote is
the one thing faked."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django_q.models import OrmQ

from agents.broker import task_of
from agents.fake import FakeRemote
from agents.outcome import AttemptKind, CallResult, CallSpec, Outcome
from agents.queue import message_of
from sas_project.errors import InvalidInput
from scheduler.definitions import step_plain, validate_steps
from scheduler.models import (
    Attempt,
    Event,
    EventKind,
    Job,
    JobStatus,
    RemoteCancel,
    Step,
    StepStatus,
    Workflow,
)
from scheduler.services import attempt_claim, job_submit, step_record_outcome
from scheduler.services.cancels import CANCEL_TASK
from scheduler.tasks import run_cancel
from supervisor.scan import ScanReport
from supervisor.services import job_cancel, job_compensate
from tests.api.support import V1, client_for, make_user
from tests.factories import make_policy, make_pool, make_workflow

pytestmark = pytest.mark.django_db
S = StepStatus
J = JobStatus
Drain = Callable[[], int]
Supervise = Callable[..., ScanReport]
CANCEL_PATH = "/payments/charge/cancel"


def charge_workflow(*, cancel_path: str | None = CANCEL_PATH, kind: str = "http", **policy: Any) -> None:
    """charge (a call to the web pool, with a cancel_path) -> ship."""
    make_pool(
        "web", kind=kind, endpoints=["http://a.example:1"] if kind == "http" else ["redis://a.example:1/0"]
    )
    make_policy("cancelling", **policy)
    path = "/payments/charge" if kind == "http" else "charges"
    make_workflow(
        "order",
        {
            "name": "charge",
            "pool": "web",
            "path": path,
            "policy": "cancelling",
            "compensation_path": "/payments/refund" if kind == "http" else "refunds",
            "cancel_path": cancel_path,
        },
        {"name": "ship", "pool": "web", "path": path, "policy": "cancelling", "depends_on": ["charge"]},
    )


def in_flight(job: Job) -> Step:
    """Claim the charge's first call, as a worker would before sending it: it is now out."""
    charge = Step.objects.get(job=job, name="charge")
    assert isinstance(attempt_claim(charge.pk, number=1), CallSpec)
    return charge


def olga() -> User:
    return make_user("olga", "operators")


def cancels_queued() -> list[tuple[int, ...]]:
    return [
        tuple(t["args"]) for t in (task_of(r.payload) for r in OrmQ.objects.all()) if t["func"] == CANCEL_TASK
    ]


def events(job: Job, kind: EventKind) -> list[Event]:
    return list(Event.objects.filter(job_id=job.pk, kind=kind).order_by("id"))


# --- the definition ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "payments/cancel",
        "//evil.example/cancel",
        "http://evil.example/cancel",
        "/payments/../admin",
        "/payments/%2e%2e/admin",
        "/payments/cancel?to=evil",
        "/payments/cancel#x",
        "/payments/ cancel",
        "/payments\\cancel",
        "/" + "a" * 300,
        5,
    ],
)
def test_a_cancel_path_that_is_not_a_plain_path_is_refused_naming_the_field(value: Any) -> None:
    make_pool("web", kind="http", endpoints=["http://a.example:1"])
    make_policy()
    spec = {"name": "charge", "pool": "web", "path": "/charge", "policy": "default", "cancel_path": value}
    with pytest.raises(InvalidInput) as refused:
        validate_steps([spec])
    assert "cancel_path" in refused.value.message and refused.value.detail == {"field": "steps"}


def test_a_python_pools_step_may_not_name_a_cancel_path() -> None:
    make_pool()
    make_policy()
    spec = {
        "name": "a",
        "pool": "local",
        "path": "agents.builtin.noop",
        "policy": "default",
        "cancel_path": "/x",
    }
    with pytest.raises(InvalidInput, match="python pool's calls cannot be cancelled"):
        validate_steps([spec])


def test_the_api_answers_a_bad_cancel_path_with_a_400_that_names_it() -> None:
    make_pool("web", kind="http", endpoints=["http://a.example:1"])
    make_policy()
    admin = client_for(make_user("ada", "administrators"))
    body = {
        "name": "order",
        "steps": [
            {"name": "charge", "pool": "web", "path": "/c", "policy": "default", "cancel_path": "/a/../b"}
        ],
    }
    response = admin.post(f"{V1}/workflows/", body, format="json")
    assert response.status_code == 400
    assert "cancel_path" in str(response.json())
    assert not Workflow.objects.filter(name="order").exists()


def test_a_step_with_a_cancel_path_is_read_back_and_is_never_plain() -> None:
    charge_workflow()
    admin = client_for(make_user("ada", "administrators"))
    steps = admin.get(f"{V1}/workflows/order/").json()["steps"]
    assert [s["cancel_path"] for s in steps] == [CANCEL_PATH, None]
    workflow = Workflow.objects.get(name="order")
    assert not workflow.plain  # the SQL fast path never runs its jobs
    cleaned = validate_steps(
        [{"name": "a", "pool": "web", "path": "/a", "policy": "cancelling", "cancel_path": "/c"}]
    )
    assert not step_plain(cleaned[0])
    assert step_plain({**cleaned[0], "cancel_path": ""})


# --- the intent ---------------------------------------------------------------------------------


def test_cancelling_a_job_whose_call_is_in_flight_writes_the_cancel_and_its_task_with_the_user(
    fake_remote: FakeRemote,
) -> None:
    charge_workflow()
    job = job_submit(workflow="order", input={}).job
    charge = in_flight(job)
    job_cancel(actor=olga(), job_id=job.pk, reason="customer called")
    cancel = RemoteCancel.objects.get(step=charge)
    assert (cancel.call_attempt, cancel.tries, cancel.finished_at) == (1, 0, None)
    assert cancel.endpoint_url == "http://a.example:1"
    assert cancels_queued() == [(cancel.pk, 1)]
    (requested,) = events(job, EventKind.STEP_CANCEL_REQUESTED)
    assert requested.actor is not None and requested.actor.username == "olga"
    assert requested.step_id == charge.pk and requested.attempt == 1
    assert requested.data["operation_id"] == charge.operation_id
    assert requested.data["cancel_path"] == CANCEL_PATH
    assert fake_remote.cancels() == []  # nothing is sent inside the decision's transaction


def test_compensating_a_job_whose_call_is_in_flight_writes_the_cancel(fake_remote: FakeRemote) -> None:
    charge_workflow()
    job = job_submit(workflow="order", input={}).job
    charge = in_flight(job)
    job_compensate(actor=olga(), job_id=job.pk, reason="wrong order")
    assert RemoteCancel.objects.filter(step=charge).exists()
    assert events(job, EventKind.STEP_CANCEL_REQUESTED)[0].reason.startswith("job compensating")


def test_the_cancel_reaches_the_remote_once_with_the_calls_operation_id_and_the_late_answer_counts(
    drain: Drain, fake_remote: FakeRemote
) -> None:
    charge_workflow()
    job = job_submit(workflow="order", input={}).job
    charge = in_flight(job)
    job_cancel(actor=olga(), job_id=job.pk)
    drain()
    (sent,) = fake_remote.cancels()
    assert sent.operation_id == charge.operation_id and sent.attempt == 1
    assert (sent.path, sent.base_url, sent.agent_kind) == (CANCEL_PATH, "http://a.example:1", "http")
    assert sent.payload["type"] == "cancel" and sent.payload["operation_id"] == charge.operation_id
    cancel_attempt = Attempt.objects.get(step=charge, kind=AttemptKind.CANCEL)
    assert (cancel_attempt.number, cancel_attempt.outcome) == (0, Outcome.SUCCEEDED)
    (answered,) = events(job, EventKind.STEP_CANCEL_SENT)
    assert answered.data["try"] == 1 and answered.data["outcome"] == Outcome.SUCCEEDED
    # The call itself is still out; its answer, when it comes, is recorded as ever: it succeeded
    # after all, so the saga undoes it.
    charge.refresh_from_db()
    assert charge.status == S.DISPATCHED
    step_record_outcome(charge.pk, number=1, result=CallResult(Outcome.SUCCEEDED, output={"id": 7}))
    drain()
    charge.refresh_from_db()
    job.refresh_from_db()
    assert charge.status == S.COMPENSATED and charge.output == {"id": 7}
    assert Attempt.objects.get(step=charge, number=1).outcome == Outcome.SUCCEEDED
    assert job.status == J.CANCELLED
    assert fake_remote.compensations() == ["charge"] and len(fake_remote.cancels()) == 1


def test_a_step_whose_outcome_is_unknown_is_cancelled_too(drain: Drain, fake_remote: FakeRemote) -> None:
    charge_workflow()
    job = job_submit(workflow="order", input={}).job
    charge = in_flight(job)
    step_record_outcome(charge.pk, number=1, result=CallResult(Outcome.NO_ANSWER, error="timed out"))
    charge.refresh_from_db()
    assert charge.status in (S.UNKNOWN, S.RETRY_WAIT, S.ATTEMPT_FAILED)
    job_cancel(actor=olga(), job_id=job.pk)
    drain()
    assert [c.operation_id for c in fake_remote.cancels()] == [charge.operation_id]


def test_no_cancel_for_a_call_no_worker_has_taken(drain: Drain, fake_remote: FakeRemote) -> None:
    charge_workflow()
    job = job_submit(workflow="order", input={}).job
    job_cancel(actor=olga(), job_id=job.pk)  # the charge is dispatched, its task still queued
    drain()
    assert not RemoteCancel.objects.exists() and fake_remote.cancels() == []
    assert fake_remote.calls == []  # its claim found the job stopped: nothing went out


def test_no_cancel_without_a_cancel_path(drain: Drain, fake_remote: FakeRemote) -> None:
    charge_workflow(cancel_path=None)
    job = job_submit(workflow="order", input={}).job
    in_flight(job)
    job_cancel(actor=olga(), job_id=job.pk)
    drain()
    assert not RemoteCancel.objects.exists() and fake_remote.cancels() == []
    assert not events(job, EventKind.STEP_CANCEL_REQUESTED)


def test_no_cancel_for_a_call_that_has_answered(
    drain: Drain, fake_remote: FakeRemote, one_delivery_per_task: None
) -> None:
    charge_workflow()
    job = job_submit(workflow="order", input={}).job
    charge = in_flight(job)
    step_record_outcome(charge.pk, number=1, result=CallResult(Outcome.SUCCEEDED, output={}))
    job_cancel(actor=olga(), job_id=job.pk)
    drain()
    assert not RemoteCancel.objects.exists() and fake_remote.cancels() == []


# --- tries ----------------------------------------------------------------------------------------


def test_a_failed_cancel_is_tried_again_by_the_steps_policy_until_it_is_answered(
    drain: Drain, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    charge_workflow(max_attempts=3)
    fake_remote.script("charge.cancel", "transient_failure", "no_answer")
    job = job_submit(workflow="order", input={}).job
    charge = in_flight(job)
    job_cancel(actor=olga(), job_id=job.pk)
    for _ in range(3):
        drain()
        supervise()  # the backoff (0 s here) has passed: the next try's task
    cancel = RemoteCancel.objects.get(step=charge)
    assert cancel.tries == 3 and cancel.finished_at is not None
    assert [e.data["outcome"] for e in events(job, EventKind.STEP_CANCEL_SENT)] == [
        Outcome.TRANSIENT_FAILURE,
        Outcome.NO_ANSWER,
        Outcome.SUCCEEDED,
    ]
    assert Attempt.objects.get(step=charge, kind=AttemptKind.CANCEL).outcome == Outcome.SUCCEEDED
    assert len(fake_remote.cancels()) == 3


def test_a_cancel_stops_after_the_policys_attempts(
    drain: Drain, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    charge_workflow(max_attempts=2)
    fake_remote.script("charge.cancel", "transient_failure", "transient_failure", "transient_failure")
    job = job_submit(workflow="order", input={}).job
    charge = in_flight(job)
    job_cancel(actor=olga(), job_id=job.pk)
    for _ in range(4):
        drain()
        supervise()
    assert len(fake_remote.cancels()) == 2
    attempt = Attempt.objects.get(step=charge, kind=AttemptKind.CANCEL)
    assert attempt.outcome == Outcome.TRANSIENT_FAILURE
    assert RemoteCancel.objects.get(step=charge).finished_at is not None


def test_a_refused_cancel_is_not_tried_again(
    drain: Drain, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    charge_workflow(max_attempts=3)
    fake_remote.script(
        "charge.cancel", CallResult(Outcome.BUSINESS_FAILURE, status_code=409, error="HTTP 409")
    )
    job = job_submit(workflow="order", input={}).job
    charge = in_flight(job)
    job_cancel(actor=olga(), job_id=job.pk)
    drain()
    supervise()
    drain()
    assert len(fake_remote.cancels()) == 1
    attempt = Attempt.objects.get(step=charge, kind=AttemptKind.CANCEL)
    assert (attempt.outcome, attempt.status_code) == (Outcome.BUSINESS_FAILURE, 409)


def test_a_duplicate_delivery_sends_nothing(fake_remote: FakeRemote) -> None:
    charge_workflow()
    job = job_submit(workflow="order", input={}).job
    charge = in_flight(job)
    job_cancel(actor=olga(), job_id=job.pk)
    cancel = RemoteCancel.objects.get(step=charge)
    assert run_cancel(cancel.pk, 1) == Outcome.SUCCEEDED
    assert run_cancel(cancel.pk, 1) == "ignored"
    assert len(fake_remote.cancels()) == 1
    assert Attempt.objects.filter(step=charge, kind=AttemptKind.CANCEL).count() == 1


def test_a_cancel_whose_task_was_lost_is_sent_by_the_scan(
    drain: Drain, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    charge_workflow()
    job = job_submit(workflow="order", input={}).job
    charge = in_flight(job)
    job_cancel(actor=olga(), job_id=job.pk)
    cancel = RemoteCancel.objects.get(step=charge)
    OrmQ.objects.all().delete()  # its worker died with the task
    supervise()
    assert cancels_queued() == []  # not due yet: the task may still be on its way
    RemoteCancel.objects.filter(pk=cancel.pk).update(due_at=cancel.created_at - dt.timedelta(seconds=1))
    report = supervise()
    assert report.decisions.get("cancel_sent_again") == 1
    drain()
    assert [c.operation_id for c in fake_remote.cancels()] == [charge.operation_id]


def test_a_cancel_that_cannot_be_handled_is_quarantined_and_the_others_are_sent(
    drain: Drain, fake_remote: FakeRemote, supervise: Supervise, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scheduler.models import Quarantine, QuarantineLoop
    from scheduler.services import cancels

    charge_workflow()
    jobs = [job_submit(workflow="order", input={"n": n}).job for n in range(3)]
    charges = [in_flight(job) for job in jobs]
    operator = olga()
    for job in jobs:
        job_cancel(actor=operator, job_id=job.pk)
    OrmQ.objects.all().delete()  # every task lost: the scan sends them again
    RemoteCancel.objects.update(due_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
    poisoned = RemoteCancel.objects.get(step=charges[0])
    enqueue = cancels._enqueue

    def raising(cancel_id: int, **kwargs: Any) -> None:
        if cancel_id == poisoned.pk:
            raise ValueError("an impossible value in this cancel")
        enqueue(cancel_id, **kwargs)

    monkeypatch.setattr(cancels, "_enqueue", raising)
    report = supervise()
    assert report.quarantined == 1 and report.decisions.get("cancel_sent_again") == 2
    quarantined = Quarantine.objects.get(job_id=jobs[0].pk)
    assert quarantined.loop == QuarantineLoop.REMEDIATION and "impossible value" in quarantined.error
    assert Job.objects.get(pk=jobs[0].pk).status != JobStatus.NEEDS_ATTENTION  # its job untouched
    drain()
    assert sorted(c.operation_id for c in fake_remote.cancels()) == sorted(
        s.operation_id for s in charges[1:]
    )
    # The next pass leaves the quarantined cancel alone, and runs.
    assert supervise().quarantined == 0


# --- queue steps ----------------------------------------------------------------------------------


def test_a_queue_steps_cancel_goes_to_its_request_queue_marked_as_one(
    drain: Drain, fake_remote: FakeRemote
) -> None:
    charge_workflow(kind="queue", cancel_path="/cancel")
    job = job_submit(workflow="order", input={}).job
    charge = Step.objects.get(job=job, name="charge")
    # A queue call is out once published (accepted); the reply has not come.
    assert isinstance(attempt_claim(charge.pk, number=1), CallSpec)
    job_cancel(actor=olga(), job_id=job.pk)
    drain()
    (sent,) = fake_remote.cancels()
    assert (sent.agent_kind, sent.path, sent.operation_id) == ("queue", "charges", charge.operation_id)
    assert message_of(sent) == {
        "type": "cancel",
        "kind": "cancel",
        "operation_id": charge.operation_id,
        "job_id": str(job.pk),
        "step": "charge",
        "attempt": 1,
    }
