"""The WSGI app served by sas_remote's standard-library server over real sockets (TCP_NODELAY on
every connection), and the ASGI app driven through the ASGI interface itself."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sas_remote import Request, later, make_asgi_app, make_server, make_wsgi_app
from sas_remote.serve import ThreadingWSGIServer

pytestmark = pytest.mark.sqlite


def charge(request: Request) -> Any:
    return {"charged": request.input["amount"], "path": request.path}


@pytest.fixture
def served() -> Iterator[tuple[ThreadingWSGIServer, list[int]]]:
    """The server and, per connection it accepted, its TCP_NODELAY option."""
    server = make_server(make_wsgi_app(charge), port=0)
    nodelay: list[int] = []
    base = server.RequestHandlerClass

    class Recording(base):  # type: ignore[valid-type,misc]
        def setup(self) -> None:
            super().setup()
            nodelay.append(self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    server.RequestHandlerClass = Recording
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server, nodelay
    server.shutdown()
    server.server_close()


def url_of(server: ThreadingWSGIServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_the_wsgi_app_answers_and_replays_over_http_with_nodelay(
    served: tuple[ThreadingWSGIServer, list[int]],
) -> None:
    server, nodelay = served
    headers = {"Idempotency-Key": "op-1", "X-SAS-Attempt": "1"}
    with httpx.Client(base_url=url_of(server)) as client:
        first = client.post("/payments/charge", json={"input": {"amount": 7}}, headers=headers)
        again = client.post("/payments/charge", json={"input": {"amount": 7}, "attempt": 2}, headers=headers)
        status = client.get("/payments/op-1")
    assert first.status_code == 200 and first.json() == {"charged": 7, "path": "/payments/charge"}
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    assert status.status_code == 200 and status.json() == first.json()
    assert nodelay and all(nodelay), nodelay


def test_the_wsgi_app_refuses_an_oversized_body_unread(served: tuple[ThreadingWSGIServer, list[int]]) -> None:
    server, _ = served
    server.get_app().max_body_bytes = 100
    response = httpx.post(
        f"{url_of(server)}/payments/charge",
        content=b"{" + b" " * 200 + b"}",
        headers={"Idempotency-Key": "op-1", "Content-Type": "application/json"},
    )
    assert response.status_code == 413


def wsgi_call(app: Any, environ: dict[str, Any]) -> tuple[str, bytes]:
    started: list[str] = []
    body = b"".join(app(environ, lambda status, headers: started.append(status)))
    return started[0], body


@pytest.mark.parametrize("length", ["many", "-1"])
def test_the_wsgi_app_refuses_a_bad_content_length(length: str) -> None:
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/x",
        "CONTENT_LENGTH": length,
        "wsgi.input": io.BytesIO(),
    }
    status, body = wsgi_call(make_wsgi_app(charge), environ)
    assert status == "400 Bad Request" and json.loads(body)["code"] == "invalid_length"


def test_the_wsgi_app_reads_a_utf8_path_as_servers_pass_it() -> None:
    raw = b'{"input": {"amount": 1}}'
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/caf\u00c3\u00a9",  # "/café" as PEP 3333 hands it over: UTF-8 read as latin-1
        "CONTENT_LENGTH": str(len(raw)),
        "HTTP_IDEMPOTENCY_KEY": "op-1",
        "wsgi.input": io.BytesIO(raw),
    }
    status, body = wsgi_call(make_wsgi_app(charge), environ)
    assert status == "200 OK" and json.loads(body)["path"] == "/café"


async def asgi_call(app: Any, scope: dict[str, Any], chunks: list[bytes]) -> list[dict[str, Any]]:
    incoming = [
        {"type": "http.request", "body": chunk, "more_body": n < len(chunks) - 1}
        for n, chunk in enumerate(chunks)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def http_scope(path: str = "/payments/charge") -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(b"idempotency-key", b"op-1"), (b"content-type", b"application/json")],
    }


def test_the_asgi_app_answers_a_body_in_chunks_in_one_body_message() -> None:
    app = make_asgi_app(charge)
    sent = asyncio.run(asgi_call(app, http_scope(), [b'{"input": ', b'{"amount": 3}}']))
    start, body = sent
    assert start["type"] == "http.response.start" and start["status"] == 200
    assert (b"content-length", str(len(body["body"])).encode()) in start["headers"]
    assert body == {
        "type": "http.response.body",
        "body": b'{"charged":3,"path":"/payments/charge"}',
        "more_body": False,
    }
    replay = asyncio.run(asgi_call(app, http_scope(), [b'{"input": {"amount": 3}}']))
    assert (b"idempotent-replayed", b"true") in replay[0]["headers"]
    app.remote.close()


def test_the_asgi_app_refuses_an_oversized_body() -> None:
    app = make_asgi_app(charge, max_body_bytes=10)
    sent = asyncio.run(asgi_call(app, http_scope(), [b'{"input": ', b'{"amount": 3}}']))
    assert sent[0]["status"] == 413
    app.remote.close()


def test_the_asgi_app_completes_the_lifespan_and_closes_the_remote() -> None:
    app = make_asgi_app(charge, callback_origins=["http://127.0.0.1:9/cb/"])
    incoming = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app({"type": "lifespan"}, receive, send))
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    # Closed: work accepted now would never run, so none is accepted, and nothing is held.
    app.remote.handler = lambda request: later(lambda heartbeat: {})
    headers = {"Idempotency-Key": "op-9", "X-SAS-Callback-URL": "http://127.0.0.1:9/cb/t/"}
    assert app.remote.handle("POST", "/x", headers, b"{}").status == 503
    assert app.remote.store.get("op-9") is None
