"""The benchmark's remote, measured: its own CPU per call (it must be faster than both sides it
serves, or it caps the baseline), and what a remote that leaves Nagle's algorithm on costs per
call on a kept-alive connection, through the agent's client and through a plain httpx client."""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

import httpx

from scheduler.models import AttemptKind
from testbed.bench.definitions import HTTP_INPUT, HTTP_PATHS
from testbed.fastremote import stats


def cost(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The remote's CPU per call between two `/stats` readings, and the calls per second one core
    of it could serve at that cost."""
    calls = after["calls"] - before["calls"]
    cpu = after["cpu_seconds"] - before["cpu_seconds"]
    per_call = cpu / calls if calls else None
    return {
        "calls": calls,
        "cpu_seconds": round(cpu, 3),
        "cpu_us_per_call": round(per_call * 1e6, 1) if per_call else None,
        "capacity_calls_per_s": round(1 / per_call) if per_call else None,
    }


def _median_ms(call: Any, calls: int) -> float:
    call(-1)  # connected and kept alive
    took = []
    for n in range(calls):
        started = time.perf_counter()
        call(n)
        took.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(took), 2)


def _agent_call(url: str) -> Any:
    from agents.http import call_http
    from agents.outcome import CallSpec

    def call(n: int) -> None:
        key = f"probe-{uuid.uuid4()}"
        result = call_http(
            CallSpec(
                job_id="probe",
                step_id=n,
                attempt=1,
                operation_id=key,
                kind=AttemptKind.CALL,
                agent_kind="http",
                base_url=url,
                path=HTTP_PATHS[0],
                payload={"step": "probe", "operation_id": key, "input": HTTP_INPUT},
                timeout=10,
                headers={},
            )
        )
        assert result.outcome == "succeeded", result

    return call


def _plain_call(url: str, client: httpx.Client) -> Any:
    def call(n: int) -> None:
        response = client.post(
            url + HTTP_PATHS[0],
            json={"input": HTTP_INPUT},
            headers={"Idempotency-Key": f"probe-{uuid.uuid4()}"},
        )
        response.raise_for_status()

    return call


def nagle_probe(fast_url: str, nagle_url: str, calls: int = 200) -> dict[str, Any]:
    """Milliseconds per call (median, one kept-alive connection, one call at a time) to a remote
    with TCP_NODELAY and to one leaving Nagle on: through the agent's client (TCP_QUICKACK) and a
    plain httpx client."""
    with httpx.Client(trust_env=False, timeout=10) as client:
        figures = {
            "agent_nodelay_ms": _median_ms(_agent_call(fast_url), calls),
            "agent_nagle_ms": _median_ms(_agent_call(nagle_url), calls),
            "plain_nodelay_ms": _median_ms(_plain_call(fast_url, client), calls),
            "plain_nagle_ms": _median_ms(_plain_call(nagle_url, client), calls),
        }
    figures["agent_nagle_extra_ms"] = round(figures["agent_nagle_ms"] - figures["agent_nodelay_ms"], 2)
    figures["plain_nagle_extra_ms"] = round(figures["plain_nagle_ms"] - figures["plain_nodelay_ms"], 2)
    return figures


__all__ = ["cost", "nagle_probe", "stats"]
