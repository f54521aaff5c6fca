"""Wait steps: definitions of signal, approval and timer steps, how a wait starts (buffered
signals, timers already due), how the scan ends waits (timers fire once, timeouts hold, fail or
continue), and what waits cost the hot path (nothing for workflows without them)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.models import OrmQ

from agents.fake import FakeRemote
from agents.outcome import CallResult, Outcome
from sas_project.errors import ActionNotAllowed, IdempotencyConflict, InvalidInput
from sas_project.permissions import role_groups_ensure
from scheduler.definitions import workflow_create
from scheduler.models import (
    Delivery,
    DeliveryKind,
    Event,
    EventKind,
    EventReaction,
    Job,
    JobStatus,
    Signal,
    Step,
    StepDefinition,
    StepStatus,
)
from scheduler.services import job_submit
from scheduler.services.wakeups import NotPermitted, approval_decide, signal_send
from supervisor.alerts import reactions_handle
from supervisor.scan import ScanReport
from supervisor.services import job_compensate, step_resolve, step_retry
from supervisor.subscriptions import subscription_create
from tests.factories import make_policy, make_pool, make_workflow, step

pytestmark = pytest.mark.django_db
Supervise = Callable[..., ScanReport]
S = StepStatus


def steps_of(job: Job) -> dict[str, Step]:
    return {s.name: s for s in Step.objects.filter(job=job).select_related("definition")}


def operator(name: str = "olga") -> User:
    role_groups_ensure()
    user = User.objects.create_user(name)
    user.groups.add(Group.objects.get(name="operators"))
    return user


def submitter(name: str = "sam") -> User:
    role_groups_ensure()
    user = User.objects.create_user(name)
    user.groups.add(Group.objects.get(name="submitters"))
    return user


def order_workflow(**wait: Any) -> None:
    """reserve -> [shipped: a signal wait] -> notify."""
    make_workflow(
        "order",
        step("reserve"),
        {"name": "shipped", "kind": "signal", "signal": "shipped", "depends_on": ["reserve"], **wait},
        step("notify", "shipped"),
    )


def due_now(job: Job, name: str) -> None:
    """The wait's time came (its deadline moved into the past, as time passing would)."""
    Step.objects.filter(job=job, name=name).update(deadline=timezone.now() - dt.timedelta(seconds=1))


# --- definitions ----------------------------------------------------------------------------------


def test_a_step_without_kind_is_a_call_and_wait_steps_have_no_pool() -> None:
    make_workflow(
        "kinds",
        step("a"),
        {"name": "sig", "kind": "signal", "signal": "go", "timeout_seconds": 60, "depends_on": ["a"]},
        {"name": "ok", "kind": "approval", "depends_on": ["a"]},
        {"name": "later", "kind": "timer", "wait_seconds": 5, "depends_on": ["a"]},
    )
    by_name = {d.name: d for d in StepDefinition.objects.filter(workflow__name="kinds")}
    assert by_name["a"].kind == "call" and by_name["a"].pool is not None
    assert [by_name[n].pool for n in ("sig", "ok", "later")] == [None, None, None]
    # A timeout without on_timeout holds for an operator; no timeout: for ever.
    assert (by_name["sig"].on_timeout, by_name["ok"].timeout_seconds) == ("hold", None)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "wait"}, "kind must be one of"),
        ({"kind": "signal"}, "signal must be"),
        ({"kind": "signal", "signal": "go", "pool": "local"}, "unknown fields for signal steps: pool"),
        ({"kind": "timer"}, "either wait_seconds or until"),
        ({"kind": "timer", "wait_seconds": 1, "until": "input.at"}, "either wait_seconds or until"),
        ({"kind": "timer", "wait_seconds": -1}, "at least 0"),
        ({"kind": "timer", "until": "at"}, "until must be"),
        ({"kind": "timer", "until": "other.at"}, "not a step it depends on"),
        (
            {"kind": "timer", "wait_seconds": 1, "timeout_seconds": 5},
            "unknown fields for timer steps: timeout_seconds",
        ),
        ({"kind": "approval", "group": "nobody"}, "unknown group"),
        ({"kind": "approval", "on_timeout": "fail"}, "on_timeout needs timeout_seconds"),
        ({"kind": "approval", "timeout_seconds": 5, "on_timeout": "skip"}, "on_timeout must be"),
        ({"kind": "approval", "timeout_seconds": 0}, "greater than 0"),
        ({"kind": "approval", "timeout_seconds": 5, "default_output": {"a": 1}}, "on_timeout continue"),
        ({"kind": "approval", "policy": "missing"}, "unknown policy"),
        (
            {"kind": "call", "signal": "go", "pool": "local", "path": "agents.builtin.noop"},
            "for call steps: signal",
        ),
    ],
)
def test_a_wrong_wait_definition_is_refused_naming_the_step(spec: dict[str, Any], message: str) -> None:
    make_pool()
    make_policy()
    with pytest.raises(InvalidInput, match=message):
        workflow_create(name="bad", steps=[step("other"), {"name": "w", **spec}])
    assert not StepDefinition.objects.filter(workflow__name="bad").exists()


def test_a_timer_may_read_its_time_from_an_ancestors_output() -> None:
    make_workflow(
        "t", step("a"), step("b", "a"), {"name": "w", "kind": "timer", "until": "a.at", "depends_on": ["b"]}
    )
    assert StepDefinition.objects.get(workflow__name="t", name="w").until == "a.at"


# --- signals ----------------------------------------------------------------------------------------


@pytest.mark.sqlite
def test_a_signal_completes_the_waiting_step_with_its_payload_and_the_job_moves_on(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    order_workflow(timeout_seconds=3600)
    sam = submitter()
    job = job_submit(workflow="order", input={"n": 1}, submitter=sam).job
    drain()
    steps = steps_of(job)
    assert steps["shipped"].status == S.WAITING and steps["shipped"].pool is None
    assert steps["shipped"].deadline is not None
    assert steps["notify"].status == S.PENDING
    receipt = signal_send(job_id=job.pk, name="shipped", payload={"tracking": "T1"}, sender=sam)
    assert receipt.created and receipt.signal.consumed_by_id == steps["shipped"].pk
    drain()
    steps = steps_of(job)
    assert steps["shipped"].status == S.SUCCEEDED and steps["shipped"].output == {"tracking": "T1"}
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and job.result["shipped"] == {"tracking": "T1"}
    # The payload reached the dependent as an ancestor's output.
    assert fake_remote.calls_for("notify")[0].payload["results"]["shipped"] == {"tracking": "T1"}
    received = Event.objects.get(job=job, kind=EventKind.SIGNAL_RECEIVED)
    assert received.actor == sam and received.data["name"] == "shipped"
    assert Event.objects.filter(job=job, kind=EventKind.STEP_SIGNALLED, step=steps["shipped"]).count() == 1


@pytest.mark.sqlite
def test_a_signal_that_comes_before_its_step_waits_is_kept_and_consumed_when_it_starts_waiting(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    order_workflow()
    sam = submitter()
    job = job_submit(workflow="order", input={}, submitter=sam).job  # reserve not run yet
    receipt = signal_send(job_id=job.pk, name="shipped", payload={"early": True}, sender=sam)
    assert receipt.signal.consumed_at is None
    assert steps_of(job)["shipped"].status == S.PENDING
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert steps_of(job)["shipped"].output == {"early": True}
    assert Signal.objects.get(pk=receipt.signal.pk).consumed_by_id == steps_of(job)["shipped"].pk


@pytest.mark.sqlite
def test_the_same_key_is_one_signal_and_a_different_body_under_it_is_a_conflict(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    order_workflow()
    sam = submitter()
    job = job_submit(workflow="order", input={}, submitter=sam).job
    first = signal_send(job_id=job.pk, name="shipped", payload={"a": 1}, sender=sam, idempotency_key="k1")
    again = signal_send(job_id=job.pk, name="shipped", payload={"a": 1}, sender=sam, idempotency_key="k1")
    assert (first.created, again.created, again.signal.pk) == (True, False, first.signal.pk)
    with pytest.raises(IdempotencyConflict):
        signal_send(job_id=job.pk, name="shipped", payload={"a": 2}, sender=sam, idempotency_key="k1")
    assert Signal.objects.filter(job=job).count() == 1
    assert Event.objects.filter(job=job, kind=EventKind.SIGNAL_RECEIVED).count() == 1


@pytest.mark.sqlite
def test_each_signal_is_consumed_once_and_a_second_one_waits_for_a_step(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    order_workflow()
    sam = submitter()
    job = job_submit(workflow="order", input={}, submitter=sam).job
    drain()
    one = signal_send(job_id=job.pk, name="shipped", payload=1, sender=sam).signal
    two = signal_send(job_id=job.pk, name="shipped", payload=2, sender=sam).signal
    one.refresh_from_db()
    two.refresh_from_db()
    assert one.consumed_at is not None and two.consumed_at is None
    assert steps_of(job)["shipped"].output == 1


def test_a_signal_no_step_takes_is_refused_and_one_to_a_settled_job_changes_nothing(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    order_workflow()
    sam = submitter()
    job = job_submit(workflow="order", input={}, submitter=sam).job
    with pytest.raises(InvalidInput, match=r"no step .* waits for signal 'delivered'.*shipped"):
        signal_send(job_id=job.pk, name="delivered", payload=None, sender=sam)
    drain()
    signal_send(job_id=job.pk, name="shipped", payload=None, sender=sam)
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    before = Event.objects.filter(job=job).count()
    with pytest.raises(ActionNotAllowed, match="succeeded: it takes no more signals"):
        signal_send(job_id=job.pk, name="shipped", payload=None, sender=sam)
    assert Event.objects.filter(job=job).count() == before
    assert Signal.objects.filter(job=job).count() == 1


def test_a_job_whose_compensation_is_held_takes_no_signal(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise
) -> None:
    order_workflow()
    sam = submitter()
    job = job_submit(workflow="order", input={}, submitter=sam).job
    drain()
    fake_remote.script("reserve.compensate", "business_failure")
    job_compensate(actor=operator(), job_id=job.pk, reason="undo")
    drain()
    supervise()
    job.refresh_from_db()
    assert job.status == JobStatus.NEEDS_ATTENTION and job.compensation_reason
    before = Event.objects.filter(job=job).count()
    with pytest.raises(ActionNotAllowed, match="needs_attention while compensating: it takes no more"):
        signal_send(job_id=job.pk, name="shipped", payload=None, sender=sam)
    assert Event.objects.filter(job=job).count() == before
    assert not Signal.objects.filter(job=job).exists()


# --- approvals -----------------------------------------------------------------------------------------


def approval_workflow(**wait: Any) -> None:
    make_workflow(
        "refund",
        step("check"),
        {"name": "approve", "kind": "approval", "depends_on": ["check"], **wait},
        step("pay", "approve"),
    )


@pytest.mark.sqlite
def test_an_approval_waits_for_an_operator_whose_decision_is_the_output(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    approval_workflow()
    job = job_submit(workflow="refund", input={}).job
    drain()
    waiting = steps_of(job)["approve"]
    assert waiting.status == S.WAITING
    requested = Event.objects.get(job=job, kind=EventKind.APPROVAL_REQUESTED)
    assert requested.step_id == waiting.pk
    # The alert queue took it (the subscriptions' `approval_requested`).
    assert EventReaction.objects.filter(kind=EventKind.APPROVAL_REQUESTED, job_id=job.pk).exists()
    with pytest.raises(NotPermitted):
        approval_decide(job_id=job.pk, step_name="approve", actor=submitter(), approve=True)
    olga = operator()
    approval_decide(job_id=job.pk, step_name="approve", actor=olga, approve=True, comment="fine")
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    output = steps_of(job)["approve"].output
    assert (output["approved"], output["by"], output["comment"]) == (True, "olga", "fine")
    approved = Event.objects.get(job=job, kind=EventKind.STEP_APPROVED)
    assert approved.actor == olga and approved.reason == "fine"
    with pytest.raises(ActionNotAllowed, match="waits for no approval"):
        approval_decide(job_id=job.pk, step_name="approve", actor=olga, approve=False)


def test_a_rejection_fails_the_step_and_compensates_what_ran(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    approval_workflow()
    job = job_submit(workflow="refund", input={}).job
    drain()
    approval_decide(job_id=job.pk, step_name="approve", actor=operator(), approve=False, comment="too much")
    drain()
    job.refresh_from_db()
    steps = steps_of(job)
    assert job.status == JobStatus.COMPENSATED
    assert steps["approve"].status == S.FAILED and "too much" in steps["approve"].error
    assert steps["check"].status == S.COMPENSATED and steps["pay"].status == S.SKIPPED
    assert Event.objects.get(job=job, kind=EventKind.STEP_REJECTED).actor.username == "olga"


def test_an_approval_naming_a_group_is_decided_by_its_members_only(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    Group.objects.create(name="finance")
    approval_workflow(group="finance")
    job = job_submit(workflow="refund", input={}).job
    drain()
    with pytest.raises(NotPermitted, match="members of finance"):
        approval_decide(job_id=job.pk, step_name="approve", actor=operator(), approve=True)
    fiona = User.objects.create_user("fiona")
    fiona.groups.add(Group.objects.get(name="finance"))
    approval_decide(job_id=job.pk, step_name="approve", actor=fiona, approve=True)
    assert steps_of(job)["approve"].status == S.SUCCEEDED


# --- timers and timeouts (the scan) ----------------------------------------------------------------------


@pytest.mark.sqlite
def test_a_timer_fires_once_when_its_time_comes_and_the_job_moves_on(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_workflow(
        "later",
        step("a"),
        {"name": "wait", "kind": "timer", "wait_seconds": 3600, "depends_on": ["a"]},
        step("b", "wait"),
    )
    job = job_submit(workflow="later", input={}).job
    drain()
    wait = steps_of(job)["wait"]
    assert wait.status == S.WAITING
    assert 3590 < (wait.deadline - wait.updated_at).total_seconds() <= 3600
    assert supervise().decisions.get("timer_fired") is None  # not due: left alone
    due_now(job, "wait")
    report = supervise()
    assert report.decisions["timer_fired"] == 1
    assert supervise().decisions.get("timer_fired") is None  # never twice
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert Event.objects.filter(job=job, kind=EventKind.TIMER_FIRED).count() == 1


def test_a_timer_reads_its_time_from_the_input_and_fires_at_once_when_it_passed(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_workflow("at", {"name": "wait", "kind": "timer", "until": "input.when.at"}, step("b", "wait"))
    future = job_submit(workflow="at", input={"when": {"at": "2999-01-01T00:00:00"}}).job
    wait = steps_of(future)["wait"]
    assert wait.status == S.WAITING and wait.deadline == dt.datetime(2999, 1, 1, tzinfo=dt.UTC)
    past = job_submit(workflow="at", input={"when": {"at": "2001-01-01T00:00:00+01:00"}}).job
    assert steps_of(past)["wait"].status == S.SUCCEEDED
    drain()
    past.refresh_from_db()
    assert past.status == JobStatus.SUCCEEDED


def test_a_timer_whose_time_is_missing_is_held_for_an_operator(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    make_workflow("at", {"name": "wait", "kind": "timer", "until": "input.at"}, step("b", "wait"))
    job = job_submit(workflow="at", input={"when": "tomorrow"}).job
    job.refresh_from_db()
    wait = steps_of(job)["wait"]
    assert wait.status == S.HELD and job.status == JobStatus.NEEDS_ATTENTION
    assert "input.at is missing" in Event.objects.get(step=wait, kind=EventKind.STEP_HELD).reason


UNREADABLE_TIMES = [
    pytest.param("2024-02-30T00:00:00Z", "day is out of range for month", id="february-30"),
    pytest.param("2024-13-01T00:00:00Z", "month must be in 1..12", id="month-13"),
    pytest.param("2024-01-01T00:00:00+20:00", "beyond +/-15:59", id="offset-20h"),
    pytest.param("9999-12-31T23:00:00-05:00", "outside the years", id="year-10000-in-utc"),
    pytest.param("tomorrow", "not an ISO 8601 time", id="words"),
]


@pytest.mark.parametrize(("value", "why"), UNREADABLE_TIMES)
@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.sqlite
def test_a_submission_whose_input_holds_an_unreadable_timer_time_is_refused_and_nothing_is_written(
    fake_remote: FakeRemote, settings: Any, fast_path: bool, value: str, why: str
) -> None:
    settings.SAS_FAST_PATH = fast_path
    make_workflow(
        "at", step("a"), {"name": "wait", "kind": "timer", "until": "input.when.at"}, step("b", "wait")
    )
    with pytest.raises(InvalidInput) as refused:
        job_submit(workflow="at", input={"when": {"at": value}})
    assert refused.value.detail["field"] == "input.when.at"
    assert "cannot read the time at input.when.at" in refused.value.message and why in refused.value.message
    assert not Job.objects.exists() and not Step.objects.exists() and not Event.objects.exists()
    assert fake_remote.calls == []


@pytest.mark.parametrize(("value", "why"), UNREADABLE_TIMES)
@pytest.mark.sqlite
def test_an_unreadable_time_in_an_ancestors_output_holds_the_timer_and_the_scan_remediates_the_other_jobs(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise, value: str, why: str
) -> None:
    make_workflow(
        "later",
        step("a"),
        {"name": "pause", "kind": "timer", "wait_seconds": 3600, "depends_on": ["a"]},
        {"name": "wait", "kind": "timer", "until": "a.at", "depends_on": ["pause"]},
        step("b", "wait"),
    )
    fake_remote.script("a", CallResult(Outcome.SUCCEEDED, output={"at": value}))
    job = job_submit(workflow="later", input={}).job
    drain()
    due_now(job, "pause")
    make_workflow("beside", step("c"))
    other = job_submit(workflow="beside", input={}).job
    # The call of the job beside it was lost with its worker: only the scan can retry it.
    OrmQ.objects.all().delete()
    Step.objects.filter(job=other).update(deadline=timezone.now() - dt.timedelta(seconds=1))

    report = supervise()

    assert report.decisions["timer_fired"] == 1
    wait = steps_of(job)["wait"]
    assert wait.status == S.HELD and wait.deadline is None
    held = Event.objects.get(step=wait, kind=EventKind.STEP_HELD).reason
    assert held.startswith(f"cannot read the time at a.at: {value!r}") and why in held
    assert wait.status_reason == held
    job.refresh_from_db()
    assert job.status == JobStatus.NEEDS_ATTENTION
    assert report.timed_out == 1
    assert steps_of(other)["c"].attempt == 2
    drain()
    other.refresh_from_db()
    assert other.status == JobStatus.SUCCEEDED


@pytest.mark.parametrize(
    ("on_timeout", "step_status", "job_status"),
    [
        ("hold", S.HELD, JobStatus.NEEDS_ATTENTION),
        ("fail", S.FAILED, JobStatus.COMPENSATED),
        ("continue", S.SUCCEEDED, JobStatus.SUCCEEDED),
    ],
)
def test_a_wait_that_times_out_does_what_its_definition_says(
    drain: Callable[[], int],
    fake_remote: FakeRemote,
    supervise: Supervise,
    on_timeout: str,
    step_status: str,
    job_status: str,
) -> None:
    extra = {"default_output": {"carrier": "default"}} if on_timeout == "continue" else {}
    order_workflow(timeout_seconds=60, on_timeout=on_timeout, **extra)
    job = job_submit(workflow="order", input={}).job
    drain()
    due_now(job, "shipped")
    assert supervise().decisions["wait_timed_out"] == 1
    drain()
    job.refresh_from_db()
    shipped = steps_of(job)["shipped"]
    assert (shipped.status, job.status) == (step_status, job_status)
    if on_timeout == "continue":
        assert shipped.output == {"carrier": "default"}


def test_an_operator_retries_a_held_wait_by_waiting_again_and_may_resolve_a_waiting_one(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise
) -> None:
    order_workflow(timeout_seconds=60)
    job = job_submit(workflow="order", input={}).job
    drain()
    due_now(job, "shipped")
    supervise()
    olga = operator()
    step_retry(actor=olga, step_id=steps_of(job)["shipped"].pk)
    shipped = steps_of(job)["shipped"]
    assert shipped.status == S.WAITING and shipped.deadline > timezone.now()
    step_resolve(actor=olga, step_id=shipped.pk, output={"by": "hand"})
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and steps_of(job)["shipped"].output == {"by": "hand"}


def test_waits_that_are_not_due_cost_the_scan_one_index_read(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise
) -> None:
    order_workflow(timeout_seconds=3600)
    for _ in range(20):
        job_submit(workflow="order", input={})
    drain()
    assert Step.objects.filter(status=S.WAITING).count() == 20
    supervise()  # the lease
    with CaptureQueriesContext(connection) as queries:
        report = supervise()
    assert report.examined == 0
    touching = [q["sql"] for q in queries.captured_queries if '"scheduler_step"' in q["sql"]]
    # The due-wait read and the due-step read: nothing per waiting job.
    assert len(touching) <= 3, touching


def test_an_approval_request_alerts_the_subscriptions_that_want_it(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    subscription_create(name="approvers", actor=None, email="a@example.com", kinds=["approval_requested"])
    subscription_create(name="others", actor=None, email="o@example.com", kinds=["job_failed"])
    approval_workflow()
    job = job_submit(workflow="refund", input={}).job
    drain()
    assert reactions_handle() > 0
    (alert,) = Delivery.objects.filter(kind=DeliveryKind.EMAIL)
    assert alert.subscription is not None and alert.subscription.name == "approvers"
    assert alert.payload["alert"] == "approval_requested" and alert.payload["job_id"] == str(job.pk)


def test_a_job_takes_a_bounded_number_of_signals(
    drain: Callable[[], int], fake_remote: FakeRemote, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scheduler.services import wakeups

    monkeypatch.setattr(wakeups, "MAX_SIGNALS_PER_JOB", 3)
    order_workflow()
    sam = submitter()
    job = job_submit(workflow="order", input={}, submitter=sam).job
    for n in range(3):
        signal_send(job_id=job.pk, name="shipped", payload=n, sender=sam)
    with pytest.raises(ActionNotAllowed, match="already holds 3 signals"):
        signal_send(job_id=job.pk, name="shipped", payload=4, sender=sam)
    assert Signal.objects.filter(job=job).count() == 3
