"""`sas signals send`, `sas events post` and `sas events replay`, and their client calls, in-process
against an httpx MockTransport (the remote boundary): what each sends, that a retry sends the same
request (the event's own id, or the same Idempotency-Key), and what each prints."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from sas_client import AsyncClient, RetryPolicy
from sas_client.openapi.models import EventReplayAnswer, InboundEventAnswer

from tests.client.test_async_and_cli_unit import JOB_ID, Script, cli_with, run

pytestmark = pytest.mark.sqlite

EVENT_ANSWER = {"event": 7, "started": [JOB_ID], "signalled": [], "refused": [], "duplicate": False}
REPLAY_ANSWER = {**EVENT_ANSWER, "event": 8, "replay_of": 7, "replayed_by": "olga", "reason": "fixed"}


def sent(request: httpx.Request) -> Any:
    return json.loads(request.content)


def test_an_event_is_posted_and_sent_again_as_it_was_after_a_503(monkeypatch: pytest.MonkeyPatch) -> None:
    script = Script(503, 202, body=EVENT_ANSWER)
    invoke = cli_with(monkeypatch, script)
    code, out, _ = invoke(
        "events", "post", "order.paid", "p-1", "--source", "payments", "--data", '{"order": "A-1"}'
    )
    assert code == 0, out
    first, again = script.requests
    assert first.method == "POST" and first.url.path == "/api/v1/events/"
    assert (
        sent(first)
        == sent(again)
        == {
            "type": "order.paid",
            "id": "p-1",
            "source": "payments",
            "data": {"order": "A-1"},
        }
    )
    assert "event 7" in out and f"started  {JOB_ID}" in out


def test_a_replay_is_keyed_and_a_retry_sends_the_same_key(monkeypatch: pytest.MonkeyPatch) -> None:
    script = Script(503, 202, body=REPLAY_ANSWER)
    invoke = cli_with(monkeypatch, script)
    code, out, _ = invoke("events", "replay", "7", "--reason", "fixed")
    assert code == 0, out
    first, again = script.requests
    assert first.url.path == "/api/v1/events/7/replay/" and sent(first) == {"reason": "fixed"}
    key = first.headers["Idempotency-Key"]
    assert key and again.headers["Idempotency-Key"] == key
    assert "replay of event 7 by olga" in out
    code, out, _ = cli_with(monkeypatch, Script(202, body=REPLAY_ANSWER))("events", "replay", "7", "--json")
    assert json.loads(out)["replay_of"] == 7


def test_a_signal_by_key_names_its_key_workflow_and_payload_and_says_when_it_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kept = {"jobs": [], "buffered": True, "expires_at": "2026-12-06T15:00:00Z"}
    script = Script(202, body=kept)
    code, out, _ = cli_with(monkeypatch, script)(
        "signals",
        "send",
        "A-1",
        "payment",
        "--payload",
        '{"amount": 5}',
        "--workflow",
        "order",
        "--key",
        "k-1",
    )
    assert code == 0, out
    (request,) = script.requests
    assert request.url.path == "/api/v1/signals/" and request.headers["Idempotency-Key"] == "k-1"
    assert sent(request) == {
        "business_key": "A-1",
        "name": "payment",
        "payload": {"amount": 5},
        "workflow": "order",
    }
    assert "kept until 2026-12-06T15:00:00Z" in out
    reached = Script(202, body={"jobs": [JOB_ID], "buffered": False, "expires_at": None})
    code, out, _ = cli_with(monkeypatch, reached)("signals", "send", "A-1", "payment")
    assert code == 0 and JOB_ID in out and sent(reached.requests[0])["payload"] is None


def test_the_async_client_posts_and_replays_events_as_typed_answers() -> None:
    answers = [EVENT_ANSWER, REPLAY_ANSWER]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(202, json=answers.pop(0))

    async def both() -> tuple[Any, Any]:
        async with AsyncClient(
            "https://sas.test", "key", transport=httpx.MockTransport(handler), retry=RetryPolicy(attempts=1)
        ) as sas:
            return await sas.post_event("order.paid", "p-1", "payments", {"a": 1}), await sas.replay_event(7)

    posted, replayed = run(both())
    assert isinstance(posted, InboundEventAnswer) and posted.event == 7
    assert (
        isinstance(replayed, EventReplayAnswer) and replayed.replay_of == 7 and replayed.replayed_by == "olga"
    )


def test_jobs_list_at_risk_asks_for_the_jobs_at_risk_only(monkeypatch: pytest.MonkeyPatch) -> None:
    page = {"next": None, "previous": None, "results": []}
    script = Script(200, 200, body=page)
    invoke = cli_with(monkeypatch, script)
    assert invoke("jobs", "list", "--at-risk", "--json")[0] == 0
    assert invoke("jobs", "list", "--json")[0] == 0
    at_risk, every = script.requests
    assert at_risk.url.params.get("at_risk") == "true" and "at_risk" not in every.url.params
