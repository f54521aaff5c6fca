"""Operator actions. The console, the API and the admin call these and nothing else.

Each action takes the acting user (required), locks the job, checks the current state, makes the
change through the scheduler's services and records an event naming the user, all in one
transaction. A second identical request (a double click) finds the state already changed and is
refused with ActionNotAllowed: it does nothing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agents.models import AgentPool
from agents.outcome import Outcome
from sas_project.errors import ActionNotAllowed, InvalidInput, NotFound
from sas_project.validation import json_storable
from scheduler import contracts
from scheduler.models import (
    JOB_SETTLED,
    EventKind,
    Job,
    JobStatus,
    Step,
    StepDefinitionKind,
    StepStatus,
)
from scheduler.selectors import job_missing
from scheduler.services import (
    JOB_FORWARD,
    JobState,
    job_advance,
    job_start_compensation,
    lock_job,
    rerun_create,
    step_dispatch,
    step_succeed,
)
from scheduler.services.waits import step_begin_child, step_begin_wait
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
    state = lock_job(unit, job_id=job_id)
    return state, state.step(int(step_id))


def _lock(unit: Unit, job_id: Any) -> JobState:
    try:
        job_id = uuid.UUID(str(job_id))
    except ValueError:
        raise NotFound(f"job {job_id!r} does not exist") from None
    if not Job.objects.filter(pk=job_id).exists():
        # Operator actions reach every job (their callers checked the role): an archived job is
        # a 410 naming its archive object, not a bare 404.
        raise job_missing(user=None, job_id=job_id, every_job=True)
    return lock_job(unit, job_id=job_id)


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


#: The past participle of each step action's verb, for what a refusal says.
_DONE = {"retry": "retried", "resolve": "resolved"}


def step_actionable_check(state: JobState, *, step: Step, verb: str) -> None:
    """Whether the job lets an operator `verb` (retry, resolve) this step: ActionNotAllowed says
    why not (the console offers the action only where this passes: supervisor.selectors.actions)."""
    job = state.job
    done = _DONE.get(verb, f"{verb}d")
    if job.paused_at is not None:
        raise ActionNotAllowed(f"job {job.pk} is paused: resume it before you {verb} a step")
    if step.forward:
        if job.status not in JOB_FORWARD and job.status != J.FAILED:
            raise ActionNotAllowed(f"job {job.pk} is {job.status}: its steps cannot be {done} now")
    elif job.status not in (J.COMPENSATING, J.NEEDS_ATTENTION):
        raise ActionNotAllowed(f"job {job.pk} is {job.status}: its compensations cannot be {done} now")


#: Last outcomes that prove the step's operation had no effect at the remote: only such a step
#: may be retried as a different request (an edited input, so a new operation ID), or the effect
#: of the old one could stay, undone by nothing.
NO_EFFECT_FOR_EDIT = frozenset({Outcome.BUSINESS_FAILURE, Outcome.NOT_HAPPENED})


def step_retry(
    *,
    actor: User | None,
    step_id: Any,
    pool: str | None = None,
    reason: str = "",
    input: Any = None,
) -> Step:
    """Dispatch a waiting, failed or held step now (skipping any backoff), optionally elsewhere,
    optionally with an edited input (then with a new operation ID: the request changed)."""
    actor = _require_actor(actor)
    with unit_of_work() as unit:
        state, step = _lock_step(unit, step_id)
        if step.status not in RETRYABLE_BY_OPERATOR:
            raise ActionNotAllowed(f"step {step.name} is {step.status}: nothing to retry")
        if step.has_items:
            # Its items (a fan-out's, a repeat's iterations) carry the calls and their effects:
            # they are retried, the list or the loop is not made again.
            raise ActionNotAllowed(
                f"step {step.name} fans out over items (or repeats through them): retry its held or failed "
                "items, or resolve it"
            )
        step_actionable_check(state, step=step, verb="retry")
        edit: dict[str, Any] | None = None
        if input is not None:
            edit = _edit_input(unit, state, step, input)
        target = None
        calls = not step.definition.waits and step.definition.kind != StepDefinitionKind.WORKFLOW
        if pool and not calls:
            raise InvalidInput(
                f"step {step.name} waits for a {step.definition.kind}: it has no pool", field="pool"
            )
        if pool:
            target = AgentPool.objects.filter(name=pool).first()
            if target is None:
                raise InvalidInput(f"unknown pool {pool!r}", field="pool")
            if target.kind != step.call_pool.kind:
                raise InvalidInput(
                    f"pool {pool!r} is a {target.kind} pool, not {step.call_pool.kind}", field="pool"
                )
        note: dict[str, Any] = {"pool": pool} if pool else {}
        if edit is not None:
            note.update(edit)
        _note(unit, state, actor, EventKind.OPERATOR_RETRY, reason, step, note or None)
        _reopen_if_failed(unit, state, actor, reason)
        if calls:
            step_dispatch(
                unit,
                state=state,
                step=step,
                source=operator_source(actor),
                actor=actor,
                pool=target,
                avoid_endpoint_id=step.endpoint_id,
                reason=reason or ("retried on pool " + pool if pool else "retried by an operator"),
            )
        else:
            # A wait is retried by waiting again (a new timeout, a timer's time read again). A
            # workflow step whose child ended without success starts a new child, the next try
            # (`<operation ID>/retry-<n>`); one whose child is live or succeeded waits for it
            # again: never two live children for one step (scheduler.services.waits).
            begin = step_begin_wait if step.definition.waits else step_begin_child
            begin(
                unit,
                state=state,
                step=step,
                source=operator_source(actor),
                actor=actor,
                reason=reason or "retried by an operator",
            )
        job_advance(unit, state=state, source=operator_source(actor), actor=actor)
        return step


def input_edit_refusal(step: Step) -> str | None:
    """Why `step` may not be retried with an edited input now, or None when it may (the console
    shows the form on None; _edit_input refuses with the reason)."""
    if not step.forward:
        return "a compensation is retried as it is: its input is the step it undoes"
    if step.definition.waits:
        return f"a {step.definition.kind} step calls nothing: it has no input to edit"
    if step.definition.kind == StepDefinitionKind.WORKFLOW:
        return "a workflow step's child job keeps the input it started with: retry the child's steps"
    if step.status not in (S.HELD, S.FAILED):
        return f"only a held or failed step is retried with an edited input, not a {step.status} one"
    if step.attempt and step.last_outcome not in NO_EFFECT_FOR_EDIT:
        return (
            f"step {step.name} may have taken effect under its operation ID (last outcome: "
            f"{step.last_outcome or 'none'}): reconcile or resolve it instead of changing its input"
        )
    return None


def _json_object(value: Any, field: str = "input") -> dict[str, Any]:
    """A new input: a JSON object the database can store, or InvalidInput naming the field."""
    if not isinstance(value, dict):
        raise InvalidInput(f"{field} must be a JSON object", field=field)
    json_storable(value, field)
    return value


def _edit_input(unit: Unit, state: JobState, step: Step, new_input: Any) -> dict[str, Any]:
    """Give the step its own input and a new operation ID; what the event records."""
    refusal = input_edit_refusal(step)
    if refusal is not None:
        raise ActionNotAllowed(refusal)
    new_input = _json_object(new_input)
    contracts.input_check(state.job.workflow.input_schema, new_input)
    old_input = step.input_override if step.input_override is not None else state.job.input
    old_operation = step.operation_id
    step.operation_id = str(uuid.uuid4())
    step.input_override = new_input
    Step.objects.filter(pk=step.pk).update(
        operation_id=step.operation_id, input_override=new_input, updated_at=unit.now
    )
    return {
        "input": {"old": old_input, "new": new_input},
        "operation_id": {"old": old_operation, "new": step.operation_id},
    }


def step_resolve(*, actor: User | None, step_id: Any, output: Any, reason: str = "") -> Step:
    """Complete a step by hand with `output`: the operator asserts it happened (the evidence is
    the reason). The job then moves on as if the step had succeeded."""
    actor = _require_actor(actor)
    if output is not None and not isinstance(output, dict):
        raise InvalidInput("output must be a JSON object", field="output")
    json_storable(output, "output")
    with unit_of_work() as unit:
        state, step = _lock_step(unit, step_id)
        waiting = step.status == S.WAITING and step.definition.waits
        if step.status not in RESOLVABLE_BY_OPERATOR and not waiting:
            raise ActionNotAllowed(f"step {step.name} is {step.status}: nothing to resolve")
        job = state.job
        if step.forward and job.status not in JOB_FORWARD and job.status not in (J.FAILED, J.COMPENSATING):
            raise ActionNotAllowed(f"job {job.pk} is {job.status}: its steps cannot be resolved now")
        _note(unit, state, actor, EventKind.OPERATOR_RESOLVE, reason, step, {"output": output})
        if step.forward:
            _reopen_if_failed(unit, state, actor, reason)
        step_succeed(
            unit,
            state=state,
            step=step,
            output=output,
            source=operator_source(actor),
            actor=actor,
            kind=EventKind.STEP_RESOLVED,
            reason=reason or "resolved by an operator",
        )
        return step


@dataclass(frozen=True)
class _Stop:
    """How an operator stops a job: from which statuses (`stoppable`, while it is not compensating
    yet), what a refusal says, the operator's event, the compensation's reason code, the reason
    when the operator gives none, and what a bulk preview says it will do."""

    stoppable: Collection[str]
    refused: str
    kind: EventKind
    reason_code: str
    said: str
    preview: str


#: The stops by bulk action name: the action and its preview accept the same jobs.
JOB_STOPS = {
    "compensate": _Stop(
        (*JOB_FORWARD, J.FAILED, J.WAITING),
        "it cannot be compensated now",
        EventKind.OPERATOR_COMPENSATE,
        "operator",
        "compensation requested by an operator",
        "stop the job and undo what it did",
    ),
    "cancel": _Stop(
        (*JOB_FORWARD, J.WAITING),
        "it cannot be cancelled now",
        EventKind.OPERATOR_CANCEL,
        "cancel",
        "cancelled by an operator",
        "cancel the job and undo what it did",
    ),
}


def job_compensate(*, actor: User | None, job_id: Any, reason: str = "") -> Job:
    """Stop the job and undo what its steps did, in reverse dependency order."""
    return _stop(actor, job_id, reason, JOB_STOPS["compensate"])


def job_rerun(
    *,
    actor: User | None,
    job_id: Any,
    from_step: str,
    input: Any = None,
    reason: str = "",
    version: str = "job",
) -> Job:
    """Run a settled job again from `from_step`, as a new job linked to it (`rerun_of`), with the
    original input or `input`, on the job's own workflow version or (`version="current"`) on the
    latest. The steps downstream of `from_step` run again with new operation IDs; the others
    reuse their outputs (scheduler.services.submission.rerun_create). Both jobs record who did it
    and why."""
    actor = _require_actor(actor)
    if version not in ("job", "current"):
        raise InvalidInput("version must be 'job' (the job's own) or 'current'", field="version")
    if not isinstance(from_step, str) or not from_step:
        raise InvalidInput("from_step must name a step of the job", field="from_step")
    if input is not None:
        input = _json_object(input)
    with unit_of_work() as unit:
        state = _lock(unit, job_id)
        job = state.job
        if job.status not in JOB_SETTLED:
            raise ActionNotAllowed(
                f"job {job.pk} is {job.status}: rerun a job once it has settled (retry its steps meanwhile)"
            )
        source = operator_source(actor)
        rerun = rerun_create(
            unit,
            original=state,
            from_step=from_step,
            payload=input if input is not None else job.input,
            actor=actor,
            source=source,
            reason=reason,
            current=version == "current",
        )
        _note(
            unit,
            state,
            actor,
            EventKind.OPERATOR_RERUN,
            reason,
            data={
                "rerun_job": str(rerun.job.pk),
                "from_step": from_step,
                "input_changed": input is not None,
                "version": rerun.job.workflow.version,
            },
        )
        return rerun.job


def job_cancel(*, actor: User | None, job_id: Any, reason: str = "") -> Job:
    """Stop dispatching and compensate what ran; the job ends `cancelled`."""
    return _stop(actor, job_id, reason, JOB_STOPS["cancel"])


def _stop(actor: User | None, job_id: Any, reason: str, stop: _Stop) -> Job:
    """An operator stops a job that `stop` accepts and its compensation starts, under the job's
    lock."""
    actor = _require_actor(actor)
    with unit_of_work() as unit:
        state = _lock(unit, job_id)
        job = state.job
        if job.compensation_reason or job.status not in stop.stoppable:
            raise ActionNotAllowed(f"job {job.pk} is {job.status}: {stop.refused}")
        _note(unit, state, actor, stop.kind, reason)
        job_start_compensation(
            unit,
            state=state,
            reason_code=stop.reason_code,
            source=operator_source(actor),
            actor=actor,
            reason=reason or stop.said,
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
        job_advance(unit, state=state, source=operator_source(actor), actor=actor)
        return job


# --- bulk actions ---------------------------------------------------------------------------------

BULK_ACTIONS = ("retry", "compensate", "cancel")
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
            step_actionable_check(JobState(job=job, steps=[step]), step=step, verb="retry")
        except ActionNotAllowed as exc:
            return BulkItem(step.pk, str(job.pk), step.name, False, exc.message)
        if step.definition.waits:
            what = f"wait for its {step.definition.kind} again"
        elif step.definition.kind == StepDefinitionKind.WORKFLOW:
            what = "wait for its child job again"
        else:
            what = f"dispatch attempt {step.attempt + 1} now"
        return BulkItem(step.pk, str(job.pk), step.name, True, f"{what} (was {step.status})")
    stop = JOB_STOPS[action]
    if job.compensation_reason or job.status not in stop.stoppable:
        return BulkItem(step.pk, str(job.pk), step.name, False, f"job is {job.status}: cannot {action}")
    return BulkItem(step.pk, str(job.pk), step.name, True, stop.preview)


def bulk_preview(*, action: str, step_ids: list[int]) -> list[BulkItem]:
    """A dry run: for each step, whether the action is allowed now and what it would do.
    Changes nothing."""
    if action not in BULK_ACTIONS:
        raise InvalidInput(f"unknown bulk action {action!r}", field="action")
    if len(step_ids) > BULK_LIMIT:
        raise InvalidInput(f"at most {BULK_LIMIT} items per bulk action", field="steps")
    steps = Step.objects.filter(pk__in=step_ids).select_related("job", "definition").order_by("id")
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
                state = "cancelled" if action == "cancel" else "compensating"
                detail = f"job already {state} (same bulk action)"
            elif action == "cancel":
                job_cancel(actor=actor, job_id=step.job_id, reason=reason or "bulk cancel")
                done_jobs.add(job_id)
                detail = "cancelled"
            else:
                job_compensate(actor=actor, job_id=step.job_id, reason=reason or "bulk compensate")
                done_jobs.add(job_id)
                detail = "compensating"
            results.append(BulkItem(step.pk, job_id, step.name, True, detail))
        except (ActionNotAllowed, InvalidInput, NotFound) as exc:
            results.append(BulkItem(step.pk, job_id, step.name, False, exc.message))
    return results
