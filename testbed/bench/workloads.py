"""The benchmark's workloads: each starts from an idle cluster and ends when its last job did.

- HTTP through the API: jobs submitted with `POST /api/v1/jobs/` from several client threads,
  each step an HTTP call to the sandbox remote (what client systems do);
- python: jobs submitted in-process, each step a no-op callable (the engine's own cost);
- bare django-q2: chains of plain tasks making the same calls, on the stock ORM broker;
- sustained: a backlog kept up through the API for minutes, reported per 10-second window.

Times are the database's clock: from just before the first submission to the last job's
`finished_at` (bare chains: the last chain's completion row).
"""

from __future__ import annotations

import datetime as dt
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from django.db import connection
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.tasks import async_task

from scheduler.services import job_submit
from testbed.bench import bare
from testbed.bench.definitions import HTTP_INPUT, HTTP_PATHS
from testbed.processes import percentile

#: Threads submitting jobs through the API at once.
CLIENT_THREADS = 4
#: Jobs per request through the batch endpoint.
BATCH_SIZE = 50


@dataclass
class Counters:
    """The benchmark's own queries during a run, to take them out of the database's counts."""

    polls: int = 0


def db_now() -> dt.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp() /* bench */")
        value: dt.datetime = cursor.fetchone()[0]
        return value


def jobs_settled(ids: list[str], counters: Counters) -> tuple[int, int, Any]:
    """(succeeded, settled otherwise, last finished_at) of these jobs."""
    counters.polls += 1
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE status = 'succeeded'), "
            "count(*) FILTER (WHERE status IN ('failed', 'compensated', 'cancelled', 'needs_attention')), "
            "max(finished_at) FROM scheduler_job WHERE id = ANY(%s::uuid[]) /* bench */",
            [ids],
        )
        ok, other, last = cursor.fetchone()
        return int(ok), int(other), last


def wait_for_jobs(ids: list[str], counters: Counters, timeout: float = 900) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ok, other, last = jobs_settled(ids, counters)
        if other:
            raise RuntimeError(f"{other} benchmark job(s) did not succeed: look at the console")
        if ok == len(ids):
            return last
        time.sleep(0.1)
    raise RuntimeError(f"timed out after {timeout}s waiting for {len(ids)} jobs")


# --- submitting -----------------------------------------------------------------------------------


class ApiClient:
    """Submits jobs through the REST API, as a client system does."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url
        self.headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        self.local = threading.local()
        #: Every thread's client, to close them all once the run is over.
        self.clients: list[httpx.Client] = []

    def _client(self) -> httpx.Client:
        client = getattr(self.local, "client", None)
        if client is None:
            client = httpx.Client(base_url=self.base_url, headers=self.headers, timeout=60, trust_env=False)
            self.local.client = client
            self.clients.append(client)
        return client

    def close(self) -> None:
        """Close the connections of every thread's client."""
        while self.clients:
            self.clients.pop().close()

    def submit(self, workflow: str, payload: dict[str, Any]) -> str:
        response = self._client().post("/api/v1/jobs/", json={"workflow": workflow, "input": payload})
        if response.status_code != 201:
            raise RuntimeError(f"submit answered {response.status_code}: {response.text[:300]}")
        return str(response.json()["id"])

    def submit_batch(self, workflow: str, numbers: list[int]) -> list[str]:
        response = self._client().post(
            "/api/v1/jobs/batch/",
            json={"jobs": [{"workflow": workflow, "input": {**HTTP_INPUT, "n": n}} for n in numbers]},
        )
        if response.status_code != 201:
            raise RuntimeError(f"batch answered {response.status_code}: {response.text[:300]}")
        return [item["id"] for item in response.json()["jobs"]]

    def submit_batches(
        self, workflow: str, count: int, size: int = BATCH_SIZE, threads: int = CLIENT_THREADS
    ) -> list[str]:
        """`count` jobs through the batch endpoint, `size` a request, from `threads` threads."""
        return _in_threads(
            range(0, count, size),
            lambda first: self.submit_batch(workflow, list(range(first, min(first + size, count)))),
            threads=threads,
            what="submitting batches through the API",
        )

    def submit_many(self, workflow: str, count: int, threads: int = CLIENT_THREADS) -> list[str]:
        return _in_threads(
            range(count),
            lambda n: [self.submit(workflow, {**HTTP_INPUT, "n": n})],
            threads=threads,
            what="submitting through the API",
        )


def in_threads(
    items: range, make: Callable[[int], list[str]], *, what: str, threads: int = CLIENT_THREADS
) -> list[str]:
    """`make(item)` for every item, from the client's threads (as `_in_threads`)."""
    return _in_threads(items, make, threads=threads, what=what)


def _in_threads(items: range, make: Callable[[int], list[str]], *, threads: int, what: str) -> list[str]:
    """`make(item)` for every item, from `threads` threads; the ids made, in the order made."""
    ids: list[str] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    todo = iter(items)

    def worker() -> None:
        while True:
            with lock:
                item = next(todo, None)
            if item is None:
                return
            try:
                made = make(item)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return
            with lock:
                ids.extend(made)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise RuntimeError(f"{what} failed: {errors[0]}")
    return ids


# --- the full path --------------------------------------------------------------------------------


def run_http(api: ApiClient, workflow: str, jobs: int, steps: int, counters: Counters) -> dict[str, Any]:
    started = db_now()
    ids = api.submit_many(workflow, jobs)
    last = wait_for_jobs(ids, counters)
    seconds = (last - started).total_seconds()
    return {"seconds": round(seconds, 3), "steps_per_s": round(jobs * steps / seconds, 1), "ids": ids}


def run_batch(api: ApiClient, workflow: str, jobs: int, steps: int, counters: Counters) -> dict[str, Any]:
    started = db_now()
    ids = api.submit_batches(workflow, jobs)
    last = wait_for_jobs(ids, counters)
    seconds = (last - started).total_seconds()
    return {"seconds": round(seconds, 3), "steps_per_s": round(jobs * steps / seconds, 1), "ids": ids}


def run_engine_only(
    api: ApiClient, workflow: str, jobs: int, steps: int, counters: Counters, *, start: Callable[[], Any]
) -> tuple[dict[str, Any], Any]:
    """The engine alone: `jobs` submitted through the API while no cluster runs, then `start()`
    (a cluster) drains them. Timed from the first attempt's start to the last job's end, so the
    API and the cluster's own start-up are left out. Returns the figures and what `start` gave."""
    ids = api.submit_many(workflow, jobs)
    cluster = start()
    wait_for_jobs(ids, counters)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT min(a.started_at), max(j.finished_at) FROM scheduler_job j "
            "JOIN scheduler_step s ON s.job_id = j.id JOIN scheduler_attempt a ON a.step_id = s.id "
            "WHERE j.id = ANY(%s::uuid[]) /* bench */",
            [ids],
        )
        first, last = cursor.fetchone()
    seconds = (last - first).total_seconds()
    return {"seconds": round(seconds, 3), "steps_per_s": round(jobs * steps / seconds, 1)}, cluster


def run_python(workflow: str, jobs: int, steps: int, counters: Counters) -> dict[str, Any]:
    started = db_now()
    ids = [str(job_submit(workflow=workflow, input={"n": n}).job_id) for n in range(jobs)]
    last = wait_for_jobs(ids, counters)
    seconds = (last - started).total_seconds()
    return {"seconds": round(seconds, 3), "steps_per_s": round(jobs * steps / seconds, 1), "ids": ids}


def step_times(ids: list[str]) -> dict[str, Any]:
    """Per-step overhead (dispatch to outcome) and submit-to-done of these jobs."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM a.finished_at - a.dispatched_at) * 1000, "
            "extract(epoch FROM a.started_at - a.dispatched_at) * 1000 "
            "FROM scheduler_attempt a JOIN scheduler_step s ON s.id = a.step_id "
            "WHERE s.job_id = ANY(%s::uuid[]) AND a.finished_at IS NOT NULL /* bench */",
            [ids],
        )
        rows = cursor.fetchall()
        cursor.execute(
            "SELECT extract(epoch FROM finished_at - created_at) * 1000 FROM scheduler_job "
            "WHERE id = ANY(%s::uuid[]) AND finished_at IS NOT NULL /* bench */",
            [ids],
        )
        turnaround = [float(r[0]) for r in cursor.fetchall()]
    overhead = [float(r[0]) for r in rows]
    waits = [float(r[1]) for r in rows if r[1] is not None]
    return {
        "step_overhead_ms": {"p50": percentile(overhead, 50), "p99": percentile(overhead, 99)},
        "queue_wait_ms": {"p50": percentile(waits, 50), "p99": percentile(waits, 99)},
        "job_turnaround_ms": {"p50": percentile(turnaround, 50), "p99": percentile(turnaround, 99)},
    }


def run_latency(submit: Callable[[int], str], jobs: int, counters: Counters) -> dict[str, Any]:
    """Jobs one at a time on an idle cluster: the service's own overhead, without queueing."""
    ids = []
    for n in range(jobs):
        job_id = submit(n)
        wait_for_jobs([job_id], counters, timeout=60)
        ids.append(job_id)
    return {"jobs": jobs, **step_times(ids)}


# --- bare django-q2 -------------------------------------------------------------------------------


def run_bare(jobs: int, steps: int, *, http_base: str | None, counters: Counters) -> dict[str, Any]:
    """`jobs` chains of `steps` plain tasks through the stock ORM broker (the cluster running them
    must use it too); HTTP chains call `http_base` like the agent does."""
    bare.ensure_done_table()
    run = uuid.uuid4().hex[:8]
    broker = ORM(list_key=Conf.CLUSTER_NAME)
    started = db_now()
    for n in range(jobs):
        if http_base:
            async_task(
                "testbed.bench.bare.bare_http_step",
                run,
                n,
                1,
                steps,
                http_base,
                list(HTTP_PATHS),
                broker=broker,
            )
        else:
            async_task("testbed.bench.bare.bare_step", run, n, 1, steps, broker=broker)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        counters.polls += 1
        done, last = bare.chains_done(run)
        if done == jobs:
            seconds = (last - started).total_seconds()
            return {"seconds": round(seconds, 3), "steps_per_s": round(jobs * steps / seconds, 1)}
        time.sleep(0.1)
    raise RuntimeError("timed out waiting for the bare chains")


# --- sustained backlog ----------------------------------------------------------------------------


@dataclass
class Sustained:
    seconds: float
    window: float
    started: dt.datetime | None = None
    submitted: int = 0
    windows: list[float] = field(default_factory=list)


def run_sustained(
    api: ApiClient, workflow: str, *, seconds: float, backlog: int, counters: Counters, window: float = 10
) -> dict[str, Any]:
    """Keep about `backlog` jobs live through the API for `seconds`, then report the steps that
    finished in each `window`-second window (the first, a ramp-up, is left out)."""
    started = db_now()
    stop = time.monotonic() + seconds
    lock = threading.Lock()
    ids: list[str] = []
    settled = [0]
    errors: list[BaseException] = []

    def watch() -> None:
        while time.monotonic() < stop and not errors:
            with lock:
                current = list(ids)
            if current:
                ok, other, _ = jobs_settled(current, counters)
                settled[0] = ok + other
            time.sleep(0.5)

    def submit() -> None:
        n = 0
        while time.monotonic() < stop and not errors:
            with lock:
                live = len(ids) - settled[0]
            if live >= backlog:
                time.sleep(0.05)
                continue
            try:
                job_id = api.submit(workflow, {**HTTP_INPUT, "n": n})
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return
            n += 1
            with lock:
                ids.append(job_id)

    threads = [threading.Thread(target=watch)] + [
        threading.Thread(target=submit) for _ in range(CLIENT_THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"the sustained run failed: {errors[0]}")
    ended = started + dt.timedelta(seconds=seconds)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT floor(extract(epoch FROM a.finished_at - %s) / %s)::int AS w, count(*) "
            "FROM scheduler_attempt a WHERE a.finished_at >= %s AND a.finished_at < %s "
            "AND a.outcome = 'succeeded' GROUP BY w ORDER BY w /* bench */",
            [started, window, started, ended],
        )
        counts = dict(cursor.fetchall())
        cursor.execute(
            "SELECT extract(epoch FROM started_at - dispatched_at) * 1000 FROM scheduler_attempt "
            "WHERE dispatched_at >= %s AND dispatched_at < %s AND started_at IS NOT NULL /* bench */",
            [started, ended],
        )
        waits = [float(r[0]) for r in cursor.fetchall()]
    total = int(seconds // window)
    rates = [round(counts.get(w, 0) / window, 1) for w in range(1, total)]
    median = statistics.median(rates) if rates else 0.0
    # Let the backlog drain before the next measurement.
    wait_for_jobs(ids, counters, timeout=900)
    return {
        "seconds": seconds,
        "window_seconds": window,
        "backlog": backlog,
        "jobs": len(ids),
        "windows_steps_per_s": rates,
        "median_steps_per_s": median,
        "min_over_median": round(min(rates) / median, 2) if rates and median else None,
        "queue_wait_ms": {
            "p50": percentile(waits, 50),
            "p90": percentile(waits, 90),
            "p99": percentile(waits, 99),
            "max": max(waits) if waits else None,
        },
    }
