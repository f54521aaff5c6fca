"""The benchmark behind `manage.py bench` (PostgreSQL only).

Everything is measured in one run on one database, so the figures compare with each other
(ratios), not with another machine's:

0. the remote: by default testbed.fastremote, answering from memory with TCP_NODELAY, its own
   CPU per call printed (one core of it must serve far more calls per second than either side
   makes, or it caps the baseline); `--remote sandbox` uses the sandbox remote instead, which
   writes each effect to SQLite and is slower than bare django-q2;
1. the HTTP workload users meet: jobs of a 3-step chain submitted through `POST /api/v1/jobs/`
   from 4 client threads, each step an HTTP call to the remote, through one `qcluster`; the API
   under gunicorn with the production configuration and under `runserver` (`make run`), each in
   turn; beside it, bare django-q2 chains of 3 tasks making the same POST, on django-q2's stock
   ORM broker with the same `Q_CLUSTER` values;
2. the engine alone: the same jobs submitted while no cluster runs, then drained by one, timed
   from the first attempt's start to the last job's end;
3. the python workload: jobs of 3 no-op python steps submitted in-process, beside bare chains of
   no-op tasks on the stock broker;
4. commits (`pg_stat_database`) and top-level statements (`pg_stat_statements`, all sessions) per
   step of the HTTP workload, and statements per step in-process;
5. unloaded latency: jobs one at a time on an idle cluster;
6. a remote that leaves Nagle's algorithm on: milliseconds per call on a kept-alive connection,
   through the agent's client and a plain one, beside a remote with TCP_NODELAY;
7. a sustained backlog through the API for minutes (past `CONN_MAX_AGE`, worker recycling and the
   lease period), steps per second in every 10-second window;
8. the supervisor scan with 1,000 overdue steps among 10,000 and 1,000,000 settled steps, and
   console and API pages and the /metrics scrape over that history;
9. the same scan beside 10,000 waiting jobs whose timers are not due (testbed.bench.waits), and
   one scan firing 1,000 due timers;
10. with `--peers`, the same chains on Temporal, procrastinate and DBOS (testbed.bench.peerbench).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connection
from django_q.models import OrmQ

from sas_project.database import is_postgresql
from scheduler.services import job_submit
from supervisor.models import SupervisorLease
from testbed.bench import cpu, db, history, peerbench, waits, workloads
from testbed.bench import remote as bench_remote
from testbed.bench.definitions import OWN_WORKFLOWS, api_token, ensure_definitions
from testbed.definitions import refuse_foreign_jobs
from testbed.fastremote import stats
from testbed.processes import (
    ROOT,
    ClusterProcess,
    FastRemoteProcess,
    SandboxProcess,
    WebProcess,
    free_port,
    wait_until,
)

Q_KEYS = ("workers", "queue_limit", "bulk", "poll", "save_limit", "recycle", "timeout", "retry")


def cluster_env(*, workers: int, stock: bool) -> dict[str, str]:
    env = {
        **os.environ,
        "SAS_Q_WORKERS": str(workers),
        "SAS_SUPERVISOR_INTERVAL": "1",
        "SAS_LOG_LEVEL": "WARNING",
        "DJANGO_DEBUG": "0",
        "PYTHONUNBUFFERED": "1",
    }
    if stock:
        # django-q2 as it ships: its ORM broker, no supervisor loop beside the cluster.
        env["DJANGO_SETTINGS_MODULE"] = "testbed.stock_settings"
        env["SAS_SUPERVISOR_IN_CLUSTER"] = "0"
    return env


def start_cluster(*, workers: int, stock: bool, settle: bool = True) -> ClusterProcess:
    cluster = ClusterProcess(
        name="stock" if stock else "sas",
        env=cluster_env(workers=workers, stock=stock),
        log=ROOT / "var" / f"bench-qcluster-{'stock' if stock else 'sas'}.log",
    ).start()
    if not stock:
        SupervisorLease.objects.all().delete()
        wait_until(
            lambda: SupervisorLease.objects.exclude(holder="").exists(), timeout=60, message="the cluster"
        )
    if settle:
        time.sleep(2)  # workers and pusher up
    return cluster


def idle_commits_per_s(seconds: float = 3.0) -> float:
    """The background commits (broker looks, supervisor scans) of whatever runs, while idle."""
    before = db.xact_commit()
    time.sleep(seconds)
    return max(0.0, (db.xact_commit() - before - 1) / (seconds + 1.2))


def measured(
    run: Callable[[workloads.Counters], dict[str, Any]], *, steps: int, idle: float, statements: bool
) -> dict[str, Any]:
    """Run one workload, with commits, CPU by kind of process and (when available) statements per
    step."""
    counters = workloads.Counters()
    if statements:
        db.statements_reset()
    before = db.xact_commit()
    cpu_before = cpu.snapshot()
    result = run(counters)
    result["cpu_ms_per_step"] = cpu.per_step(cpu_before, cpu.snapshot(), steps)
    commits = db.xact_commit() - before - counters.polls - 2
    result["commits_per_step"] = round((commits - idle * (result["seconds"] + 2.4)) / steps, 2)
    if statements:
        kinds = db.statements_by_kind()
        result["top_statements"] = db.top_statements()
        fk_checks = kinds.pop("FK checks", 0)
        result["fk_checks_per_step"] = round(fk_checks / steps, 2)
        total = sum(kinds.values())
        result["statements_per_step"] = round(total / steps, 2)
        result["statements_by_kind_per_step"] = {k: round(v / steps, 2) for k, v in sorted(kinds.items())}
    return result


def prepare_database(*, scratch: bool) -> bool:
    """Refuse anything but PostgreSQL and a database holding jobs the benchmark did not make (unless
    `scratch`), empty the task queue; returns whether statements can be counted."""
    if not is_postgresql():
        raise RuntimeError("the benchmark runs on PostgreSQL (set DATABASE_URL)")
    refuse_foreign_jobs("bench", OWN_WORKFLOWS, scratch=scratch)
    OrmQ.objects.all().delete()
    return db.statements_available()


def run(
    *,
    jobs: int,
    steps: int,
    workers: int,
    rounds: int,
    sustained: float,
    backlog: int,
    history_steps: int,
    small_history: int,
    overdue: int,
    log: Callable[[str], None],
    scratch: bool = False,
    waiting: int = 0,
    due: int = 0,
    remote: str = "fast",
    webs: tuple[str, ...] = ("gunicorn", "runserver"),
    peers: tuple[str, ...] = (),
    peers_work: tuple[str, ...] = peerbench.WORKS,
) -> dict[str, Any]:
    statements = prepare_database(scratch=scratch)
    q = {k: settings.Q_CLUSTER.get(k) for k in Q_KEYS} | {"workers": workers, "queue_limit": workers}
    results: dict[str, Any] = {
        "config": {
            "jobs": jobs,
            "steps_per_job": steps,
            "rounds": rounds,
            "q_cluster": q,
            "supervisor_interval": 1,
            "cpu_count": os.cpu_count(),
            "statements_counted": statements,
        }
    }
    fast = remote == "fast"
    sandbox: FastRemoteProcess | SandboxProcess
    if fast:
        sandbox = FastRemoteProcess(port=free_port(), log=ROOT / "var" / "bench-remote.log").start()
    else:
        sandbox = SandboxProcess(
            port=free_port(),
            db=ROOT / "var" / "bench-sandbox.sqlite3",
            log=ROOT / "var" / "bench-sandbox.log",
        ).start()
    results["config"]["remote"] = remote
    results["config"]["web"] = list(webs)
    nagle = (
        FastRemoteProcess(port=free_port(), log=ROOT / "var" / "bench-remote-nagle.log", nagle=True)
        if fast
        else None
    )
    servers: dict[str, WebProcess] = {}
    cluster = None
    try:
        python_wf, http_wf = ensure_definitions(steps, sandbox.url)
        log("statements and commits per step, in-process (python workload)...")
        results["in_process"] = history.statements_per_step(min(jobs, 100), steps, python_wf.name)

        # The benchmark's one client submits far above any per-user rate a deployment would set.
        web_env = {**cluster_env(workers=workers, stock=False), "SAS_THROTTLE_USER": "off"}
        apis: dict[str, workloads.ApiClient] = {}
        for name in webs:
            port = free_port()
            servers[name] = WebProcess(
                port=port,
                env=web_env,
                log=ROOT / "var" / f"bench-web-{name}.log",
                gunicorn=name == "gunicorn",
            ).start()
            apis[name] = workloads.ApiClient(servers[name].url, api_token())
        remote_before = stats(sandbox.url) if fast else None
        rounds_out: list[dict[str, Any]] = []
        for r in range(1, rounds + 1):
            log(f"round {r}: bare django-q2 chains on the stock broker (HTTP, then python)...")
            cluster = start_cluster(workers=workers, stock=True)
            idle = idle_commits_per_s()
            counters = workloads.Counters()
            workloads.run_bare(10, steps, http_base=sandbox.url, counters=counters)  # warm-up
            bare_http = measured(
                lambda c: workloads.run_bare(jobs, steps, http_base=sandbox.url, counters=c),
                steps=jobs * steps,
                idle=idle,
                statements=statements,
            )
            bare_python = measured(
                lambda c: workloads.run_bare(jobs, steps, http_base=None, counters=c),
                steps=jobs * steps,
                idle=idle,
                statements=statements,
            )
            cluster.stop(30)
            cluster = start_cluster(workers=workers, stock=False)
            idle = idle_commits_per_s()
            full_http: dict[str, dict[str, Any]] = {}
            for name, api in apis.items():
                log(f"round {r}: the service, HTTP through the API under {name}...")
                workloads.run_http(api, http_wf.name, 10, steps, workloads.Counters())  # warm-up

                def through(c: workloads.Counters, api: workloads.ApiClient = api) -> dict[str, Any]:
                    return workloads.run_http(api, http_wf.name, jobs, steps, c)

                full = measured(
                    through,
                    steps=jobs * steps,
                    idle=idle,
                    statements=statements,
                )
                full.update(workloads.step_times(full.pop("ids")))
                full["ratio"] = round(full["steps_per_s"] / bare_http["steps_per_s"], 2)
                full_http[name] = full
            first_web = next(iter(apis))
            batch_api = apis[first_web]
            log(f"round {r}: the service, HTTP through the batch endpoint under {first_web}...")
            batch = measured(
                lambda c, api=batch_api: workloads.run_batch(api, http_wf.name, jobs, steps, c),  # type: ignore[misc]
                steps=jobs * steps,
                idle=idle,
                statements=False,
            )
            batch.update(workloads.step_times(batch.pop("ids")))
            batch["ratio"] = round(batch["steps_per_s"] / bare_http["steps_per_s"], 2)
            batch["web"] = first_web
            log(f"round {r}: the service, python steps submitted in-process...")
            full_python = measured(
                lambda c: workloads.run_python(python_wf.name, jobs, steps, c),
                steps=jobs * steps,
                idle=idle,
                statements=statements,
            )
            full_python.update(workloads.step_times(full_python.pop("ids")))
            if r == 1:
                log("unloaded latency: jobs one at a time...")
                counters = workloads.Counters()
                first_api = next(iter(apis.values()))

                def submit_one(n: int, api: workloads.ApiClient = first_api) -> str:
                    return api.submit(http_wf.name, {"latency": n})

                results["latency"] = {
                    "python": workloads.run_latency(
                        lambda n: str(job_submit(workflow=python_wf.name, input={"latency": n}).job_id),
                        30,
                        counters,
                    ),
                    "http_api": workloads.run_latency(submit_one, 30, counters),
                }
            cluster.stop(30)
            cluster = None
            log(f"round {r}: the engine alone: {jobs} jobs submitted with no cluster, then drained...")
            engine, cluster = workloads.run_engine_only(
                next(iter(apis.values())),
                http_wf.name,
                jobs,
                steps,
                workloads.Counters(),
                start=lambda: start_cluster(workers=workers, stock=False, settle=False),
            )
            # From the first attempt's start: the cluster's own start-up is left out. Not over a
            # middle share of the completions: with one queue in order, every job's first step
            # runs before any second step, so the jobs all end in the drain's last third.
            engine["ratio"] = round(engine["steps_per_s"] / bare_http["steps_per_s"], 2)
            cluster.stop(30)
            cluster = None
            rounds_out.append(
                {
                    "bare_http": bare_http,
                    "full_http": full_http,
                    "engine_only": engine,
                    "batch": batch,
                    "bare_python": bare_python,
                    "full_python": full_python,
                    "python_ratio": round(full_python["steps_per_s"] / bare_python["steps_per_s"], 2),
                }
            )
        results["rounds"] = rounds_out
        if rounds_out:
            results["http_ratio_median"] = {
                name: round(statistics.median(r["full_http"][name]["ratio"] for r in rounds_out), 3)
                for name in webs
            }
            results["engine_ratio_median"] = round(
                statistics.median(r["engine_only"]["ratio"] for r in rounds_out), 3
            )
            results["batch_ratio_median"] = round(
                statistics.median(r["batch"]["ratio"] for r in rounds_out), 3
            )
            results["python_steps_per_s_median"] = round(
                statistics.median(r["full_python"]["steps_per_s"] for r in rounds_out), 1
            )
        if remote_before is not None:
            results["remote"] = bench_remote.cost(remote_before, stats(sandbox.url))
        if peers:
            peerbench.run_into(
                results,
                peers=peers,
                works=peers_work,
                jobs=jobs,
                steps=steps,
                workers=workers,
                remote=sandbox.url,
                fast=fast,
                poll=float(q["poll"] or 0.2),
                log=log,
            )
        if nagle is not None:
            log("a remote leaving Nagle on: milliseconds per call on a kept-alive connection...")
            nagle.start()
            results["nagle"] = bench_remote.nagle_probe(sandbox.url, nagle.url)
        if sustained > 0:
            first = next(iter(apis))
            api = apis[first]
            log(f"sustained backlog of {backlog} jobs through the API ({first}) for {sustained:.0f}s...")
            cluster = start_cluster(workers=workers, stock=False)
            results["sustained"] = workloads.run_sustained(
                api, http_wf.name, seconds=sustained, backlog=backlog, counters=workloads.Counters()
            )
            cluster.stop(30)
            cluster = None
    finally:
        if cluster is not None:
            cluster.stop(30)
        for server in servers.values():
            server.stop()
        sandbox.stop()
        if nagle is not None:
            nagle.stop()

    if history_steps > 0:
        log(f"scan: {overdue} overdue among {small_history} settled steps...")
        history.load_history(python_wf, small_history)
        small = history.time_scan(overdue)
        log(f"scan: loading history up to {history_steps} steps...")
        loaded = history.load_history(python_wf, history_steps)
        large = history.time_scan(overdue)
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM scheduler_step")
            total_steps = int(cursor.fetchone()[0])
        results["scan"] = {
            "small": {**small, "settled_steps": small_history},
            "large": {**large, "settled_steps": total_steps},
            "ratio": round(large["seconds"] / small["seconds"], 2) if small["seconds"] else None,
            "history_load_seconds": round(loaded, 1),
        }
        log("console and API with the large history...")
        history.make_held(100)
        results["pages"] = history.time_pages()
    if waiting > 0:
        log(f"scan beside {waiting} waiting jobs, then {due} due timers...")
        results["waits"] = waits.run(waiting=waiting, due=due, overdue=overdue)
    return results


def run_waits(*, waiting: int, due: int, overdue: int, scratch: bool = False) -> dict[str, Any]:
    """Part 7 alone (`bench --waits-only`)."""
    prepare_database(scratch=scratch)
    ensure_definitions(3, "http://127.0.0.1:9")
    return {"waits": waits.run(waiting=waiting, due=due, overdue=overdue)}


def _ms(pair: dict[str, Any]) -> str:
    def f(v: Any) -> str:
        return "-" if v is None else f"{v:.1f}"

    return f"{f(pair.get('p50'))} / {f(pair.get('p99'))}"


def table(results: dict[str, Any]) -> str:
    lines: list[str] = []
    add = lines.append
    cfg = results["config"]
    add(
        f"jobs={cfg['jobs']} steps/job={cfg['steps_per_job']} rounds={cfg['rounds']} cpus={cfg['cpu_count']} "
        f"Q_CLUSTER={cfg['q_cluster']}"
    )
    add("")
    add("| measure | value |")
    add("| --- | --- |")
    add(
        f"| remote | {cfg.get('remote', 'sandbox')}"
        + (
            f": {results['remote']['cpu_us_per_call']} us of CPU per call (one core serves "
            f"{results['remote']['capacity_calls_per_s']:,} calls/s), {results['remote']['calls']:,} calls |"
            if results.get("remote")
            else " |"
        )
    )
    for i, r in enumerate(results["rounds"], 1):
        bh, bp, fp, eng = r["bare_http"], r["bare_python"], r["full_python"], r["engine_only"]
        for web, fh in r["full_http"].items():
            add(
                f"| round {i}, HTTP: bare django-q2 / service through the API under {web}, steps/s | "
                f"{bh['steps_per_s']} / {fh['steps_per_s']} (ratio {fh['ratio']}) |"
            )
        add(
            f"| round {i}, HTTP: service through the batch endpoint ({workloads.BATCH_SIZE} jobs a request, "
            f"{r['batch']['web']}), steps/s | {r['batch']['steps_per_s']} (ratio {r['batch']['ratio']}) |"
        )
        add(
            f"| round {i}, HTTP: the engine alone (a backlog drained), steps/s | "
            f"{eng['steps_per_s']} (ratio {eng['ratio']}) |"
        )
        batch_cpu = cpu.describe(r["batch"].get("cpu_ms_per_step", {}))
        add(
            f"| round {i}, CPU ms per step, batch endpoint: {batch_cpu}; "
            f"python bare: {cpu.describe(bp.get('cpu_ms_per_step', {}))}; "
            f"python service: {cpu.describe(fp.get('cpu_ms_per_step', {}))} |"
        )
        add(
            f"| round {i}, python: bare django-q2 (stock broker) / service, steps/s | "
            f"{bp['steps_per_s']} / {fp['steps_per_s']} (ratio {r['python_ratio']}) |"
        )
        for web, fh in r["full_http"].items():
            add(
                f"| round {i}, commits per step, HTTP bare / service ({web}) | "
                f"{bh['commits_per_step']} / {fh['commits_per_step']} |"
            )
            if "statements_per_step" in fh:
                add(
                    f"| round {i}, statements per step, HTTP bare / service ({web}) | "
                    f"{bh['statements_per_step']} / {fh['statements_per_step']} "
                    f"{fh['statements_by_kind_per_step']} |"
                )
            add(
                f"| round {i}, CPU ms per step, HTTP bare: {cpu.describe(bh.get('cpu_ms_per_step', {}))}; "
                f"service ({web}): {cpu.describe(fh.get('cpu_ms_per_step', {}))} |"
            )
            add(
                f"| round {i}, HTTP under load ({web}): step overhead, queue wait, submit-to-done "
                f"p50 / p99 ms | {_ms(fh['step_overhead_ms'])}; {_ms(fh['queue_wait_ms'])}; "
                f"{_ms(fh['job_turnaround_ms'])} |"
            )
    if results["rounds"]:
        for web, ratio in results["http_ratio_median"].items():
            add(f"| **HTTP ratio service / bare, under {web} (median)** | **{ratio}** |")
        add(f"| **HTTP ratio batch endpoint / bare (median)** | **{results['batch_ratio_median']}** |")
        add(f"| **HTTP ratio engine alone / bare (median)** | **{results['engine_ratio_median']}** |")
        add(f"| **python workload, steps/s (median)** | **{results['python_steps_per_s_median']}** |")
    ng = results.get("nagle")
    if ng:
        add(
            f"| a call on a kept-alive connection, remote with TCP_NODELAY / leaving Nagle on, "
            f"agent's client, ms | {ng['agent_nodelay_ms']} / {ng['agent_nagle_ms']} "
            f"(+{ng['agent_nagle_extra_ms']}) |"
        )
        add(
            f"| the same through a plain httpx client (no quick ACK), ms | {ng['plain_nodelay_ms']} / "
            f"{ng['plain_nagle_ms']} (+{ng['plain_nagle_extra_ms']}) |"
        )
    lat = results.get("latency")
    if lat:
        for name, figures in lat.items():
            add(f"| unloaded {name}: step overhead p50 / p99 ms | {_ms(figures['step_overhead_ms'])} |")
            add(f"| unloaded {name}: submit-to-done p50 / p99 ms | {_ms(figures['job_turnaround_ms'])} |")
    per = results["in_process"]
    add(f"| in-process: statements per step | {per['statements_per_step']} {per['by_kind_per_step']} |")
    add(f"| in-process: commits per step | {per['commits_per_step']} |")
    sus = results.get("sustained")
    if sus:
        add(
            f"| sustained {sus['seconds']:.0f} s, backlog {sus['backlog']} jobs: steps/s per "
            f"{sus['window_seconds']:.0f} s "
            f"window | {sus['windows_steps_per_s']} |"
        )
        add(
            f"| sustained: median window, lowest / median | "
            f"{sus['median_steps_per_s']}, {sus['min_over_median']} |"
        )
        qw = sus["queue_wait_ms"]
        add(
            f"| sustained: queue wait p50 / p90 / p99 / max ms | {qw['p50']:.1f} / {qw['p90']:.1f} / "
            f"{qw['p99']:.1f} / {qw['max']:.1f} |"
        )
    if "scan" in results:
        sc = results["scan"]
        for size in ("small", "large"):
            add(
                f"| scan, {sc[size]['examined']} overdue among {sc[size]['settled_steps']:,} steps | "
                f"{sc[size]['seconds']} s ({sc[size]['batches']} batches) |"
            )
        add(f"| scan ratio large / small | {sc['ratio']} |")
        for name, page in results["pages"].items():
            if "median_ms" in page:
                add(
                    f"| {name} at {sc['large']['settled_steps']:,} steps, median / max ms | "
                    f"{page['median_ms']} / {page['max_ms']}"
                    + (f" ({page['statements']} statements) |" if "statements" in page else " |")
                )
            else:
                add(f"| {name} | HTTP {page['status']} |")
    if "waits" in results:
        lines.extend(waits.table_rows(results["waits"]))
    lines.extend(peerbench.table_rows(results))
    return "\n".join(lines)
