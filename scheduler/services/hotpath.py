"""The hot path on PostgreSQL: submission and the common outcomes, each in one round trip.

`sas_submit` (scheduler/sql/postgresql/sas_submit.sql) creates a job and dispatches its first
steps; `sas_record_outcome` (sas_record_outcome.sql) records the common outcomes and advances the
DAG; both dispatch through `sas_dispatch_ready` (sas_dispatch_ready.sql). Each is called by name
with named parameters (sas_project.dbcode.function_call).

It covers the live call of an action step of a running, unpaused job, with a success or a
failure; everything else it declines before writing ('fallback'), and the general path
(scheduler.services.outcomes) records it. The database refuses any move of theirs that the state
machines' tables (scheduler.transitions) do not allow, as it does for every writer, and the tests
run the same scenarios through both paths and compare every row they leave. The setting
SAS_FAST_PATH=0 turns it off.

Restated in SQL (keep both in step; the equivalence tests compare them):
`scheduler/sql/postgresql/sas_submit.sql`, `scheduler/sql/postgresql/sas_record_outcome.sql`.
"""

from __future__ import annotations

import functools
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django_q.brokers import get_broker
from django_q.conf import Conf

from agents.broker import COMPACT, ClaimByDeleteORM, task_of
from agents.outcome import CallResult
from sas_project.conf import sas_settings
from sas_project.database import is_postgresql
from sas_project.dbcode import Json, function_call
from scheduler.faults import maybe_fail_after_commit
from scheduler.models import Job
from scheduler.services.dispatch import AGENT_TASK
from scheduler.transitions import key_freed


@functools.cache
def _broker() -> Any:
    """The configured broker (its class and queue key do not change while a process runs)."""
    return get_broker()


def _queue_args() -> dict[str, Any]:
    """Where and how the functions enqueue agent tasks (the parameters `p_queue_key`,
    `p_task_func`, `p_task_floor` and `p_notify` of sas_dispatch_ready)."""
    return {
        "queue_key": _broker().list_key or Conf.CLUSTER_NAME,
        "task_func": AGENT_TASK,
        "task_floor": int(Conf.TIMEOUT or 0),
        "notify": bool(getattr(settings, "SAS_Q_NOTIFY", True)),
    }


def submit(
    workflow: str,
    *,
    payload: dict[str, Any],
    user: Any,
    key: str | None,
    request_hash: str,
    source: str,
    callback_url: str = "",
    trace_parent: str = "",
    business_key: str = "",
    priority: int = 0,
) -> Any:
    """Create a job of the latest version of `workflow` and dispatch its first steps, in one
    statement; returns the job's id, or None for an unknown workflow."""
    sql, params = function_call(
        "sas_submit",
        workflow=workflow,
        input=Json(payload),
        submitter=user.pk if user is not None else None,
        key=key,
        hash=request_hash,
        source=source,
        **_queue_args(),
        callback_url=callback_url,
        trace_parent=trace_parent,
        business_key=business_key,
        priority=priority,
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()[0]


def enabled() -> bool:
    """On PostgreSQL with the project's broker (the function enqueues compact rows into its
    table), unless SAS_FAST_PATH is off."""
    return (
        is_postgresql()
        and bool(getattr(settings, "SAS_FAST_PATH", True))
        and isinstance(_broker(), ClaimByDeleteORM)
    )


def record_outcome(step_id: int, *, number: int, result: CallResult, source: str) -> bool:
    """Record the outcome in one statement if the function takes it; False when it declined
    (nothing was written) and the general path must record it. A remote's Retry-After is the
    general path's (it moves the step's earliest retry and the endpoint's circuit)."""
    if result.retry_after is not None:
        return False
    sql, params = function_call(
        "sas_record_outcome",
        step=step_id,
        number=number,
        outcome=result.outcome,
        output=Json(result.output if result.succeeded else None),
        status_code=result.status_code,
        latency_ms=result.latency_ms,
        excerpt=result.excerpt,
        error=result.error,
        source=source,
        **_queue_args(),
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        verdict = cursor.fetchone()[0]
        if verdict == "done:key_freed":
            # The job settled holding a concurrency key: what waits for it starts after the
            # commit, as a move through job_transition makes it start.
            cursor.execute(
                "SELECT w.name, j.concurrency_key FROM scheduler_step s"
                " JOIN scheduler_job j ON j.id = s.job_id JOIN scheduler_workflow w ON w.id = j.workflow_id"
                " WHERE s.id = %s",
                [step_id],
            )
            workflow, key = cursor.fetchone()
            transaction.on_commit(lambda: key_freed.send(sender=Job, workflow=workflow, key=key))
            verdict = "done"
    if verdict != "done":
        return False
    maybe_fail_after_commit("the record of an outcome")
    return True


# The job's next attempt, taken from the queue by the worker that recorded its predecessor: its
# queue row deleted as a pusher's claim deletes it (agents.broker), so exactly one of them
# delivers it. Only an attempt not started whose deadline falls within what is left of this
# task's time (django-q2 ends a task at its timeout, which the next call must not outlast). The
# job's steps drive the plan (their few rows by job, then each one's current attempt by its
# unique key): a plan that started from the live attempts (the partial index a bare
# `finished_at IS NULL` matches) walked a backlog's worth, 1 ms a call; `OFFSET 0` keeps the
# planner from flattening the lateral subquery into such a plan, `IS TRUE` from matching it.
TAKE_NEXT_SQL = """
DELETE FROM django_q_ormq q
WHERE q.id = (
    SELECT a.queue_row FROM scheduler_step s
    CROSS JOIN LATERAL (
        SELECT a.id, a.queue_row FROM scheduler_attempt a
        WHERE a.step_id = s.id AND a.number = s.attempt
          AND (a.started_at IS NULL AND a.finished_at IS NULL AND a.queue_row IS NOT NULL) IS TRUE
          AND a.deadline <= statement_timestamp() + make_interval(secs => %(budget)s)
        OFFSET 0
    ) a
    WHERE s.job_id = %(job)s AND (s.status = 'dispatched') IS TRUE
    ORDER BY a.id LIMIT 1
) AND q.key = %(key)s AND q.payload LIKE %(agent_task)s
RETURNING q.payload
"""


def continuations() -> int:
    """How many attempts one task may take after its own (SAS_Q_CONTINUE; 0 on other
    databases and brokers)."""
    if not enabled():
        return 0
    return sas_settings.q_continue


def task_budget() -> float:
    """The seconds a task may run: django-q2's timeout, which every agent task's is at least
    (sas_dispatch_ready's floor), less a margin for recording the last outcome."""
    return float(Conf.TIMEOUT or 0) - 5.0


def take_next(job_id: str, *, budget: float) -> tuple[int, int] | None:
    """(step, attempt) of the job's next attempt waiting in the queue, its row taken; None when
    there is none (or a pusher took it first, or its deadline is past the budget)."""
    if budget <= 0:
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            TAKE_NEXT_SQL,
            {
                "job": job_id,
                "budget": budget,
                "key": _queue_args()["queue_key"],
                # Only an agent task's row: anything else stays for a pusher.
                "agent_task": f"{COMPACT} % {AGENT_TASK} %",
            },
        )
        row = cursor.fetchone()
    if row is None:
        return None
    task = task_of(row[0])
    if task["func"] != AGENT_TASK or len(task["args"]) != 2:
        raise ValueError(f"not an agent task: {row[0]!r}")
    step_id, number = task["args"]
    return int(step_id), int(number)
