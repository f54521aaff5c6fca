"""The campaign's clients send a POST again, under the same key, after a 5xx or a lost
connection, and say what came of it (testbed.resend). The remote is a transport that answers from
a script."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from testbed import resend

pytestmark = pytest.mark.sqlite


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resend, "PAUSE", 0)


def scripted(*answers: int | type[httpx.HTTPError]) -> tuple[httpx.Client, list[httpx.Request]]:
    seen: list[httpx.Request] = []
    script: Iterator[int | type[httpx.HTTPError]] = iter(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = next(script)
        if isinstance(answer, int):
            return httpx.Response(answer, json={"id": "j1"})
        raise answer("scripted", request=request)

    return httpx.Client(base_url="http://remote", transport=httpx.MockTransport(handle)), seen


def test_a_5xx_and_a_lost_connection_are_sent_again_under_the_same_key() -> None:
    client, seen = scripted(503, httpx.ConnectError, 201)
    sent = resend.post_until_answered(client, "/api/v1/jobs/", {"a": 1}, key="k-1")
    assert sent.response is not None and sent.response.status_code == 201
    assert (sent.tries, sent.resent, sent.failures, sent.cut) == (3, 2, 2, False)
    assert [r.headers["Idempotency-Key"] for r in seen] == ["k-1"] * 3


def test_a_4xx_is_an_answer_unless_the_caller_takes_only_jobs() -> None:
    client, _ = scripted(409)
    assert resend.post_until_answered(client, "/x", {}).response.status_code == 409  # type: ignore[union-attr]
    client, _ = scripted(409, 429, 201)
    sent = resend.post_until_answered(client, "/x", {}, taken=lambda r: r.status_code in (200, 201))
    assert sent.response is not None and sent.response.status_code == 201 and sent.failures == 2


def test_a_cut_first_answer_is_counted_and_the_request_sent_again() -> None:
    client, _ = scripted(httpx.ReadTimeout, 200)
    sent = resend.post_until_answered(client, "/x", {}, cut_after=0.01)
    assert sent.cut and sent.resent == 1 and sent.response is not None
    # Without `cut_after`, a read timeout is a lost answer like any other.
    client, _ = scripted(httpx.ReadTimeout, 200)
    assert not resend.post_until_answered(client, "/x", {}).cut


def test_no_answer_in_every_try_says_what_the_last_got() -> None:
    client, seen = scripted(*([502] * 3))
    sent = resend.post_until_answered(client, "/x", {}, tries=3)
    assert sent.response is None and (sent.tries, sent.status) == (3, 502)
    assert sent.error.startswith("502") and len(seen) == 3
    assert "Idempotency-Key" not in seen[0].headers  # no key, none sent


def test_a_picker_chooses_the_client_of_each_try() -> None:
    first, seen_first = scripted(500)
    second, seen_second = scripted(201)
    clients = iter([first, second])
    sent = resend.post_until_answered(lambda: next(clients), "/x", {})
    assert sent.response is not None and (len(seen_first), len(seen_second)) == (1, 1)
