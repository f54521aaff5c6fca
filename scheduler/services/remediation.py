"""Remediation: the moves through which the supervisor's decisions (supervisor.policies) are
applied. The supervisor never calls a remote itself: a retry or a reconcile is a normal dispatch,
run by an agent and recorded like any other attempt.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from agents.broker import tasks_still_queued
from agents.models import AgentPool
from agents.outcome import AttemptKind, Outcome
from scheduler.models import Attempt, EventKind, Step, StepKind, StepStatus
from scheduler.services.dispatch import step_dispatch
from scheduler.services.heartbeats import timed_out_reason
from scheduler.services.locking import JobState
from scheduler.services.saga import job_advance, job_end_for_step, step_hold
from scheduler.transitions import attempts_time_out, step_postpone, step_transition
from scheduler.unit import Unit

S = StepStatus
E = EventKind


def steps_still_queued(steps: list[Step]) -> set[int]:
    """Of these dispatched steps, those whose attempt has not started and whose task still waits
    in the broker's queue: they wait for a worker, not for the remote."""
    if not steps:
        return set()
    waiting: dict[int, int] = dict(
        Attempt.objects.filter(
            step_id__in=[s.pk for s in steps],
            finished_at__isnull=True,
            started_at__isnull=True,
            queue_row__isnull=False,
        ).values_list("queue_row", "step_id")  # type: ignore[arg-type]  # queue_row is not null here
    )
    if not waiting:
        return set()
    return {waiting[row] for row in tasks_still_queued(list(waiting))}


def step_keep_waiting(unit: Unit, *, state: JobState, step: Step, source: str) -> None:
    """An overdue attempt whose task has not left the queue: give it another timeout.

    Calling again would only queue a second task behind the first (under load, a retry storm of
    stale tasks); the task keeps its place, and the attempt counts as made only once it runs.
    """
    deadline = unit.now + dt.timedelta(seconds=step.definition.call_policy.timeout_seconds)
    step_postpone(
        unit,
        step,
        deadline=deadline,
        source=source,
        reason="its task is still waiting in the queue for a worker: deadline extended",
    )


def step_time_out(
    unit: Unit,
    *,
    state: JobState,
    step: Step,
    source: str,
    attempt_closed: bool = False,
    missed_heartbeat: float | None = None,
) -> None:
    """The attempt in flight passed its deadline with no outcome: its outcome is unknown.
    `attempt_closed`: the caller already closed the attempt (attempts_time_out).
    `missed_heartbeat`: the call was held to heartbeats this often and the last one is overdue
    (scheduler.services.heartbeats.heartbeats_missed): the event says so."""
    overdue_ms = int((unit.now - step.deadline).total_seconds() * 1000) if step.deadline is not None else None
    if not attempt_closed:
        attempts_time_out(unit, [step], decided_by=source)
    data: dict[str, Any] = {"overdue_ms": overdue_ms}
    if missed_heartbeat is not None:
        data["heartbeat_seconds"] = missed_heartbeat
    step_transition(
        unit,
        step,
        S.UNKNOWN,
        source=source,
        kind=E.STEP_TIMED_OUT,
        reason=timed_out_reason(step.deadline, missed_heartbeat=missed_heartbeat),
        data=data,
        last_outcome=Outcome.NO_ANSWER,
        error="no outcome reported before the deadline",
    )


def step_retry_later(
    unit: Unit,
    *,
    state: JobState,
    step: Step,
    delay: float,
    source: str,
    reason: str,
    pool: AgentPool | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """Retry the step after `delay` seconds (now, when 0 and the job is not paused)."""
    if delay <= 0 and state.job.paused_at is None:
        step_dispatch(
            unit,
            state=state,
            step=step,
            source=source,
            pool=pool,
            avoid_endpoint_id=step.endpoint_id,
            reason=reason,
            data=data,
        )
        return
    fields: dict[str, Any] = {"not_before": unit.now + dt.timedelta(seconds=max(delay, 0))}
    if pool is not None:
        fields["pool"] = pool
    step_transition(
        unit,
        step,
        S.RETRY_WAIT,
        source=source,
        kind=E.RETRY_SCHEDULED,
        reason=reason,
        data={"delay_s": round(delay, 3), **(data or {})},
        **fields,
    )


def step_reconcile(unit: Unit, *, state: JobState, step: Step, source: str, reason: str) -> None:
    """Ask the remote whether the operation happened (through a normal, supervised dispatch)."""
    step_dispatch(unit, state=state, step=step, source=source, kind=AttemptKind.RECONCILE, reason=reason)


def step_give_up(unit: Unit, *, state: JobState, step: Step, action: str, source: str, reason: str) -> None:
    """No more attempts. `action` is the policy's on_exhausted: compensate, fail or hold.

    A compensation that cannot be completed is always held: only an operator can decide it.
    """
    if action == "hold" or step.kind == StepKind.COMPENSATION:
        step_hold(unit, state=state, step=step, source=source, reason=reason)
        return
    step_transition(unit, step, S.FAILED, source=source, reason=reason)
    if step.kind == StepKind.ITEM:
        # An item's failure counts against its fan-out's join (scheduler.services.fanout).
        job_advance(unit, state=state, source=source)
    else:
        job_end_for_step(unit, state=state, step=step, action=action, source=source, reason=reason)


def step_abandon(unit: Unit, *, state: JobState, step: Step, source: str) -> None:
    """A forward step of a job that stopped running: no more attempts."""
    step_transition(
        unit,
        step,
        S.FAILED,
        source=source,
        kind=E.STEP_ABANDONED,
        reason=f"job is {state.job.status}: no further attempts",
    )
    job_advance(unit, state=state, source=source)
