"""The sandbox remote's cancels (`POST /cancel/<route>`, what a step's `cancel_path` names): each
one recorded by the operation ID it carries, and listed by `GET /stats`; the HTTP agent's cancel
reaches it as the service sends it. The sandbox runs in-process."""

from __future__ import annotations

import httpx
import pytest

from agents.http import call_http
from agents.outcome import AttemptKind, CallSpec, Outcome
from testbed.sandbox import SandboxRemote

# No database at all: the same on SQLite.
pytestmark = pytest.mark.sqlite


def test_each_cancel_is_recorded_by_operation_id_and_says_whether_the_operation_was_processed(
    sandbox: SandboxRemote,
) -> None:
    before = httpx.post(f"{sandbox.url}/cancel/payments/charge", headers={"Idempotency-Key": "op-1"}, json={})
    assert before.status_code == 200 and before.json() == {"cancelled": "op-1", "known": False}
    charged = httpx.post(
        f"{sandbox.url}/payments/charge", headers={"Idempotency-Key": "op-1"}, json={"input": {"amount": 5}}
    )
    assert charged.status_code == 200
    after = httpx.post(
        f"{sandbox.url}/cancel/payments/charge", headers={"Idempotency-Key": "op-1", "X-SAS-Attempt": "2"}
    )
    assert after.json() == {"cancelled": "op-1", "known": True}
    stats = sandbox.store.stats()
    path = "/cancel/payments/charge"
    assert stats["cancels"] == [["op-1", path, None], ["op-1", path, 2]]
    assert stats["deliveries"] == {"op-1": 1}  # a cancel is no delivery of the operation


def test_a_cancel_without_an_operation_id_or_for_no_route_is_refused(sandbox: SandboxRemote) -> None:
    assert httpx.post(f"{sandbox.url}/cancel/payments/charge").status_code == 400
    assert httpx.post(f"{sandbox.url}/cancel/nowhere", headers={"Idempotency-Key": "x"}).status_code == 404
    assert sandbox.store.stats()["cancels"] == []


def test_the_http_agents_cancel_carries_the_calls_operation_id_and_attempt(sandbox: SandboxRemote) -> None:
    spec = CallSpec(
        job_id="j",
        step_id=1,
        attempt=3,
        operation_id="op-9",
        kind=AttemptKind.CANCEL,
        agent_kind="http",
        base_url=sandbox.url,
        path="/cancel/payments/charge",
        payload={"type": "cancel", "job_id": "j", "step": "charge", "operation_id": "op-9", "attempt": 3},
        timeout=5,
    )
    result = call_http(spec)
    assert (result.outcome, result.status_code) == (Outcome.SUCCEEDED, 200)
    assert sandbox.store.stats()["cancels"] == [["op-9", "/cancel/payments/charge", 3]]
