"""The benchmark's remote: answers every POST from memory, faster than either side it serves.

A remote that is slower than the system under test caps the baseline and flatters the ratio:
the sandbox remote writes each effect to SQLite and held bare django-q2 to about 190 steps/s
where a remote answering from memory let it make 360. This one is a single asyncio process with
a minimal HTTP/1.1 server (keep-alive, `Content-Length` bodies only), no framework:

- `POST <any path>`: de-duplicates on `Idempotency-Key` (the first answer for a key is kept and
  served again, as a real remote would) and answers `200 {"ok": true, "operation": <key>}`;
- `GET /stats`: `{"calls", "unique", "cpu_seconds"}`, the process's own CPU time, so that a
  benchmark can print the remote's cost per call beside the figures it serves;
- anything else: 404.

By default it sets TCP_NODELAY and writes each answer in one piece, as nginx, gunicorn and Go's
server do. `--nagle` leaves Nagle's algorithm on and writes the headers and the body apart, as
Python's `http.server` does: on a kept-alive connection the body then waits for the client's
acknowledgement of the headers (testbed.bench measures what that costs the service).

    python -m testbed.fastremote --port 8200 [--nagle]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import sys
import time
from typing import Any

MAX_HEADERS = 64 * 1024
MAX_BODY = 1024 * 1024


class Remote:
    def __init__(self, *, nagle: bool) -> None:
        self.nagle = nagle
        self.answers: dict[str, bytes] = {}
        self.calls = 0

    def stats(self) -> bytes:
        return json.dumps(
            {"calls": self.calls, "unique": len(self.answers), "cpu_seconds": time.process_time()}
        ).encode()

    def answer(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        if method == "POST":
            self.calls += 1
            key = headers.get("idempotency-key", "")
            body = self.answers.get(key) if key else None
            if body is None:
                body = json.dumps({"ok": True, "operation": key}).encode()
                if key:
                    self.answers[key] = body
            return 200, body
        if method == "GET" and path == "/stats":
            return 200, self.stats()
        return 404, b'{"detail": "not found"}'


REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 413: "Content Too Large"}


class Protocol(asyncio.Protocol):
    def __init__(self, remote: Remote) -> None:
        self.remote = remote
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0 if self.remote.nagle else 1)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.transport is not None and self._one_request():
            pass

    def _one_request(self) -> bool:
        """Answer the first request in the buffer if it is whole; returns whether it was."""
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEADERS:
                self._reply(400, b"{}", close=True)
            return False
        head = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
        try:
            method, target, _version = head[0].split(" ", 2)
        except ValueError:
            self._reply(400, b"{}", close=True)
            return False
        headers: dict[str, str] = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length") or 0)
        if length > MAX_BODY:
            self._reply(413, b"{}", close=True)
            return False
        if len(self.buffer) < end + 4 + length:
            return False
        del self.buffer[: end + 4 + length]
        status, body = self.remote.answer(method, target.split("?", 1)[0], headers)
        self._reply(status, body, close=headers.get("connection", "").lower() == "close")
        return True

    def _reply(self, status: int, body: bytes, *, close: bool = False) -> None:
        assert self.transport is not None
        head = (
            f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"{'Connection: close' if close else 'Connection: keep-alive'}\r\n\r\n"
        ).encode()
        if self.remote.nagle:
            self.transport.write(head)  # two segments, as http.server sends them
            self.transport.write(body)
        else:
            self.transport.write(head + body)
        if close:
            self.transport.close()
            self.transport = None


async def serve(host: str, port: int, *, nagle: bool) -> None:
    remote = Remote(nagle=nagle)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Protocol(remote), host, port, backlog=1024)
    bound = server.sockets[0].getsockname()[1]
    print(f"fast remote listening on http://{host}:{bound} (nagle {'on' if nagle else 'off'})", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    parser.add_argument(
        "--nagle", action="store_true", help="leave Nagle on and write headers and body apart"
    )
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port, nagle=args.nagle))
    return 0


def stats(url: str) -> dict[str, Any]:
    """The remote's own figures (`GET /stats`)."""
    import httpx

    result: dict[str, Any] = httpx.get(f"{url}/stats", timeout=5, trust_env=False).json()
    return result


if __name__ == "__main__":
    sys.exit(main())
