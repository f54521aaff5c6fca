"""The benchmark's fast remote (testbed.fastremote), a real process on loopback: it de-duplicates
on the operation ID, reports its own CPU per call, and with `--nagle` reproduces the kept-alive
stall of a remote that leaves Nagle's algorithm on (which the agent's client avoids)."""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from testbed.bench import remote as bench_remote
from testbed.fastremote import stats
from testbed.processes import ROOT, FastRemoteProcess, free_port

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def remotes() -> Iterator[tuple[FastRemoteProcess, FastRemoteProcess]]:
    fast = FastRemoteProcess(port=free_port(), log=ROOT / "test-artifacts" / "fastremote.log").start()
    nagle = FastRemoteProcess(
        port=free_port(), log=ROOT / "test-artifacts" / "fastremote-nagle.log", nagle=True
    ).start()
    yield fast, nagle
    fast.stop()
    nagle.stop()


def test_a_repeated_operation_id_gets_the_first_answer_and_the_calls_are_counted(
    remotes: tuple[FastRemoteProcess, FastRemoteProcess],
) -> None:
    fast, _ = remotes
    before = stats(fast.url)
    with httpx.Client(base_url=fast.url, trust_env=False) as client:
        key = str(uuid.uuid4())
        first = client.post("/payments/charge", json={"x": 1}, headers={"Idempotency-Key": key})
        again = client.post("/payments/charge", json={"x": 1}, headers={"Idempotency-Key": key})
        other = client.post("/payments/charge", json={}, headers={"Idempotency-Key": f"{key}-2"})
        assert first.status_code == again.status_code == 200
        assert first.json() == again.json() == {"ok": True, "operation": key}
        assert other.json()["operation"] == f"{key}-2"
        assert client.get("/anything").status_code == 404
    after = stats(fast.url)
    assert after["calls"] - before["calls"] == 3 and after["unique"] - before["unique"] == 2
    cost = bench_remote.cost(before, after)
    assert cost["calls"] == 3 and cost["cpu_us_per_call"] is not None and cost["cpu_us_per_call"] > 0


def test_with_nagle_on_a_plain_client_stalls_on_a_kept_alive_connection_and_the_agent_does_not(
    remotes: tuple[FastRemoteProcess, FastRemoteProcess],
) -> None:
    fast, nagle = remotes
    with httpx.Client(trust_env=False) as client:

        def median_ms(url: str) -> float:
            client.post(url + "/x", json={}, headers={"Idempotency-Key": "warm"})
            took = []
            for n in range(15):
                started = time.perf_counter()
                client.post(url + "/x", json={}, headers={"Idempotency-Key": str(n)})
                took.append((time.perf_counter() - started) * 1000)
            return statistics.median(took)

        assert median_ms(fast.url) < 20
        assert median_ms(nagle.url) >= 35  # the delayed ACK: some 40 ms per call
    probe = bench_remote.nagle_probe(fast.url, nagle.url, calls=15)
    assert probe["agent_nagle_extra_ms"] < 10 and probe["plain_nagle_extra_ms"] >= 30


@pytest.fixture(autouse=True)
def _close_the_agents_client() -> Iterator[None]:
    """The probe calls through the agent's process-wide client: closed after each test."""
    yield
    from agents import http

    if http._client is not None:
        http._client.close()
        http._client = None
