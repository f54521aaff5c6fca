"""`bench` part 7: what waiting steps cost the supervisor scan.

The same scan (the same number of overdue calls; the median of three) is timed with no waiting jobs, then with
`waiting` jobs each holding a timer step that is not due (bulk-loaded in one statement, as the
Python path writes them: status `waiting`, no pool, the deadline a day ahead). A wait that is not
due must cost the scan nothing (its ratio stays near 1). Then `due` of those timers are made due
and one scan fires them: its time, and a check that each fired exactly once.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import connection

from scheduler.models import Workflow
from supervisor.scan import scan
from testbed.bench import history
from testbed.bench.definitions import TIMER
from testbed.definitions import ensure_workflow

WAITING_SQL = """
WITH def AS (
    SELECT id FROM scheduler_stepdefinition WHERE workflow_id = %(workflow)s
), jobs AS (
    INSERT INTO scheduler_job (id, workflow_id, status, input, request_hash, compensation_reason,
                               created_at, updated_at)
    SELECT gen_random_uuid(), %(workflow)s, 'running', '{}', '', '', now(), now()
    FROM generate_series(1, %(jobs)s)
    RETURNING id
)
INSERT INTO scheduler_step (job_id, definition_id, name, kind, status, operation_id, attempt, calls,
                            last_outcome, pool_id, deadline, error, created_at, updated_at)
SELECT jobs.id, def.id, 'pause', 'action', 'waiting', gen_random_uuid()::text, 0, 0, '', NULL,
       now() + interval '1 day', '', now(), now()
FROM jobs CROSS JOIN def
"""


def ensure_timer() -> Workflow:
    return ensure_workflow(TIMER, [{"name": "pause", "kind": "timer", "wait_seconds": 86400}])


def _median_scan(overdue: int, repeat: int, workflow: Workflow) -> dict[str, Any]:
    """The median of `repeat` timed scans (one scan is a fraction of a second: noise)."""
    runs = []
    for _ in range(repeat):
        runs.append(history.time_scan(overdue))
        with connection.cursor() as cursor:
            # time_scan settles every running job afterwards: the waiting ones run on.
            cursor.execute(
                "UPDATE scheduler_job j SET status = 'running', finished_at = NULL "
                "WHERE workflow_id = %s AND status = 'failed' AND EXISTS "
                "(SELECT 1 FROM scheduler_step s WHERE s.job_id = j.id AND s.status = 'waiting')",
                [workflow.pk],
            )
    return sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]


def run(*, waiting: int, due: int, overdue: int, repeat: int = 3) -> dict[str, Any]:
    workflow = ensure_timer()
    without = _median_scan(overdue, repeat, workflow)
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (loaded_at,) = cursor.fetchone()
        cursor.execute(WAITING_SQL, {"workflow": workflow.pk, "jobs": waiting})
        cursor.execute("ANALYZE scheduler_step")
    with_waits = _median_scan(overdue, repeat, workflow)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE scheduler_step SET deadline = now() - interval '1 second' WHERE id IN ("
            "SELECT s.id FROM scheduler_step s JOIN scheduler_job j ON j.id = s.job_id "
            "WHERE j.workflow_id = %s AND s.status = 'waiting' ORDER BY s.id LIMIT %s)",
            [workflow.pk, due],
        )
    started = time.monotonic()
    report = scan(holder="bench")
    fired_seconds = time.monotonic() - started
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(DISTINCT step_id) FROM scheduler_event e "
            "JOIN scheduler_job j ON j.id = e.job_id WHERE j.workflow_id = %s AND e.kind = 'timer_fired' "
            "AND j.created_at >= %s",
            [workflow.pk, loaded_at],
        )
        fired, fired_steps = cursor.fetchone()
        cursor.execute(
            "SELECT count(*) FROM scheduler_step s JOIN scheduler_job j ON j.id = s.job_id "
            "WHERE j.workflow_id = %s AND s.status = 'waiting'",
            [workflow.pk],
        )
        (still_waiting,) = cursor.fetchone()
        # Leave nothing live behind for the next parts.
        cursor.execute(
            "UPDATE scheduler_step SET status = 'skipped', finished_at = now() WHERE status = 'waiting' "
            "AND job_id IN (SELECT id FROM scheduler_job WHERE workflow_id = %s)",
            [workflow.pk],
        )
        cursor.execute(
            "UPDATE scheduler_job SET status = 'failed', finished_at = now() "
            "WHERE workflow_id = %s AND status = 'running'",
            [workflow.pk],
        )
    return {
        "waiting": waiting,
        "overdue": overdue,
        "scan_without_waits": without,
        "scan_with_waits": with_waits,
        "ratio": round(with_waits["seconds"] / without["seconds"], 2) if without["seconds"] else None,
        "due": due,
        "fire_scan_seconds": round(fired_seconds, 3),
        "timers_fired": report.decisions.get("timer_fired", 0),
        "timer_fired_events": fired,
        "timer_fired_steps": fired_steps,
        "still_waiting": still_waiting,
    }


def table_rows(w: dict[str, Any]) -> list[str]:
    return [
        f"| scan, {w['overdue']} overdue, no waiting jobs | {w['scan_without_waits']['seconds']} s |",
        f"| scan, {w['overdue']} overdue, {w['waiting']:,} waiting timers not due | "
        f"{w['scan_with_waits']['seconds']} s |",
        f"| scan ratio with / without waits | {w['ratio']} |",
        f"| scan firing {w['due']:,} due timers | {w['fire_scan_seconds']} s "
        f"({w['timers_fired']} fired, {w['timer_fired_events']} events on {w['timer_fired_steps']} steps) |",
    ]
