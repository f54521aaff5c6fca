"""The benchmark's measures of history: statements and commits per step in-process, the
supervisor scan's cost among 10,000 and 1,000,000 settled steps, and console and API pages over
that history."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings
from django.utils.module_loading import import_string
from django_q.brokers import get_broker
from django_q.models import OrmQ

from agents.broker import task_of
from sas_project.conf import sas_settings
from scheduler.models import Workflow
from scheduler.services import job_submit
from supervisor.scan import scan
from testbed.bench.db import xact_commit
from testbed.bench.definitions import SINGLE


def statements_per_step(jobs: int, steps: int, workflow: str) -> dict[str, Any]:
    """Submit and run `jobs` jobs in this process through the real broker and agent task."""
    broker = get_broker()
    OrmQ.objects.all().delete()
    # As in the cluster: no health-check `SELECT 1` after every close_old_connections().
    connection.health_check_enabled = False  # type: ignore[attr-defined]
    before = xact_commit()
    with CaptureQueriesContext(connection) as captured:
        for n in range(jobs):
            job_submit(workflow=workflow, input={"n": n})
        while True:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")  # stands for the pusher's wake-up; not counted below
            claimed = broker.dequeue() if OrmQ.objects.exists() else None
            if not claimed:
                break
            for _, payload in claimed:
                task = task_of(payload)
                import_string(task["func"])(*task["args"], **task["kwargs"])
    commits = xact_commit() - before
    queries = [q["sql"] for q in captured.captured_queries]
    ours = [
        q for q in queries if q != "SELECT 1" and not q.startswith('SELECT 1 AS "a" FROM "django_q_ormq"')
    ]
    total = jobs * steps
    kinds = Counter(q.split(None, 1)[0].upper() for q in ours)
    # Commits counted above include this loop's own `SELECT 1` and exists() probes (autocommit).
    probes = len(queries) - len(ours)
    control = sum(1 for q in ours if q in ("BEGIN", "COMMIT"))
    return {
        "statements_per_step": round(len(ours) / total, 2),
        "statements_per_step_without_begin_commit": round((len(ours) - control) / total, 2),
        "by_kind_per_step": {k: round(v / total, 2) for k, v in sorted(kinds.items())},
        "commits_per_step": round((commits - probes - 1) / total, 2),
    }


# --- 3 and 4: history, scan, console -------------------------------------------------------------------


HISTORY_SQL = """
WITH defs AS (
    SELECT id, name, pool_id FROM scheduler_stepdefinition WHERE workflow_id = %(workflow)s
), jobs AS (
    INSERT INTO scheduler_job (id, workflow_id, status, input, result, request_hash, compensation_reason,
                               created_at, updated_at, finished_at, archived_at)
    SELECT gen_random_uuid(), %(workflow)s, 'succeeded', '{}', '{}', '', '',
           now() - interval '2 days' + (g * interval '10 milliseconds'),
           now() - interval '2 days' + (g * interval '10 milliseconds'),
           now() - interval '2 days' + (g * interval '10 milliseconds'),
           -- As in service, where the supervisor archives a job about an hour after it settles.
           CASE WHEN %(archived)s THEN now() - interval '2 days' + (g * interval '10 milliseconds')
                                       + interval '1 hour' END
    FROM generate_series(1, %(jobs)s) g
    RETURNING id, created_at
), steps AS (
    INSERT INTO scheduler_step (job_id, definition_id, name, kind, status, operation_id, attempt, calls,
                                last_outcome, pool_id, first_dispatched_at, output, error, created_at,
                                updated_at, finished_at)
    SELECT jobs.id, defs.id, defs.name, 'action', 'succeeded', gen_random_uuid()::text, 1, 1, 'succeeded',
           defs.pool_id, jobs.created_at, '{}', '', jobs.created_at, jobs.created_at, jobs.created_at
    FROM jobs CROSS JOIN defs
    RETURNING id, job_id, pool_id, created_at
), attempts AS (
    INSERT INTO scheduler_attempt (step_id, number, kind, pool_id, endpoint_url, policy_version,
                                   dispatched_at, deadline, started_at, finished_at, outcome, decided_by,
                                   latency_ms, response_excerpt, error, late_outcome)
    SELECT id, 1, 'call', pool_id, '', 1, created_at, created_at + interval '1 minute', created_at,
           created_at, 'succeeded', 'agent', 3, '{}', '', ''
    FROM steps
    RETURNING 1
)
INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, source, reason, data,
                             created_at)
SELECT job_id, id, e.kind, e.frm, e.too, 1, 'agent', '', '{}', created_at
FROM steps CROSS JOIN (VALUES ('step_dispatched', 'pending', 'dispatched'),
                              ('step_succeeded', 'dispatched', 'succeeded')) AS e(kind, frm, too)
"""


@contextlib.contextmanager
def event_guard_off(cursor: Any) -> Iterator[None]:
    """The event trigger (migration 0015) off while bulk-loading history whose jobs are inserted
    by the same statement: a load of millions of events would spend most of its time in it."""
    cursor.execute("ALTER TABLE scheduler_event DISABLE TRIGGER event_job_guard")
    try:
        yield
    finally:
        cursor.execute("ALTER TABLE scheduler_event ENABLE TRIGGER event_job_guard")


def load_history(workflow: Workflow, steps: int) -> float:
    """Bulk-load terminal jobs until the table holds `steps` steps; returns seconds taken."""
    started = time.monotonic()
    per_job = workflow.steps.count()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM scheduler_step")
        have = int(cursor.fetchone()[0])
        missing_jobs = max(0, (steps - have) // per_job)
        chunk = 50_000
        with event_guard_off(cursor):
            while missing_jobs > 0:
                n = min(chunk, missing_jobs)
                cursor.execute(HISTORY_SQL, {"workflow": workflow.pk, "jobs": n, "archived": True})
                missing_jobs -= n
        cursor.execute("VACUUM ANALYZE scheduler_job")
        cursor.execute("VACUUM ANALYZE scheduler_step")
        cursor.execute("VACUUM ANALYZE scheduler_attempt")
        cursor.execute("VACUUM ANALYZE scheduler_event")
    return time.monotonic() - started


def make_overdue(count: int) -> None:
    """`count` single-step jobs whose call is overdue (their worker died, the task is gone)."""
    for n in range(count):
        job_submit(workflow=SINGLE, input={"overdue": n})
    OrmQ.objects.all().delete()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE scheduler_step SET deadline = now() - interval '1 minute' WHERE status = 'dispatched'"
        )


def make_held(count: int) -> None:
    """`count` jobs needing attention (a held step), for the console and API timings."""
    make_overdue(count)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE scheduler_step SET status = 'held', deadline = NULL WHERE status = 'dispatched'"
        )
        cursor.execute(
            "UPDATE scheduler_job SET status = 'needs_attention' WHERE id IN "
            "(SELECT job_id FROM scheduler_step WHERE status = 'held')"
        )


def time_scan(overdue: int) -> dict[str, Any]:
    make_overdue(overdue)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduler_step")
    # Timed without query capture: capturing renders every statement's text, which is not free.
    started = time.monotonic()
    report = scan(holder="bench")
    elapsed = time.monotonic() - started
    # Leave the remediated steps out of the next measurement.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE scheduler_step SET status = 'failed', finished_at = now() "
            "WHERE status IN ('retry_wait', 'dispatched', 'unknown', 'attempt_failed')"
        )
        cursor.execute(
            "UPDATE scheduler_job SET status = 'failed', finished_at = now() "
            "WHERE status IN ('running', 'pending')"
        )
    return {
        "seconds": round(elapsed, 3),
        "examined": report.examined,
        "remediated": report.remediated,
        "batches": report.batches,
    }


def time_pages(repeat: int = 5) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(username="bench-admin", defaults={"is_superuser": True})
    user.is_superuser = True
    user.is_staff = True
    user.save()
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    pages = {
        "ops_overview": "/ops/",
        "ops_needs_attention": "/ops/attention/",
        "api_jobs_needs_attention": "/api/v1/jobs/?status=needs_attention",
        # The first scrape starts the counters; the timed ones find no new events: the gauges.
        "metrics_scrape": "/metrics",
    }
    # Each scrape timed is made anew (no cache), and answered (a token: outside debug /metrics
    # is off without one).
    token = sas_settings.metrics_token or "bench-scrape"
    headers = {"Authorization": f"Bearer {token}"}
    with override_settings(SAS_METRICS_TOKEN=token, SAS_METRICS_CACHE_SECONDS=0):
        return _time_pages(client, pages, headers, repeat)


def _time_pages(client: Any, pages: dict[str, str], headers: dict[str, str], repeat: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, url in pages.items():
        response = client.get(url, headers=headers)
        if response.status_code != 200:
            results[name] = {"status": response.status_code}
            continue
        timings = []
        for _ in range(repeat):
            started = time.monotonic()
            with CaptureQueriesContext(connection) as captured:
                client.get(url, headers=headers)
            timings.append((time.monotonic() - started) * 1000)
        results[name] = {
            "median_ms": round(statistics.median(timings), 1),
            "max_ms": round(max(timings), 1),
            "statements": len(captured.captured_queries),
        }
    results["metrics_scrape_10k_events"] = _time_scrape_with_new_events(client, headers, 10_000, repeat)
    return results


def _time_scrape_with_new_events(client: Any, headers: dict[str, str], events: int, repeat: int) -> Any:
    """A scrape that counts `events` new events (about what 15 s of a busy cluster records)."""
    from supervisor.models import MetricsCheckpoint

    timings = []
    for _ in range(repeat):
        with connection.cursor() as cursor:
            cursor.execute("SELECT COALESCE(max(id), 0) FROM scheduler_event")
            newest = int(cursor.fetchone()[0])
        MetricsCheckpoint.objects.filter(pk="metrics").update(event_id=max(newest - events, 0))
        started = time.monotonic()
        response = client.get("/metrics", headers=headers)
        timings.append((time.monotonic() - started) * 1000)
        if response.status_code != 200:
            return {"status": response.status_code}
    return {"median_ms": round(statistics.median(timings), 1), "max_ms": round(max(timings), 1)}
