"""The benchmark behind `manage.py bench` (PostgreSQL only).

Everything is measured in one run on one database with one cluster configuration, so the figures
compare with each other (ratios), not with another machine:

1. throughput of N jobs of k sequential no-op python steps through the whole service, beside the
   same number of bare django-q2 no-op tasks chained k per job through the same cluster;
2. latency: per-step overhead (dispatch to outcome) and submit-to-done per job;
3. the supervisor scan's cost with 1,000 overdue steps among 10,000, then 1,000,000 terminal
   steps (bulk-loaded with their attempts and events);
4. console and API response times over that history;
5. SQL statements (Django's query capture) and commits (pg_stat_database.xact_commit) per step.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils.module_loading import import_string
from django_q.brokers import get_broker
from django_q.models import OrmQ
from django_q.tasks import async_task

from agents.broker import task_of
from agents.models import AgentPool
from agents.services import pool_save
from scheduler.definitions import workflow_create, workflow_latest
from scheduler.models import Attempt, Job, JobStatus, Workflow
from scheduler.services import job_submit
from supervisor.models import RemediationPolicy, SupervisorLease
from supervisor.policies import policy_create
from supervisor.scan import scan
from testbed import processes
from testbed.definitions import refuse_foreign_jobs
from testbed.processes import ClusterProcess, percentile

ROOT = processes.ROOT
POOL = "bench-local"
POLICY = "bench"
SCAN_POLICY = "bench-scan"
DONE_TABLE = "sas_bench_done"
SINGLE = "bench_single"


def chain_name(steps: int) -> str:
    return f"bench_chain_{steps}"


#: The workflows of the jobs this benchmark creates (and may delete or settle).
OWN_WORKFLOWS = [SINGLE, *(chain_name(n) for n in range(1, 21))]


# --- the bare django-q2 baseline ----------------------------------------------------------------


def bare_step(chain: int, index: int, total: int) -> None:
    """A no-op task that enqueues the next task of its chain; the last one marks the chain done."""
    if index < total:
        async_task("testbed.bench.bare_step", chain, index + 1, total)
        return
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {DONE_TABLE} (chain) VALUES (%s)", [chain])  # noqa: S608


# --- definitions ------------------------------------------------------------------------------


def ensure_definitions(steps: int) -> Workflow:
    if not AgentPool.objects.filter(name=POOL).exists():
        pool_save(name=POOL, kind="python", endpoints=[])
    if not RemediationPolicy.objects.filter(name=POLICY).exists():
        policy_create(name=POLICY, actor=None, timeout_seconds=60, max_attempts=1, on_exhausted="fail")
    if not RemediationPolicy.objects.filter(name=SCAN_POLICY).exists():
        policy_create(
            name=SCAN_POLICY,
            actor=None,
            timeout_seconds=60,
            max_attempts=5,
            backoff_initial_seconds=3600,
            backoff_max_seconds=3600,
            on_exhausted="hold",
        )
    for name, count, policy in ((f"bench_chain_{steps}", steps, POLICY), ("bench_single", 1, SCAN_POLICY)):
        if workflow_latest(name) is None:
            workflow_create(
                name=name,
                steps=[
                    {
                        "name": f"s{i}",
                        "pool": POOL,
                        "path": "agents.builtin.noop",
                        "policy": policy,
                        "depends_on": [f"s{i - 1}"] if i > 1 else [],
                    }
                    for i in range(1, count + 1)
                ],
            )
    workflow = workflow_latest(f"bench_chain_{steps}")
    assert workflow is not None
    return workflow


# --- helpers ----------------------------------------------------------------------------------


def xact_commit() -> int:
    """Commits of this database so far, after asking every backend's pending stats to land."""
    time.sleep(1.2)  # backends flush their statistics at most once a second
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    processes.wait_until(predicate, timeout=timeout, interval=0.05, message=what)


@dataclass
class Cluster:
    workers: int
    process: ClusterProcess | None = None
    log: Path = field(default_factory=lambda: ROOT / "var" / "bench-qcluster.log")

    def start(self) -> None:
        env = {**os.environ, "SAS_Q_WORKERS": str(self.workers), "SAS_LOG_LEVEL": "WARNING"}
        self.process = ClusterProcess(name="bench", env=env, log=self.log).start()
        SupervisorLease.objects.all().delete()
        wait_until(lambda: SupervisorLease.objects.exclude(holder="").exists(), 60, "the cluster to start")
        time.sleep(1.5)  # workers and pusher up

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(30)


# --- 1 and 2: throughput and latency ---------------------------------------------------------------


def run_full(jobs: int, steps: int, workflow: str) -> dict[str, Any]:
    before = xact_commit()
    started = time.monotonic()
    created = [job_submit(workflow=workflow, input={"n": n}).job.pk for n in range(jobs)]
    wait_until(
        lambda: Job.objects.filter(pk__in=created, status=JobStatus.SUCCEEDED).count() == jobs,
        600,
        "the jobs to succeed",
    )
    elapsed = time.monotonic() - started
    commits = xact_commit() - before
    attempts = Attempt.objects.filter(step__job_id__in=created).values_list("dispatched_at", "finished_at")
    overhead = [(f - d).total_seconds() * 1000 for d, f in attempts if f is not None]
    done = Job.objects.filter(pk__in=created).values_list("created_at", "finished_at")
    turnaround = [(f - c).total_seconds() * 1000 for c, f in done if f is not None]
    return {
        "seconds": round(elapsed, 3),
        "steps_per_s": round(jobs * steps / elapsed, 1),
        "commits": commits,
        "step_overhead_ms": {"p50": percentile(overhead, 50), "p99": percentile(overhead, 99)},
        "job_turnaround_ms": {"p50": percentile(turnaround, 50), "p99": percentile(turnaround, 99)},
    }


def run_latency(jobs: int, workflow: str) -> dict[str, Any]:
    """Jobs one at a time on an idle cluster: the service's own overhead, without queueing."""
    overhead: list[float] = []
    turnaround: list[float] = []
    for n in range(jobs):
        job_id = job_submit(workflow=workflow, input={"latency": n}).job.pk
        done = Job.objects.filter(pk=job_id, status=JobStatus.SUCCEEDED)
        wait_until(done.exists, 60, "a job")
        job = Job.objects.get(pk=job_id)
        if job.finished_at is not None:
            turnaround.append((job.finished_at - job.created_at).total_seconds() * 1000)
        for dispatched, finished in Attempt.objects.filter(step__job_id=job_id).values_list(
            "dispatched_at", "finished_at"
        ):
            if finished is not None:
                overhead.append((finished - dispatched).total_seconds() * 1000)
    return {
        "jobs": jobs,
        "step_overhead_ms": {"p50": percentile(overhead, 50), "p99": percentile(overhead, 99)},
        "job_turnaround_ms": {"p50": percentile(turnaround, 50), "p99": percentile(turnaround, 99)},
    }


def run_bare(jobs: int, steps: int) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE UNLOGGED TABLE IF NOT EXISTS {DONE_TABLE} (chain integer)")
        cursor.execute(f"TRUNCATE {DONE_TABLE}")
    before = xact_commit()
    started = time.monotonic()
    for n in range(jobs):
        async_task("testbed.bench.bare_step", n, 1, steps)

    def done() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {DONE_TABLE}")  # noqa: S608
            return int(cursor.fetchone()[0]) == jobs

    wait_until(done, 600, "the bare chains to finish")
    elapsed = time.monotonic() - started
    commits = xact_commit() - before
    return {"seconds": round(elapsed, 3), "steps_per_s": round(jobs * steps / elapsed, 1), "commits": commits}


def idle_commits_per_s(seconds: float = 3.0) -> float:
    """The cluster's own background commits (broker polls, supervisor scans) while idle."""
    before = xact_commit()
    time.sleep(seconds)
    return max(0.0, (xact_commit() - before - 1) / (seconds + 1.2))


# --- 5: statements and commits per step, in-process -------------------------------------------------


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
                               created_at, updated_at, finished_at)
    SELECT gen_random_uuid(), %(workflow)s, 'succeeded', '{}', '{}', '', '',
           now() - interval '2 days' + (g * interval '10 milliseconds'),
           now() - interval '2 days' + (g * interval '10 milliseconds'),
           now() - interval '2 days' + (g * interval '10 milliseconds')
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


def load_history(workflow: Workflow, steps: int) -> float:
    """Bulk-load terminal jobs until the table holds `steps` steps; returns seconds taken."""
    started = time.monotonic()
    per_job = workflow.steps.count()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM scheduler_step")
        have = int(cursor.fetchone()[0])
        missing_jobs = max(0, (steps - have) // per_job)
        chunk = 50_000
        while missing_jobs > 0:
            n = min(chunk, missing_jobs)
            cursor.execute(HISTORY_SQL, {"workflow": workflow.pk, "jobs": n})
            missing_jobs -= n
        cursor.execute("VACUUM ANALYZE scheduler_job")
        cursor.execute("VACUUM ANALYZE scheduler_step")
        cursor.execute("VACUUM ANALYZE scheduler_attempt")
        cursor.execute("VACUUM ANALYZE scheduler_event")
    return time.monotonic() - started


def make_overdue(count: int) -> None:
    """`count` single-step jobs whose call is overdue (their worker died, the task is gone)."""
    for n in range(count):
        job_submit(workflow="bench_single", input={"overdue": n})
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
    }
    results: dict[str, Any] = {}
    for name, url in pages.items():
        response = client.get(url)
        if response.status_code != 200:
            results[name] = {"status": response.status_code}
            continue
        timings = []
        for _ in range(repeat):
            started = time.monotonic()
            with CaptureQueriesContext(connection) as captured:
                client.get(url)
            timings.append((time.monotonic() - started) * 1000)
        results[name] = {
            "median_ms": round(statistics.median(timings), 1),
            "max_ms": round(max(timings), 1),
            "statements": len(captured.captured_queries),
        }
    return results


# --- the whole run -------------------------------------------------------------------------------------


def run(
    *,
    jobs: int,
    steps: int,
    workers: int,
    rounds: int,
    history: int,
    small_history: int,
    overdue: int,
    log: Callable[[str], None],
    scratch: bool = False,
) -> dict[str, Any]:
    if connection.vendor != "postgresql":
        raise RuntimeError("the benchmark runs on PostgreSQL (set DATABASE_URL)")
    refuse_foreign_jobs("bench", OWN_WORKFLOWS, scratch=scratch)
    workflow = ensure_definitions(steps)
    results: dict[str, Any] = {
        "config": {
            "jobs": jobs,
            "steps_per_job": steps,
            "workers": workers,
            "rounds": rounds,
            "q_cluster": {
                k: settings.Q_CLUSTER.get(k)
                for k in ("workers", "bulk", "poll", "save_limit", "broker_class", "queue_limit")
            },
            "cpu_count": os.cpu_count(),
        },
    }
    results["config"]["q_cluster"]["workers"] = workers

    log("statements and commits per step (in-process)...")
    results["per_step"] = statements_per_step(min(jobs, 100), steps, workflow.name)

    log(f"throughput: starting a cluster with {workers} workers...")
    cluster = Cluster(workers=workers)
    cluster.start()
    try:
        idle = idle_commits_per_s()
        run_full(10, steps, workflow.name)  # warm-up
        run_bare(10, steps)
        log("latency: jobs one at a time...")
        results["latency"] = run_latency(30, workflow.name)
        rounds_out = []
        for r in range(rounds):
            log(f"  round {r + 1}: bare django-q2 chains...")
            bare = run_bare(jobs, steps)
            log(f"  round {r + 1}: full path...")
            full = run_full(jobs, steps, workflow.name)
            for item in (bare, full):
                item["commits_per_step"] = round(
                    (item["commits"] - idle * item["seconds"]) / (jobs * steps), 2
                )
            rounds_out.append(
                {"bare": bare, "full": full, "ratio": round(full["steps_per_s"] / bare["steps_per_s"], 2)}
            )
    finally:
        cluster.stop()
    results["throughput"] = {
        "idle_commits_per_s": round(idle, 2),
        "rounds": rounds_out,
        "ratio_median": statistics.median(r["ratio"] for r in rounds_out),
    }

    if history <= 0:
        return results
    log(f"scan: {overdue} overdue among {small_history} terminal steps...")
    load_history(workflow, small_history)
    small = time_scan(overdue)
    log(f"scan: loading history up to {history} steps...")
    loaded = load_history(workflow, history)
    large = time_scan(overdue)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM scheduler_step")
        total_steps = int(cursor.fetchone()[0])
    results["scan"] = {
        "small": {**small, "terminal_steps": small_history},
        "large": {**large, "terminal_steps": total_steps},
        "ratio": round(large["seconds"] / small["seconds"], 2) if small["seconds"] else None,
        "history_load_seconds": round(loaded, 1),
    }

    log("console and API with the large history...")
    make_held(100)
    results["pages"] = time_pages()
    return results


def table(results: dict[str, Any]) -> str:
    lines: list[str] = []
    add = lines.append
    cfg = results["config"]
    add(
        f"jobs={cfg['jobs']} steps/job={cfg['steps_per_job']} workers={cfg['workers']} "
        f"rounds={cfg['rounds']} cpus={cfg['cpu_count']}"
    )
    add("")
    add("| measure | value |")
    add("| --- | --- |")
    for i, r in enumerate(results["throughput"]["rounds"], 1):
        add(f"| round {i}: bare django-q2 chained tasks, steps/s | {r['bare']['steps_per_s']} |")
        add(f"| round {i}: full path, steps/s | {r['full']['steps_per_s']} |")
        add(f"| round {i}: ratio full / bare | {r['ratio']} |")
        add(
            f"| round {i}: commits per step, bare / full | {r['bare']['commits_per_step']} / "
            f"{r['full']['commits_per_step']} |"
        )
        full = r["full"]
        add(
            f"| round {i}: step overhead p50 / p99 ms | {full['step_overhead_ms']['p50']:.1f} / "
            f"{full['step_overhead_ms']['p99']:.1f} |"
        )
        add(
            f"| round {i}: submit-to-done p50 / p99 ms | {full['job_turnaround_ms']['p50']:.1f} / "
            f"{full['job_turnaround_ms']['p99']:.1f} |"
        )
    add(f"| throughput ratio (median) | {results['throughput']['ratio_median']} |")
    lat = results.get("latency")
    if lat:
        add(
            "| unloaded, one job at a time: step overhead p50 / p99 ms | "
            f"{lat['step_overhead_ms']['p50']:.1f} / {lat['step_overhead_ms']['p99']:.1f} |"
        )
        add(
            f"| unloaded: submit-to-done p50 / p99 ms | {lat['job_turnaround_ms']['p50']:.1f} / "
            f"{lat['job_turnaround_ms']['p99']:.1f} |"
        )
    per = results["per_step"]
    add(f"| SQL statements per step (in-process) | {per['statements_per_step']} {per['by_kind_per_step']} |")
    add(f"| ... of which not BEGIN/COMMIT | {per['statements_per_step_without_begin_commit']} |")
    add(f"| commits per step (in-process) | {per['commits_per_step']} |")
    if "scan" not in results:
        return "\n".join(lines)
    sc = results["scan"]
    add(
        f"| scan, {sc['small']['examined']} overdue among {sc['small']['terminal_steps']:,} steps | "
        f"{sc['small']['seconds']} s ({sc['small']['batches']} batches) |"
    )
    add(
        f"| scan, {sc['large']['examined']} overdue among {sc['large']['terminal_steps']:,} steps | "
        f"{sc['large']['seconds']} s ({sc['large']['batches']} batches) |"
    )
    add(f"| scan ratio large / small | {sc['ratio']} |")
    for name, page in results["pages"].items():
        if "median_ms" in page:
            add(
                f"| {name} at {sc['large']['terminal_steps']:,} steps, median / max ms | "
                f"{page['median_ms']} / {page['max_ms']} ({page['statements']} statements) |"
            )
        else:
            add(f"| {name} | HTTP {page['status']} |")
    return "\n".join(lines)
