"""The fan-out against as many one-step jobs, in one run (`manage.py bench --fan-out 1000`).

Both sides take the path users take: the REST API (runserver or gunicorn), one `qcluster`, an
HTTP call to the sandbox remote per item or step. One side submits 1,000 jobs of one step; the
other submits one job whose step fans out over 1,000 items (no `max_parallel`: the workers bound
it, as they bound the jobs). Rounds alternate the two, so drift of a noisy machine falls on both;
the figure is each side's calls per second from the first submission to the last settled job, and
their ratio. The remote's own cost per call (4 threads posting straight to it) is shown beside
them: it must be far faster than either side, or it is what is measured.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from testbed.bench import workloads
from testbed.bench.definitions import (
    FAN_OUT,
    HTTP_INPUT,
    HTTP_POOL,
    POLICY,
    api_token,
    ensure_definitions,
    http_chain,
)
from testbed.definitions import ensure_workflow
from testbed.processes import ROOT, SandboxProcess, WebProcess, free_port

#: The route every call of both sides makes.
PATH = "/inventory/reserve"


def ensure_fan_out(remote_url: str) -> None:
    ensure_definitions(1, remote_url)
    ensure_workflow(
        FAN_OUT,
        [{"name": "items", "pool": HTTP_POOL, "path": PATH, "policy": POLICY, "for_each": "input.items"}],
    )


def remote_cost(url: str, calls: int = 1000, threads: int = 4) -> dict[str, Any]:
    """The sandbox alone: `calls` POSTs (new operation IDs) from `threads` threads."""
    latencies: list[float] = []
    lock = threading.Lock()
    todo = iter(range(calls))

    def worker() -> None:
        with httpx.Client(base_url=url, timeout=30, trust_env=False) as client:
            while True:
                with lock:
                    n = next(todo, None)
                if n is None:
                    return
                started = time.perf_counter()
                response = client.post(
                    PATH,
                    json={"input": HTTP_INPUT, "attempt": 1},
                    headers={"Idempotency-Key": f"bench-remote-{uuid.uuid4()}"},
                )
                response.raise_for_status()
                with lock:
                    latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    seconds = time.perf_counter() - started
    return {
        "calls_per_s": round(calls / seconds, 1),
        "ms_per_call_p50": round(statistics.median(latencies), 2),
        "threads": threads,
    }


def run(
    *,
    items: int,
    rounds: int,
    workers: int,
    gunicorn: bool,
    log: Callable[[str], None],
    scratch: bool,
) -> dict[str, Any]:
    from testbed.bench import cluster_env, prepare_database, start_cluster

    prepare_database(scratch=scratch)
    sandbox = SandboxProcess(
        port=free_port(), db=ROOT / "var" / "bench-sandbox.sqlite3", log=ROOT / "var" / "bench-sandbox.log"
    ).start()
    web = cluster = None
    results: dict[str, Any] = {"config": {"items": items, "rounds": rounds, "workers": workers}}
    try:
        ensure_fan_out(sandbox.url)
        api = workloads.ApiClient(f"http://127.0.0.1:{free_port()}", api_token())
        port = int(api.base_url.rsplit(":", 1)[1])
        web_env = {**cluster_env(workers=workers, stock=False), "SAS_THROTTLE_USER": "off"}
        web = WebProcess(port=port, env=web_env, log=ROOT / "var" / "bench-web.log", gunicorn=gunicorn)
        web.start()
        results["config"]["server"] = "gunicorn" if gunicorn else "runserver"
        cluster = start_cluster(workers=workers, stock=False)
        counters = workloads.Counters()
        workloads.run_http(api, http_chain(1), 20, 1, counters)  # warm-up
        results["remote"] = remote_cost(sandbox.url)
        log(f"the remote alone: {results['remote']['calls_per_s']} calls/s")
        jobs_rates: list[float] = []
        fan_rates: list[float] = []
        for r in range(1, rounds + 1):
            log(f"round {r}: {items} one-step jobs...")
            one = workloads.run_http(api, http_chain(1), items, 1, counters)
            jobs_rates.append(one["steps_per_s"])
            log(f"round {r}: one job fanning out over {items} items...")
            started = workloads.db_now()
            job_id = api.submit(FAN_OUT, {**HTTP_INPUT, "items": list(range(items))})
            last = workloads.wait_for_jobs([job_id], counters)
            seconds = (last - started).total_seconds()
            fan_rates.append(round(items / seconds, 1))
            log(f"round {r}: jobs {jobs_rates[-1]}/s, items {fan_rates[-1]}/s")
        results["one_step_jobs_per_s"] = jobs_rates
        results["fan_out_items_per_s"] = fan_rates
        results["ratio"] = round(statistics.median(fan_rates) / statistics.median(jobs_rates), 3)
    finally:
        if cluster is not None:
            cluster.stop(30)
        if web is not None:
            web.stop()
        sandbox.stop()
    return results


def table(results: dict[str, Any]) -> str:
    remote = results["remote"]
    return "\n".join(
        [
            "| measure | value |",
            "| --- | --- |",
            f"| server | {results['config']['server']} |",
            f"| the remote alone (4 threads) | {remote['calls_per_s']} calls/s, "
            f"p50 {remote['ms_per_call_p50']} ms per call |",
            f"| {results['config']['items']} one-step jobs, calls/s per round | "
            f"{', '.join(map(str, results['one_step_jobs_per_s']))} |",
            f"| one fan-out of {results['config']['items']} items, calls/s per round | "
            f"{', '.join(map(str, results['fan_out_items_per_s']))} |",
            f"| fan-out / jobs (medians) | {results['ratio']} |",
        ]
    )
