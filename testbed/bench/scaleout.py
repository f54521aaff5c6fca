"""Scale-out: the HTTP workload through the REST API with 1, 2, 3... `qcluster` processes, in one
run on one database, every process (clusters and the web process) reaching PostgreSQL through a
PgBouncer in transaction pooling mode (or directly, without `pgbouncer`).

For each number of clusters: a burst of jobs (steps per second from the first submission to the
last job done, commits and top-level statements per step), then a sustained backlog longer than
every horizon that can expire (`CONN_MAX_AGE` 60 s, worker recycling, the lease, attempt
deadlines), reported per 10-second window.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

from supervisor.models import SupervisorLease
from testbed.bench import idle_commits_per_s, measured, prepare_database, workloads
from testbed.bench.definitions import api_token, ensure_definitions
from testbed.processes import (
    ROOT,
    ClusterProcess,
    PgBouncerProcess,
    SandboxProcess,
    WebProcess,
    free_port,
    wait_until,
)


def database_url() -> str:
    s = connection.settings_dict
    user = s.get("USER") or "postgres"
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


def server_backends() -> int:
    """Server sessions open on this database now (PgBouncer's pool, or every client directly)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() /* bench */"
        )
        return int(cursor.fetchone()[0])


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_scaleout(
    *,
    counts: list[int],
    jobs: int,
    steps: int,
    workers: int,
    sustained: float,
    backlog: int,
    pgbouncer: bool,
    log: Callable[[str], None],
    scratch: bool = False,
) -> dict[str, Any]:
    statements = prepare_database(scratch=scratch)
    var = ROOT / "var"
    # Every process keeps the one default application_name: PgBouncer re-sends a client's name
    # with a SET (a statement and a commit) whenever it lends a server session that last served a
    # client of another name (docs/deployment.md, "Many hosts").
    base_env = {
        **os.environ,
        "SAS_Q_WORKERS": str(workers),
        "SAS_SUPERVISOR_INTERVAL": "1",
        "SAS_LOG_LEVEL": "WARNING",
        "DJANGO_DEBUG": "0",
        "PYTHONUNBUFFERED": "1",
    }
    bouncer: PgBouncerProcess | None = None
    if pgbouncer:
        bouncer = PgBouncerProcess.in_front_of(database_url(), var / "bench-pgbouncer").start()
        base_env |= {"DATABASE_URL": bouncer.url_for(database_url()), "SAS_DB_TRANSACTION_POOLING": "1"}
    results: dict[str, Any] = {
        "config": {
            "clusters": counts,
            "jobs": jobs,
            "steps_per_job": steps,
            "workers_per_cluster": workers,
            "sustained_seconds": sustained,
            "backlog": backlog,
            "pgbouncer": pgbouncer,
            "pgbouncer_pool_size": bouncer.pool_size if bouncer else None,
            "cpu_count": os.cpu_count(),
            "statements_counted": statements,
            "bulk": settings.Q_CLUSTER.get("bulk"),
            "poll": settings.Q_CLUSTER.get("poll"),
        },
        "runs": [],
    }
    sandbox = SandboxProcess(
        port=free_port(), db=var / "bench-sandbox.sqlite3", log=var / "bench-sandbox.log"
    ).start()
    web: WebProcess | None = None
    clusters: list[ClusterProcess] = []
    try:
        _, http_wf = ensure_definitions(steps, sandbox.url)
        api = workloads.ApiClient(f"http://127.0.0.1:{free_port()}", api_token())
        web = WebProcess(
            port=int(api.base_url.rsplit(":", 1)[1]),
            env={**base_env, "SAS_THROTTLE_USER": "off"},
            log=var / "bench-web.log",
        ).start()
        for count in counts:
            log(f"{count} cluster(s){' behind PgBouncer' if bouncer else ''}: a burst of {jobs} jobs...")
            SupervisorLease.objects.all().delete()
            clusters = [
                ClusterProcess(
                    name=f"sas-{i}",
                    env=base_env,
                    log=var / f"bench-qcluster-{i}.log",
                ).start()
                for i in range(count)
            ]
            wait_until(
                lambda: SupervisorLease.objects.exclude(holder="").exists(), timeout=60, message="a cluster"
            )
            time.sleep(2)  # workers and pushers up
            idle = idle_commits_per_s()
            workloads.run_http(api, http_wf.name, 10, steps, workloads.Counters())  # warm-up
            bouncer_cpu = cpu_seconds(bouncer.proc.pid) if bouncer and bouncer.proc else 0.0
            burst = measured(
                lambda c: workloads.run_http(api, http_wf.name, jobs, steps, c),
                steps=jobs * steps,
                idle=idle,
                statements=statements,
            )
            if bouncer and bouncer.proc:
                used = cpu_seconds(bouncer.proc.pid) - bouncer_cpu
                burst["pgbouncer_cpu_ms_per_step"] = round(used * 1000 / (jobs * steps), 3)
            burst.pop("top_statements", None)
            burst.update(workloads.step_times(burst.pop("ids")))
            run: dict[str, Any] = {
                "clusters": count,
                "idle_commits_per_s": round(idle, 1),
                "burst": burst,
                "server_sessions": server_backends(),
            }
            if sustained > 0:
                log(f"{count} cluster(s): sustained backlog of {backlog} jobs for {sustained:.0f}s...")
                run["sustained"] = workloads.run_sustained(
                    api, http_wf.name, seconds=sustained, backlog=backlog, counters=workloads.Counters()
                )
            results["runs"].append(run)
            for cluster in clusters:
                cluster.stop(30)
            clusters = []
    finally:
        for cluster in clusters:
            cluster.stop(30)
        if web is not None:
            web.stop()
        sandbox.stop()
        if bouncer is not None:
            bouncer.stop()
    return results


def table(results: dict[str, Any]) -> str:
    cfg = results["config"]
    lines = [
        f"clusters={cfg['clusters']} jobs={cfg['jobs']} steps/job={cfg['steps_per_job']} "
        f"workers/cluster={cfg['workers_per_cluster']} pgbouncer={cfg['pgbouncer']} cpus={cfg['cpu_count']}",
        "",
        "| clusters | burst steps/s | commits / statements per step | submit-to-done p50 / p99 ms "
        "| sustained median steps/s (lowest / median) | server sessions | PgBouncer CPU ms per step |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in results["runs"]:
        b = run["burst"]
        sus = run.get("sustained") or {}
        median = sus.get("median_steps_per_s")
        turnaround = b.get("job_turnaround_ms", {})
        lines.append(
            f"| {run['clusters']} | {b['steps_per_s']} | {b['commits_per_step']} / "
            f"{b.get('statements_per_step', '-')} | {turnaround.get('p50', 0):.1f} / "
            f"{turnaround.get('p99', 0):.1f} | {'-' if median is None else round(median, 1)} "
            f"({sus.get('min_over_median', '-')}) | {run['server_sessions']} | "
            f"{b.get('pgbouncer_cpu_ms_per_step', '-')} |"
        )
    return "\n".join(lines)
