"""A job's row lock and its steps: where every service that changes a job starts.

Outcomes of parallel branches serialise on the job's row, so the step that joins them is
dispatched exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, overload

from django.db.models import Q, QuerySet
from django.db.models.functions import Now

from sas_project.errors import InvalidInput
from scheduler.definitions import ancestors
from scheduler.models import Job, JobStatus, Step, StepKind, StepStatus
from scheduler.unit import Unit

J = JobStatus

#: Job statuses in which forward steps are dispatched and retried.
JOB_FORWARD = frozenset({J.PENDING, J.RUNNING, J.NEEDS_ATTENTION})


@dataclass
class JobState:
    """A locked job and its steps, read after the lock was taken.

    A fan-out's items (up to thousands per step) are not read with the job: the one an outcome
    is about is read when asked for (`step`), the others by scheduler.services.fanout, a page at
    a time. Every item read joins `steps`, so one row has one instance."""

    job: Job
    steps: list[Step]

    def step(self, step_id: int) -> Step:
        for step in self.steps:
            if step.pk == step_id:
                return step
        item = _steps(Step.objects.filter(pk=step_id, job_id=self.job.pk, kind=StepKind.ITEM)).first()
        if item is None:
            raise InvalidInput(f"step {step_id} is not part of job {self.job.pk}")
        return self.adopt([item])[0]

    def adopt(self, steps: list[Step]) -> list[Step]:
        """Steps read after the lock (items), as this state's instances: one already here wins."""
        known = {s.pk: s for s in self.steps}
        adopted = []
        for step in steps:
            if step.pk in known:
                adopted.append(known[step.pk])
                continue
            step.job = self.job
            self.steps.append(step)
            known[step.pk] = step
            adopted.append(step)
        return adopted

    @property
    def actions(self) -> list[Step]:
        return [s for s in self.steps if s.kind == StepKind.ACTION]

    @property
    def compensations(self) -> dict[int, Step]:
        return {s.compensates_id: s for s in self.steps if s.compensates_id is not None}


@overload
def lock_job(
    unit: Unit, *, job_id: Any, skip_locked: Literal[False] = False, also: int | None = None
) -> JobState: ...


@overload
def lock_job(unit: Unit, *, job_id: Any, skip_locked: bool, also: int | None = None) -> JobState | None: ...


def lock_job(
    unit: Unit, *, job_id: Any, skip_locked: bool = False, also: int | None = None
) -> JobState | None:
    """Take the job's row lock (reading the database clock with it), then load its steps.

    Two statements on purpose: under READ COMMITTED a single `SELECT ... JOIN ... FOR UPDATE OF
    job` that waited for the lock would return the steps as they were before the transaction it
    waited for committed. The second statement reads them after the lock is held.

    With `skip_locked`, a job whose row another transaction holds (or that is gone) is not waited
    for: the answer is None, and nothing was read.
    """
    jobs = (
        Job.objects.select_for_update(of=("self",), skip_locked=skip_locked)
        .select_related("workflow")
        .annotate(db_now=Now())
    )
    if skip_locked:
        job = jobs.filter(pk=job_id).first()
        if job is None:
            return None
    else:
        job = jobs.get(pk=job_id)
    unit.now = job.db_now  # type: ignore[attr-defined]
    # A fan-out's items stay out, but the one step `also` names (the item an outcome is about).
    own = ~Q(kind=StepKind.ITEM) | Q(pk=also) if also is not None else ~Q(kind=StepKind.ITEM)
    steps = list(_steps(Step.objects.filter(own, job_id=job.pk)).order_by("id"))
    for step in steps:
        step.job = job  # one instance: a change made through one step is seen through all
    return JobState(job=job, steps=steps)


def load_locked_jobs(jobs: list[Job]) -> dict[Any, JobState]:
    """States of jobs whose row locks this transaction already holds, with all their steps read
    in one statement (after the locks were taken)."""
    by_id = {job.pk: job for job in jobs}
    states = {job_id: JobState(job=job, steps=[]) for job_id, job in by_id.items()}
    for step in (
        _steps(Step.objects.filter(job_id__in=list(by_id)).exclude(kind=StepKind.ITEM))
        .select_related("pool__alternate")
        .order_by("job_id", "id")
    ):
        step.job = by_id[step.job_id]
        states[step.job_id].steps.append(step)
    return states


def _steps(query: QuerySet[Step]) -> QuerySet[Step]:
    return query.select_related("definition__policy", "pool")


def step_input(state: JobState, *, step: Step) -> Any:
    """The input a step's call and conditions see: its own (an operator's edit), else the job's."""
    return step.input_override if step.input_override is not None else state.job.input


def ancestor_outputs(state: JobState, *, step: Step) -> dict[str, Any]:
    """The outputs of the steps `step` depends on, directly or not, that succeeded (what a
    remote's body carries as `results`)."""
    by_name = {s.name: s for s in state.actions}
    graph = {s.name: s.definition.depends_on for s in state.actions}
    found = ancestors(graph, step.name)
    return {n: by_name[n].output for n in sorted(found) if by_name[n].status == StepStatus.SUCCEEDED}
