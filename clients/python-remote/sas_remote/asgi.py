"""`make_asgi_app`: a `Remote` as an ASGI application (uvicorn, hypercorn, daphne, or mounted in
Starlette).

The handler and the stores are synchronous: each request runs on a thread
(`asyncio.to_thread`), so a handler that blocks (a database, a slow dependency) never stalls
the event loop. The answer goes in one `http.response.body` message after its start, with its
Content-Length.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from sas_remote.core import Remote
from sas_remote.messages import Handler, Response, error_response
from sas_remote.store import Store
from sas_remote.wsgi import MAX_BODY_BYTES

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class AsgiApp:
    """The ASGI application of `remote`."""

    def __init__(self, remote: Remote, *, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.remote = remote
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        response = await self._respond(scope, receive)
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": [(name.lower().encode(), value.encode()) for name, value in response.headers],
            }
        )
        await send({"type": "http.response.body", "body": response.body, "more_body": False})

    async def _respond(self, scope: Scope, receive: Receive) -> Response:
        headers: dict[str, str] = {}
        for name, value in scope.get("headers", []):
            headers[name.decode("latin-1")] = value.decode("latin-1")
        method = str(scope.get("method", "GET")).upper()
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return error_response(400, "disconnected", "the client went away")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return error_response(
                    413, "too_large", f"the body is larger than {self.max_body_bytes} bytes"
                )
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        path = str(scope.get("root_path", "")) + str(scope.get("path", "/"))
        return await asyncio.to_thread(self.remote.handle, method, path, headers, b"".join(chunks))

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                # Accepted work still running is finished and reported before the server exits.
                await asyncio.to_thread(self.remote.close)
                await send({"type": "lifespan.shutdown.complete"})
                return


def make_asgi_app(
    handler: Handler | Remote,
    store: Store | None = None,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    **options: Any,
) -> AsgiApp:
    """The ASGI application of `handler` with `store` (see `Remote` for `options`), or of a
    `Remote` already built."""
    remote = handler if isinstance(handler, Remote) else Remote(handler, store, **options)
    return AsgiApp(remote, max_body_bytes=max_body_bytes)
