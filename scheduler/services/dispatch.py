"""Dispatch: write the intent of a step's next attempt and enqueue its agent task, in the caller's
transaction.

django-q2's ORM broker writes its queue row to the same database inside that transaction, so the
task exists if and only if the intent commits (a real outbox, no `on_commit`). A crash leaves
either nothing or an intent with a deadline, which the supervisor will find.

Restated in SQL (keep both in step; the equivalence tests compare them):
`scheduler/sql/postgresql/sas_dispatch_ready.sql`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.tasks import async_task

from agents.broker import ClaimByDeleteORM
from agents.health import choose_endpoint
from agents.models import AgentPool
from agents.outcome import AttemptKind
from scheduler.models import Attempt, EventKind, Step, StepStatus
from scheduler.services.capacity import asked_to_wait, call_parks, pump_after_commit
from scheduler.services.locking import JobState
from scheduler.transitions import attempt_open, step_transition
from scheduler.unit import Unit, User

#: The agent task every attempt runs (its arguments are ids only: the payload is pickled).
AGENT_TASK = "scheduler.tasks.run_attempt"


def step_dispatch(
    unit: Unit,
    *,
    state: JobState,
    step: Step,
    source: str,
    kind: str = AttemptKind.CALL,
    pool: AgentPool | None = None,
    avoid_endpoint_id: int | None = None,
    actor: User | None = None,
    reason: str = "",
    data: dict[str, Any] | None = None,
    capacity_checked: bool = False,
) -> Attempt | None:
    """Write the intent of attempt n+1 and enqueue its agent task, in the caller's transaction.

    The deadline comes from the database clock and the step's current policy. A call for a pool
    with limits is parked instead (`waiting`, no attempt; returns None) for the capacity pump to
    dispatch (scheduler.services.capacity), unless the pump itself is the caller
    (`capacity_checked`).
    """
    policy = step.definition.call_policy
    pool = pool or step.call_pool
    park = (
        call_parks(state, step=step, pool=pool) if kind == AttemptKind.CALL and not capacity_checked else None
    )
    endpoint = None
    if park is None:
        endpoint = choose_endpoint(pool, now=unit.now, avoid_id=avoid_endpoint_id, spread=step.pk)
        asked = endpoint.wait_asked_until if endpoint is not None else None
        if kind == AttemptKind.CALL and not capacity_checked and asked is not None and asked > unit.now:
            # Only an endpoint that asked to wait was left (every other one asked too, or is
            # cooling down): the call waits for the time it asked, holding no worker.
            park = asked_to_wait(state, step=step, pool=pool, until=asked)
    if park is not None:
        step_transition(
            unit,
            step,
            StepStatus.WAITING,
            source=source,
            kind=EventKind.STEP_WAITING,
            actor=actor,
            reason=f"{reason}; {park.reason}" if reason else park.reason,
            data=park.data,
            pool=pool,
            deadline=None,
            not_before=park.not_before,
            concurrency_key=park.concurrency_key,
            rate_key="",
        )
        pump_after_commit(pool.pk, dispatch=step_dispatch)
        return None
    number = step.attempt + 1
    deadline = unit.now + dt.timedelta(seconds=policy.timeout_seconds)
    data = {
        "kind": kind,
        "pool": pool.name,
        "endpoint": endpoint.url if endpoint else "",
        "policy": policy.name,
        "policy_version": policy.version,
        "deadline": deadline.isoformat(),
        **(data or {}),
    }
    step_transition(
        unit,
        step,
        StepStatus.DISPATCHED,
        source=source,
        kind=EventKind.STEP_DISPATCHED,
        actor=actor,
        reason=reason,
        data=data,
        attempt=number,
        calls=step.calls + (1 if kind == AttemptKind.CALL else 0),
        pool=pool,
        endpoint=endpoint,
        deadline=deadline,
        not_before=None,
        first_dispatched_at=step.first_dispatched_at or unit.now,
    )
    queue_row = enqueue_attempt(step.pk, number=number, timeout=policy.timeout_seconds)
    return attempt_open(
        unit,
        step,
        number=number,
        kind=kind,
        endpoint=endpoint,
        policy_version=policy.version,
        deadline=deadline,
        queue_row=queue_row,
    )


def task_timeout(policy_timeout: float) -> int:
    """django-q2's time limit for an agent task: the attempt's own timeout and some room for the
    database work around the call (an int: django-q2 arms `signal.alarm` with it)."""
    return max(int(Conf.TIMEOUT or 0), int(policy_timeout) + 30)


def enqueue_attempt(step_id: int, *, number: int, timeout: float) -> int | None:
    """Enqueue the agent task of attempt `number` (in the caller's transaction). Returns the queue
    row that carries it when the broker tells (the project's broker does; others do not)."""
    broker = get_broker()
    if isinstance(broker, ClaimByDeleteORM):
        return broker.enqueue_compact(AGENT_TASK, (step_id, number), timeout=task_timeout(timeout))
    async_task(
        AGENT_TASK,
        step_id,
        number,
        task_name=f"step-{step_id}-attempt-{number}",
        broker=broker,
        q_options={"timeout": task_timeout(timeout)},
    )
    row = getattr(broker, "last_enqueued", None)
    return int(row) if row is not None else None
