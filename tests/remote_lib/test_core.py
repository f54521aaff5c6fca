"""sas_remote's core: one run of the handler per operation ID whatever the deliveries, on each
store for real; business failures recorded and repeated; repeats that arrive while the first
delivery runs; a run whose process died taken over; status queries; bad input."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sas_remote import Record, Refused, Remote, Request, Response, Store, TryLater
from sas_remote.messages import fingerprint
from sas_remote.store import PENDING


def call(
    remote: Remote,
    body: dict[str, Any] | None = None,
    *,
    key: str = "op-1",
    attempt: int = 1,
    path: str = "/payments/charge",
) -> Response:
    payload = {"input": {"amount": 10}, "attempt": attempt} if body is None else body
    headers = {"Idempotency-Key": key, "X-SAS-Attempt": str(attempt), "Content-Type": "application/json"}
    return remote.handle("POST", path, headers, json.dumps(payload).encode())


class Counting:
    """A handler that counts its runs and answers what `answer` says."""

    def __init__(self, answer: Callable[[Request], Any] | None = None) -> None:
        self.runs: list[str] = []
        self.answer = answer or (lambda request: {"charged": request.input["amount"], "run": len(self.runs)})

    def __call__(self, request: Request) -> Any:
        self.runs.append(request.operation_id)
        return self.answer(request)


def header(response: Response, name: str) -> str | None:
    return next((v for k, v in response.headers if k.lower() == name.lower()), None)


def test_a_repeated_operation_gets_the_recorded_answer_without_a_second_run(store: Store) -> None:
    handler = Counting()
    remote = Remote(handler, store)
    first = call(remote, attempt=1)
    again = call(remote, {"input": {"amount": 10}, "attempt": 2, "heartbeat_details": {"at": 3}}, attempt=2)
    assert first.status == 200 and json.loads(first.body) == {"charged": 10, "run": 1}
    assert (again.status, again.body) == (first.status, first.body)
    assert header(again, "Idempotent-Replayed") == "true" and header(first, "Idempotent-Replayed") is None
    assert handler.runs == ["op-1"]


def test_a_refusal_is_recorded_and_repeated(store: Store) -> None:
    def refuse(request: Request) -> Any:
        raise Refused("over the limit", status=402, code="limit")

    handler = Counting(refuse)
    remote = Remote(handler, store)
    answers = [call(remote, attempt=n) for n in (1, 2, 3)]
    assert {(a.status, a.body) for a in answers} == {(402, b'{"error":"over the limit","code":"limit"}')}
    assert handler.runs == ["op-1"]


def test_the_same_key_with_another_request_is_refused_and_runs_nothing(store: Store) -> None:
    handler = Counting()
    remote = Remote(handler, store)
    call(remote)
    other_body = call(remote, {"input": {"amount": 11}, "attempt": 2})
    other_path = call(remote, path="/payments/refund")
    assert other_body.status == other_path.status == 422
    assert json.loads(other_body.body)["code"] == "idempotency_key_reused"
    assert handler.runs == ["op-1"]


def test_try_later_records_nothing_and_the_next_delivery_runs_again(store: Store) -> None:
    def flaky(request: Request) -> Any:
        if request.attempt == 1:
            raise TryLater("the bank is down", retry_after=5)
        return {"ok": True}

    handler = Counting(flaky)
    remote = Remote(handler, store)
    first = call(remote, attempt=1)
    assert first.status == 503 and header(first, "Retry-After") == "5"
    second = call(remote, attempt=2)
    assert second.status == 200 and handler.runs == ["op-1", "op-1"]


def test_a_handler_that_fails_answers_500_and_the_next_delivery_runs_again(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    def buggy(request: Request) -> Any:
        if request.attempt == 1:
            raise KeyError("oops")
        return {"ok": True}

    handler = Counting(buggy)
    remote = Remote(handler, store)
    assert call(remote, attempt=1).status == 500
    assert call(remote, attempt=2).status == 200
    assert len(handler.runs) == 2
    assert "the handler failed" in caplog.text


def test_an_output_that_is_not_json_is_a_500_and_not_recorded() -> None:
    remote = Remote(Counting(lambda request: {"when": object()}))
    assert call(remote).status == 500
    assert remote.store.get("op-1") is None


class Watched:
    """`store`, noting when a delivery finds the operation's run still going (it then waits)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.found_running = threading.Event()

    def get(self, key: str) -> Record | None:
        record = self.store.get(key)
        if record is not None and record.state == PENDING:
            self.found_running.set()
        return record

    def add(self, record: Record) -> bool:
        return self.store.add(record)

    def swap(self, old: Record, new: Record) -> bool:
        return self.store.swap(old, new)

    def remove(self, old: Record) -> bool:
        return self.store.remove(old)


def test_a_repeat_during_the_first_run_waits_and_gets_its_answer(store: Store) -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(request: Request) -> Any:
        entered.set()
        assert release.wait(10)
        return {"ok": True}

    handler = Counting(slow)
    watched = Watched(store)
    remote = Remote(handler, watched, wait_seconds=10)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(call, remote, attempt=1)
        assert entered.wait(10)
        second = pool.submit(call, remote, attempt=2)
        # The repeat finds the first run going and waits; then both get its answer.
        assert watched.found_running.wait(10)
        release.set()
        answers = [first.result(10), second.result(10)]
    assert [a.status for a in answers] == [200, 200]
    assert answers[0].body == answers[1].body
    assert header(answers[1], "Idempotent-Replayed") == "true"
    assert handler.runs == ["op-1"]


def test_a_repeat_that_waits_too_long_gets_a_transient_503(store: Store) -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(request: Request) -> Any:
        entered.set()
        assert release.wait(10)
        return {"ok": True}

    handler = Counting(slow)
    remote = Remote(handler, store, wait_seconds=0.1)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(call, remote, attempt=1)
        assert entered.wait(10)
        second = call(remote, attempt=2)
        release.set()
        assert first.result(10).status == 200
    assert second.status == 503 and header(second, "Retry-After") == "1"
    assert json.loads(second.body)["code"] == "in_progress"
    assert call(remote, attempt=3).status == 200
    assert handler.runs == ["op-1"]


def crashed_run(store: Store, *, lease_until: float) -> None:
    """What a process that died while running op-1's handler leaves behind."""
    mark = fingerprint("/payments/charge", {"input": {"amount": 10}})
    store.add(Record(key="op-1", fingerprint=mark, state=PENDING, token="dead", lease_until=lease_until))


def test_a_run_past_its_lease_is_taken_over(store: Store) -> None:
    crashed_run(store, lease_until=999.0)
    handler = Counting()
    remote = Remote(handler, store, clock=lambda: 1000.0)
    assert call(remote, attempt=2).status == 200
    assert handler.runs == ["op-1"]


def test_a_run_within_its_lease_is_not_taken_over(store: Store) -> None:
    crashed_run(store, lease_until=1001.0)
    handler = Counting()
    remote = Remote(handler, store, clock=lambda: 1000.0, wait_seconds=0.05)
    assert call(remote, attempt=2).status == 503
    assert handler.runs == []


def test_a_late_run_that_was_taken_over_keeps_the_first_answer_recorded(store: Store) -> None:
    """Two runs of one operation (the first outlived its lease): the first answer recorded stands
    and both deliveries answer it."""
    entered, release = threading.Event(), threading.Event()
    now = [1000.0]

    def answer(request: Request) -> Any:
        if request.attempt == 1:
            entered.set()
            assert release.wait(10)
        return {"attempt": request.attempt}

    remote = Remote(Counting(answer), store, lease_seconds=5, clock=lambda: now[0])
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(call, remote, attempt=1)
        assert entered.wait(10)
        now[0] += 10  # the first run's lease ran out
        second = call(remote, attempt=2)
        release.set()
        first = slow.result(10)
    assert json.loads(second.body) == {"attempt": 2}
    assert first.body == second.body and header(first, "Idempotent-Replayed") == "true"


def test_a_status_query_says_whether_the_operation_happened(store: Store) -> None:
    def answer(request: Request) -> Any:
        if request.input["amount"] > 100:
            raise Refused("too much")
        return {"charged": request.input["amount"]}

    remote = Remote(answer, store)
    call(remote, {"input": {"amount": 10}}, key="ok-op")
    call(remote, {"input": {"amount": 500}}, key="refused-op")
    crashed_run(store, lease_until=1e12)

    def status(path: str, **headers: str) -> Response:
        return remote.handle("GET", path, headers, b"")

    assert status("/payments/ok-op").status == 200
    assert json.loads(status("/payments/x", **{"Idempotency-Key": "ok-op"}).body) == {"charged": 10}
    assert status("/payments/refused-op").status == 404
    assert status("/payments/never-seen").status == 404
    assert status("/payments/op-1").status == 409


@pytest.mark.parametrize(
    ("headers", "body", "code"),
    [
        ({}, b"{}", "idempotency_key_missing"),
        ({"Idempotency-Key": "   "}, b"{}", "idempotency_key_missing"),
        ({"Idempotency-Key": "k" * 256}, b"{}", "idempotency_key_invalid"),
        ({"Idempotency-Key": "a\x01b"}, b"{}", "idempotency_key_invalid"),
        ({"Idempotency-Key": "k"}, b"not json", "invalid_json"),
        ({"Idempotency-Key": "k"}, b'{"amount": NaN}', "invalid_json"),
        ({"Idempotency-Key": "k"}, b"[1, 2]", "invalid_json"),
        ({"Idempotency-Key": "k"}, b"\xff\xfe", "invalid_json"),
        ({"Idempotency-Key": "k"}, b"[" * 100_000, "invalid_json"),
    ],
)
def test_bad_input_gets_a_400_and_runs_nothing(headers: dict[str, str], body: bytes, code: str) -> None:
    handler = Counting()
    response = Remote(handler).handle("POST", "/x", headers, body)
    assert response.status == 400 and json.loads(response.body)["code"] == code
    assert handler.runs == []


def test_a_method_other_than_post_or_get_is_a_405() -> None:
    assert Remote(Counting()).handle("PUT", "/x", {"Idempotency-Key": "k"}, b"{}").status == 405


def test_a_refusal_cannot_use_a_status_the_scheduler_reads_as_transient() -> None:
    for status in (200, 408, 429, 500):
        with pytest.raises(ValueError, match="4xx"):
            Refused("no", status=status)


def test_the_request_exposes_what_the_scheduler_sends() -> None:
    seen: list[Request] = []
    remote = Remote(lambda request: seen.append(request) or {})
    body = {
        "job_id": "j-1",
        "step": "charge",
        "operation_id": "op-1",
        "attempt": 2,
        "input": {"amount": 10},
        "results": {"reserve": {"id": 7}},
        "compensates": "op-0",
        "heartbeat_details": {"done": 3},
    }
    headers = {"Idempotency-Key": "op-1", "X-SAS-Attempt": "2", "X-SAS-Callback-URL": "http://s/cb/t/"}
    remote.handle("POST", "/payments/refund", headers, json.dumps(body).encode())
    (request,) = seen
    assert (request.operation_id, request.attempt, request.callback_url) == ("op-1", 2, "http://s/cb/t/")
    assert (request.job_id, request.step, request.compensates) == ("j-1", "charge", "op-0")
    assert request.input == {"amount": 10} and request.results == {"reserve": {"id": 7}}
    assert request.heartbeat_details == {"done": 3}


def test_with_a_secret_header_a_call_without_it_reaches_nothing() -> None:
    handler = Counting()
    remote = Remote(handler, secret_header=("X-Api-Key", "s3cret"))
    body = b'{"input": {"amount": 1}}'
    for headers in ({}, {"X-Api-Key": "wrong"}, {"X-Api-Key": "s3cre"}):
        assert remote.handle("POST", "/x", {"Idempotency-Key": "op-1", **headers}, body).status == 401
        assert remote.handle("GET", "/x/op-1", headers, b"").status == 401
    assert handler.runs == []
    ok = remote.handle("POST", "/x", {"Idempotency-Key": "op-1", "x-api-key": "s3cret"}, body)
    assert ok.status == 200 and handler.runs == ["op-1"]


@pytest.mark.parametrize(
    "callback",
    [
        "http://169.254.169.254/latest/",
        "https://scheduler.example.evil.test/api/v1/callbacks/t0k3n/",  # a string prefix's hole
        "https://scheduler.example/api/v1/callbacks-evil/t0k3n/",
        "https://scheduler.example/api/v1/callbacks/../../admin/",
        "http://scheduler.example/api/v1/callbacks/t0k3n/",  # another scheme
        "https://scheduler.example:8443/api/v1/callbacks/t0k3n/",  # another port
        "https://user:pw@scheduler.example/api/v1/callbacks/t0k3n/",
        "https://scheduler.example:99999/api/v1/callbacks/t0k3n/",
        "not a url",
    ],
)
def test_with_callback_origins_a_callback_url_elsewhere_is_refused(callback: str) -> None:
    handler = Counting()
    remote = Remote(handler, callback_origins=["https://scheduler.example/api/v1/callbacks"])
    body = b'{"input": {"amount": 1}}'
    refused = remote.handle("POST", "/x", {"Idempotency-Key": "op-1", "X-SAS-Callback-URL": callback}, body)
    assert refused.status == 400 and json.loads(refused.body)["code"] == "callback_not_allowed"
    assert handler.runs == []
    ok = "https://SCHEDULER.example:443/api/v1/callbacks/t0k3n/"
    assert (
        remote.handle("POST", "/x", {"Idempotency-Key": "op-1", "X-SAS-Callback-URL": ok}, body).status == 200
    )


def test_with_callback_prefixes_a_callback_url_elsewhere_is_refused() -> None:
    handler = Counting()
    remote = Remote(handler, callback_prefixes=["https://scheduler.example/api/v1/callbacks/"])
    body = b'{"input": {"amount": 1}}'

    def send(callback: str) -> Response:
        return remote.handle("POST", "/x", {"Idempotency-Key": "op-1", "X-SAS-Callback-URL": callback}, body)

    refused = send("http://169.254.169.254/latest/")
    assert refused.status == 400 and json.loads(refused.body)["code"] == "callback_not_allowed"
    assert handler.runs == []
    assert send("https://scheduler.example/api/v1/callbacks/t0k3n/").status == 200
