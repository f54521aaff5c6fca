"""The sandbox remote holds a synchronous call for its input's `hold_ms`, and counts the calls
in flight at once per path and account (`max_concurrent_by_route_account` in GET /stats), so that
a step's concurrency key is checked on that step's path alone. The sandbox runs in-process."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from testbed.sandbox import SandboxRemote

# No database at all: the same on SQLite.
pytestmark = pytest.mark.sqlite


def _call(url: str, key: str, body: dict[str, object]) -> int:
    return httpx.post(url, headers={"Idempotency-Key": key}, json=body, timeout=10).status_code


def test_a_call_is_held_for_its_hold_ms(sandbox: SandboxRemote) -> None:
    began = time.monotonic()
    status = _call(f"{sandbox.url}/payments/charge", "op-1", {"input": {"amount": 1, "hold_ms": 300}})
    assert status == 200
    assert time.monotonic() - began >= 0.3


def test_a_hold_that_is_not_milliseconds_is_refused(sandbox: SandboxRemote) -> None:
    for hold in ("300", -1, True, 10_000_000):
        body = {"input": {"amount": 1, "hold_ms": hold}}
        assert _call(f"{sandbox.url}/payments/charge", f"op-{hold}", body) == 400


def test_calls_in_flight_are_counted_per_path_and_account(sandbox: SandboxRemote) -> None:
    charge, reserve = f"{sandbox.url}/payments/charge", f"{sandbox.url}/inventory/reserve"
    calls = [
        (charge, "c1", "A"),
        (charge, "c2", "A"),
        (charge, "c3", "B"),
        (reserve, "r1", "A"),
    ]
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        answers = list(
            pool.map(lambda c: _call(c[0], c[1], {"input": {"account": c[2], "hold_ms": 500}}), calls)
        )
    assert answers == [200] * 4
    stats = httpx.get(f"{sandbox.url}/stats").json()
    assert stats["max_concurrent_by_route_account"] == {
        "/payments/charge": {"A": 2, "B": 1},
        "/inventory/reserve": {"A": 1},
    }
    assert stats["max_concurrent_by_account"] == {"A": 3, "B": 1}
    sandbox.reset()
    assert httpx.get(f"{sandbox.url}/stats").json()["max_concurrent_by_route_account"] == {}
