"""A webhook receiver for completion callbacks and alert webhooks (`manage.py webhook_receiver`).

It records every POST it accepts and can refuse the first tries of each message (by its
`Idempotency-Key`) with 503, to exercise the outbox's retries. `GET /received` answers what it
holds: the accepted deliveries (key, signatures, body, path) and the tries per key. It verifies
nothing itself: the tests verify what it recorded, the `webhook-*` headers with the
`standardwebhooks` package as a real receiver would. Nothing is kept on disk: a receiver lives
for one test or one demo.

A POST whose path starts with a hostile mode's name (HOSTILE_MODES) is answered as a hostile
receiver would, and counted under `hostile`: `/blackhole/...` reads the request and never answers
(the connection stays open up to ten minutes), `/trickle/...` sends its headers and then one byte
a second, `/fail/...` answers 500 forever, `/huge/...` answers 200 with a 50 MB body.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOSTILE_MODES = ("blackhole", "trickle", "fail", "huge")
#: How long a black hole or a trickle holds a connection at most.
HOLD_SECONDS = 600.0
HUGE_BYTES = 50 * 1024 * 1024


def hostile_mode(path: str) -> str:
    """The hostile mode a path names (its first segment), or ""."""
    first = path.lstrip("/").split("/", 1)[0]
    return first if first in HOSTILE_MODES else ""


class Receiver:
    def __init__(self, *, fail_first: int = 0) -> None:
        self.fail_first = fail_first
        self.lock = threading.Lock()
        self.tries: dict[str, int] = {}
        self.accepted: list[dict[str, Any]] = []
        self.hostile: dict[str, int] = dict.fromkeys(HOSTILE_MODES, 0)
        self.stopping = threading.Event()

    def count_hostile(self, mode: str) -> None:
        with self.lock:
            self.hostile[mode] += 1

    def take(
        self, key: str, path: str, signature: str, kind: str, body: bytes, webhook: dict[str, str]
    ) -> int:
        """The status to answer one POST with."""
        with self.lock:
            self.tries[key] = self.tries.get(key, 0) + 1
            if self.tries[key] <= self.fail_first:
                return 503
            self.accepted.append(
                {
                    "key": key,
                    "path": path,
                    "signature": signature,
                    "kind": kind,
                    "body": body.decode("utf-8", "replace"),
                    "webhook": webhook,
                }
            )
            return 200

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {"accepted": list(self.accepted), "tries": dict(self.tries), "hostile": dict(self.hostile)}


def make_server(port: int, receiver: Receiver) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, status: int, payload: dict[str, Any]) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/received":
                self._answer(200, receiver.snapshot())
            else:
                self._answer(404, {"detail": "not found"})

        def _hostile(self, mode: str) -> None:
            receiver.count_hostile(mode)
            self.close_connection = True
            if mode == "fail":
                self._answer(500, {"ok": False})
                return
            until = time.monotonic() + HOLD_SECONDS
            if mode == "blackhole":
                while time.monotonic() < until and not receiver.stopping.is_set():
                    time.sleep(0.5)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(HUGE_BYTES))
            self.end_headers()
            try:
                if mode == "huge":
                    chunk = b" " * 65536
                    for _ in range(HUGE_BYTES // len(chunk)):
                        self.wfile.write(chunk)
                    return
                while time.monotonic() < until and not receiver.stopping.is_set():
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(1.0)
            except OSError:
                return  # the sender hung up: what a guarded sender does

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            mode = hostile_mode(self.path)
            if mode:
                self._hostile(mode)
                return
            status = receiver.take(
                self.headers.get("Idempotency-Key", ""),
                self.path,
                self.headers.get("X-SAS-Signature", ""),
                self.headers.get("X-SAS-Delivery", ""),
                body,
                {name: value for name, value in self.headers.items() if name.lower().startswith("webhook-")},
            )
            self._answer(status, {"ok": status == 200})

    return _Server(("127.0.0.1", port), Handler)


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A sender that hung up on a hostile answer is what the hostile modes are for.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)
