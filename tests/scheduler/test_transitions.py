"""The state machines: every allowed transition writes its event; others are refused."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from agents.outcome import Outcome
from sas_project.errors import InvalidTransition, StaleWrite
from scheduler.models import (
    JOB_FINAL,
    JOB_SETTLED,
    STEP_SETTLED,
    Attempt,
    Event,
    EventKind,
    Job,
    JobStatus,
    Step,
    StepStatus,
)
from scheduler.services import job_submit
from scheduler.transitions import (
    ATTEMPT_TRANSITIONS,
    IN_FLIGHT,
    JOB_OPERATOR_ONLY,
    JOB_PARENT_ONLY,
    JOB_TRANSITIONS,
    STEP_EVENTS,
    STEP_OPERATOR_ONLY,
    STEP_TRANSITIONS,
    attempt_finish,
    attempt_note_late,
    attempt_supersede,
    job_transition,
    step_reuse,
    step_transition,
)
from scheduler.unit import unit_of_work
from tests.factories import chain, state_arranged

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]


@pytest.fixture
def job() -> Job:
    chain("one", n=1)
    return job_submit(workflow="one", input={}).job


@pytest.fixture
def operator() -> User:
    return User.objects.create_user("olga")


def _set_step(step: Step, status: str) -> Step:
    with state_arranged():
        Step.objects.filter(pk=step.pk).update(status=status)
    step.refresh_from_db()
    return step


def _kind(to: str) -> EventKind:
    """The event a move to `to` writes in these tests (the two failure statuses name theirs)."""
    return STEP_EVENTS.get(to) or {
        StepStatus.ATTEMPT_FAILED: EventKind.STEP_TRANSIENT_FAILURE,
        StepStatus.UNKNOWN: EventKind.STEP_NO_ANSWER,
    }.get(to, EventKind.STEP_DISPATCHED)


def _set_job(job: Job, status: str) -> Job:
    with state_arranged():
        Job.objects.filter(pk=job.pk).update(status=status)
    job.refresh_from_db()
    return job


def test_the_tables_name_every_status() -> None:
    assert set(STEP_TRANSITIONS) == set(StepStatus.values)
    assert set(JOB_TRANSITIONS) == set(JobStatus.values)
    for frm, to in STEP_OPERATOR_ONLY:
        assert to in STEP_TRANSITIONS[frm]
    for frm, to in JOB_OPERATOR_ONLY:
        assert to in JOB_TRANSITIONS[frm]


@pytest.mark.parametrize(("frm", "to"), [(f, t) for f, ts in STEP_TRANSITIONS.items() for t in sorted(ts)])
def test_every_allowed_step_transition_is_written_with_its_event(
    job: Job, operator: User, frm: str, to: str
) -> None:
    step = _set_step(job.steps.get(), frm)
    before = Event.objects.count()
    with unit_of_work() as unit:
        step_transition(unit, step, to, source="test", actor=operator, kind=_kind(to))
    step.refresh_from_db()
    assert step.status == to
    assert (step.finished_at is not None) == (to in STEP_SETTLED)
    event = Event.objects.order_by("id").last()
    assert Event.objects.count() == before + 1
    assert (event.from_status, event.to_status, event.step_id) == (frm, to, step.pk)


@pytest.mark.parametrize(
    ("frm", "to"),
    [(f, t) for f in StepStatus.values for t in StepStatus.values if t not in STEP_TRANSITIONS[f]],
)
def test_a_step_transition_not_in_the_table_is_refused(job: Job, operator: User, frm: str, to: str) -> None:
    step = _set_step(job.steps.get(), frm)
    with pytest.raises(InvalidTransition), unit_of_work() as unit:
        step_transition(unit, step, to, source="test", actor=operator, kind=_kind(to))
    step.refresh_from_db()
    assert step.status == frm


@pytest.mark.parametrize(("frm", "to"), sorted(STEP_OPERATOR_ONLY))
def test_reopening_a_settled_step_needs_an_operator(job: Job, frm: str, to: str) -> None:
    step = _set_step(job.steps.get(), frm)
    with pytest.raises(InvalidTransition, match="only an operator"), unit_of_work() as unit:
        step_transition(unit, step, to, source="test")


@pytest.mark.parametrize(("frm", "to"), [(f, t) for f, ts in JOB_TRANSITIONS.items() for t in sorted(ts)])
def test_every_allowed_job_transition_is_written_with_its_event(
    job: Job, operator: User, frm: str, to: str
) -> None:
    job = _set_job(job, frm)
    fields: dict[str, str] = {}
    if (frm, to) in JOB_PARENT_ONLY:
        # A child job (of a job submitted beside it) undone by its parent's compensation.
        parent = job_submit(workflow="one", input={}).job
        Job.objects.filter(pk=job.pk).update(parent_job=parent, parent_step="s1")
        job.refresh_from_db()
        fields["compensation_reason"] = "parent"
    with unit_of_work() as unit:
        job_transition(unit, job, to, source="test", actor=operator, **fields)
    job.refresh_from_db()
    assert job.status == to
    event = Event.objects.order_by("id").last()
    assert (event.kind, event.from_status, event.to_status) == (f"job_{to}", frm, to)
    assert event.actor == operator
    assert (job.finished_at is not None) == (to in JOB_SETTLED)


@pytest.mark.parametrize(
    ("frm", "to"),
    [(f, t) for f in JobStatus.values for t in JobStatus.values if t not in JOB_TRANSITIONS[f]],
)
def test_a_job_transition_not_in_the_table_is_refused(job: Job, frm: str, to: str) -> None:
    job = _set_job(job, frm)
    with pytest.raises(InvalidTransition), unit_of_work() as unit:
        job_transition(unit, job, to, source="test")


@pytest.mark.parametrize(("frm", "to"), sorted(JOB_PARENT_ONLY))
def test_only_a_child_job_undone_by_its_parent_leaves_succeeded(job: Job, frm: str, to: str) -> None:
    job = _set_job(job, frm)
    with pytest.raises(InvalidTransition, match="only a child job"), unit_of_work() as unit:
        job_transition(unit, job, to, source="test", compensation_reason="operator")
    job.refresh_from_db()
    assert job.status == frm


def test_a_write_from_a_stale_reader_changes_nothing(job: Job) -> None:
    step = job.steps.get()
    stale = Step.objects.get(pk=step.pk)
    with unit_of_work() as unit:
        step_transition(unit, step, StepStatus.SUCCEEDED, source="first")
    with pytest.raises(StaleWrite), unit_of_work() as unit:
        # `stale` still believes the step is dispatched with the same attempt.
        step_transition(unit, stale, StepStatus.UNKNOWN, source="second", kind=EventKind.STEP_NO_ANSWER)
    step.refresh_from_db()
    assert step.status == StepStatus.SUCCEEDED


def test_a_write_fenced_on_an_older_attempt_changes_nothing(job: Job) -> None:
    step = job.steps.get()
    stale = Step.objects.get(pk=step.pk)
    Step.objects.filter(pk=step.pk).update(attempt=step.attempt + 1)
    with pytest.raises(StaleWrite), unit_of_work() as unit:
        step_transition(unit, stale, StepStatus.SUCCEEDED, source="old attempt")
    assert Step.objects.get(pk=step.pk).status == StepStatus.DISPATCHED


def test_a_refused_transition_writes_no_event(job: Job) -> None:
    step = job.steps.get()
    before = Event.objects.count()
    with pytest.raises(InvalidTransition), unit_of_work() as unit:
        step_transition(unit, step, StepStatus.PENDING, source="test")
    assert Event.objects.count() == before


def test_final_and_settled_are_defined_by_the_tables() -> None:
    assert {s for s, moves in JOB_TRANSITIONS.items() if not moves} == JOB_FINAL
    assert JOB_FINAL < JOB_SETTLED
    # A settled job leaves its status only through an operator, or (a child job that succeeded)
    # through its parent's compensation.
    for frm in JOB_SETTLED - JOB_FINAL:
        assert all((frm, to) in JOB_OPERATOR_ONLY | JOB_PARENT_ONLY for to in JOB_TRANSITIONS[frm])


def test_a_failed_job_has_a_finish_time_and_loses_it_when_an_operator_reopens_it(
    job: Job, operator: User
) -> None:
    with unit_of_work() as unit:
        job_transition(unit, job, JobStatus.FAILED, source="test")
    job.refresh_from_db()
    assert job.finished_at is not None
    with unit_of_work() as unit:
        job_transition(unit, job, JobStatus.RUNNING, source="test", actor=operator)
    job.refresh_from_db()
    assert job.finished_at is None


def test_a_move_into_a_failure_status_must_name_its_event(job: Job) -> None:
    step = job.steps.get()
    with pytest.raises(ValueError, match="event kind"), unit_of_work() as unit:
        step_transition(unit, step, StepStatus.UNKNOWN, source="test")


def test_an_unknown_event_kind_is_refused_by_the_database(job: Job) -> None:
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic():
        Event.objects.create(job=job, kind="step_whatever", source="test")


def test_an_attempt_in_flight_finishes_once_with_its_outcome(job: Job) -> None:
    step = job.steps.get()
    with unit_of_work() as unit:
        attempt_finish(unit, step.pk, step.attempt, Outcome.TRANSIENT_FAILURE, decided_by="test", error="x")
    attempt = Attempt.objects.get(step=step, number=step.attempt)
    assert attempt.outcome == Outcome.TRANSIENT_FAILURE and attempt.finished_at is not None
    with pytest.raises(StaleWrite), unit_of_work() as unit:
        attempt_finish(unit, step.pk, step.attempt, Outcome.SUCCEEDED, decided_by="second")
    assert Attempt.objects.get(pk=attempt.pk).outcome == Outcome.TRANSIENT_FAILURE


def test_every_outcome_is_a_move_out_of_flight_and_none_leaves_an_outcome() -> None:
    assert ATTEMPT_TRANSITIONS[IN_FLIGHT] == frozenset(Outcome.values)
    assert all(not ATTEMPT_TRANSITIONS[o] for o in Outcome.values)


def test_a_late_success_is_noted_once_beside_the_verdict(job: Job) -> None:
    step = job.steps.get()
    with unit_of_work() as unit:
        attempt_finish(unit, step.pk, step.attempt, Outcome.NO_ANSWER, decided_by="supervisor")
    with unit_of_work() as unit:
        attempt_note_late(unit, step.pk, step.attempt, Outcome.SUCCEEDED)
    attempt = Attempt.objects.get(step=step, number=step.attempt)
    assert (attempt.outcome, attempt.late_outcome) == (Outcome.NO_ANSWER, Outcome.SUCCEEDED)
    with pytest.raises(StaleWrite), unit_of_work() as unit:
        attempt_note_late(unit, step.pk, step.attempt, Outcome.SUCCEEDED)
    with pytest.raises(InvalidTransition), unit_of_work() as unit:
        attempt_note_late(unit, step.pk, step.attempt, Outcome.NO_ANSWER)


def test_a_late_note_needs_a_finished_attempt(job: Job) -> None:
    step = job.steps.get()
    with pytest.raises(StaleWrite), unit_of_work() as unit:
        attempt_note_late(unit, step.pk, step.attempt, Outcome.SUCCEEDED)
    assert Attempt.objects.get(step=step, number=step.attempt).late_outcome == ""


def test_superseding_closes_the_attempt_in_flight_and_is_a_no_op_without_one(job: Job) -> None:
    step = job.steps.get()
    with unit_of_work() as unit:
        attempt_supersede(unit, step, decided_by="operator:olga")
    assert Attempt.objects.get(step=step, number=step.attempt).outcome == Outcome.SUPERSEDED
    with unit_of_work() as unit:  # nothing in flight any more: nothing to do, no error
        attempt_supersede(unit, step, decided_by="operator:olga")


def test_a_rerun_step_reuses_only_an_output_that_succeeded(job: Job, operator: User) -> None:
    original = job.steps.get()
    step = job_submit(workflow="one", input={}).job.steps.get()
    Step.objects.filter(pk=step.pk).update(reused_from=original)
    step = _set_step(step, StepStatus.PENDING)
    with pytest.raises(InvalidTransition, match="only a step that succeeded"), unit_of_work() as unit:
        step_reuse(unit, step, source="test", actor=operator)
    with state_arranged():
        Step.objects.filter(pk=original.pk).update(status=StepStatus.SUCCEEDED, output={"paid": 1})
    step = _set_step(step, StepStatus.PENDING)
    with unit_of_work() as unit:
        step_reuse(unit, step, source="test", actor=operator)
    step.refresh_from_db()
    assert (step.status, step.output) == (StepStatus.SUCCEEDED, {"paid": 1})
    event = Event.objects.filter(step=step).order_by("id").last()
    assert (event.kind, event.to_status, event.data) == (
        EventKind.STEP_SUCCEEDED,
        StepStatus.SUCCEEDED,
        {"reused_from": original.pk},
    )
    assert event.reason == f"output reused from job {job.pk}: not called again"
