"""The hot path on PostgreSQL: submission and the common outcomes, each in one round trip.

`sas_submit` (scheduler/migrations/0007) creates a job and dispatches its first steps;
`sas_record_outcome` (0006, 0007) records the common outcomes and advances the DAG; both dispatch
through `sas_dispatch_ready`.

It covers the live call of an action step of a running, unpaused job, with a success or a
failure; everything else it declines before writing ('fallback'), and the general path
(scheduler.services.outcomes) records it. It makes only the moves listed below, each of which the
state machines' tables allow (tested), and the tests run the same scenarios through both paths
and compare every row they leave. The setting SAS_FAST_PATH=0 turns it off.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from django.conf import settings
from django.db import connection
from django_q.brokers import get_broker
from django_q.conf import Conf

from agents.broker import ClaimByDeleteORM
from agents.outcome import CallResult
from sas_project.database import is_postgresql
from scheduler.faults import maybe_fail_after_commit
from scheduler.services.dispatch import AGENT_TASK

#: (machine, from, to) of every move the functions make.
FAST_PATH_MOVES = frozenset(
    {
        ("step", "dispatched", "succeeded"),
        ("step", "dispatched", "attempt_failed"),
        ("step", "dispatched", "unknown"),
        ("step", "pending", "dispatched"),
        ("step", "pending", "waiting"),
        ("job", "running", "succeeded"),
    }
)

SQL = "SELECT sas_record_outcome(%s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
SUBMIT_SQL = "SELECT sas_submit(%s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"


@functools.cache
def _broker() -> Any:
    """The configured broker (its class and queue key do not change while a process runs)."""
    return get_broker()


def _queue_args() -> list[Any]:
    return [
        _broker().list_key or Conf.CLUSTER_NAME,
        AGENT_TASK,
        int(Conf.TIMEOUT or 0),
        bool(getattr(settings, "SAS_Q_NOTIFY", True)),
    ]


def submit(
    workflow: str,
    payload: dict[str, Any],
    user: Any,
    key: str | None,
    request_hash: str,
    *,
    source: str,
    callback_url: str = "",
    trace_parent: str = "",
    business_key: str = "",
    priority: int = 0,
) -> Any:
    """Create a job of the latest version of `workflow` and dispatch its first steps, in one
    statement; returns the job's id, or None for an unknown workflow."""
    with connection.cursor() as cursor:
        cursor.execute(
            SUBMIT_SQL,
            [
                workflow,
                json.dumps(payload),
                user.pk if user is not None else None,
                key,
                request_hash,
                source,
                *_queue_args(),
                callback_url,
                trace_parent,
                business_key,
                priority,
            ],
        )
        return cursor.fetchone()[0]


def enabled() -> bool:
    """On PostgreSQL with the project's broker (the function enqueues compact rows into its
    table), unless SAS_FAST_PATH is off."""
    return (
        is_postgresql()
        and bool(getattr(settings, "SAS_FAST_PATH", True))
        and isinstance(_broker(), ClaimByDeleteORM)
    )


def record_outcome(step_id: int, number: int, result: CallResult, *, source: str) -> bool:
    """Record the outcome in one statement if the function takes it; False when it declined
    (nothing was written) and the general path must record it."""
    with connection.cursor() as cursor:
        cursor.execute(
            SQL,
            [
                step_id,
                number,
                result.outcome,
                json.dumps(result.output) if result.succeeded else None,
                result.status_code,
                result.latency_ms,
                result.excerpt,
                result.error,
                source,
                *_queue_args(),
            ],
        )
        verdict = cursor.fetchone()[0]
    if verdict != "done":
        return False
    maybe_fail_after_commit("the record of an outcome")
    return True
