"""Outcomes: record what an attempt's call came to, and move the job on, in one transaction.

Fenced on the attempt: an outcome for an attempt that is already decided never rolls the step
back. A success arriving that late still completes a step that has not settled (a late success,
the evidence of a too-short timeout: the operation ID is the same, so the effect happened once),
and is only noted on the attempt otherwise.

Restated in SQL (keep both in step; the equivalence tests compare them):
`scheduler/sql/postgresql/sas_record_outcome.sql`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now
from jmespath.exceptions import JMESPathError

from agents.health import endpoint_asked_to_wait
from agents.outcome import AttemptKind, CallResult, CallSpec, Outcome, storable
from agents.queue import DeadLetter
from agents.services import reply_dead_letters_count
from scheduler import expressions
from scheduler.models import STEP_SETTLED, Attempt, EventKind, Job, Step, StepKind, StepStatus
from scheduler.services import hotpath
from scheduler.services.capacity import any_pool_limited, pump_after_outcome
from scheduler.services.claims import AGENT, NOT_CALLED
from scheduler.services.dispatch import step_dispatch
from scheduler.services.heartbeats import step_silence_deadline
from scheduler.services.locking import JOB_FORWARD, JobState, lock_job
from scheduler.services.saga import ancestor_outputs, job_advance, step_hold, step_input
from scheduler.transitions import (
    ATTEMPT_LATE_OUTCOMES,
    OUTCOME_MOVES,
    attempt_finish,
    attempt_note_late,
    attempt_supersede,
    step_postpone,
    step_transition,
)
from scheduler.unit import Unit, User, unit_of_work

S = StepStatus
E = EventKind


def step_record_outcome(
    step_id: int,
    *,
    number: int,
    result: CallResult,
    source: str = AGENT,
    spec: CallSpec | None = None,
) -> None:
    """Record the outcome of attempt `number` and move the job on, in one transaction.

    `spec` (the claimed call) saves the lookups of the job and the attempt. On PostgreSQL the
    common outcomes take one round trip (scheduler.services.hotpath); the rest come here.

    Whatever the remote answered is made storable first (agents.outcome.storable): a success
    whose answer the database cannot hold is recorded as the success it is (the attempt
    succeeded, its error says why the answer is not kept) and holds the step for an operator,
    never lost to a write that fails nor retried or compensated as if it had failed.
    """
    result = storable(result)
    _record_outcome(step_id, number, result, source, spec)
    if any_pool_limited():
        # A call of a limited pool ending frees a slot, and the steps this outcome made ready may
        # have been parked: the pump looks at those pools once this commits.
        pump_after_outcome(step_id, number=number, dispatch=step_dispatch)


def _record_outcome(
    step_id: int, number: int, result: CallResult, source: str, spec: CallSpec | None
) -> None:
    """step_record_outcome's write, once the result is storable; the pump comes after it, whichever
    way it returns."""
    if (
        not result.unstorable
        and hotpath.enabled()
        and hotpath.record_outcome(step_id, number=number, result=result, source=source)
    ):
        return
    job_id = (
        spec.job_id
        if spec is not None
        else (Step.objects.filter(pk=step_id).values_list("job_id", flat=True).first())
    )
    if job_id is None:
        return
    with unit_of_work() as unit:
        state = lock_job(unit, job_id=job_id, also=step_id)
        step = state.step(step_id)
        live = step.attempt == number and step.status == S.DISPATCHED
        if live and spec is not None and spec.deadline is not None:
            # Under the job lock, the current attempt of a dispatched step is still in flight.
            _finish(unit, state, step, number, result, source, late=unit.now > spec.deadline, kind=spec.kind)
            return
        attempt = Attempt.objects.get(step_id=step_id, number=number)
        if attempt.finished_at is not None or not live:
            _record_late(unit, state, step, attempt, result)
            return
        _finish(
            unit, state, step, number, result, source, late=unit.now > attempt.deadline, kind=attempt.kind
        )


def attempt_accepted(step_id: int, *, number: int, result: CallResult, job_id: str, via: str) -> None:
    """The remote took the call and reports later (HTTP 202, a message on its queue): the attempt
    stays in flight under its deadline; the event says so, unless its result is already in.

    When the step's policy sets `heartbeat_seconds`, the deadline becomes the first heartbeat's:
    that long after the acceptance (scheduler.services.heartbeats), under the job's lock and
    guarded on the attempt being in flight."""
    with unit_of_work() as unit:
        state = lock_job(unit, job_id=job_id)
        step = state.step(step_id)
        if step.status != S.DISPATCHED or step.attempt != number:
            return
        if not Attempt.objects.filter(step_id=step_id, number=number, finished_at__isnull=True).exists():
            return
        reason = f"the remote took the call ({via}); its result comes later"
        data: dict[str, Any] = {
            "latency_ms": result.latency_ms,
            "status_code": result.status_code,
            "via": via,
        }
        policy = step.definition.call_policy
        silence = step_silence_deadline(unit.now, step=step, policy=policy)
        if silence is None:
            unit.event(
                job_id=job_id,
                step=step,
                kind=E.CALL_ACCEPTED,
                source=AGENT,
                attempt=number,
                reason=reason,
                data=data,
            )
            return
        heard = f"; a heartbeat is due every {policy.heartbeat_seconds:g} s"
        if silence.capped_by:
            heard += f" (the deadline stops at {silence.capped_by})"
        step_postpone(
            unit,
            step,
            deadline=silence.at,
            source=AGENT,
            reason=reason + heard,
            kind=E.CALL_ACCEPTED,
            data={**data, "heartbeat_seconds": policy.heartbeat_seconds},
        )


#: Outcomes the supervisor decides, not the remote: a result may still come after them.
DECIDED_WITHOUT_RESULT = frozenset({Outcome.NO_ANSWER, Outcome.SUPERSEDED, ""})


def async_result_record(step_id: int, *, number: int, result: CallResult, source: str) -> str:
    """Record a result that arrived after the call (a queue reply, an HTTP callback).

    The first result of an attempt wins: a repeat ("duplicate") changes nothing. A result for an
    attempt the supervisor already gave up on is late evidence ("late"), recorded as a late
    answer is. Returns "recorded", "late", "duplicate", or "unknown" (no such attempt). The
    latency is the attempt's time from its claim to now (database clock).

    The verdict is taken under the job's row lock, which every writer of an attempt's outcome
    holds: of two copies of one result arriving together, the second waits for the first to
    commit and is then a duplicate, never a second recording (nor late evidence of itself). A
    copy of a result already recorded (a remote's outcome and a late note are never undone) is
    known as one before the lock: replaying it costs one read.
    """
    job_id = Step.objects.filter(pk=step_id).values_list("job_id", flat=True).first()
    if job_id is None:
        return "unknown"
    attempt = Attempt.objects.filter(step_id=step_id, number=number)
    if _has_result(attempt.values("finished_at", "outcome", "late_outcome").first()):
        return "duplicate"
    with transaction.atomic():
        Job.objects.select_for_update(of=("self",)).filter(pk=job_id).values_list("pk").first()
        row = (
            attempt.annotate(elapsed=Now() - F("started_at"))
            .values("finished_at", "outcome", "late_outcome", "elapsed")
            .first()
        )
        if row is None:
            return "unknown"
        if _has_result(row):
            return "duplicate"
        elapsed = row["elapsed"]
        latency_ms = int(elapsed.total_seconds() * 1000) if elapsed is not None else None
        step_record_outcome(
            step_id, number=number, result=replace(result, latency_ms=latency_ms), source=source
        )
    return "late" if row["finished_at"] is not None else "recorded"


def reply_dead_letter_record(dead: DeadLetter, *, source: str) -> UUID | None:
    """Count a queue reply the consumer sent to its broker's dead-letter queue and, when it names
    the operation of a step, record `reply_dead_lettered` on that step's job, in one transaction;
    returns the job's id, or None when the reply names no step.

    Nothing else moves: the attempt it was about stays in flight under its deadline, and with no
    reply in time the supervisor handles it as no answer (a status query, by policy).
    """
    step = None
    if dead.operation_id:
        step = Step.objects.filter(operation_id=dead.operation_id).only("pk", "job_id").first()
    with unit_of_work() as unit:
        reply_dead_letters_count(dead.reason)
        if step is not None:
            unit.event(
                job_id=step.job_id,
                kind=EventKind.REPLY_DEAD_LETTERED,
                source=source,
                step=step,
                attempt=dead.attempt,
                reason=dead.error[:1000].replace("\x00", "\ufffd"),
                data={"reason": dead.reason, "queue": dead.queue, "tries": dead.tries},
            )
    return step.job_id if step is not None else None


def _has_result(row: Mapping[str, Any] | None) -> bool:
    """Whether an attempt (its finished_at, outcome and late_outcome) has the remote's result."""
    if row is None:
        return False
    return bool(row["late_outcome"]) or (
        row["finished_at"] is not None and row["outcome"] not in DECIDED_WITHOUT_RESULT
    )


def _finish(
    unit: Unit,
    state: JobState,
    step: Step,
    number: int,
    result: CallResult,
    source: str,
    *,
    late: bool,
    kind: str,
) -> None:
    attempt_finish(
        unit,
        step.pk,
        number,
        result.outcome,
        decided_by=source,
        status_code=result.status_code,
        latency_ms=result.latency_ms,
        excerpt=result.excerpt,
        error=result.error,
        late_success=late and result.succeeded,
        not_sent=result is NOT_CALLED,
        retry_after=result.retry_after,
    )
    _apply_outcome(unit, state, step, result, source=source, late=late, attempt_kind=kind)


def _apply_outcome(
    unit: Unit,
    state: JobState,
    step: Step,
    result: CallResult,
    *,
    source: str,
    late: bool = False,
    attempt_kind: str = AttemptKind.CALL,
) -> None:
    data: dict[str, Any] = {"latency_ms": result.latency_ms, "status_code": result.status_code}
    if late:
        data["late"] = True
    reconcile = attempt_kind == AttemptKind.RECONCILE
    if result.succeeded:
        _succeed_with_answer(
            unit,
            state,
            step,
            result,
            source=source,
            kind=E.STEP_RECONCILED if reconcile else E.STEP_SUCCEEDED,
            reason="the remote reports the operation happened" if reconcile else "",
            data=data,
            supersede_live=False,
        )
        return
    if reconcile and result.outcome not in (Outcome.NO_ANSWER, Outcome.NOT_HAPPENED):
        # The status query itself failed: the operation's outcome is still unknown.
        to, kind = S.UNKNOWN, E.STEP_RECONCILE_FAILED
    else:
        to, kind = OUTCOME_MOVES[result.outcome]
    asked: dict[str, Any] = {}
    if result.retry_after is not None and to == S.ATTEMPT_FAILED:
        # The remote asked for no call before then (Retry-After): the step's next attempt waits
        # for it (supervisor.policies.decide, within the policy's longest backoff), and so does
        # the endpoint's circuit.
        until = unit.now + dt.timedelta(seconds=result.retry_after)
        asked["not_before"] = until
        data["retry_after_seconds"] = result.retry_after
        if step.endpoint_id is not None:
            endpoint_asked_to_wait(step.endpoint_id, until=until)
    step_transition(
        unit,
        step,
        to,
        source=source,
        kind=kind,
        reason=result.error,
        data=data,
        last_outcome=Outcome.NO_ANSWER if to == S.UNKNOWN else result.outcome,
        error=result.error[:2000],
        **asked,
    )
    if state.job.status not in JOB_FORWARD and step.forward:
        job_advance(unit, state=state, source=source)


def _record_late(unit: Unit, state: JobState, step: Step, attempt: Attempt, result: CallResult) -> None:
    """An outcome for an attempt that is no longer the step's live one."""
    if attempt.finished_at is None:
        # Still open although the step moved on (should not happen): close it as superseded.
        attempt_finish(unit, step.pk, attempt.number, Outcome.SUPERSEDED, decided_by=AGENT)
    repeat = attempt.outcome == result.outcome and attempt.outcome not in DECIDED_WITHOUT_RESULT
    if not result.succeeded or attempt.late_outcome or repeat:
        if not (attempt.late_outcome or repeat) and result.outcome in ATTEMPT_LATE_OUTCOMES:
            # Noted once: a copy of this failure (async_result_record) is then a duplicate.
            attempt_note_late(unit, step.pk, attempt.number, result.outcome)
        unit.event(
            job_id=step.job_id,
            step=step,
            kind=E.LATE_OUTCOME_IGNORED,
            source=AGENT,
            attempt=attempt.number,
            reason=(
                f"{result.outcome} again for attempt {attempt.number}: a repeat of its result"
                if repeat
                else f"{result.outcome} for attempt {attempt.number} after it was decided"
            ),
        )
        return
    attempt_note_late(unit, step.pk, attempt.number, Outcome.SUCCEEDED)
    if step.status in STEP_SETTLED:
        unit.event(
            job_id=step.job_id,
            step=step,
            kind=E.LATE_SUCCESS_NOTED,
            source=AGENT,
            attempt=attempt.number,
            reason=f"attempt {attempt.number} succeeded after the step was already {step.status}",
            data={"output": result.output, "applied": False},
        )
        return
    _succeed_with_answer(
        unit,
        state,
        step,
        result,
        source=AGENT,
        kind=E.LATE_SUCCESS,
        reason=f"attempt {attempt.number} succeeded after its deadline",
        data={"late_attempt": attempt.number},
        succeeded_data={"applied": True},
    )


def _succeed_with_answer(
    unit: Unit,
    state: JobState,
    step: Step,
    result: CallResult,
    *,
    source: str,
    kind: EventKind,
    reason: str,
    data: dict[str, Any],
    succeeded_data: dict[str, Any] | None = None,
    supersede_live: bool = True,
) -> None:
    """Complete a step with a successful call's answer (the part its definition projects), or
    hold it when the answer cannot be stored or projected. `data` goes on the event either way,
    `succeeded_data` only on the success's. `supersede_live`: as for step_succeed."""
    if result.unstorable:
        _hold_unstorable(unit, state, step, result, source=source, data=data, supersede_live=supersede_live)
        return
    projected = project_output(
        unit, state=state, step=step, answer=result.output, source=source, supersede_live=supersede_live
    )
    if projected is HELD_BY_PROJECTION:
        return
    step_succeed(
        unit,
        state=state,
        step=step,
        output=projected,
        source=source,
        kind=kind,
        reason=reason,
        data={**data, **(succeeded_data or {})},
        supersede_live=supersede_live,
    )


def _hold_unstorable(
    unit: Unit,
    state: JobState,
    step: Step,
    result: CallResult,
    *,
    source: str,
    data: dict[str, Any],
    supersede_live: bool = True,
) -> None:
    """A success whose answer cannot be stored (agents.outcome.storable) holds the step: the
    remote did the work, so only an operator can say what its output is (Resolve), and nothing
    retries or compensates it as a failure."""
    why = f"the answer cannot be stored: {result.unstorable}"
    _hold_success(
        unit,
        state,
        step,
        why,
        source=source,
        data={**data, "excerpt": result.excerpt[:1000]},
        supersede_live=supersede_live,
        error=why[:2000],
    )


def _hold_success(
    unit: Unit,
    state: JobState,
    step: Step,
    why: str,
    *,
    source: str,
    data: dict[str, Any],
    supersede_live: bool,
    **fields: Any,
) -> None:
    """Hold a step whose call succeeded but whose output cannot be had (the answer cannot be
    stored, its projection cannot be evaluated): only an operator can say what it is."""
    if step.status == S.DISPATCHED and supersede_live:
        attempt_supersede(unit, step, decided_by=source)
    step_hold(
        unit,
        state=state,
        step=step,
        source=source,
        reason=why,
        data=data,
        status_reason=why,
        last_outcome=Outcome.SUCCEEDED,
        **fields,
    )


#: project_output's answer when the projection failed and held the step.
HELD_BY_PROJECTION = object()


def project_output(
    unit: Unit, *, state: JobState, step: Step, answer: Any, source: str, supersede_live: bool = True
) -> Any:
    """The step's output from the remote's answer: the part its definition's `output` names
    (JMESPath over `output`, `input`, `results` and a fan-out item's `item` and `index`), or the
    whole answer. A projection that cannot be evaluated holds the step (the call happened: only an
    operator can say what its output is); the answer is kept on the event."""
    expression = step.definition.output_map
    if not expression or step.kind == StepKind.COMPENSATION:
        return answer
    data: dict[str, Any] = {
        "output": answer,
        "input": step_input(state, step=step),
        "results": ancestor_outputs(state, step=step),
    }
    if step.item_index is not None:
        data |= {"item": step.item, "index": step.item_index}
    try:
        return expressions.evaluate(expression, data)
    except JMESPathError as exc:
        why = f"its output expression {expression!r} cannot be evaluated on the answer: {exc}"
        _hold_success(
            unit, state, step, why, source=source, data={"answer": answer}, supersede_live=supersede_live
        )
        return HELD_BY_PROJECTION


def step_succeed(
    unit: Unit,
    *,
    state: JobState,
    step: Step,
    output: Any,
    source: str,
    kind: EventKind = E.STEP_SUCCEEDED,
    reason: str = "",
    actor: User | None = None,
    data: dict[str, Any] | None = None,
    supersede_live: bool = True,
) -> None:
    """Complete a step with `output` and move its job on. Closes a live attempt as superseded
    unless the caller is recording that attempt's own outcome (`supersede_live=False`)."""
    if step.status == S.DISPATCHED and supersede_live:
        # The attempt in flight (if it is not the one reporting) can no longer change anything.
        attempt_supersede(unit, step, decided_by=source)
    step_transition(
        unit,
        step,
        S.SUCCEEDED,
        source=source,
        kind=kind,
        reason=reason,
        actor=actor,
        data=data,
        output=output,
        error="",
        last_outcome=Outcome.SUCCEEDED,
    )
    if step.compensates_id is not None:
        original = state.step(step.compensates_id)
        if original.status in (S.SUCCEEDED, S.FAILED):
            step_transition(
                unit,
                original,
                S.COMPENSATED,
                source=source,
                reason=f"compensation {step.operation_id} succeeded",
            )
    job_advance(unit, state=state, source=source)
