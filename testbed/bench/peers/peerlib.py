"""What the peers' programs share (testbed.bench.peerbench runs them, each with its own virtualenv's
python): their arguments, the step's work, and the one JSON line each prints at the end.

The HTTP step is the bare django-q2 task's call (testbed.bench.bare): the same remote, path,
body shape and `Idempotency-Key`, through one kept-alive httpx client per worker process (per
thread where the peer runs steps in threads) with TCP_NODELAY.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import threading
import time
from importlib import metadata
from typing import Any

import httpx

#: Options on every client's connections (the fast remote sets the same on its side).
SOCKET_OPTIONS = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--work", choices=["http", "noop"], required=True)
    p.add_argument("--jobs", type=int, required=True, help="chains submitted")
    p.add_argument("--steps", type=int, default=3, help="steps per chain")
    p.add_argument("--workers", type=int, default=4, help="steps run at once")
    p.add_argument("--remote", default="", help="the remote's base URL (http work)")
    p.add_argument("--paths", default="/", help="the remote's paths, one per step in turn, comma-separated")
    p.add_argument("--run", required=True, help="this run's name, in every key")
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for the chains")
    p.add_argument("--warmup", type=int, default=10, help="chains run first and left out of the figures")
    return p


def request(
    peer: str, run: str, chain: int, index: int, paths: list[str]
) -> tuple[str, dict[str, Any], dict[str, str]]:
    """(path, body, headers) of a step's POST, shaped like the agent's."""
    key = f"{peer}-{run}-{chain}-{index}"
    body = {
        "job_id": f"{peer}-{run}-{chain}",
        "step": f"s{index}",
        "operation_id": key,
        "attempt": 1,
        "input": {"sku": "BENCH", "quantity": 1, "amount": 10},
        "results": {},
    }
    headers = {"Idempotency-Key": key, "X-SAS-Attempt": "1", "Accept": "application/json"}
    return paths[(index - 1) % len(paths)], body, headers


class AsyncHttp:
    """One kept-alive client for a worker process whose steps are coroutines."""

    def __init__(self, base: str, workers: int) -> None:
        self.client = httpx.AsyncClient(
            base_url=base,
            follow_redirects=False,
            trust_env=False,
            timeout=30,
            limits=httpx.Limits(max_connections=workers, max_keepalive_connections=workers),
            transport=httpx.AsyncHTTPTransport(socket_options=SOCKET_OPTIONS),
        )

    async def step(self, peer: str, run: str, chain: int, index: int, paths: list[str]) -> None:
        path, body, headers = request(peer, run, chain, index, paths)
        response = await self.client.post(path, json=body, headers=headers)
        response.raise_for_status()


class ThreadHttp:
    """One kept-alive client per thread, for peers that run each step in a thread of their own."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.local = threading.local()

    def step(self, peer: str, run: str, chain: int, index: int, paths: list[str]) -> None:
        client = getattr(self.local, "client", None)
        if client is None:
            client = httpx.Client(
                base_url=self.base,
                follow_redirects=False,
                trust_env=False,
                timeout=30,
                transport=httpx.HTTPTransport(socket_options=SOCKET_OPTIONS),
            )
            self.local.client = client
        path, body, headers = request(peer, run, chain, index, paths)
        client.post(path, json=body, headers=headers).raise_for_status()


class Clock:
    """When each chain was submitted and when its last step returned (this process's clock)."""

    def __init__(self) -> None:
        self.submitted: dict[int, float] = {}
        self.done: dict[int, float] = {}

    def submit(self, chain: int) -> None:
        self.submitted[chain] = time.monotonic()

    def finish(self, chain: int) -> None:
        self.done.setdefault(chain, time.monotonic())

    async def wait(self, jobs: int, timeout: float, failed: Any = None) -> None:
        """Until every chain is done or counted as failed by `failed()` (a coroutine function)."""
        deadline = time.monotonic() + timeout
        checked = time.monotonic()
        while len(self.done) < jobs and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
            if failed is not None and time.monotonic() - checked > 1:
                checked = time.monotonic()
                if len(self.done) + await failed() >= jobs:
                    return


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank `q`th percentile, as testbed.processes.percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))]


def report(
    peer: str, args: argparse.Namespace, clock: Clock, *, failed: int, packages: list[str], **extra: Any
) -> None:
    """Print the one JSON line the benchmark reads."""
    ended = len(clock.done)
    turnaround = [(clock.done[c] - clock.submitted[c]) * 1000 for c in clock.done]
    seconds = (max(clock.done.values()) - min(clock.submitted.values())) if clock.done else 0.0
    p50, p99 = percentile(turnaround, 50), percentile(turnaround, 99)
    line = {
        "peer": peer,
        "work": args.work,
        "jobs": args.jobs,
        "steps": args.steps,
        "workers": args.workers,
        "warmup": args.warmup,
        "ended": ended,
        "failed": failed,
        "seconds": round(seconds, 3),
        "steps_per_s": round(ended * args.steps / seconds, 1) if seconds > 0 else 0.0,
        "p50_ms": None if p50 is None else round(p50, 1),
        "p99_ms": None if p99 is None else round(p99, 1),
        "versions": {name: metadata.version(name) for name in packages},
        **extra,
    }
    print(json.dumps(line), flush=True)
