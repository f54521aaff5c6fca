"""Concurrency by key, measured (`manage.py bench --keyed 1000`): fairness across keys and what
keys cost, on the path users take (the REST API under runserver or gunicorn, one `qcluster`, HTTP
calls to the fast remote).

1. Fairness: `backlog` jobs of key A, then 10 of key B, submitted while no cluster runs, with a
   limit of 2 per key; then the cluster starts. The figure is how many of A's first calls went
   out before B's first (the goal: fewer than 20), and, for contrast, the same on the unkeyed
   workflow (where B waits behind every one of A's). The most calls of one key in flight at once
   (from the attempts' claim and end times) must never pass the limit.
2. Cost: the same chain with a concurrency key (`keys` keys, limit 2 each: never the bottleneck)
   and without, `jobs` jobs each, rounds alternated so that a noisy machine's drift falls on both;
   the figure is steps per second from the first submission to the last settled job, and their
   ratio (the goal: keyed within 10 % of unkeyed).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from django.db import connection

from scheduler.definitions import workflow_create, workflow_latest
from testbed.bench import workloads
from testbed.bench.definitions import (
    HTTP_INPUT,
    HTTP_PATHS,
    HTTP_POOL,
    KEYED,
    POLICY,
    UNKEYED,
    api_token,
    ensure_definitions,
)
from testbed.processes import ROOT, FastRemoteProcess, WebProcess, free_port

#: The limit per key of the keyed workflow.
LIMIT = 2
#: Jobs of key B submitted after A's backlog.
B_JOBS = 10


def ensure_keyed(remote_url: str, *, steps: int) -> None:
    ensure_definitions(steps, remote_url)
    chain = [
        {
            "name": f"s{i}",
            "pool": HTTP_POOL,
            "path": HTTP_PATHS[(i - 1) % len(HTTP_PATHS)],
            "policy": POLICY,
            "depends_on": [f"s{i - 1}"] if i > 1 else [],
        }
        for i in range(1, steps + 1)
    ]
    if workflow_latest(UNKEYED) is None:
        workflow_create(name=UNKEYED, steps=chain)
    if workflow_latest(KEYED) is None:
        workflow_create(
            name=KEYED, steps=chain, concurrency={"key": "input.account", "limit": LIMIT, "on_limit": "queue"}
        )


def submit(api: workloads.ApiClient, workflow: str, accounts: list[str]) -> list[str]:
    """One job per account given, in order, from the client's threads."""
    return workloads.in_threads(
        range(len(accounts)),
        lambda n: [api.submit(workflow, {**HTTP_INPUT, "n": n, "account": accounts[n]})],
        what=f"submitting {workflow}",
    )


def first_calls(ids: list[str]) -> list[tuple[Any, str]]:
    """(claimed at, account) of each job's first call, in the order they went out."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT a.started_at, j.input ->> 'account' FROM scheduler_attempt a "
            "JOIN scheduler_step s ON s.id = a.step_id JOIN scheduler_job j ON j.id = s.job_id "
            "WHERE j.id = ANY(%s::uuid[]) AND s.name = 's1' AND a.number = 1 "
            "ORDER BY a.started_at /* bench */",
            [ids],
        )
        return list(cursor.fetchall())


def most_in_flight_per_key(ids: list[str]) -> int:
    """The most calls of one account in flight at once (claim to end), over every attempt."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT j.input ->> 'account', a.started_at, a.finished_at FROM scheduler_attempt a "
            "JOIN scheduler_step s ON s.id = a.step_id JOIN scheduler_job j ON j.id = s.job_id "
            "WHERE j.id = ANY(%s::uuid[]) AND a.started_at IS NOT NULL /* bench */",
            [ids],
        )
        edges: dict[str, list[tuple[Any, int]]] = defaultdict(list)
        for account, started, finished in cursor.fetchall():
            edges[account] += [(started, 1), (finished, -1)]
    most = 0
    for changes in edges.values():
        now = 0
        for _, change in sorted(changes, key=lambda e: (e[0], e[1])):  # an end before a start
            now += change
            most = max(most, now)
    return most


def fairness(
    api: workloads.ApiClient,
    workflow: str,
    *,
    backlog: int,
    start: Callable[[], Any],
    log: Callable[[str], None],
) -> tuple[dict[str, Any], Any]:
    log(f"fairness on {workflow}: {backlog} jobs of key A, then {B_JOBS} of key B, no cluster yet...")
    a_ids = submit(api, workflow, ["A"] * backlog)
    b_ids = submit(api, workflow, ["B"] * B_JOBS)
    cluster = start()
    workloads.wait_for_jobs(a_ids + b_ids, workloads.Counters())
    order = [account for _, account in first_calls(a_ids + b_ids)]
    return {
        "a_first_calls_before_b": order.index("B"),
        "most_in_flight_per_key": most_in_flight_per_key(a_ids + b_ids),
    }, cluster


def run(
    *,
    jobs: int,
    backlog: int,
    keys: int,
    steps: int,
    rounds: int,
    workers: int,
    gunicorn: bool,
    log: Callable[[str], None],
    scratch: bool,
) -> dict[str, Any]:
    from testbed.bench import cluster_env, prepare_database, start_cluster

    prepare_database(scratch=scratch)
    remote = FastRemoteProcess(port=free_port(), log=ROOT / "var" / "bench-remote.log").start()
    web = cluster = None
    api: workloads.ApiClient | None = None
    results: dict[str, Any] = {
        "config": {
            "jobs": jobs,
            "backlog": backlog,
            "keys": keys,
            "limit": LIMIT,
            "steps": steps,
            "rounds": rounds,
        }
    }
    try:
        ensure_keyed(remote.url, steps=steps)
        api = workloads.ApiClient(f"http://127.0.0.1:{free_port()}", api_token())
        port = int(api.base_url.rsplit(":", 1)[1])
        web_env = {**cluster_env(workers=workers, stock=False), "SAS_THROTTLE_USER": "off"}
        web = WebProcess(port=port, env=web_env, log=ROOT / "var" / "bench-web.log", gunicorn=gunicorn)
        web.start()
        results["config"]["server"] = "gunicorn" if gunicorn else "runserver"

        def start() -> Any:
            return start_cluster(workers=workers, stock=False)

        for workflow, name in ((KEYED, "keyed"), (UNKEYED, "unkeyed")):
            figures, cluster = fairness(api, workflow, backlog=backlog, start=start, log=log)
            cluster.stop(30)
            cluster = None
            results[f"fairness_{name}"] = figures
            log(f"{name}: {figures['a_first_calls_before_b']} of A's first calls went out before B's first")
        cluster = start()
        accounts = [f"k{n % keys}" for n in range(jobs)]
        rates: dict[str, list[float]] = {"keyed": [], "unkeyed": []}
        submit(api, KEYED, accounts[:20])  # warm-up
        for r in range(1, rounds + 1):
            for workflow, name in ((UNKEYED, "unkeyed"), (KEYED, "keyed")):
                started = workloads.db_now()
                ids = submit(api, workflow, accounts)
                last = workloads.wait_for_jobs(ids, workloads.Counters())
                rates[name].append(round(jobs * steps / (last - started).total_seconds(), 1))
                if name == "keyed":
                    results.setdefault("most_in_flight_per_key", []).append(most_in_flight_per_key(ids))
            log(f"round {r}: unkeyed {rates['unkeyed'][-1]} steps/s, keyed {rates['keyed'][-1]} steps/s")
        results["steps_per_s"] = rates
        results["ratio"] = round(statistics.median(rates["keyed"]) / statistics.median(rates["unkeyed"]), 3)
    finally:
        if api is not None:
            api.close()
        if cluster is not None:
            cluster.stop(30)
        if web is not None:
            web.stop()
        remote.stop()
    return results


def table(results: dict[str, Any]) -> str:
    config = results["config"]
    keyed, unkeyed = results["fairness_keyed"], results["fairness_unkeyed"]
    return "\n".join(
        [
            "| measure | value |",
            "| --- | --- |",
            f"| server | {config['server']} |",
            f"| {config['backlog']} jobs of key A then {B_JOBS} of B: A's first calls before B's first, "
            f"keyed (limit {config['limit']}) | {keyed['a_first_calls_before_b']} |",
            f"| the same, unkeyed | {unkeyed['a_first_calls_before_b']} |",
            f"| most calls of one key in flight at once (keyed) | {keyed['most_in_flight_per_key']}, "
            f"{', '.join(map(str, results['most_in_flight_per_key']))} |",
            f"| {config['jobs']} jobs over {config['keys']} keys, steps/s per round, unkeyed | "
            f"{', '.join(map(str, results['steps_per_s']['unkeyed']))} |",
            f"| the same, keyed (limit {config['limit']} per key) | "
            f"{', '.join(map(str, results['steps_per_s']['keyed']))} |",
            f"| keyed / unkeyed (medians) | {results['ratio']} |",
        ]
    )
