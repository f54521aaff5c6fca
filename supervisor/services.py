"""Operator actions. The console, the API and the admin call these and nothing else.

Each action takes the acting user (required), locks the job, checks the current state, makes the
change through the scheduler's services and records an event naming the user, all in one
transaction. A second identical request (a double click) finds the state already changed and is
refused with ActionNotAllowed: it does nothing.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agents.models import AgentPool
from sas_project.errors import ActionNotAllowed, InvalidInput, NotFound
from sas_project.validation import json_storable
from scheduler.models import EventKind, Job, JobStatus, Step, StepKind, StepStatus
from scheduler.services import (
    JOB_FORWARD,
    JobState,
    job_advance,
    job_start_compensation,
    lock_job,
    step_dispatch,
    step_succeed,
)
from scheduler.transitions import job_set_paused, job_transition
from scheduler.unit import Unit, User, unit_of_work

S = StepStatus
J = JobStatus

#: Step statuses from which an operator may retry or resolve.
RETRYABLE_BY_OPERATOR = frozenset({S.ATTEMPT_FAILED, S.UNKNOWN, S.RETRY_WAIT, S.HELD, S.FAILED})
RESOLVABLE_BY_OPERATOR = RETRYABLE_BY_OPERATOR | {S.DISPATCHED}


logger = logging.getLogger("supervisor.operators")


def operator_source(actor: User) -> str:
    return f"operator:{actor.get_username()}"


def _require_actor(actor: User | None) -> User:
    if actor is None or not actor.is_authenticated:
        raise ActionNotAllowed("an operator action needs a signed-in user")
    return actor


def _step_pk(step_id: Any) -> int:
    try:
        pk = int(step_id)
    except (TypeError, ValueError):
        raise NotFound(f"step {step_id!r} does not exist") from None
    if not 0 < pk < 2**63:
        raise NotFound(f"step {step_id!r} does not exist")
    return pk


def _lock_step(unit: Unit, step_id: Any) -> tuple[JobState, Step]:
    step_id = _step_pk(step_id)
    job_id = Step.objects.filter(pk=step_id).values_list("job_id", flat=True).first()
    if job_id is None:
        raise NotFound(f"step {step_id} does not exist")
    state = lock_job(unit, job_id)
    return state, state.step(int(step_id))


def _lock(unit: Unit, job_id: Any) -> JobState:
    try:
        job_id = uuid.UUID(str(job_id))
    except ValueError:
        raise NotFound(f"job {job_id!r} does not exist") from None
    if not Job.objects.filter(pk=job_id).exists():
        raise NotFound(f"job {job_id} does not exist")
    return lock_job(unit, job_id)


def _note(
    unit: Unit,
    state: JobState,
    actor: User,
    kind: EventKind,
    reason: str,
    step: Step | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    unit.event(
        job_id=state.job.pk,
        step=step,
        kind=kind,
        source=operator_source(actor),
        actor=actor,
        reason=reason,
        data=data,
    )
    line = {
        "action": str(kind),
        "job_id": str(state.job.pk),
        "step": step.name if step is not None else None,
        "step_id": step.pk if step is not None else None,
        "operation_id": step.operation_id if step is not None else None,
        "operator": actor.get_username(),
        "reason": reason,
    }
    # Logged once the action commits: a refused or rolled-back action is not one.
    transaction.on_commit(lambda: logger.info("operator action", extra=line))


def _reopen_if_failed(unit: Unit, state: JobState, actor: User, reason: str) -> None:
    """An operator bringing back a step of a job that failed by policy reopens the job."""
    if state.job.status == J.FAILED:
        job_transition(
            unit,
            state.job,
            J.RUNNING,
            source=operator_source(actor),
            actor=actor,
            reason=reason or "reopened by an operator",
        )


def _check_step_actionable(state: JobState, step: Step, verb: str) -> None:
    job = state.job
    if job.paused_at is not None:
        raise ActionNotAllowed(f"job {job.pk} is paused: resume it before you {verb} a step")
    if step.kind == StepKind.ACTION:
        if job.status not in JOB_FORWARD and job.status != J.FAILED:
            raise ActionNotAllowed(f"job {job.pk} is {job.status}: its steps cannot be {verb}d now")
    elif job.status not in (J.COMPENSATING, J.NEEDS_ATTENTION):
        raise ActionNotAllowed(f"job {job.pk} is {job.status}: its compensations cannot be {verb}d now")


def step_retry(*, actor: User | None, step_id: Any, pool: str | None = None, reason: str = "") -> Step:
    """Dispatch a waiting, failed or held step now (skipping any backoff), optionally elsewhere."""
    actor = _require_actor(actor)
    with unit_of_work() as unit:
        state, step = _lock_step(unit, step_id)
        if step.status not in RETRYABLE_BY_OPERATOR:
            raise ActionNotAllowed(f"step {step.name} is {step.status}: nothing to retry")
        _check_step_actionable(state, step, "retry")
        target = None
        if pool:
            target = AgentPool.objects.filter(name=pool).first()
            if target is None:
                raise InvalidInput(f"unknown pool {pool!r}", field="pool")
            if target.kind != step.pool.kind:
                raise InvalidInput(
                    f"pool {pool!r} is a {target.kind} pool, not {step.pool.kind}", field="pool"
                )
        _note(unit, state, actor, EventKind.OPERATOR_RETRY, reason, step, {"pool": pool} if pool else None)
        _reopen_if_failed(unit, state, actor, reason)
        step_dispatch(
            unit,
            state,
            step,
            source=operator_source(actor),
            actor=actor,
            pool=target,
            avoid_endpoint_id=step.endpoint_id,
            reason=reason or ("retried on pool " + pool if pool else "retried by an operator"),
        )
        job_advance(unit, state, source=operator_source(actor), actor=actor)
        return step


def step_resolve(*, actor: User | None, step_id: Any, output: Any, reason: str = "") -> Step:
    """Complete a step by hand with `output`: the operator asserts it happened (the evidence is
    the reason). The job then moves on as if the step had succeeded."""
    actor = _require_actor(actor)
    if output is not None and not isinstance(output, dict):
        raise InvalidInput("output must be a JSON object", field="output")
    json_storable(output, "output")
    with unit_of_work() as unit:
        state, step = _lock_step(unit, step_id)
        if step.status not in RESOLVABLE_BY_OPERATOR:
            raise ActionNotAllowed(f"step {step.name} is {step.status}: nothing to resolve")
        job = state.job
        if (
            step.kind == StepKind.ACTION
            and job.status not in JOB_FORWARD
            and job.status not in (J.FAILED, J.COMPENSATING)
        ):
            raise ActionNotAllowed(f"job {job.pk} is {job.status}: its steps cannot be resolved now")
        _note(unit, state, actor, EventKind.OPERATOR_RESOLVE, reason, step, {"output": output})
        if step.kind == StepKind.ACTION:
            _reopen_if_failed(unit, state, actor, reason)
        step_succeed(
            unit,
            state,
            step,
            output=output,
            source=operator_source(actor),
            actor=actor,
            kind=EventKind.STEP_RESOLVED,
            reason=reason or "resolved by an operator",
        )
        return step


def job_compensate(*, actor: User | None, job_id: Any, reason: str = "") -> Job:
    """Stop the job and undo what its steps did, in reverse dependency order."""
    actor = _require_actor(actor)
    with unit_of_work() as unit:
        state = _lock(unit, job_id)
        job = state.job
        if job.compensation_reason or job.status not in (*JOB_FORWARD, J.FAILED):
            raise ActionNotAllowed(f"job {job.pk} is {job.status}: it cannot be compensated now")
        _note(unit, state, actor, EventKind.OPERATOR_COMPENSATE, reason)
        job_start_compensation(
            unit,
            state,
            reason_code="operator",
            source=operator_source(actor),
            actor=actor,
            reason=reason or "compensation requested by an operator",
        )
        return job


def job_cancel(*, actor: User | None, job_id: Any, reason: str = "") -> Job:
    """Stop dispatching and compensate what ran; the job ends `cancelled`."""
    actor = _require_actor(actor)
    with unit_of_work() as unit:
        state = _lock(unit, job_id)
        job = state.job
        if job.compensation_reason or job.status not in JOB_FORWARD:
            raise ActionNotAllowed(f"job {job.pk} is {job.status}: it cannot be cancelled now")
        _note(unit, state, actor, EventKind.OPERATOR_CANCEL, reason)
        job_start_compensation(
            unit,
            state,
            reason_code="cancel",
            source=operator_source(actor),
            actor=actor,
            reason=reason or "cancelled by an operator",
        )
        return job


def job_pause(*, actor: User | None, job_id: Any, reason: str = "") -> Job:
    """No new dispatches (first attempts, retries, compensations) until resumed. Calls already
    in flight finish, and their deadlines are still watched."""
    actor = _require_actor(actor)
    with unit_of_work() as unit:
        state = _lock(unit, job_id)
        job = state.job
        if job.paused_at is not None:
            raise ActionNotAllowed(f"job {job.pk} is already paused")
        if not (job.status in JOB_FORWARD or job.status == J.COMPENSATING):
            raise ActionNotAllowed(f"job {job.pk} is {job.status}: there is nothing to pause")
        job_set_paused(unit, job, paused=True, source=operator_source(actor), actor=actor, reason=reason)
        return job


def job_resume(*, actor: User | None, job_id: Any, reason: str = "") -> Job:
    actor = _require_actor(actor)
    with unit_of_work() as unit:
        state = _lock(unit, job_id)
        job = state.job
        if job.paused_at is None:
            raise ActionNotAllowed(f"job {job.pk} is not paused")
        job_set_paused(unit, job, paused=False, source=operator_source(actor), actor=actor, reason=reason)
        job_advance(unit, state, source=operator_source(actor), actor=actor)
        return job


# --- bulk actions ---------------------------------------------------------------------------------

BULK_ACTIONS = ("retry", "compensate")
BULK_LIMIT = 1000


@dataclass(frozen=True)
class BulkItem:
    """One item of a bulk action: what will happen to it (preview) or what happened (run)."""

    step_id: int
    job_id: str
    step: str
    allowed: bool
    detail: str


def _preview_one(action: str, step: Step, job: Job) -> BulkItem:
    if action == "retry":
        try:
            if step.status not in RETRYABLE_BY_OPERATOR:
                raise ActionNotAllowed(f"step is {step.status}: nothing to retry")
            _check_step_actionable(JobState(job=job, steps=[step]), step, "retry")
        except ActionNotAllowed as exc:
            return BulkItem(step.pk, str(job.pk), step.name, False, exc.message)
        return BulkItem(
            step.pk,
            str(job.pk),
            step.name,
            True,
            f"dispatch attempt {step.attempt + 1} now (was {step.status})",
        )
    if job.compensation_reason or job.status not in (*JOB_FORWARD, J.FAILED):
        return BulkItem(step.pk, str(job.pk), step.name, False, f"job is {job.status}: cannot compensate")
    return BulkItem(step.pk, str(job.pk), step.name, True, "stop the job and undo what it did")


def bulk_preview(*, action: str, step_ids: list[int]) -> list[BulkItem]:
    """A dry run: for each step, whether the action is allowed now and what it would do.
    Changes nothing."""
    if action not in BULK_ACTIONS:
        raise InvalidInput(f"unknown bulk action {action!r}", field="action")
    if len(step_ids) > BULK_LIMIT:
        raise InvalidInput(f"at most {BULK_LIMIT} items per bulk action", field="steps")
    steps = Step.objects.filter(pk__in=step_ids).select_related("job").order_by("id")
    return [_preview_one(action, step, step.job) for step in steps]


def bulk_run(*, actor: User | None, action: str, step_ids: list[int], reason: str = "") -> list[BulkItem]:
    """Apply `action` to each step (compensate: to each step's job, once per job), each in its own
    transaction, and report each item's result. One item refused does not stop the others."""
    actor = _require_actor(actor)
    if action not in BULK_ACTIONS:
        raise InvalidInput(f"unknown bulk action {action!r}", field="action")
    if len(step_ids) > BULK_LIMIT:
        raise InvalidInput(f"at most {BULK_LIMIT} items per bulk action", field="steps")
    results: list[BulkItem] = []
    done_jobs: set[str] = set()
    for step in Step.objects.filter(pk__in=step_ids).select_related("job").order_by("id"):
        job_id = str(step.job_id)
        try:
            if action == "retry":
                step_retry(actor=actor, step_id=step.pk, reason=reason or "bulk retry")
                detail = "retried"
            elif job_id in done_jobs:
                detail = "job already compensating (same bulk action)"
            else:
                job_compensate(actor=actor, job_id=step.job_id, reason=reason or "bulk compensate")
                done_jobs.add(job_id)
                detail = "compensating"
            results.append(BulkItem(step.pk, job_id, step.name, True, detail))
        except (ActionNotAllowed, InvalidInput, NotFound) as exc:
            results.append(BulkItem(step.pk, job_id, step.name, False, exc.message))
    return results
