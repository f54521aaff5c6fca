"""The supervisor scan: overdue detection, policy decisions, compensation, lease, health."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.db.models import F
from django.utils import timezone
from django_q.models import OrmQ

from agents.fake import FakeRemote
from agents.models import AgentEndpoint
from agents.outcome import CallResult
from scheduler.models import Attempt, AttemptKind, Event, Job, JobStatus, Outcome, Step, StepStatus
from scheduler.services import job_submit
from scheduler.tasks import run_attempt
from supervisor.lease import lease_acquire
from supervisor.models import LeaseTerm, SupervisorLease
from supervisor.policies import policy_update
from supervisor.scan import ScanReport
from supervisor.services import job_cancel, job_pause, job_resume, step_retry
from tests.factories import (
    chain,
    diamond,
    failing_endpoint_history,
    make_policy,
    make_pool,
    make_workflow,
    state_arranged,
    step,
)

pytestmark = pytest.mark.django_db
Supervise = Callable[..., ScanReport]


def steps_of(job: Job) -> dict[str, Step]:
    return {s.name: s for s in Step.objects.filter(job=job)}


def lose_in_flight_calls() -> None:
    """The worker running the calls died: their tasks are gone and their deadlines pass."""
    OrmQ.objects.all().delete()
    past = dt.timedelta(seconds=1)
    Step.objects.filter(status=StepStatus.DISPATCHED).update(
        deadline=F("deadline") - dt.timedelta(hours=1) - past
    )


@pytest.mark.sqlite
def test_an_overdue_call_is_retried_with_the_same_operation_id(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    chain(n=2)
    job = job_submit(workflow="chain", input={}).job
    lose_in_flight_calls()
    report = supervise()
    assert report.acted and report.timed_out == 1
    s1 = steps_of(job)["s1"]
    assert (s1.status, s1.attempt) == (StepStatus.DISPATCHED, 2)
    first, second = Attempt.objects.filter(step=s1).order_by("number")
    assert (first.outcome, first.decided_by) == (Outcome.NO_ANSWER, "supervisor:test-supervisor")
    assert second.outcome == ""
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert {c.operation_id for c in fake_remote.calls_for("s1")} == {s1.operation_id}
    timed_out = Event.objects.get(step=s1, kind="step_timed_out")
    assert timed_out.data["overdue_ms"] >= 1000 and timed_out.source == "supervisor:test-supervisor"


def test_a_dispatched_step_with_no_deadline_is_never_hidden_from_the_scan(
    fake_remote: FakeRemote, supervise: Supervise
) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    OrmQ.objects.all().delete()
    Step.objects.filter(job=job).update(deadline=None)
    report = supervise()
    assert report.timed_out == 1
    assert Event.objects.get(job=job, kind="step_timed_out").reason == "dispatched with no deadline"


def test_a_retry_with_no_not_before_is_never_hidden_from_the_scan(supervise: Supervise) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    OrmQ.objects.all().delete()
    Attempt.objects.filter(step__job=job).update(finished_at=F("dispatched_at"), outcome=Outcome.NO_ANSWER)
    with state_arranged():  # a retry decided without a time (dispatched -> retry_wait directly)
        Step.objects.filter(job=job).update(status=StepStatus.RETRY_WAIT, not_before=None)
    assert supervise().remediated == 1
    assert steps_of(job)["s1"].status == StepStatus.DISPATCHED


def test_a_step_in_flight_before_its_deadline_is_left_alone(supervise: Supervise) -> None:
    chain(n=1)
    job_submit(workflow="chain", input={})
    report = supervise()
    assert (report.examined, report.remediated) == (0, 0)


@pytest.mark.sqlite
def test_a_transient_failure_is_retried_until_it_succeeds(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    chain(n=1)
    fake_remote.script("s1", Outcome.TRANSIENT_FAILURE, Outcome.TRANSIENT_FAILURE)
    job = job_submit(workflow="chain", input={}).job
    for _ in range(3):
        drain()
        supervise()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert len(fake_remote.calls_for("s1")) == 3
    reasons = list(Event.objects.filter(job=job, kind="step_dispatched").values_list("reason", flat=True))
    assert "transient_failure: retry 2 of 3" in reasons[1]


@pytest.mark.sqlite
def test_exhausted_retries_compensate_the_steps_that_ran_in_reverse_order(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    chain(n=3)
    fake_remote.script("s3", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="chain", input={}).job
    for _ in range(4):
        drain()
        supervise()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPENSATED
    assert fake_remote.compensations() == ["s2", "s1"]
    steps = steps_of(job)
    assert steps["s3"].status == StepStatus.FAILED
    assert steps["s1"].status == steps["s2"].status == StepStatus.COMPENSATED
    assert steps["s1.compensate"].operation_id == f"{steps['s1'].operation_id}:compensate"
    assert len(fake_remote.calls_for("s3")) == 1  # a business failure is not retried


def test_a_diamond_compensates_both_branches_before_the_root(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    diamond()
    fake_remote.script("d", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="diamond", input={}).job
    for _ in range(4):
        drain()
        supervise()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPENSATED
    order = fake_remote.compensations()
    assert sorted(order[:2]) == ["b", "c"] and order[2] == "a" and len(order) == 3


def test_a_step_that_never_started_is_skipped_and_one_that_said_no_is_not_undone(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    chain(n=3)
    fake_remote.script("s2", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="chain", input={}).job
    for _ in range(3):
        drain()
        supervise()
    steps = steps_of(job)
    assert steps["s3"].status == StepStatus.SKIPPED
    assert fake_remote.compensations() == ["s1"]


def test_an_unknown_outcome_is_compensated_as_if_it_happened(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_policy("once", max_attempts=1)
    make_workflow("two", step("s1"), step("s2", "s1", policy="once"))
    fake_remote.script("s2", Outcome.NO_ANSWER)
    job = job_submit(workflow="two", input={}).job
    for _ in range(3):
        drain()
        supervise()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPENSATED
    assert fake_remote.compensations() == ["s2", "s1"]


def test_on_exhausted_fail_ends_the_job_failed_without_compensating(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_policy("failing", on_exhausted="fail", max_attempts=1)
    make_workflow("f", step("s1"), step("s2", "s1", policy="failing"), step("s3", "s2"))
    fake_remote.script("s2", Outcome.TRANSIENT_FAILURE)
    job = job_submit(workflow="f", input={}).job
    for _ in range(3):
        drain()
        supervise()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert fake_remote.compensations() == []
    assert steps_of(job)["s3"].status == StepStatus.SKIPPED


@pytest.mark.sqlite
def test_on_exhausted_hold_parks_the_step_for_an_operator_who_retries_it(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_policy("holding", on_exhausted="hold", max_attempts=1)
    make_workflow("h", step("s1", policy="holding"), step("s2", "s1"))
    fake_remote.script("s1", Outcome.TRANSIENT_FAILURE)
    job = job_submit(workflow="h", input={}).job
    drain()
    supervise()
    job.refresh_from_db()
    assert job.status == JobStatus.NEEDS_ATTENTION
    assert steps_of(job)["s1"].status == StepStatus.HELD
    olga = User.objects.create_user("olga")
    step_retry(actor=olga, step_id=steps_of(job)["s1"].pk, reason="remote fixed")
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    event = Event.objects.get(job=job, kind="operator_retry")
    assert (event.actor, event.source, event.reason) == (olga, "operator:olga", "remote fixed")


def test_reconcile_finds_the_lost_success_without_calling_the_action_again(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_policy("careful", reconcile_before_retry=True)
    make_workflow("r", step("pay", policy="careful", status_path="agents.builtin.echo"))
    fake_remote.script("pay", Outcome.NO_ANSWER, CallResult(Outcome.SUCCEEDED, output={"charge": "c1"}))
    job = job_submit(workflow="r", input={}).job
    drain()
    supervise()
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert [c.kind for c in fake_remote.calls] == [AttemptKind.CALL, AttemptKind.RECONCILE]
    assert steps_of(job)["pay"].output == {"charge": "c1"}
    assert Event.objects.filter(job=job, kind="step_reconciled").exists()


def test_reconcile_that_finds_nothing_retries_the_call(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_policy("careful", reconcile_before_retry=True)
    make_workflow("r", step("pay", policy="careful", status_path="agents.builtin.echo"))
    fake_remote.script("pay", Outcome.NO_ANSWER, Outcome.NOT_HAPPENED)
    job = job_submit(workflow="r", input={}).job
    for _ in range(3):
        drain()
        supervise()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert [c.kind for c in fake_remote.calls] == [AttemptKind.CALL, AttemptKind.RECONCILE, AttemptKind.CALL]
    assert steps_of(job)["pay"].calls == 2


def test_after_n_failed_calls_the_step_moves_to_the_alternate_pool_with_its_operation_id(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_pool("backup")
    make_pool("primary", alternate="backup")
    make_policy("moving", reassign_after_attempts=2, max_attempts=4)
    make_workflow("m", step("s1", pool="primary", policy="moving"))
    fake_remote.script("s1", Outcome.TRANSIENT_FAILURE, Outcome.TRANSIENT_FAILURE)
    job = job_submit(workflow="m", input={}).job
    for _ in range(3):
        drain()
        supervise()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    pools = list(
        Attempt.objects.filter(step__job=job).order_by("number").values_list("pool__name", flat=True)
    )
    assert pools == ["primary", "primary", "backup"]
    assert len({c.operation_id for c in fake_remote.calls}) == 1
    moved = Event.objects.filter(job=job, kind="step_dispatched").order_by("id").last()
    assert moved.data["reassigned_to"] == "backup" and "reassigned after 2 failed calls" in moved.reason


def test_a_policy_edit_applies_at_the_next_decision_and_attempts_keep_their_version(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    policy = make_policy("editable", max_attempts=5)
    make_workflow("e", step("s1", policy="editable"))
    fake_remote.script("s1", *[Outcome.TRANSIENT_FAILURE] * 5)
    job = job_submit(workflow="e", input={}).job
    drain()
    supervise()
    drain()
    policy_update(policy.pk, actor=None, changes={"max_attempts": 2})
    supervise()
    drain()  # a transient failure may have had an effect: it is compensated
    job.refresh_from_db()
    assert job.status == JobStatus.COMPENSATED
    versions = list(
        Attempt.objects.filter(step__job=job, step__name="s1")
        .order_by("number")
        .values_list("policy_version", flat=True)
    )
    assert versions == [1, 1]
    assert Attempt.objects.get(step__name="s1.compensate").policy_version == 2
    gave_up = Event.objects.get(job=job, kind="step_failed")
    assert "2 of 2 attempts used (policy editable v2)" in gave_up.reason


@pytest.mark.sqlite
def test_a_late_success_completes_the_step_once_and_supersedes_the_retry(
    fake_remote: FakeRemote, supervise: Supervise, drain: Callable
) -> None:
    chain(n=2)
    job = job_submit(workflow="chain", input={}).job
    s1 = steps_of(job)["s1"]
    OrmQ.objects.all().delete()  # attempt 1's answer is still on its way
    Step.objects.filter(pk=s1.pk).update(deadline=F("deadline") - dt.timedelta(hours=1))
    Attempt.objects.filter(step=s1).update(deadline=F("deadline") - dt.timedelta(hours=1))
    supervise()  # times attempt 1 out and dispatches attempt 2
    from scheduler.services import step_record_outcome

    step_record_outcome(s1.pk, number=1, result=CallResult(Outcome.SUCCEEDED, output={"late": True}))
    s1.refresh_from_db()
    assert s1.status == StepStatus.SUCCEEDED and s1.output == {"late": True}
    first, second = Attempt.objects.filter(step=s1).order_by("number")
    assert (first.outcome, first.late_outcome) == (Outcome.NO_ANSWER, Outcome.SUCCEEDED)
    assert second.outcome == Outcome.SUPERSEDED
    assert Event.objects.filter(step=s1, kind="late_success").count() == 1
    # Attempt 2's delivery finds itself superseded and calls nothing; s2 runs once.
    drain()
    assert fake_remote.calls_for("s1") == []
    assert len(fake_remote.calls_for("s2")) == 1
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED


def test_an_outcome_for_a_remediated_step_never_rolls_it_back(supervise: Supervise) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    s1 = steps_of(job)["s1"]
    from scheduler.services import step_record_outcome

    step_record_outcome(s1.pk, number=1, result=CallResult(Outcome.SUCCEEDED, output={}))
    step_record_outcome(s1.pk, number=1, result=CallResult(Outcome.TRANSIENT_FAILURE, error="late failure"))
    s1.refresh_from_db()
    assert s1.status == StepStatus.SUCCEEDED
    assert Event.objects.filter(step=s1, kind="late_outcome_ignored").count() == 1


@pytest.mark.sqlite
def test_only_the_lease_holder_acts(supervise: Supervise) -> None:
    chain(n=1)
    job_submit(workflow="chain", input={})
    lose_in_flight_calls()
    first = supervise(holder="one")
    second = supervise(holder="two")
    assert first.acted and not second.acted
    assert SupervisorLease.objects.get().holder == "one"


def test_an_expired_lease_is_taken_over_with_a_new_token(supervise: Supervise) -> None:
    supervise(holder="one")
    token = SupervisorLease.objects.get().token
    SupervisorLease.objects.update(expires_at=F("expires_at") - dt.timedelta(hours=1))
    report = supervise(holder="two")
    lease = SupervisorLease.objects.get()
    assert report.acted and lease.holder == "two" and lease.token == token + 1 and lease.handovers == 1


@pytest.mark.sqlite
def test_a_takeover_records_the_finished_term_which_ended_no_later_than_the_takeover() -> None:
    SupervisorLease.objects.all().delete()
    first = lease_acquire("one")
    assert first is not None
    assert lease_acquire("one") is not None  # a renewal finishes no term
    assert lease_acquire("two") is None  # nor does a refused takeover
    assert not LeaseTerm.objects.exists()
    SupervisorLease.objects.update(expires_at=F("expires_at") - dt.timedelta(hours=1))
    expired = SupervisorLease.objects.get().expires_at
    second = lease_acquire("two")
    assert second is not None and second.token == first.token + 1
    term = LeaseTerm.objects.get()
    lease = SupervisorLease.objects.get()
    assert (term.lease, term.token, term.holder, term.ended_by) == ("supervisor", first.token, "one", "two")
    assert term.expired_at == expired and term.ended_at == lease.acquired_at
    assert term.expired_at is not None and term.ended_at is not None and term.expired_at <= term.ended_at


def test_a_supervisor_that_loses_its_lease_mid_scan_takes_no_further_action(
    supervise: Supervise, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain(n=1)
    for _ in range(3):
        job_submit(workflow="chain", input={})
    lose_in_flight_calls()
    from supervisor import report as report_module

    real_fence = report_module.lease_fence
    calls = {"n": 0}

    def fence_then_lose(grant: object) -> bool:
        calls["n"] += 1
        # Batch 1 fenced (the sweeps before it fence only when they have work), then another
        # supervisor takes over before batch 2's fence.
        if calls["n"] == 2:
            SupervisorLease.objects.update(holder="usurper", token=F("token") + 1)
        return real_fence(grant)

    monkeypatch.setattr(report_module, "lease_fence", fence_then_lose)
    report = supervise(holder="one", batch_size=1)
    assert report.lost_lease
    assert report.remediated == 1
    assert Step.objects.filter(status=StepStatus.DISPATCHED, attempt=1).count() == 2


def test_the_scan_records_its_heartbeat_and_figures_on_the_lease(supervise: Supervise) -> None:
    chain(n=1)
    job_submit(workflow="chain", input={})
    lose_in_flight_calls()
    supervise()
    lease = SupervisorLease.objects.get()
    assert lease.last_scan_at is not None
    assert lease.last_scan["examined"] == 1 and lease.last_scan["timed_out"] == 1
    assert {"duration_ms", "lag_ms", "remediated", "batches"} <= set(lease.last_scan)


@pytest.mark.usefixtures("one_delivery_per_task")
def test_a_job_past_its_deadline_is_compensated(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_workflow("slow", step("s1"), step("s2", "s1"), deadline_seconds=60)
    job = job_submit(workflow="slow", input={}).job
    run_attempt(steps_of(job)["s1"].pk, 1)
    Job.objects.filter(pk=job.pk).update(deadline=F("deadline") - dt.timedelta(hours=1))
    supervise()
    drain()
    supervise()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPENSATED and job.compensation_reason == "deadline"
    # s2 was queued when the deadline passed: its delivery finds the job stopping and calls nothing.
    assert fake_remote.calls_for("s2") == []
    assert steps_of(job)["s2"].last_outcome == Outcome.NOT_HAPPENED
    assert fake_remote.compensations() == ["s1"]


def test_an_unhealthy_endpoint_is_avoided_on_retry(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_pool("web", kind="http", endpoints=["http://a.example:1", "http://b.example:1"])
    make_workflow("w", step("s1", pool="web", path="/do", compensation="/undo"))
    # Its recent history: mostly failures.
    seed_step = failing_endpoint_history("w", "http://a.example:1")
    bad = AgentEndpoint.objects.get(url="http://a.example:1")
    supervise()
    bad.refresh_from_db()
    assert bad.circuit_open_until is not None
    retried = Attempt.objects.get(step=seed_step, number=4)
    assert retried.endpoint_url == "http://b.example:1"
    fresh = job_submit(workflow="w", input={}).job
    assert steps_of(fresh)["s1"].endpoint.url == "http://b.example:1"


def test_a_paused_job_dispatches_nothing_until_resumed(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    chain(n=2)
    job = job_submit(workflow="chain", input={}).job
    olga = User.objects.create_user("olga")
    job_pause(actor=olga, job_id=job.pk, reason="investigating")
    drain()  # s1 was already in flight: it finishes
    supervise()
    assert steps_of(job)["s2"].status == StepStatus.PENDING
    job_resume(actor=olga, job_id=job.pk)
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    kinds = list(Event.objects.filter(job=job, actor=olga).values_list("kind", flat=True))
    assert kinds == ["job_paused", "job_resumed"]


@pytest.mark.usefixtures("one_delivery_per_task")
def test_cancel_stops_dispatching_and_compensates_what_ran(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    chain(n=3)
    job = job_submit(workflow="chain", input={}).job
    run_attempt(steps_of(job)["s1"].pk, 1)
    OrmQ.objects.all().delete()
    from scheduler.services import attempt_claim

    assert attempt_claim(steps_of(job)["s2"].pk, number=1) is not None  # s2 was sent; its answer is lost
    olga = User.objects.create_user("olga")
    job_cancel(actor=olga, job_id=job.pk, reason="customer changed their mind")
    lose_in_flight_calls()
    supervise()
    drain()
    supervise()
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    steps = steps_of(job)
    assert steps["s3"].status == StepStatus.SKIPPED
    assert fake_remote.compensations() == ["s2", "s1"]
    assert Event.objects.get(job=job, kind="operator_cancel").actor == olga


@pytest.mark.usefixtures("one_delivery_per_task")
def test_a_step_whose_call_never_left_needs_no_compensation(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    chain(n=2)
    job = job_submit(workflow="chain", input={}).job
    run_attempt(steps_of(job)["s1"].pk, 1)
    OrmQ.objects.all().delete()  # s2's task was lost before any agent took it
    job_cancel(actor=User.objects.create_user("olga"), job_id=job.pk)
    lose_in_flight_calls()
    supervise()
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert fake_remote.compensations() == ["s1"]


def test_a_step_refused_by_the_remote_needs_no_compensation_but_an_unanswered_one_does(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_policy("once", max_attempts=1)
    make_workflow("p", step("a", policy="once"), step("b", policy="once"), step("c", "a", "b"))
    fake_remote.script("a", Outcome.BUSINESS_FAILURE)
    fake_remote.script("b", Outcome.NO_ANSWER)
    job = job_submit(workflow="p", input={}).job
    for _ in range(3):
        drain()
        supervise()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPENSATED
    assert fake_remote.compensations() == ["b"]


def test_a_job_cancelled_before_anything_ran_needs_no_compensation(fake_remote: FakeRemote) -> None:
    chain(n=2)
    job = job_submit(workflow="chain", input={}).job
    OrmQ.objects.all().delete()
    Attempt.objects.filter(step__job=job).update(finished_at=F("dispatched_at"), outcome=Outcome.NOT_HAPPENED)
    Step.objects.filter(job=job, status=StepStatus.DISPATCHED).update(
        status=StepStatus.ATTEMPT_FAILED, last_outcome=Outcome.NOT_HAPPENED
    )
    job_cancel(actor=User.objects.create_user("olga"), job_id=job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert fake_remote.calls == []


def test_lease_acquire_creates_the_row_when_missing() -> None:
    SupervisorLease.objects.all().delete()
    grant = lease_acquire("solo")
    assert grant is not None and grant.holder == "solo"


@pytest.mark.sqlite
def test_an_overdue_call_still_waiting_in_the_queue_gets_more_time_instead_of_a_second_task(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    s1 = steps_of(job)["s1"]
    assert OrmQ.objects.count() == 1  # the task waits for a worker
    Step.objects.filter(pk=s1.pk).update(deadline=F("deadline") - dt.timedelta(hours=1))
    report = supervise()
    s1.refresh_from_db()
    assert report.decisions == {"still_queued": 1}
    assert (s1.status, s1.attempt) == (StepStatus.DISPATCHED, 1)
    assert s1.deadline > timezone.now()
    assert OrmQ.objects.count() == 1
    assert Event.objects.get(step=s1, kind="deadline_extended").reason.startswith("its task is still waiting")
    drain()  # a worker finally takes it: the call is made with the time it was given
    assert len(fake_remote.calls) == 1
    assert fake_remote.calls[0].timeout > 1
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED


def test_an_overdue_call_whose_task_left_the_queue_without_starting_is_retried(supervise: Supervise) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    OrmQ.objects.all().delete()  # taken by a pusher that died before a worker started it
    Step.objects.filter(job=job).update(deadline=F("deadline") - dt.timedelta(hours=1))
    report = supervise()
    assert report.timed_out == 1
    assert steps_of(job)["s1"].attempt == 2
