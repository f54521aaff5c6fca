"""Work answered with 202: the result recorded and POSTed to the callback URL (tried again on 5xx,
settled by 409), heartbeats on the way, a 410 stopping the work, a repeat redirecting the result.
The scheduler's callback endpoints are a real HTTP server on loopback (the remote boundary)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from sas_remote import AttemptGivenUp, CallbackClient, Heartbeat, Refused, Remote, Request, Store, later
from sas_remote.callbacks import Delivery

from tests.processes import wait_until


class Scheduler:
    """Records every POST; answers each path with the statuses scripted for it (200 when none
    is left), as the scheduler's callback and heartbeat endpoints would."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, Any]] = []
        self.script: dict[str, list[int]] = {}
        self.lock = threading.Lock()
        scheduler = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with scheduler.lock:
                    scheduler.posts.append((self.path, body))
                    statuses = scheduler.script.get(self.path, [])
                    status = statuses.pop(0) if statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def callback(self, token: str) -> str:
        return f"{self.url}/api/v1/callbacks/{token}/"

    def posted(self, path_part: str) -> list[Any]:
        with self.lock:
            return [body for path, body in self.posts if path_part in path]


@pytest.fixture
def scheduler() -> Iterator[Scheduler]:
    server = Scheduler()
    yield server
    server.server.shutdown()
    server.server.server_close()


def quick_callbacks() -> CallbackClient:
    return CallbackClient(tries=4, backoff=0.01, timeout=5)


def deliver(remote: Remote, callback: str, *, attempt: int = 1, body: dict[str, Any] | None = None) -> Any:
    headers = {"Idempotency-Key": "op-1", "X-SAS-Attempt": str(attempt), "X-SAS-Callback-URL": callback}
    payload = body if body is not None else {"input": {"beats": 2}, "attempt": attempt}
    return remote.handle("POST", "/later", headers, json.dumps(payload).encode())


class Work:
    """A handler that accepts, then works: `beats` heartbeats, then an answer."""

    def __init__(self, *, refuse: bool = False, hold: threading.Event | None = None) -> None:
        self.runs = 0
        self.refuse = refuse
        self.hold = hold
        self.stopped = threading.Event()

    def __call__(self, request: Request) -> Any:
        self.runs += 1

        def work(heartbeat: Heartbeat) -> Any:
            try:
                for n in range(request.input["beats"]):
                    heartbeat({"beat": n + 1})
                if self.hold is not None:
                    assert self.hold.wait(10)
                    heartbeat({"beat": "after hold"})
            except AttemptGivenUp:
                self.stopped.set()
                raise
            if self.refuse:
                raise Refused("no stock", status=409, code="stock")
            return {"beats": request.input["beats"]}

        return later(work)


def test_accepted_work_answers_202_heartbeats_and_posts_its_result(
    scheduler: Scheduler, store: Store
) -> None:
    handler = Work()
    remote = Remote(handler, store, callbacks=quick_callbacks(), callback_origins=[scheduler.url])
    callback = scheduler.callback("t1")
    response = deliver(remote, callback)
    assert response.status == 202
    assert remote.wait_idle(10)
    assert scheduler.posted("/t1/heartbeat/") == [{"details": {"beat": 1}}, {"details": {"beat": 2}}]
    assert scheduler.posted("/t1/") == [
        {"details": {"beat": 1}},
        {"details": {"beat": 2}},
        {"outcome": "succeeded", "output": {"beats": 2}},
    ]
    # A later delivery of the operation gets the recorded answer at once.
    again = deliver(remote, scheduler.callback("t2"), attempt=2)
    assert (again.status, json.loads(again.body)) == (200, {"beats": 2})
    assert handler.runs == 1
    remote.close()


def test_a_refusal_of_accepted_work_is_posted_and_recorded(scheduler: Scheduler, store: Store) -> None:
    remote = Remote(Work(refuse=True), store, callbacks=quick_callbacks(), callback_origins=[scheduler.url])
    assert deliver(remote, scheduler.callback("t1")).status == 202
    assert remote.wait_idle(10)
    assert scheduler.posted("/t1/")[-1] == {"outcome": "refused", "error": "no stock"}
    assert deliver(remote, scheduler.callback("t2"), attempt=2).status == 409
    remote.close()


def test_a_result_is_posted_again_after_5xx_and_a_409_counts_as_delivered(scheduler: Scheduler) -> None:
    callback = scheduler.callback("t1")
    path = callback.removeprefix(scheduler.url)
    scheduler.script[path] = [503, 502, 409, 200]
    remote = Remote(Work(), callbacks=quick_callbacks(), callback_origins=[scheduler.url])
    deliver(remote, callback, body={"input": {"beats": 0}})
    assert remote.wait_idle(10)
    assert len(scheduler.posted(path)) == 3  # two failures, then the 409: nothing more
    remote.close()


def test_a_heartbeat_answered_410_stops_the_work_and_the_next_attempt_runs_it_again(
    scheduler: Scheduler, store: Store
) -> None:
    handler = Work()
    first = scheduler.callback("t1")
    scheduler.script[first.removeprefix(scheduler.url) + "heartbeat/"] = [200, 410]
    remote = Remote(handler, store, callbacks=quick_callbacks(), callback_origins=[scheduler.url])
    assert deliver(remote, first, body={"input": {"beats": 3}}).status == 202
    assert remote.wait_idle(10)
    assert handler.stopped.is_set()
    assert scheduler.posted("/t1/") == [{"details": {"beat": 1}}, {"details": {"beat": 2}}]  # no result
    assert store.get("op-1") is None
    # The scheduler's next attempt runs the operation afresh, to its own callback URL.
    assert deliver(remote, scheduler.callback("t2"), attempt=2, body={"input": {"beats": 3}}).status == 202
    assert remote.wait_idle(10)
    assert scheduler.posted("/t2/")[-1] == {"outcome": "succeeded", "output": {"beats": 3}}
    assert handler.runs == 2
    remote.close()


def test_a_repeat_during_the_work_gets_202_and_the_result_goes_to_its_callback(
    scheduler: Scheduler, store: Store
) -> None:
    hold = threading.Event()
    handler = Work(hold=hold)
    remote = Remote(handler, store, callbacks=quick_callbacks(), callback_origins=[scheduler.url])
    assert deliver(remote, scheduler.callback("t1")).status == 202
    wait_until(lambda: len(scheduler.posted("/t1/heartbeat/")) == 2, timeout=10, message="two heartbeats")
    assert deliver(remote, scheduler.callback("t2"), attempt=2).status == 202
    hold.set()
    assert remote.wait_idle(10)
    assert handler.runs == 1
    assert scheduler.posted("/t2/") == [
        {"details": {"beat": "after hold"}},
        {"outcome": "succeeded", "output": {"beats": 2}},
    ]
    assert not [b for b in scheduler.posted("/t1/") if "outcome" in b]
    remote.close()


def test_accepted_work_without_a_callback_url_runs_at_once() -> None:
    handler = Work()
    remote = Remote(handler)
    response = remote.handle("POST", "/later", {"Idempotency-Key": "op-1"}, b'{"input": {"beats": 2}}')
    assert (response.status, json.loads(response.body)) == (200, {"beats": 2})
    remote.close()


def test_a_callback_refused_for_good_is_not_tried_again(scheduler: Scheduler) -> None:
    url = scheduler.callback("bad")
    scheduler.script[url.removeprefix(scheduler.url)] = [403]
    assert quick_callbacks().post_result(lambda: url, {"outcome": "succeeded"}) is Delivery.REFUSED
    assert len(scheduler.posted("/bad/")) == 1


def test_a_callback_nobody_answers_is_tried_the_given_number_of_times() -> None:
    client = CallbackClient(tries=3, backoff=0.01, timeout=1)
    url = "http://127.0.0.1:9/api/v1/callbacks/t/"  # the discard port: connection refused
    assert client.post_result(lambda: url, {"outcome": "succeeded"}) is Delivery.UNDELIVERED


def test_accepted_work_with_a_callback_url_needs_the_callback_origins(scheduler: Scheduler) -> None:
    """Without callback_origins anyone who reaches the remote could have it POST results to an
    address of their choosing: accepted work is refused (500) and does not run."""
    handler = Work()
    remote = Remote(handler, callbacks=quick_callbacks())
    response = deliver(remote, "http://169.254.169.254/latest/meta-data/")
    assert response.status == 500 and json.loads(response.body)["code"] == "callback_origins_required"
    assert remote.wait_idle(5) and scheduler.posts == []
    # The operation is not held: once configured, the same delivery is accepted.
    configured = Remote(handler, remote.store, callbacks=quick_callbacks(), callback_origins=[scheduler.url])
    assert deliver(configured, scheduler.callback("t1")).status == 202
    assert configured.wait_idle(10)
    remote.close()
    configured.close()
