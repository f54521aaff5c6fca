"""The HTTP agent against a real HTTP server on loopback: request shape and outcome mapping."""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import json
import socket
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from agents.egress import deadline, outbound_client
from agents.http import call_http
from agents.outcome import CallSpec
from scheduler.models import AttemptKind, Outcome

Handler = Callable[[BaseHTTPRequestHandler], None]


class Remote:
    def __init__(self) -> None:
        self.handler: Handler = lambda h: _reply(h, 200, {"ok": True})
        self.requests: list[dict[str, Any]] = []
        remote = self

        class _H(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                remote.requests.append(
                    {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body}
                )
                remote.handler(self)

            do_GET = do_POST = _handle  # noqa: N815 - the names http.server dispatches to

            def log_message(self, *args: Any) -> None:
                pass

        self._handler_class = _H
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _H)
        # server_close() waits for the handler threads, so no connection outlives its test.
        self.server.daemon_threads = False
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def keep_alive(self) -> None:
        """Answer over HTTP/1.1 and keep the connection open between requests."""
        self._handler_class.protocol_version = "HTTP/1.1"


def _reply(h: BaseHTTPRequestHandler, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
    data = json.dumps(body).encode() if not isinstance(body, bytes) else body
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.end_headers()
    h.wfile.write(data)


@pytest.fixture
def remote() -> Iterator[Remote]:
    from agents import http

    r = Remote()
    yield r
    # Hang up the agents' kept-alive connections first: the handlers waiting on them then end.
    if http._client is not None:
        http._client.close()
        http._client = None
    r.server.shutdown()
    r.server.server_close()


def spec(base: str, *, timeout: float = 2.0, kind: str = AttemptKind.CALL, path: str = "/pay") -> CallSpec:
    return CallSpec(
        job_id="j",
        step_id=1,
        attempt=3,
        operation_id="op-123",
        kind=kind,
        agent_kind="http",
        base_url=base,
        path=path,
        payload={"step": "pay", "operation_id": "op-123", "input": {"amount": 5}},
        timeout=timeout,
        headers={"Authorization": "Bearer s3cret"},
    )


def test_the_call_posts_the_payload_with_the_idempotency_key_and_attempt(remote: Remote) -> None:
    result = call_http(spec(remote.url))
    assert result.outcome == Outcome.SUCCEEDED and result.output == {"ok": True}
    (req,) = remote.requests
    assert req["method"] == "POST" and req["path"] == "/pay"
    assert req["headers"]["Idempotency-Key"] == "op-123"
    assert req["headers"]["X-SAS-Attempt"] == "3"
    assert req["headers"]["Authorization"] == "Bearer s3cret"
    assert json.loads(req["body"]) == {"step": "pay", "operation_id": "op-123", "input": {"amount": 5}}
    assert result.status_code == 200 and result.latency_ms is not None


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (201, Outcome.SUCCEEDED),
        (400, Outcome.BUSINESS_FAILURE),
        (402, Outcome.BUSINESS_FAILURE),
        (409, Outcome.BUSINESS_FAILURE),
        (422, Outcome.BUSINESS_FAILURE),
        (408, Outcome.TRANSIENT_FAILURE),
        (429, Outcome.TRANSIENT_FAILURE),
        (500, Outcome.TRANSIENT_FAILURE),
        (503, Outcome.TRANSIENT_FAILURE),
    ],
)
def test_status_codes_map_to_outcomes(remote: Remote, status: int, outcome: str) -> None:
    remote.handler = lambda h: _reply(h, status, {"status": status})
    result = call_http(spec(remote.url))
    assert result.outcome == outcome
    assert result.status_code == status
    assert str(status) in result.excerpt


def test_a_redirect_is_not_followed(remote: Remote) -> None:
    remote.handler = lambda h: _reply(h, 302, b"", {"Location": "http://169.254.169.254/"})
    result = call_http(spec(remote.url))
    assert result.outcome == Outcome.BUSINESS_FAILURE and "not followed" in result.error
    assert len(remote.requests) == 1


def test_a_refused_connection_is_a_transient_failure() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = call_http(spec(f"http://127.0.0.1:{port}"))
    assert result.outcome == Outcome.TRANSIENT_FAILURE


def test_no_answer_before_the_deadline_is_no_answer(remote: Remote) -> None:
    release = threading.Event()
    answered = threading.Event()

    def hold(h: BaseHTTPRequestHandler) -> None:
        release.wait(30)  # the remote answers only once the test lets it
        answered.set()
        with contextlib.suppress(OSError):  # the agent has hung up by then
            _reply(h, 200, {})

    remote.handler = hold
    result = call_http(spec(remote.url, timeout=0.3))
    # The agent gave up while the remote was still holding the request.
    assert not answered.is_set()
    release.set()
    assert result.outcome == Outcome.NO_ANSWER, result.error
    assert answered.wait(10)


def test_a_connection_closed_without_an_answer_is_no_answer(remote: Remote) -> None:
    def drop(h: BaseHTTPRequestHandler) -> None:
        h.close_connection = True
        h.connection.shutdown(socket.SHUT_RDWR)

    remote.handler = drop
    result = call_http(spec(remote.url))
    assert result.outcome == Outcome.NO_ANSWER


def test_an_oversized_answer_is_not_read_into_memory(remote: Remote, settings: Any) -> None:
    settings.SAS_MAX_RESPONSE_BYTES = 1000
    remote.handler = lambda h: _reply(h, 200, b"x" * 5000)
    result = call_http(spec(remote.url))
    assert result.outcome == Outcome.TRANSIENT_FAILURE and "larger than" in result.error


def test_a_remote_answering_a_byte_at_a_time_is_cut_at_the_deadline_as_no_answer(remote: Remote) -> None:
    # Each byte comes well within a read timeout; only the call's deadline can end it.
    stop = threading.Event()

    def trickle(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", "1000")
        h.end_headers()
        h.wfile.flush()
        with contextlib.suppress(OSError):
            while not stop.wait(0.1):
                h.wfile.write(b" ")
                h.wfile.flush()

    remote.handler = trickle
    started = time.monotonic()
    result = call_http(spec(remote.url, timeout=1.0))
    took = time.monotonic() - started
    stop.set()
    assert result.outcome == Outcome.NO_ANSWER and "no answer in time" in result.error
    assert took < 10  # the trickle alone would run 100 s


def test_a_remote_trickling_its_headers_is_cut_at_the_deadline_as_no_answer(remote: Remote) -> None:
    stop = threading.Event()

    def trickle(h: BaseHTTPRequestHandler) -> None:
        with contextlib.suppress(OSError):
            h.wfile.write(b"HTTP/1.1 200 OK\r\n")
            while not stop.wait(0.1):
                h.wfile.write(b"X-Slow: a\r\n")
                h.wfile.flush()

    remote.handler = trickle
    result = call_http(spec(remote.url, timeout=1.0))
    stop.set()
    assert result.outcome == Outcome.NO_ANSWER


def test_a_request_whose_deadline_has_passed_connects_nowhere(remote: Remote) -> None:
    with outbound_client() as http_client, deadline(0), pytest.raises(httpx.ConnectTimeout):
        http_client.get(remote.url)
    assert remote.requests == []


def test_a_name_server_that_does_not_answer_holds_a_call_no_longer_than_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agents import validation

    released = threading.Event()

    def silent(host: str, port: int) -> list[str]:
        released.wait(30)  # a resolver with no timeout of its own
        return ["203.0.113.9"]

    monkeypatch.setattr(validation, "resolve", silent)
    started = time.monotonic()
    result = call_http(spec("http://slow-dns.example.com", timeout=0.5))
    took = time.monotonic() - started
    released.set()
    assert result.outcome == Outcome.TRANSIENT_FAILURE  # nothing was sent
    assert "no name resolution before the request's deadline" in result.error
    assert took < 10  # (the resolver would answer after 30 s; a loaded machine has room)


def test_a_kept_alive_connection_serves_each_request_under_its_own_deadline(remote: Remote) -> None:
    remote.keep_alive()
    with outbound_client() as http_client:
        with deadline(0.5):
            assert http_client.get(remote.url).status_code == 200
        time.sleep(0.6)  # the first request's deadline is long past
        with deadline(5):
            assert http_client.get(remote.url).status_code == 200
    assert len(remote.requests) == 2


def _bomb(encoding: str, size: int) -> bytes:
    """`size` zero bytes compressed (about a thousandth of that)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16 if encoding == "gzip" else zlib.MAX_WBITS)
    zeros = bytes(1024 * 1024)
    parts = [packer.compress(zeros) for _ in range(size // len(zeros))]
    return b"".join([*parts, packer.flush()])


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_answer_expanding_past_the_cap_is_refused_without_expanding_it(
    remote: Remote, settings: Any, encoding: str
) -> None:
    settings.SAS_MAX_RESPONSE_BYTES = 1024 * 1024
    bomb = _bomb(encoding, 128 * 1024 * 1024)
    assert len(bomb) < settings.SAS_MAX_RESPONSE_BYTES
    remote.handler = lambda h: _reply(h, 200, bomb, {"Content-Encoding": encoding})
    tracemalloc.start()
    try:
        result = call_http(spec(remote.url, timeout=30))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.outcome == Outcome.TRANSIENT_FAILURE
    assert result.error == f"answer larger than {settings.SAS_MAX_RESPONSE_BYTES} bytes"
    assert peak < 16 * 1024 * 1024  # about the cap, not the 128 MiB it expands to


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "deflate-raw"])
def test_a_compressed_answer_within_the_cap_is_read_decoded(remote: Remote, encoding: str) -> None:
    data = json.dumps({"ok": True, "pad": "x" * 200_000}).encode()
    if encoding == "gzip":
        body = gzip.compress(data)
    elif encoding == "deflate":
        body = zlib.compress(data)
    else:
        packer = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
        body = packer.compress(data) + packer.flush()
    remote.handler = lambda h: _reply(h, 200, body, {"Content-Encoding": encoding.split("-")[0]})
    result = call_http(spec(remote.url))
    assert result.outcome == Outcome.SUCCEEDED and result.output["ok"] is True
    assert remote.requests[0]["headers"]["Accept-Encoding"] == "gzip, deflate"


def test_a_non_json_success_is_a_success_with_no_output(remote: Remote) -> None:
    remote.handler = lambda h: _reply(h, 200, b"<html>ok</html>")
    result = call_http(spec(remote.url))
    assert result.outcome == Outcome.SUCCEEDED and result.output is None
    assert result.excerpt == "<html>ok</html>"


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(200, Outcome.SUCCEEDED), (404, Outcome.NOT_HAPPENED), (500, Outcome.TRANSIENT_FAILURE)],
)
def test_a_reconcile_asks_the_status_path_for_the_operation(
    remote: Remote, status: int, outcome: str
) -> None:
    remote.handler = lambda h: _reply(h, status, {"charge_id": "c1"})
    result = call_http(spec(remote.url, kind=AttemptKind.RECONCILE, path="/payments/{operation_id}"))
    assert result.outcome == outcome
    (req,) = remote.requests
    assert req["method"] == "GET" and req["path"] == "/payments/op-123"
    if outcome == Outcome.SUCCEEDED:
        assert result.output == {"charge_id": "c1"}


@pytest.mark.parametrize("base", ["ftp://127.0.0.1", "file:///etc/passwd", "http://user:pw@127.0.0.1"])
def test_a_target_other_than_http_is_refused_without_a_call(base: str) -> None:
    result = call_http(spec(base))
    assert result.outcome == Outcome.BUSINESS_FAILURE and "endpoint refused" in result.error


def test_a_host_outside_the_allowed_hosts_is_refused_at_call_time(remote: Remote, settings: Any) -> None:
    settings.SAS_AGENT_ALLOWED_HOSTS = ["payments.internal"]
    result = call_http(spec(remote.url))
    assert result.outcome == Outcome.BUSINESS_FAILURE and "SAS_AGENT_ALLOWED_HOSTS" in result.error
    assert remote.requests == []


def test_calls_reuse_one_client_and_its_kept_alive_connection(remote: Remote) -> None:
    from agents import http

    connections: set[int] = set()

    def reply(h: BaseHTTPRequestHandler) -> None:
        connections.add(id(h.connection))
        _reply(h, 200, {})

    remote.handler = reply
    remote.keep_alive()
    first = http.client()
    for _ in range(3):
        assert call_http(spec(remote.url)).outcome == Outcome.SUCCEEDED
    assert http.client() is first
    assert len(connections) == 1  # one TCP connection (and one TLS context) for three calls


def test_a_forked_worker_builds_its_own_client(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from agents import http

    parent = http.client()
    monkeypatch.setattr(os, "getpid", lambda: -1)
    child = http.client()
    try:
        assert child is not parent
        assert child.follow_redirects is False and child.trust_env is False
    finally:
        child.close()
        monkeypatch.undo()
        monkeypatch.setattr(http, "_client", parent)
        monkeypatch.setattr(http, "_client_pid", os.getpid())


def test_each_call_keeps_its_own_timeout_on_the_shared_client(remote: Remote) -> None:
    release = threading.Event()

    def slow(h: BaseHTTPRequestHandler) -> None:
        release.wait(5)
        with contextlib.suppress(OSError):
            _reply(h, 200, {})

    remote.handler = slow
    assert call_http(spec(remote.url, timeout=0.2)).outcome == Outcome.NO_ANSWER
    release.set()
    remote.handler = lambda h: _reply(h, 200, {})
    assert call_http(spec(remote.url, timeout=5)).outcome == Outcome.SUCCEEDED


def test_a_cookie_set_by_a_remote_is_never_sent_back(remote: Remote) -> None:
    seen: list[str | None] = []

    def reply(h: BaseHTTPRequestHandler) -> None:
        seen.append(h.headers.get("Cookie"))
        _reply(h, 200, {}, headers={"Set-Cookie": "session=job-a; Path=/"})

    remote.handler = reply
    remote.keep_alive()
    for _ in range(2):
        assert call_http(spec(remote.url)).outcome == Outcome.SUCCEEDED
    assert seen == [None, None]


@pytest.mark.parametrize("name", ["Host", "idempotency-key", "Content-Length", "X-SAS-Attempt"])
def test_a_secret_saved_under_a_reserved_header_name_is_not_sent(remote: Remote, name: str) -> None:
    # Saved before the name was checked when saved: the call refuses rather than let the secret
    # replace a header the service sets.
    result = call_http(dataclasses.replace(spec(remote.url), headers={name: "s3cret"}))
    assert result.outcome == Outcome.BUSINESS_FAILURE and "reserved name" in result.error
    assert "s3cret" not in result.error
    assert remote.requests == []


@pytest.mark.parametrize("secret", [" s3cr3t", "s3cr3t ", "s3cr\u00e9t", "s3\x01cret"])
def test_a_header_value_http_cannot_send_is_not_sent_and_never_quoted(remote: Remote, secret: str) -> None:
    result = call_http(dataclasses.replace(spec(remote.url), headers={"Authorization": secret}))
    assert result.outcome == Outcome.BUSINESS_FAILURE
    assert result.error.startswith("not sent")
    assert secret.strip() not in result.error
    assert remote.requests == []


@pytest.mark.django_db
@pytest.mark.sqlite
@pytest.mark.parametrize("secret", [" s3cr3t", "s3cr3t\t", "s3cr\u00e9t", "s3\x7fcret"])
def test_a_secret_header_value_that_is_not_an_http_field_value_is_refused_when_saved(secret: str) -> None:
    from agents.services import pool_save
    from sas_project.errors import InvalidInput

    with pytest.raises(InvalidInput, match="HTTP header value"):
        pool_save(
            name="web",
            kind="http",
            endpoints=[
                {
                    "url": "http://web.example",
                    "secret_header_name": "Authorization",
                    "secret_header_value": secret,
                }
            ],
        )


def test_the_answer_to_a_body_nesting_too_deeply_to_parse_is_a_success_with_no_output(
    remote: Remote,
) -> None:
    remote.handler = lambda h: _reply(h, 200, b"[" * 2000)
    result = call_http(spec(remote.url))
    assert result.outcome == Outcome.SUCCEEDED
    assert result.output is None
    assert "nests too deeply" in result.error


@pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"), reason="Linux's TCP_QUICKACK")
def test_a_kept_alive_remote_that_leaves_nagle_on_is_not_kept_waiting_for_a_delayed_ack(
    remote: Remote, monkeypatch: pytest.MonkeyPatch
) -> None:
    """http.server writes the headers, then the body, with Nagle's algorithm on: the body waits
    for the headers' acknowledgement, which a client with nothing to send delays by some 40 ms.
    Quick-ACK mode answers at once. Without it the stall is there (the test can fail)."""
    from agents import egress, http

    remote.keep_alive()

    def median_ms(calls: int = 15) -> float:
        assert call_http(spec(remote.url)).outcome == Outcome.SUCCEEDED  # connected, kept alive
        took = []
        for _ in range(calls):
            started = time.perf_counter()
            assert call_http(spec(remote.url)).outcome == Outcome.SUCCEEDED
            took.append((time.perf_counter() - started) * 1000)
        return sorted(took)[calls // 2]

    quick = median_ms()

    http._client.close()  # type: ignore[union-attr]
    http._client = None
    monkeypatch.setattr(egress, "_QUICKACK", None)
    stalled = median_ms()
    # The stall this avoids, some 40 ms a call, measured against the same machine's pace: a
    # loaded machine slows both alike.
    assert stalled >= 35 and stalled - quick >= 25, (quick, stalled)


def test_every_outbound_client_shares_one_tls_context_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import ssl

    from agents import egress

    monkeypatch.setattr(egress, "_ssl_context", None)
    built: list[object] = []
    real = ssl.create_default_context

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counting)
    first, second = outbound_client(), outbound_client()
    try:
        assert len(built) == 1  # one context for both clients, and none for httpx's own pool
        for client in (first, second):
            assert client._transport._pool._ssl_context is egress.ssl_context()  # type: ignore[attr-defined]
    finally:
        first.close()
        second.close()
