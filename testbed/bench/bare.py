"""The bare django-q2 baseline: chains of plain tasks, each enqueueing the next, the last marking
its chain done. The HTTP task makes the same POST the service's agent makes (same remote, path,
body shape and `Idempotency-Key`), through one pooled client per worker process, as a careful
author of a plain task would."""

from __future__ import annotations

import os
from typing import Any

import httpx
from django.db import connection
from django_q.tasks import async_task

DONE_TABLE = "sas_bench_done"

_client: httpx.Client | None = None
_client_pid: int | None = None


def _http() -> httpx.Client:
    global _client, _client_pid
    if _client is None or _client_pid != os.getpid():
        _client = httpx.Client(follow_redirects=False, trust_env=False)
        _client_pid = os.getpid()
    return _client


def _done(run: str, chain: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {DONE_TABLE} (run, chain, at) VALUES (%s, %s, clock_timestamp())",  # noqa: S608
            [run, chain],
        )


def bare_step(run: str, chain: int, index: int, total: int) -> None:
    """A no-op task that enqueues the next task of its chain."""
    if index < total:
        async_task("testbed.bench.bare.bare_step", run, chain, index + 1, total)
        return
    _done(run, chain)


def bare_http_step(run: str, chain: int, index: int, total: int, base: str, paths: list[str]) -> None:
    """POST to the remote as the agent would, then enqueue the next task of the chain."""
    path = paths[(index - 1) % len(paths)]
    key = f"bare-{run}-{chain}-{index}"
    response = _http().post(
        base + path,
        json={
            "job_id": f"bare-{run}-{chain}",
            "step": f"s{index}",
            "operation_id": key,
            "attempt": 1,
            "input": {"sku": "BENCH", "quantity": 1, "amount": 10},
            "results": {},
        },
        headers={"Idempotency-Key": key, "X-SAS-Attempt": "1", "Accept": "application/json"},
        timeout=30,
    )
    response.raise_for_status()
    if index < total:
        async_task("testbed.bench.bare.bare_http_step", run, chain, index + 1, total, base, paths)
        return
    _done(run, chain)


def ensure_done_table() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE UNLOGGED TABLE IF NOT EXISTS {DONE_TABLE} (run text, chain integer, at timestamptz)"
        )


def chains_done(run: str) -> tuple[int, Any]:
    """How many chains of `run` finished, and when the last did (the database's clock)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*), max(at) FROM {DONE_TABLE} WHERE run = %s /* bench */", [run])  # noqa: S608
        count, last = cursor.fetchone()
        return int(count), last
