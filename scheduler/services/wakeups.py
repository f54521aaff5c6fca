"""How a wait ends (scheduler.services.waits has how it starts): a signal sent to the job, an
operator's approval or rejection, or the scan finding its time come (a timer fires, a timeout
applies its on_timeout). Each is a guarded move under the job's lock, and moves the job on.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any, cast

from django.contrib.auth.models import Group
from django.db import IntegrityError

from sas_project.errors import ActionNotAllowed, IdempotencyConflict, InvalidInput, NotFound, SasError
from sas_project.permissions import can_operate
from sas_project.validation import json_storable, valid_name
from scheduler.models import (
    JOB_SETTLED,
    EventKind,
    Job,
    OnExhausted,
    OnTimeout,
    QuarantineLoop,
    Signal,
    Step,
    StepDefinition,
    StepDefinitionKind,
    StepKind,
    StepStatus,
)
from scheduler.services.escalation import escalate, rung_due
from scheduler.services.locking import JOB_FORWARD, JobState, load_locked_jobs, lock_job
from scheduler.services.quarantine import not_quarantined
from scheduler.services.saga import job_advance, job_end_for_step, step_hold
from scheduler.services.waits import describe, signal_consume, timer_fire
from scheduler.transitions import step_transition
from scheduler.unit import Unit, User, unit_of_work

S = StepStatus
K = StepDefinitionKind
E = EventKind


#: A job's signals are rows of its own: a client looping on distinct keys stops here.
MAX_SIGNALS_PER_JOB = 1000


class NotPermitted(SasError, http_status=403, code="permission_denied"):
    """The user may not decide this approval (not in the group it names, nor an operator)."""


# --- signals ------------------------------------------------------------------------------------------


@dataclass
class SignalReceipt:
    """A signal as stored, and whether this request created it (False: a replay of its key)."""

    signal: Signal
    created: bool


def signal_hash(name: str, *, payload: Any) -> str:
    canonical = json.dumps({"name": name, "payload": payload}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def signal_send(
    *, job_id: Any, name: Any, payload: Any, sender: User, idempotency_key: str | None = None
) -> SignalReceipt:
    """Send signal `name` to a job: stored with its event, and consumed at once by the step that
    waits for it, if one does (otherwise kept until one does).

    Raises InvalidInput when no signal step of the job's workflow takes `name`, ActionNotAllowed
    (409) when the job no longer runs forward (settled or compensating), IdempotencyConflict
    when the key was used for another signal. The same key again is the same signal.
    """
    name = valid_name(name, "name", "name")
    json_storable(payload, "payload")
    if idempotency_key is not None and not (0 < len(idempotency_key) <= 255):
        raise InvalidInput("Idempotency-Key must be 1 to 255 characters", field="Idempotency-Key")
    request_hash = signal_hash(name, payload=payload)
    try:
        with unit_of_work() as unit:
            state = _lock(unit, job_id)
            job = state.job
            if idempotency_key:
                replay = _signal_replay(job, idempotency_key, request_hash)
                if replay is not None:
                    return replay
            if not any(s.definition.kind == K.SIGNAL and s.definition.signal == name for s in state.actions):
                takes = sorted({s.definition.signal for s in state.actions if s.definition.kind == K.SIGNAL})
                raise InvalidInput(
                    f"no step of job {job.pk} waits for signal {name!r}"
                    + (f" (it takes: {', '.join(takes)})" if takes else " (it takes no signals)"),
                    field="name",
                )
            takers = [
                s.definition
                for s in state.actions
                if s.definition.kind == K.SIGNAL and s.definition.signal == name
            ]
            if not any(may_send(sender, definition=d) for d in takers):
                groups = sorted({d.sender_group for d in takers})
                raise NotPermitted(f"only members of {', '.join(groups)} may send signal {name!r}")
            if not job_takes_signals(job):
                # A job whose compensation is held needs attention, but goes back, not forward.
                being = f"{job.status} while compensating" if job.status in JOB_FORWARD else job.status
                raise ActionNotAllowed(f"job {job.pk} is {being}: it takes no more signals")
            if Signal.objects.filter(job=job).count() >= MAX_SIGNALS_PER_JOB:
                raise ActionNotAllowed(
                    f"job {job.pk} already holds {MAX_SIGNALS_PER_JOB} signals: it takes no more"
                )
            signal = Signal.objects.create(
                job=job,
                name=name,
                payload=payload,
                idempotency_key=idempotency_key or None,
                request_hash=request_hash,
                sender=cast(Any, sender) if sender.is_authenticated else None,
                created_at=unit.now,
            )
            source = f"api:{sender.get_username()}"
            unit.event(
                job_id=job.pk,
                kind=E.SIGNAL_RECEIVED,
                source=source,
                actor=sender,
                reason=f"signal {name!r}",
                data={"signal_id": signal.pk, "name": name, "idempotency_key": idempotency_key},
            )
            step = next(
                (
                    s
                    for s in state.actions
                    if s.status == S.WAITING and s.definition.kind == K.SIGNAL and s.definition.signal == name
                ),
                None,
            )
            if step is not None:
                signal_consume(unit, step=step, signal=signal, source=source, actor=sender)
                job_advance(unit, state=state, source=source, actor=sender)
            return SignalReceipt(signal=signal, created=True)
    except IntegrityError:
        # A concurrent request with the same key won the insert: answer with its signal.
        if not idempotency_key:
            raise
        job = Job.objects.get(pk=job_id)
        replay = _signal_replay(job, idempotency_key, request_hash)
        if replay is None:
            raise
        return replay


#: How often a sender waiting for its signal's consumption looks again.
SIGNAL_WAIT_POLL_SECONDS = 0.1


def signal_consumed_within(signal_id: int, *, seconds: float) -> bool:
    """Whether signal `signal_id` is consumed, waiting up to `seconds` for it (a bounded wait: one
    indexed read every SIGNAL_WAIT_POLL_SECONDS, outside any transaction, so the consumption the
    cluster commits meanwhile is seen)."""
    deadline = time.monotonic() + max(seconds, 0.0)
    while True:
        if Signal.objects.filter(pk=signal_id, consumed_at__isnull=False).exists():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(SIGNAL_WAIT_POLL_SECONDS, left))


def job_takes_signals(job: Job) -> bool:
    """Whether a job takes signals now: it still goes forward (not settled, not compensating)."""
    return job.status in JOB_FORWARD and not job.compensation_reason


def _signal_replay(job: Job, key: str, request_hash: str) -> SignalReceipt | None:
    existing = Signal.objects.filter(job=job, idempotency_key=key).first()
    if existing is None:
        return None
    if existing.request_hash != request_hash:
        raise IdempotencyConflict(
            f"Idempotency-Key {key!r} was already used for a different signal to job {job.pk}"
        )
    return SignalReceipt(signal=existing, created=False)


def _lock(unit: Unit, job_id: Any) -> JobState:
    if not Job.objects.filter(pk=job_id).exists():
        raise NotFound(f"job {job_id} does not exist")
    return lock_job(unit, job_id=job_id)


# --- approvals -----------------------------------------------------------------------------------------


def _member(user: User, group: str) -> bool:
    return Group.objects.filter(name=group, user=cast(Any, user)).exists()


def may_send(user: User, *, definition: StepDefinition) -> bool:
    """Whether `user` may send the signal this step takes: anyone who may signal the job, unless
    the step names a `sender_group` (then its members, and superusers)."""
    if not definition.sender_group:
        return True
    return user.is_authenticated and (
        bool(cast(Any, user).is_superuser) or _member(user, definition.sender_group)
    )


def may_decide(user: User, *, step: Step, submitter_id: Any, approve: bool = True) -> bool:
    """Whether `user` may decide this approval: a member of the group it names, or, when it names
    none, an operator; and a member of the group an escalation reassigned it to. The job's
    submitter may not approve their own job unless the step allows it (separation of duties;
    rejecting it they may)."""
    if not user.is_authenticated:
        return False
    definition = step.definition
    if approve and not definition.allow_self_approval and submitter_id == user.pk:
        return False
    if step.escalation_group and _member(user, step.escalation_group):
        return True
    if definition.group:
        return bool(cast(Any, user).is_superuser) or _member(user, definition.group)
    return can_operate(user)


def approval_decide(*, job_id: Any, step_name: str, actor: User, approve: bool, comment: Any = "") -> Step:
    """Approve (the step succeeds with the decision as its output) or reject (it fails, and its
    policy decides the job) a step waiting for an approval. Raises NotFound, NotPermitted (403),
    ActionNotAllowed (409) when the step is not waiting for an approval."""
    if comment is None:
        comment = ""
    if not isinstance(comment, str) or len(comment) > 2000 or "\x00" in comment:
        raise InvalidInput("comment must be text of at most 2000 characters", field="comment")
    with unit_of_work() as unit:
        state = _lock(unit, job_id)
        step = next((s for s in state.actions if s.name == step_name), None)
        if step is None:
            raise NotFound(f"job {state.job.pk} has no step {step_name!r}")
        if step.definition.kind != K.APPROVAL:
            raise ActionNotAllowed(f"step {step_name} is a {step.definition.kind} step: nothing to approve")
        if not may_decide(actor, step=step, submitter_id=state.job.submitter_id, approve=approve):
            definition = step.definition
            if approve and not definition.allow_self_approval and state.job.submitter_id == actor.pk:
                raise NotPermitted(
                    f"you submitted job {state.job.pk}: another person approves it "
                    f"(step {step_name} does not allow self-approval)"
                )
            who = f"members of {definition.group}" if definition.group else "operators"
            if step.escalation_group:
                who += f" or of {step.escalation_group}"
            raise NotPermitted(f"only {who} may decide step {step_name}")
        if step.status != S.WAITING:
            raise ActionNotAllowed(f"step {step_name} is {step.status}: it waits for no approval")
        source = f"operator:{actor.get_username()}"
        decision = {
            "approved": approve,
            "by": actor.get_username(),
            "comment": comment,
            "at": unit.now.isoformat(),
        }
        if approve:
            step_transition(
                unit,
                step,
                S.SUCCEEDED,
                source=source,
                kind=E.STEP_APPROVED,
                actor=actor,
                reason=comment or "approved",
                data={"comment": comment},
                output=decision,
                error="",
            )
            job_advance(unit, state=state, source=source, actor=actor)
        else:
            step_wait_failed(
                unit,
                state=state,
                step=step,
                kind=E.STEP_REJECTED,
                source=source,
                reason=f"rejected by {actor.get_username()}" + (f": {comment}" if comment else ""),
                actor=actor,
                output=decision,
            )
        return step


# --- failing, timeouts, timers -------------------------------------------------------------------------


def step_wait_failed(
    unit: Unit,
    *,
    state: JobState,
    step: Step,
    kind: EventKind,
    source: str,
    reason: str,
    actor: User | None = None,
    output: Any = None,
    data: dict[str, Any] | None = None,
    status_reason: str | None = None,
) -> None:
    """A wait that ends without its success (a rejection, a failing timeout, a timer without a
    time, a child job that did not succeed or could not start): the step's policy decides, as
    when a call's attempts run out (compensate when it has no policy); hold parks the step for an
    operator. `status_reason`: what the step says of its status, when the caller says it."""
    said: dict[str, Any] = {"status_reason": status_reason} if status_reason is not None else {}
    policy = step.definition.policy
    action = policy.on_exhausted if policy is not None else OnExhausted.COMPENSATE
    if action == OnExhausted.HOLD:
        if kind != E.STEP_HELD:
            # What ended the wait (a rejection, a timeout) is recorded besides the hold.
            unit.event(
                job_id=state.job.pk,
                step=step,
                kind=kind,
                source=source,
                actor=actor,
                reason=reason,
                data=data,
            )
        step_hold(unit, state=state, step=step, source=source, actor=actor, reason=reason, **said)
        return
    step_transition(
        unit,
        step,
        S.FAILED,
        source=source,
        kind=kind,
        actor=actor,
        reason=reason,
        data=data,
        error=reason,
        output=output,
        **said,
    )
    job_end_for_step(unit, state=state, step=step, action=action, source=source, reason=reason, actor=actor)


def wait_expire(unit: Unit, *, state: JobState, step: Step, source: str) -> str:
    """End a due wait (the caller holds the job's lock): fire a timer, apply a signal's or
    approval's on_timeout, or start a repeat's next iteration. Returns what it did ("" when the
    step no longer waits or is not due)."""
    if step.status != S.WAITING or step.deadline is None or step.deadline > unit.now:
        return ""
    definition = step.definition
    if step.repeats:
        # The interval between two iterations passed: the DAG advance dispatches the next one
        # (scheduler.services.repeat), which clears the deadline.
        job_advance(unit, state=state, source=source)
        return "iteration_started" if step.deadline is None else ""
    if not definition.waits:
        return ""
    if definition.kind == K.TIMER:
        timer_fire(unit, step=step, source=source)
        job_advance(unit, state=state, source=source)
        return "timer_fired"
    rung = rung_due(step, now=unit.now)
    if rung is not None:
        return escalate(unit, state=state, step=step, rung=rung, source=source)
    # No rung due: the deadline is the timeout's (the sooner of the two: scheduler.services.
    # escalation), and a deadline the step reached is its timeout.
    reason = f"no {describe(definition).removeprefix('an ')} within {definition.timeout_seconds:g} s"
    if definition.on_timeout == OnTimeout.CONTINUE:
        step_transition(
            unit,
            step,
            S.SUCCEEDED,
            source=source,
            kind=E.WAIT_TIMED_OUT,
            reason=f"{reason}: continued with the default output",
            output=definition.default_output,
            error="",
        )
        job_advance(unit, state=state, source=source)
    elif definition.on_timeout == OnTimeout.FAIL:
        step_wait_failed(unit, state=state, step=step, kind=E.WAIT_TIMED_OUT, source=source, reason=reason)
    else:
        step_transition(
            unit, step, S.HELD, source=source, kind=E.STEP_HELD, reason=f"{reason}: held for an operator"
        )
        job_advance(unit, state=state, source=source)
    return "wait_timed_out"


def waits_due(now: dt.datetime, *, limit: int, exclude: set[Any] | None = None) -> list[Any]:
    """The jobs of up to `limit` waits whose time came, earliest first (read through the live
    steps' index: a wait that is not due costs nothing), but those in `exclude` and those the
    waits' sweep quarantined lately."""
    rows = (
        Step.objects.filter(status=S.WAITING, deadline__lte=now, pool__isnull=True, kind=StepKind.ACTION)
        .filter(not_quarantined(QuarantineLoop.WAITS, now=now, field="job_id"))
        .exclude(job_id__in=list(exclude or ()))
        .order_by("deadline")
        .values_list("job_id", flat=True)[:limit]
    )
    return list(dict.fromkeys(rows))


def waits_due_steps(job_id: Any, *, now: dt.datetime) -> list[int]:
    """The due waits of one job (what the waits' sweep was ending when it raised)."""
    return list(
        Step.objects.filter(
            job_id=job_id, status=S.WAITING, deadline__lte=now, pool__isnull=True, kind=StepKind.ACTION
        ).values_list("pk", flat=True)
    )


def waits_expire(unit: Unit, *, job_ids: list[Any], source: str) -> dict[str, int]:
    """Lock these jobs (skipping those locked elsewhere: the next scan takes them) and end their
    due waits. Returns the counts of what was done."""
    done: dict[str, int] = {}
    jobs = list(
        Job.objects.filter(pk__in=job_ids)
        .exclude(status__in=sorted(JOB_SETTLED))
        .select_for_update(skip_locked=True)
        .select_related("workflow")
    )
    for state in load_locked_jobs(jobs).values():
        for step in list(state.actions):
            what = wait_expire(unit, state=state, step=step, source=source)
            if what:
                done[what] = done.get(what, 0) + 1
    return done
