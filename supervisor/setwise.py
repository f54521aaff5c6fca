"""The scan's common decisions, applied set-wise on PostgreSQL.

Most of what a scan finds is one of two things: a call overdue whose task still waits in the
queue (keep waiting: its deadline moves), or a call overdue with no answer that the policy retries
after a backoff (time it out, schedule the retry). This module reads the facts of a batch of due
steps in one statement (locking their jobs, skipping locked ones), lets the policy decide
(supervisor.policies.decide, the same pure function), and applies those two decisions to the
whole batch in one statement: the attempts closed, the steps moved, and their events, exactly as
the per-step path writes them (tests/supervisor/test_scan_setwise.py compares the two). Every other due step,
and every step of a job that has one, goes back to the per-step path (supervisor.scan.remediate)
in the same transaction.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection

from agents.broker import tasks_still_queued
from agents.health import pool_has_healthy_endpoint
from agents.models import AgentPool
from agents.outcome import AttemptKind, Outcome
from sas_project.database import is_postgresql
from sas_project.errors import StaleWrite
from scheduler.models import EventKind, JobStatus, StepKind, StepStatus
from scheduler.services import JOB_FORWARD
from scheduler.services.heartbeats import timed_out_reason
from supervisor.alerts import endpoint_assess_and_alert
from supervisor.policies import PolicySnapshot, Retry, StepFacts, decide

S = StepStatus
TIMEOUT_ERROR = "no outcome reported before the deadline"

FACTS_SQL = """
SELECT s.id, s.job_id, s.kind, s.status, s.attempt, s.calls, s.last_outcome, s.deadline,
       s.first_dispatched_at, s.pool_id, d.pool_id, d.status_path, pool.kind, pool.alternate_id,
       alt.name, j.status, j.paused_at, j.deadline, a.kind, a.endpoint_id, a.started_at, a.queue_row,
       p.name, p.version, p.timeout_seconds, p.max_attempts, p.backoff_initial_seconds,
       p.backoff_multiplier, p.backoff_max_seconds, p.backoff_jitter, p.retry_on,
       p.reassign_after_attempts, p.on_exhausted, p.reconcile_before_retry, p.step_budget_seconds,
       p.heartbeat_seconds,
       -- Held to heartbeats: the remote accepted the call or already sent one (the scan's event
       -- then says which heartbeat was missed). Looked up only for such policies' overdue calls.
       CASE WHEN p.heartbeat_seconds IS NOT NULL AND s.status = 'dispatched' THEN
           a.heartbeat_at IS NOT NULL OR EXISTS (
               SELECT 1 FROM scheduler_event e
               WHERE e.job_id = s.job_id AND e.step_id = s.id AND e.attempt = s.attempt
                 AND e.kind = 'call_accepted')
       ELSE false END
FROM scheduler_step s
JOIN scheduler_job j ON j.id = s.job_id
JOIN scheduler_stepdefinition d ON d.id = s.definition_id
JOIN supervisor_remediationpolicy p ON p.id = d.policy_id
JOIN agents_agentpool pool ON pool.id = s.pool_id
LEFT JOIN agents_agentpool alt ON alt.id = pool.alternate_id
-- One index probe per step (attempt_unique_number), whatever the statistics say about the
-- table: LIMIT keeps the planner from folding this into a join it may misjudge.
LEFT JOIN LATERAL (
    SELECT kind, endpoint_id, started_at, queue_row, heartbeat_at FROM scheduler_attempt
    WHERE step_id = s.id AND number = s.attempt AND finished_at IS NULL LIMIT 1
) a ON true
WHERE s.status IN ('dispatched', 'retry_wait', 'attempt_failed', 'unknown')
  AND ((s.status = 'dispatched' AND (s.deadline <= %(now)s OR s.deadline IS NULL))
       OR (s.status = 'retry_wait' AND (s.not_before <= %(now)s OR s.not_before IS NULL)
           AND j.paused_at IS NULL)
       OR s.status IN ('attempt_failed', 'unknown'))
  AND NOT (s.id = ANY(%(exclude)s))
ORDER BY s.updated_at, s.id
LIMIT %(limit)s
FOR UPDATE OF j SKIP LOCKED
"""


def enabled() -> bool:
    return is_postgresql() and bool(getattr(settings, "SAS_FAST_PATH", True))


@dataclass
class Due:
    """One due step's facts, as the facts statement reads them."""

    step_id: int
    job_id: Any
    kind: str
    status: str
    attempt: int
    calls: int
    deadline: dt.datetime | None
    first_dispatched_at: dt.datetime | None
    pool_id: int
    definition_pool_id: int
    status_path: str
    pool_kind: str
    alternate_id: int | None
    alternate_name: str | None
    job_status: str
    job_paused: bool
    job_deadline: dt.datetime | None
    attempt_kind: str | None
    attempt_endpoint_id: int | None
    attempt_started: bool
    queue_row: int | None
    policy: PolicySnapshot
    #: The call in flight is held to the policy's heartbeats (accepted, or one already came).
    held_to_heartbeats: bool = False

    @property
    def missed_heartbeat(self) -> float | None:
        """The heartbeat interval an overdue call missed, if it was held to heartbeats."""
        return self.policy.heartbeat_seconds if self.held_to_heartbeats else None


@dataclass
class Plan:
    """What the set-wise path will do with a batch, and what it leaves to the per-step path."""

    keep_waiting: list[Due] = field(default_factory=list)
    retry_later: list[tuple[Due, Retry]] = field(default_factory=list)
    per_step: list[Due] = field(default_factory=list)


def due_batch(now: dt.datetime, *, limit: int, exclude: set[int]) -> list[Due]:
    """Up to `limit` due steps, oldest first, with their jobs locked (skipping locked ones)."""
    with connection.cursor() as cursor:
        cursor.execute(FACTS_SQL, {"now": now, "exclude": list(exclude), "limit": limit})
        rows = cursor.fetchall()
    return [
        Due(
            step_id=r[0],
            job_id=r[1],
            kind=r[2],
            status=r[3],
            attempt=r[4],
            calls=r[5],
            deadline=r[7],
            first_dispatched_at=r[8],
            pool_id=r[9],
            definition_pool_id=r[10],
            status_path=r[11],
            pool_kind=r[12],
            alternate_id=r[13],
            alternate_name=r[14],
            job_status=r[15],
            job_paused=r[16] is not None,
            job_deadline=r[17],
            attempt_kind=r[18],
            attempt_endpoint_id=r[19],
            attempt_started=r[20] is not None,
            queue_row=r[21],
            policy=PolicySnapshot(
                name=r[22],
                version=r[23],
                timeout_seconds=r[24],
                max_attempts=r[25],
                backoff_initial_seconds=r[26],
                backoff_multiplier=r[27],
                backoff_max_seconds=r[28],
                backoff_jitter=r[29],
                retry_on=frozenset(json.loads(r[30]) if isinstance(r[30], str) else (r[30] or ())),
                reassign_after_attempts=r[31],
                on_exhausted=r[32],
                reconcile_before_retry=r[33],
                step_budget_seconds=r[34],
                heartbeat_seconds=r[35],
            ),
            held_to_heartbeats=bool(r[36]),
        )
        for r in rows
    ]


def plan(
    batch: list[Due],
    now: dt.datetime,
    *,
    draw: Callable[[], float],
    pool_healthy: dict[int, bool],
    assessed: set[int],
) -> Plan:
    """Sort a batch: the two common decisions for the set-wise path, the rest per step. A job
    with any step left per step keeps all its steps there (one writer per job)."""
    result = Plan()
    queued = tasks_still_queued(
        [d.queue_row for d in batch if _overdue_call(d, now) and not d.attempt_started and d.queue_row]
    )
    decided: list[tuple[Due, Any]] = []
    for due in batch:
        if not _overdue_call(due, now) or due.attempt_kind is None:
            decided.append((due, None))
        elif not due.attempt_started and due.queue_row in queued:
            decided.append((due, "keep_waiting"))
        elif due.kind != StepKind.COMPENSATION and due.job_status not in JOB_FORWARD:
            decided.append((due, None))  # abandoned by the per-step path
        else:
            decided.append((due, _decide(due, now, draw, pool_healthy, assessed)))
    per_step_jobs = {
        due.job_id
        for due, decision in decided
        if decision is None
        or (
            isinstance(decision, Retry)
            and (decision.delay <= 0 and not due.job_paused)  # dispatched now: per step
        )
        or (decision != "keep_waiting" and not isinstance(decision, Retry))
    }
    for due, decision in decided:
        if due.job_id in per_step_jobs:
            result.per_step.append(due)
        elif decision == "keep_waiting":
            result.keep_waiting.append(due)
        else:
            result.retry_later.append((due, decision))
    return result


def _overdue_call(due: Due, now: dt.datetime) -> bool:
    return due.status == S.DISPATCHED and (due.deadline is None or due.deadline <= now)


def _decide(
    due: Due, now: dt.datetime, draw: Callable[[], float], pool_healthy: dict[int, bool], assessed: set[int]
) -> Any:
    """The policy's decision for an overdue call, once timed out (what supervisor.scan decides)."""
    endpoint_id = due.attempt_endpoint_id
    if endpoint_id is not None and due.attempt_kind == AttemptKind.CALL and endpoint_id not in assessed:
        assessed.add(endpoint_id)
        if endpoint_assess_and_alert(endpoint_id, now):
            pool_healthy.clear()

    def healthy(pool_id: int) -> bool:
        if pool_id not in pool_healthy:
            pool_healthy[pool_id] = pool_has_healthy_endpoint(AgentPool.objects.get(pk=pool_id), now)
        return pool_healthy[pool_id]

    alternate = due.alternate_id
    facts = StepFacts(
        kind=due.kind,
        status=S.UNKNOWN,
        last_outcome=Outcome.NO_ANSWER,
        last_attempt_kind=due.attempt_kind or AttemptKind.CALL,
        calls=due.calls,
        first_dispatched_at=due.first_dispatched_at,
        job_deadline=due.job_deadline,
        has_status_path=bool(due.status_path) and due.kind != StepKind.COMPENSATION,
        on_alternate_pool=due.pool_id != due.definition_pool_id,
        alternate_available=alternate is not None and alternate != due.definition_pool_id,
        pool_healthy=healthy(due.pool_id),
        alternate_healthy=alternate is not None and healthy(alternate),
    )
    return decide(facts, due.policy, now, draw())


APPLY_SQL = """
WITH waiting AS (
    SELECT * FROM unnest(%(w_step)s::bigint[], %(w_attempt)s::integer[], %(w_deadline)s::timestamptz[])
        AS v(step_id, attempt, deadline)
), retrying AS (
    SELECT * FROM unnest(%(r_step)s::bigint[], %(r_attempt)s::integer[], %(r_not_before)s::timestamptz[],
                         %(r_pool)s::bigint[])
        AS v(step_id, attempt, not_before, pool_id)
), closed AS (
    UPDATE scheduler_attempt a SET finished_at = %(now)s, outcome = 'no_answer', decided_by = %(source)s,
        error = %(timeout_error)s
    FROM retrying v WHERE a.step_id = v.step_id AND a.number = v.attempt AND a.finished_at IS NULL
    RETURNING a.id
), extended AS (
    UPDATE scheduler_attempt a SET deadline = v.deadline
    FROM waiting v WHERE a.step_id = v.step_id AND a.number = v.attempt AND a.finished_at IS NULL
    RETURNING a.id
), moved AS (
    -- dispatched -> unknown here, unknown -> retry_wait by RETRY_SQL after it: two moves of the
    -- step machine, as the per-step path makes them (the database refuses dispatched -> retry_wait).
    UPDATE scheduler_step s SET status = 'unknown', last_outcome = 'no_answer', error = %(timeout_error)s,
        updated_at = %(now)s
    FROM retrying v WHERE s.id = v.step_id AND s.status = 'dispatched' AND s.attempt = v.attempt
    RETURNING s.id
), postponed AS (
    UPDATE scheduler_step s SET deadline = v.deadline, updated_at = %(now)s
    FROM waiting v WHERE s.id = v.step_id AND s.status = 'dispatched' AND s.attempt = v.attempt
    RETURNING s.id
), events AS (
    INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id, source,
                                 reason, data, created_at)
    SELECT * FROM unnest(%(e_job)s::uuid[], %(e_step)s::bigint[], %(e_kind)s::varchar[],
                         %(e_from)s::varchar[], %(e_to)s::varchar[], %(e_attempt)s::integer[],
                         %(e_actor)s::integer[], %(e_source)s::varchar[], %(e_reason)s::text[],
                         %(e_data)s::jsonb[], %(e_at)s::timestamptz[])
    RETURNING 1
)
SELECT (SELECT count(*) FROM closed), (SELECT count(*) FROM moved), (SELECT count(*) FROM extended),
       (SELECT count(*) FROM postponed), (SELECT count(*) FROM events)
"""


RETRY_SQL = """
UPDATE scheduler_step s SET status = 'retry_wait', not_before = v.not_before, pool_id = v.pool_id
FROM unnest(%(r_step)s::bigint[], %(r_attempt)s::integer[], %(r_not_before)s::timestamptz[],
            %(r_pool)s::bigint[]) AS v(step_id, attempt, not_before, pool_id)
WHERE s.id = v.step_id AND s.status = 'unknown' AND s.attempt = v.attempt
"""


EVENT_PARAMS = (
    "e_job",
    "e_step",
    "e_kind",
    "e_from",
    "e_to",
    "e_attempt",
    "e_actor",
    "e_source",
    "e_reason",
    "e_data",
    "e_at",
)


def apply(plan: Plan, now: dt.datetime, *, source: str) -> None:
    """Write the batch's common decisions in one statement, as the per-step path would have."""
    if not plan.keep_waiting and not plan.retry_later:
        return
    events: list[tuple[Any, ...]] = []

    def event(due: Due, kind: EventKind, frm: str, to: str, reason: str, data: dict[str, Any]) -> None:
        events.append(
            (
                due.job_id,
                due.step_id,
                kind,
                frm,
                to,
                due.attempt or None,
                None,
                source,
                reason,
                json.dumps(data),
                now,
            )
        )

    waiting_deadlines = []
    for due in plan.keep_waiting:
        deadline = now + dt.timedelta(seconds=due.policy.timeout_seconds)
        waiting_deadlines.append(deadline)
        event(
            due,
            EventKind.DEADLINE_EXTENDED,
            "",
            "",
            "its task is still waiting in the queue for a worker: deadline extended",
            {"deadline": deadline.isoformat()},
        )
    not_before = []
    pools = []
    for due, decision in plan.retry_later:
        overdue_ms = int((now - due.deadline).total_seconds() * 1000) if due.deadline is not None else None
        timed_out: dict[str, Any] = {"overdue_ms": overdue_ms}
        if due.missed_heartbeat is not None:
            timed_out["heartbeat_seconds"] = due.missed_heartbeat
        event(
            due,
            EventKind.STEP_TIMED_OUT,
            S.DISPATCHED,
            S.UNKNOWN,
            timed_out_reason(due.deadline, missed_heartbeat=due.missed_heartbeat),
            timed_out,
        )
        reassign = decision.reassign and due.alternate_id is not None
        event(
            due,
            EventKind.RETRY_SCHEDULED,
            S.UNKNOWN,
            S.RETRY_WAIT,
            decision.reason,
            {
                "delay_s": round(decision.delay, 3),
                "policy_version": due.policy.version,
                "reassigned_to": due.alternate_name if reassign else None,
            },
        )
        not_before.append(now + dt.timedelta(seconds=max(decision.delay, 0)))
        pools.append(due.alternate_id if reassign else due.pool_id)
    columns = list(zip(*events, strict=True))
    params: dict[str, Any] = {
        "now": now,
        "source": source,
        "timeout_error": TIMEOUT_ERROR,
        "w_step": [d.step_id for d in plan.keep_waiting],
        "w_attempt": [d.attempt for d in plan.keep_waiting],
        "w_deadline": waiting_deadlines,
        "r_step": [d.step_id for d, _ in plan.retry_later],
        "r_attempt": [d.attempt for d, _ in plan.retry_later],
        "r_not_before": not_before,
        "r_pool": pools,
        **{name: list(values) for name, values in zip(EVENT_PARAMS, columns, strict=True)},
    }
    with connection.cursor() as cursor:
        cursor.execute(APPLY_SQL, params)
        closed, moved, extended, postponed, written = cursor.fetchone()
        if plan.retry_later:
            retry = {k: params[k] for k in ("r_step", "r_attempt", "r_not_before", "r_pool")}
            cursor.execute(RETRY_SQL, retry)
            if cursor.rowcount != moved:
                moved = -1
    retries, waits = len(plan.retry_later), len(plan.keep_waiting)
    if (closed, moved, extended, postponed, written) != (retries, retries, waits, waits, len(events)):
        # Under the jobs' locks nothing may move these rows: a miss means another writer did.
        raise StaleWrite(f"a due step changed under the scan ({closed}/{moved}/{extended}/{postponed})")


__all__ = ["Due", "JobStatus", "Plan", "apply", "due_batch", "enabled", "plan"]
