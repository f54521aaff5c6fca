"""The sandbox's HTTP server: the services' routes, the status queries, and `/health`, `/stats`,
`/config`, `/reset`; `POST /async/<route>` hands the work to testbed.sandbox.async_, and
`POST /cancel/<route>` records a cancel of an operation.

Connections are opened per request because sqlite3 connections must not be shared between the
server's threads.
"""

from __future__ import annotations

import contextlib
import gzip
import signal
import socket
import sqlite3
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

from testbed.sandbox.async_ import callback_beat, callback_reporters, perform_later, perform_slowly
from testbed.sandbox.core import (
    HOSTILE_IN_TURN,
    ROUTES,
    Answer,
    BadRequest,
    ConfigError,
    FaultPlan,
    OperationRequest,
    Route,
    SandboxConfig,
    parse_json,
    read_caller,
    read_operation_request,
    status_route,
)
from testbed.sandbox.state import SandboxState

#: Request bodies above this are refused with 413 before being read.
MAX_BODY_BYTES = 1024 * 1024
#: A hostile answer's size (`huge`, and what `bomb` inflates to).
HOSTILE_HUGE_BYTES = 50 * 1024 * 1024
#: 50 MB of spaces, gzipped (about 50 KB).
HOSTILE_BOMB = gzip.compress(b"[" + b" " * (HOSTILE_HUGE_BYTES - 2) + b"]", compresslevel=9)
MAX_KEY_LENGTH = 255


class SandboxRemote(SandboxState):
    """The sandbox server: the shared state (testbed.sandbox.state) served over HTTP.

    `start()` serves in a background thread and returns the base URL; `stop()` shuts it down.
    """

    def __init__(
        self,
        db_path: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        config: SandboxConfig | None = None,
        seed: int = 0,
        reset: bool = False,
        access_log: bool = False,
    ) -> None:
        self.access_log = access_log
        super().__init__(db_path, config=config, seed=seed, reset=reset)
        try:
            self._server = _Server((host, port), _Handler, self)
        except OSError:
            self.store.close()
            raise
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.socket.getsockname()[:2]
        return f"http://{host}:{port}"

    def start(self) -> str:
        """Serve in a daemon thread; return the base URL."""
        self._thread = threading.Thread(
            # A short poll keeps stop() quick: shutdown() waits for the loop to notice.
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="sandbox-remote",
            daemon=True,
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop accepting requests and close the listening socket. Requests in flight are abandoned."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
        self.store.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[_Handler], remote: SandboxRemote) -> None:
        self.remote = remote
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "SandboxRemote/1"
    # An idle keep-alive connection (or a client that sent less than its Content-Length) must not
    # hold a thread forever.
    timeout = 30
    # Headers and body are written separately; with Nagle on, the body waits for a delayed ACK.
    disable_nagle_algorithm = True

    @property
    def remote(self) -> SandboxRemote:
        return self.server.remote

    # -- plumbing

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if self.remote.access_log:
            super().log_request(code, size)

    def _send(self, answer: Answer, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(answer.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer.body)))
        if answer.replayed:
            self.send_header("Idempotent-Replayed", "true")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(answer.body)

    def _send_json(self, status: int, payload: Any) -> None:
        self._send(Answer.json(status, payload))

    def _guarded(self, handle: Callable[[], None]) -> None:
        try:
            handle()
        except sqlite3.OperationalError as exc:
            # The store stayed locked past the busy timeout: a transient failure, as a real remote's.
            self.log_error("store unavailable: %s", exc)
            self.close_connection = True
            self._send_json(503, {"error": "store unavailable"})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:  # noqa: BLE001 - one request's bug must not kill the server thread silently
            traceback.print_exc(file=sys.stderr)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self._send_json(500, {"error": "internal error"})

    def _read_body(self) -> bytes | None:
        """The request body, or None once a 4xx has been sent for it."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            self._send_json(411, {"error": "Content-Length required"})
            return None
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if length < 0:
            self.close_connection = True
            self._send_json(400, {"error": "invalid Content-Length"})
            return None
        if length > MAX_BODY_BYTES:
            # The body is not read, so the connection cannot carry another request.
            self.close_connection = True
            self._send_json(413, {"error": f"body larger than {MAX_BODY_BYTES} bytes"})
            return None
        return self.rfile.read(length)

    def _drop(self, hold_ms: int) -> None:
        """Close the connection having written nothing: the caller cannot know what happened."""
        if hold_ms:
            time.sleep(hold_ms / 1000)
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    # -- routes

    def do_GET(self) -> None:
        self._guarded(self._get)

    def do_POST(self) -> None:
        self._guarded(self._post)

    def _get(self) -> None:
        path = urlsplit(self.path).path
        if path == "/health":
            self._send_json(200, {"ok": True})
        elif path == "/stats":
            with self.remote._lock:
                most = dict(self.remote.max_concurrent)
                by_account = dict(self.remote.max_concurrent_by_account)
                by_route = {p: dict(a) for p, a in self.remote.max_concurrent_by_route_account.items()}
            self._send_json(
                200,
                {
                    **self.remote.store.stats(),
                    "max_concurrent": most,
                    "max_concurrent_by_account": by_account,
                    "max_concurrent_by_route_account": by_route,
                },
            )
        elif path == "/config":
            self._send_json(200, self.remote.config_snapshot())
        elif (found := status_route(path)) is not None:
            service, op_id = found
            self.remote.store.log_delivery(
                op_id, "GET", path, _int_or_none(self.headers.get("X-SAS-Attempt"))
            )
            if self.remote.is_in_progress(op_id):
                # Neither "it happened" nor "it did not": a request with this key is being processed.
                self._send_json(409, {"error": "operation in progress", "operation_id": op_id})
            else:
                self._send(self.remote.store.status_of(service, op_id))
        else:
            self._send_json(404, {"error": "not found"})

    def _post(self) -> None:
        raw = self._read_body()
        if raw is None:
            return
        path = urlsplit(self.path).path
        if path == "/config":
            self._post_config(raw)
        elif path == "/reset":
            self._post_reset(raw)
        elif path in ROUTES:
            self._post_operation(ROUTES[path], path, raw)
        elif path.startswith("/async/") and path.removeprefix("/async") in ROUTES:
            self._post_operation(ROUTES[path.removeprefix("/async")], path, raw, later=True)
        elif path.startswith("/cancel/") and path.removeprefix("/cancel") in ROUTES:
            self._post_cancel(path)
        else:
            self._send_json(404, {"error": "not found"})

    def _post_cancel(self, path: str) -> None:
        """A cancel of the operation its `Idempotency-Key` names: recorded, every one, while any
        call of that operation goes on (its work is not stopped: the sandbox only keeps count)."""
        key = self.headers.get("Idempotency-Key", "").strip()
        if not key or len(key) > MAX_KEY_LENGTH:
            self._send_json(400, {"error": "Idempotency-Key header required (the operation's ID)"})
            return
        known = self.remote.store.record_cancel(key, path, _int_or_none(self.headers.get("X-SAS-Attempt")))
        self._send_json(200, {"cancelled": key, "known": known})

    def _post_config(self, raw: bytes) -> None:
        try:
            patch = parse_json(raw) if raw.strip() else {}
            if not isinstance(patch, dict):
                raise ConfigError("config must be a JSON object")
            self._send_json(200, self.remote.configure(patch))
        except (BadRequest, ConfigError) as exc:
            self._send_json(400, {"error": str(exc)})

    def _post_reset(self, raw: bytes) -> None:
        try:
            options = parse_json(raw) if raw.strip() else {}
        except BadRequest as exc:
            self._send_json(400, {"error": str(exc)})
            return
        if not isinstance(options, dict) or not isinstance(options.get("config", False), bool):
            self._send_json(400, {"error": 'body must be {"config": true|false} or empty'})
            return
        self.remote.reset(config=options.get("config", False))
        self._send_json(200, {"reset": True, "config": self.remote.config_snapshot()})

    def _post_operation(self, route: Route, path: str, raw: bytes, *, later: bool = False) -> None:
        key = self.headers.get("Idempotency-Key", "").strip()
        body: object = None
        parse_error: BadRequest | None = None
        try:
            body = parse_json(raw)
        except BadRequest as exc:
            parse_error = exc
        attempt = _int_or_none(self.headers.get("X-SAS-Attempt"))
        if attempt is None and isinstance(body, dict):
            attempt = _int_or_none(body.get("attempt"))
        # Logged before validation: a malformed or faulted request was still delivered.
        self.remote.store.log_delivery(key or None, "POST", path, attempt, read_caller(body))
        try:
            if not key:
                raise BadRequest("Idempotency-Key header required")
            if len(key) > MAX_KEY_LENGTH:
                raise BadRequest(f"Idempotency-Key longer than {MAX_KEY_LENGTH} characters")
            if parse_error is not None:
                raise parse_error
            request = read_operation_request(route, path, key, body)
        except BadRequest as exc:
            self._send_json(400, {"error": str(exc)})
            return

        plan, config = self.remote.plan_faults(path)
        if plan.error:
            self.remote.store.bump("fault_error")
            self._send_json(503, {"error": "injected failure"})
            return
        if plan.throttle is not None:
            # Too many requests: nothing done, come back after the time it names.
            self.remote.store.bump("fault_throttle")
            self._send(Answer.json(429, {"error": "too many requests"}), {"Retry-After": str(plan.throttle)})
            return
        if later:
            self._accept(request, config, plan, attempt)
            return
        with self.remote.in_progress(key), self.remote.concurrent(path, account=_account(body)):
            if plan.delay_ms:
                self.remote.store.bump("fault_slow")
                time.sleep(plan.delay_ms / 1000)
            if request.hold_ms:
                time.sleep(request.hold_ms / 1000)
            answer = self.remote.store.execute(request, config, force_decline=plan.decline)
        if plan.drop or (request.drops and self.remote.store.take_drop(key, request.drops)):
            self.remote.store.bump("fault_drop")
            self._drop(plan.hold_ms or config.drop_hold_ms)
            return
        if plan.hostile and 200 <= answer.status < 300:
            # Only once the work is done: what is hostile is the answer, never the effect.
            kind = self.remote.next_hostile_kind() if plan.hostile == HOSTILE_IN_TURN else plan.hostile
            self.remote.store.bump(f"hostile_{kind}")
            self._send_hostile(kind, config)
            return
        self._send(answer)

    def _send_hostile(self, kind: str, config: SandboxConfig) -> None:
        """Answer a done operation in a way a careless client cannot survive (HOSTILE_KINDS).
        The connection is closed afterwards: what was sent on it cannot be followed."""
        self.close_connection = True
        if kind == "unstorable":
            self._hostile_unstorable()
            return
        if kind == "bad_header":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            # A NUL character: RFC 9110 forbids it in a field value, and HTTP clients refuse it.
            self.send_header("X-Remote-Note", "done\x00really")
            self.send_header("Connection", "close")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        # Said, not only done: a client that read the whole answer would otherwise send its next
        # request on a connection this side is closing, and lose it to the race.
        self.send_header("Connection", "close")
        if kind == "bomb":
            body = HOSTILE_BOMB
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_header("Content-Length", str(HOSTILE_HUGE_BYTES))
        self.end_headers()
        if kind == "huge":
            chunk = b" " * 65536
            for _ in range(HOSTILE_HUGE_BYTES // len(chunk)):
                self.wfile.write(chunk)  # until the client hangs up (BrokenPipeError)
            return
        # trickle: one byte at a time, until the client hangs up or two minutes passed.
        until = time.monotonic() + 120
        self.wfile.write(b"{")
        while time.monotonic() < until:
            time.sleep(config.trickle_ms / 1000)
            self.wfile.write(b" ")
            self.wfile.flush()

    def _hostile_unstorable(self) -> None:
        variants = (
            b'{"note": "nul \\u0000 here"}',
            b'{"ratio": NaN}',
            b'{"amount": 1e999}',
            b"[" * 2000 + b"]" * 2000,
        )
        body = variants[self.remote.store.counter("hostile_unstorable") % len(variants)]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "close")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _accept(
        self, request: OperationRequest, config: SandboxConfig, plan: FaultPlan, attempt: int | None
    ) -> None:
        """The asynchronous mode: 202 now, the work and its callback later (testbed.sandbox.async_);
        a slow job (`input.slow`) sends heartbeats meanwhile."""
        callback = self.headers.get("X-SAS-Callback-URL", "").strip()
        report, report_unknown = callback_reporters(callback) if callback else (_nothing, _nothing)
        if request.slow is not None:
            beat = callback_beat(callback) if callback else _beating_nowhere
            perform_slowly(
                self.remote,
                request,
                request.slow,
                attempt,
                config,
                plan,
                beat=beat,
                report=report,
                report_unknown=report_unknown,
            )
        else:
            # The slowness fault delays the work, not the 202: what is slow is the remote's work.
            perform_later(self.remote, request, config, plan, report=report, report_unknown=report_unknown)
        if plan.drop:
            self.remote.store.bump("fault_drop")
            self._drop(plan.hold_ms)
            return
        self._send_json(202, {"accepted": True, "operation_id": request.key})


def _nothing(*args: Any) -> None:
    """A report with nowhere to go: the request carried no callback URL."""


def _beating_nowhere(details: dict[str, Any]) -> bool:
    """A heartbeat with nowhere to go: the request carried no callback URL."""
    return True


def _int_or_none(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value)
    return None


def serve_until_signalled(remote: SandboxRemote, on_ready: Callable[[str], None]) -> None:
    """Serve until SIGTERM or SIGINT, then shut down cleanly. Must run in the main thread.

    `on_ready(url)` is called once the socket is listening and requests are being served.
    """
    stopping: list[int] = []

    def request_stop(signum: int, frame: FrameType | None) -> None:
        # Only a plain append: taking a lock here could deadlock with the main thread holding it.
        stopping.append(signum)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        on_ready(remote.start())
        while not stopping:
            time.sleep(0.1)
    finally:
        remote.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _account(body: object) -> str | None:
    """The `account` a request's input names (GET /stats counts requests in flight per account)."""
    given = body.get("input") if isinstance(body, dict) else None
    account = given.get("account") if isinstance(given, dict) else None
    return None if account is None else str(account)
