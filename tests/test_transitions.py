"""The state machines: every allowed transition writes its event; others are refused."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from scheduler.errors import InvalidTransition, StaleWrite
from scheduler.models import Event, Job, JobStatus, Step, StepStatus
from scheduler.services import job_submit
from scheduler.transitions import (
    JOB_OPERATOR_ONLY,
    JOB_TRANSITIONS,
    STEP_OPERATOR_ONLY,
    STEP_TRANSITIONS,
    job_transition,
    step_transition,
    unit_of_work,
)
from tests.factories import chain

pytestmark = pytest.mark.django_db


@pytest.fixture
def job() -> Job:
    chain("one", n=1)
    return job_submit(workflow="one", input={}).job


@pytest.fixture
def operator() -> User:
    return User.objects.create_user("olga")


def _set_step(step: Step, status: str) -> Step:
    # Test setup only: place the row in the state under test.
    Step.objects.filter(pk=step.pk).update(status=status)
    step.refresh_from_db()
    return step


def _set_job(job: Job, status: str) -> Job:
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
        step_transition(unit, step, to, source="test", actor=operator)
    step.refresh_from_db()
    assert step.status == to
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
        step_transition(unit, step, to, source="test", actor=operator)
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
    with unit_of_work() as unit:
        job_transition(unit, job, to, source="test", actor=operator)
    job.refresh_from_db()
    assert job.status == to
    event = Event.objects.order_by("id").last()
    assert (event.kind, event.from_status, event.to_status) == (f"job_{to}", frm, to)
    assert event.actor == operator
    assert (job.finished_at is not None) == (not JOB_TRANSITIONS[to])


@pytest.mark.parametrize(
    ("frm", "to"),
    [(f, t) for f in JobStatus.values for t in JobStatus.values if t not in JOB_TRANSITIONS[f]],
)
def test_a_job_transition_not_in_the_table_is_refused(job: Job, frm: str, to: str) -> None:
    job = _set_job(job, frm)
    with pytest.raises(InvalidTransition), unit_of_work() as unit:
        job_transition(unit, job, to, source="test")


def test_a_write_from_a_stale_reader_changes_nothing(job: Job) -> None:
    step = job.steps.get()
    stale = Step.objects.get(pk=step.pk)
    with unit_of_work() as unit:
        step_transition(unit, step, StepStatus.SUCCEEDED, source="first")
    with pytest.raises(StaleWrite), unit_of_work() as unit:
        # `stale` still believes the step is dispatched with the same attempt.
        step_transition(unit, stale, StepStatus.UNKNOWN, source="second")
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
