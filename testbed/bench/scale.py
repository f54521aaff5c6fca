"""`bench --scale`: the scan, the console and the API over a small and a large history, history
retention pruning about a million rows while a workload runs, and table and index sizes before
and after (docs/performance.md, "History at scale")."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from django.db import connection
from django.utils.module_loading import import_string
from django_q.brokers import get_broker
from django_q.models import OrmQ

from agents.broker import task_of
from scheduler.models import Workflow
from scheduler.services import job_submit
from testbed.bench import history
from testbed.bench.definitions import ensure_definitions
from testbed.processes import ROOT

TABLES = ("scheduler_job", "scheduler_step", "scheduler_attempt", "scheduler_event")
#: Rows one job of the 3-step chain leaves: the job, 3 steps, 3 attempts, 6 events.
ROWS_PER_JOB = 13
#: How long ago the prunable jobs settled: beyond 30 days of retention, and in a month that ends
#: before the cutoff, so that its event partition is emptied and dropped.
PRUNABLE_AGE = "70 days"


def sizes() -> dict[str, dict[str, int]]:
    """Rows, table bytes and index bytes of the hot tables (a partitioned table: its partitions)."""
    out: dict[str, dict[str, int]] = {}
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(
                "SELECT COALESCE(sum(pg_table_size(relid)), 0), COALESCE(sum(pg_indexes_size(relid)), 0) "
                "FROM (SELECT relid FROM pg_partition_tree(%s::regclass) UNION SELECT %s::regclass) t",
                [table, table],
            )
            table_bytes, index_bytes = cursor.fetchone()
            cursor.execute(f"SELECT count(*) FROM {table}")  # noqa: S608 (a constant name)
            out[table] = {
                "rows": int(cursor.fetchone()[0]),
                "table_bytes": int(table_bytes),
                "index_bytes": int(index_bytes),
            }
    return out


def load_prunable(workflow: Workflow, rows: int) -> float:
    """Jobs settled PRUNABLE_AGE ago holding about `rows` rows in all, in their month's partition."""
    started = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM sas_event_partitions_ensure(now() - %s::interval, now())", [PRUNABLE_AGE]
        )
        sql = history.HISTORY_SQL.replace("interval '2 days'", f"interval '{PRUNABLE_AGE}'")
        missing = rows // ROWS_PER_JOB
        with history.event_guard_off(cursor):
            while missing > 0:
                n = min(50_000, missing)
                # Not archived yet: the benchmark times the archive phase and the deletion apart.
                cursor.execute(sql, {"workflow": workflow.pk, "jobs": n, "archived": False})
                missing -= n
    return time.monotonic() - started


def _run_one_job(workflow: str, broker: Any) -> int:
    """Submit one job and run its tasks in this process; returns the steps run."""
    job_submit(workflow=workflow, input={})
    steps = 0
    while True:
        claimed = broker.dequeue() if OrmQ.objects.exists() else None
        if not claimed:
            return steps
        for _, payload in claimed:
            task = task_of(payload)
            import_string(task["func"])(*task["args"], **task["kwargs"])
            steps += 1


def throughput(
    workflow: str, *, seconds: float | None = None, until: Callable[[], bool] | None = None
) -> dict[str, Any]:
    """Steps per second of jobs run one after another in this process, for `seconds` or until
    `until()` is true."""
    broker = get_broker()
    OrmQ.objects.all().delete()
    connection.health_check_enabled = False  # type: ignore[attr-defined]
    started = time.monotonic()
    steps = 0
    while True:
        elapsed = time.monotonic() - started
        if (seconds is not None and elapsed >= seconds) or (until is not None and until()):
            break
        steps += _run_one_job(workflow, broker)
    elapsed = time.monotonic() - started
    return {"steps": steps, "seconds": round(elapsed, 2), "steps_per_s": round(steps / elapsed, 1)}


def _under_workload(
    workflow: str, archive_dir: Any, args: list[str]
) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
    """Run `manage.py history_prune *args` in another process while the workload runs here;
    returns its report, its partition log lines and the workload's throughput meanwhile."""
    prune = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "history_prune", *args],
        cwd=ROOT,
        env=os.environ | {"SAS_LOG_FORMAT": "text", "SAS_ARCHIVE_DIR": str(archive_dir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    during = throughput(workflow, until=lambda: prune.poll() is not None)
    out, err = prune.communicate()
    if prune.returncode != 0:
        raise RuntimeError(f"history_prune failed: {err[-2000:]}")
    report = json.loads(out[out.index("{") :])
    return report, [line for line in err.splitlines() if "partition" in line][-10:], during


def measure(overdue: int) -> dict[str, Any]:
    scan = history.time_scan(overdue)
    pages = history.time_pages()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM scheduler_step")
        steps = int(cursor.fetchone()[0])
    return {"steps": steps, "scan": scan, "pages": pages}


def run(
    *, small: int, large: int, prune_rows: int, overdue: int, log: Callable[[str], None]
) -> dict[str, Any]:
    python_wf, _ = ensure_definitions(3, "http://127.0.0.1:9")
    results: dict[str, Any] = {
        "config": {"small": small, "large": large, "prune_rows": prune_rows, "cpus": os.cpu_count()}
    }
    log(f"scale: {small} settled steps...")
    history.load_history(python_wf, small)
    # The same live work at every size (100 jobs needing attention): only the history grows.
    history.make_held(100)
    results["small"] = measure(overdue)
    log(f"scale: about {prune_rows} rows settled {PRUNABLE_AGE} ago...")
    results["prunable_load_seconds"] = round(load_prunable(python_wf, prune_rows), 1)
    log(f"scale: loading history up to {large} steps...")
    results["large_load_seconds"] = round(history.load_history(python_wf, large), 1)
    results["large"] = measure(overdue)
    results["sizes_before"] = sizes()

    log("scale: throughput without pruning...")
    results["throughput_alone"] = throughput(python_wf.name, seconds=20)
    archive_dir = ROOT / "var" / "bench-archive"
    shutil.rmtree(archive_dir, ignore_errors=True)
    alone = results["throughput_alone"]["steps_per_s"]
    # In service the supervisor archives each job about an hour after it settles, so the daily
    # run only deletes; here the two phases are timed apart, each under the workload.
    for phase, args in (("archive", ["--archive-only"]), ("prune", [])):
        log(f"scale: throughput while history_prune {' '.join(args)} runs...")
        report, log_lines, during = _under_workload(python_wf.name, archive_dir, args)
        report["rows_total"] = sum(report["rows"].values())
        results[phase] = report
        results[f"{phase}_log"] = log_lines
        results[f"throughput_during_{phase}"] = during
        results[f"throughput_drop_{phase}"] = round(1 - during["steps_per_s"] / alone, 3) if alone else None
    results["throughput_drop"] = results["throughput_drop_prune"]
    results["sizes_after"] = sizes()
    results["after_prune"] = measure(overdue)
    return results


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f}"


def table(results: dict[str, Any]) -> str:
    small, large = results["small"], results["large"]
    lines = [
        f"| measure | {small['steps']:,} steps | {large['steps']:,} steps | ratio |",
        "| --- | --- | --- | --- |",
    ]

    def row(name: str, a: float, b: float, unit: str) -> None:
        lines.append(f"| {name} | {a} {unit} | {b} {unit} | {round(b / a, 2) if a else '-'} |")

    row(
        f"scan, {small['scan']['examined']} overdue steps",
        small["scan"]["seconds"],
        large["scan"]["seconds"],
        "s",
    )
    for name in ("ops_overview", "ops_needs_attention", "api_jobs_needs_attention"):
        a, b = small["pages"].get(name, {}), large["pages"].get(name, {})
        if "median_ms" in a and "median_ms" in b:
            row(f"{name}, median", a["median_ms"], b["median_ms"], "ms")
    prune, archived = results["prune"], results["archive"]
    lines += [
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| history_prune --archive-only: jobs archived | {archived['archived']:,} |",
        f"| history_prune --archive-only: seconds | {archived['seconds']} |",
        f"| history_prune: jobs / rows deleted | {prune['jobs']:,} / {prune['rows_total']:,} "
        f"{prune['rows']} |",
        f"| history_prune: jobs archived (not archived before) | {prune['archived']:,} |",
        f"| history_prune: seconds | {prune['seconds']} |",
        f"| history_prune: partitions dropped | {prune['partitions_dropped']} |",
        f"| throughput alone, steps/s | {results['throughput_alone']['steps_per_s']} |",
        f"| throughput while archiving, steps/s | {results['throughput_during_archive']['steps_per_s']} "
        f"(over {results['throughput_during_archive']['seconds']} s) |",
        f"| throughput drop while archiving | {results['throughput_drop_archive']:.1%} |",
        f"| throughput during the prune, steps/s | {results['throughput_during_prune']['steps_per_s']} "
        f"(over {results['throughput_during_prune']['seconds']} s) |",
        f"| throughput drop while pruning | {results['throughput_drop']:.1%} |",
        "",
        "| table | rows before | table / index MiB before | rows after | table / index MiB after |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name in TABLES:
        b, a = results["sizes_before"][name], results["sizes_after"][name]
        lines.append(
            f"| {name} | {b['rows']:,} | {_mib(b['table_bytes'])} / {_mib(b['index_bytes'])} "
            f"| {a['rows']:,} | {_mib(a['table_bytes'])} / {_mib(a['index_bytes'])} |"
        )
    return "\n".join(lines)
