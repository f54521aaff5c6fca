"""The sandbox remote's slow jobs (`input.slow` on an asynchronous route): 202 at once, heartbeats
to `<X-SAS-Callback-URL>heartbeat/` while the work lasts, then the result; or silence, or a death
mid-job. The sandbox runs in-process; a loopback server stands for the service's callback URLs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from testbed.processes import wait_until
from testbed.sandbox import BadRequest, SandboxRemote
from testbed.sandbox.core import SlowJob, read_slow_job
from tests.agents.test_http import Remote, _reply

# No database at all: the same on SQLite.
pytestmark = pytest.mark.sqlite

CALLBACK = "/api/v1/callbacks/token/"


@pytest.fixture
def service() -> Iterator[Remote]:
    """The service's side: takes heartbeats (200) and results (200), and records them."""
    receiver = Remote()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


def charge(
    sandbox: SandboxRemote, service: Remote, slow: dict[str, Any], *, attempt: int = 1, **body: Any
) -> httpx.Response:
    return httpx.post(
        f"{sandbox.url}/async/payments/charge",
        json={"operation_id": "op-1", "attempt": attempt, "input": {"amount": 5, "slow": slow}, **body},
        headers={
            "Idempotency-Key": "op-1",
            "X-SAS-Attempt": str(attempt),
            "X-SAS-Callback-URL": f"{service.url}{CALLBACK}",
        },
    )


def heartbeats(service: Remote) -> list[dict[str, Any]]:
    return [
        json.loads(r["body"])["details"] for r in service.requests if r["path"] == f"{CALLBACK}heartbeat/"
    ]


def results(service: Remote) -> list[dict[str, Any]]:
    return [json.loads(r["body"]) for r in service.requests if r["path"] == CALLBACK]


def test_a_slow_job_heartbeats_while_it_works_then_reports_its_result(
    sandbox: SandboxRemote, service: Remote
) -> None:
    assert charge(sandbox, service, {"duration_ms": 600, "heartbeat_ms": 100}).status_code == 202
    wait_until(lambda: results(service), timeout=20, message="the result was reported")
    beats = heartbeats(service)
    assert len(beats) >= 3
    assert [b["done_ms"] for b in beats] == sorted(b["done_ms"] for b in beats)
    assert {(b["of_ms"], b["attempt"]) for b in beats} == {(600, 1)}
    (result,) = results(service)
    assert result["outcome"] == "succeeded" and result["output"]["resumed_from"] is None
    assert sandbox.store.stats()["effects"] == {"op-1": 1}


def test_a_slow_job_that_dies_sends_no_more_heartbeats_and_no_result(
    sandbox: SandboxRemote, service: Remote
) -> None:
    charge(sandbox, service, {"duration_ms": 5000, "heartbeat_ms": 50, "die_after_ms": 200})
    wait_until(lambda: sandbox.store.stats()["slow_jobs"]["slow_died"] == 1, timeout=20, message="it died")
    sent = len(heartbeats(service))
    assert sent >= 1
    assert not sandbox.is_in_progress("op-1")  # a status query no longer says "in progress"
    assert len(heartbeats(service)) == sent and results(service) == []
    assert sandbox.store.stats()["effects"] == {}


def test_a_slow_job_that_falls_silent_still_reports_its_result(
    sandbox: SandboxRemote, service: Remote
) -> None:
    charge(sandbox, service, {"duration_ms": 800, "heartbeat_ms": 50, "silent_after_ms": 150})
    wait_until(lambda: results(service), timeout=20, message="the result was reported")
    assert all(b["done_ms"] < 150 for b in heartbeats(service))


def test_the_faults_apply_to_the_attempts_named_and_a_retry_resumes_where_the_details_say(
    sandbox: SandboxRemote, service: Remote
) -> None:
    slow = {"duration_ms": 5000, "heartbeat_ms": 50, "die_after_ms": 100, "on_attempts": [1]}
    details = {"done_ms": 4900, "of_ms": 5000, "attempt": 1}
    assert charge(sandbox, service, slow, attempt=2, heartbeat_details=details).status_code == 202
    wait_until(lambda: results(service), timeout=20, message="the second attempt reported")
    (result,) = results(service)
    assert result["output"]["resumed_from"] == details
    assert heartbeats(service)[0]["done_ms"] >= 4900


def test_a_heartbeat_the_service_refuses_stops_the_work(sandbox: SandboxRemote, service: Remote) -> None:
    service.handler = lambda h: _reply(h, 410 if h.path.endswith("/heartbeat/") else 200, {})
    charge(sandbox, service, {"duration_ms": 2000, "heartbeat_ms": 50})
    wait_until(
        lambda: sandbox.store.stats()["slow_jobs"]["heartbeats_refused"] == 1,
        timeout=20,
        message="it stopped",
    )
    assert len(heartbeats(service)) == 1 and results(service) == []
    assert not sandbox.is_in_progress("op-1")


def test_a_retry_carrying_heartbeat_details_is_the_same_request() -> None:
    from testbed.sandbox.core import request_fingerprint

    body = {"operation_id": "op", "attempt": 1, "input": {"amount": 5}}
    later = {**body, "attempt": 2, "heartbeat_details": {"done_ms": 10}}
    assert request_fingerprint(body) == request_fingerprint(later)


@pytest.mark.parametrize(
    "slow",
    [
        "fast",
        {},
        {"duration_ms": -1},
        {"duration_ms": 10, "heartbeat_ms": 0},
        {"duration_ms": 10, "on_attempts": "1"},
        {"duration_ms": 10, "forever": True},
    ],
)
def test_a_bad_slow_job_is_refused(slow: Any) -> None:
    with pytest.raises(BadRequest, match=r"input\.slow"):
        read_slow_job(slow)


def test_a_slow_job_resumes_from_at_most_all_of_its_work() -> None:
    job = SlowJob(duration_ms=100)
    assert job.done_before({"done_ms": 40}) == 40
    assert job.done_before({"done_ms": 400}) == 100
    assert job.done_before({"done_ms": "x"}) == job.done_before(None) == 0
