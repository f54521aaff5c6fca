"""`make_wsgi_app`: a `Remote` as a WSGI application (gunicorn, uWSGI, wsgiref, any framework
that mounts one).

The answer is one iterable of one chunk with its Content-Length, so a server that writes the
headers and the body together (gunicorn does) sends one segment; one that writes them apart should
run with TCP_NODELAY (sas_remote.serve does), or Nagle's algorithm and the caller's delayed ACK
cost about 40 ms a call on a kept-alive connection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sas_remote.core import Remote
from sas_remote.messages import Handler, Response, error_response
from sas_remote.store import Store

#: The largest request body read; a larger one gets 413 unread.
MAX_BODY_BYTES = 1024 * 1024

StartResponse = Callable[..., Any]


class WsgiApp:
    """The WSGI application of `remote`."""

    def __init__(self, remote: Remote, *, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.remote = remote
        self.max_body_bytes = max_body_bytes

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        response = self._respond(environ)
        start_response(response.status_line, list(response.headers))
        return [response.body]

    def _respond(self, environ: dict[str, Any]) -> Response:
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        body = b""
        if method == "POST":
            try:
                length = int(environ.get("CONTENT_LENGTH") or 0)
            except ValueError:
                return error_response(400, "invalid_length", "Content-Length is not a number")
            if length < 0:
                return error_response(400, "invalid_length", "Content-Length is negative")
            if length > self.max_body_bytes:
                return error_response(
                    413, "too_large", f"the body is larger than {self.max_body_bytes} bytes"
                )
            body = environ["wsgi.input"].read(length) if length else b""
        headers = {
            name[5:].replace("_", "-"): str(value)
            for name, value in environ.items()
            if name.startswith("HTTP_")
        }
        if environ.get("CONTENT_TYPE"):
            headers["CONTENT-TYPE"] = str(environ["CONTENT_TYPE"])
        # PATH_INFO is decoded as latin-1 by WSGI servers (PEP 3333): back to the UTF-8 it was.
        path = str(environ.get("SCRIPT_NAME", "")) + str(environ.get("PATH_INFO", "/"))
        path = path.encode("latin-1", "replace").decode("utf-8", "replace")
        return self.remote.handle(method, path, headers, body)


def make_wsgi_app(
    handler: Handler | Remote,
    store: Store | None = None,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    **options: Any,
) -> WsgiApp:
    """The WSGI application of `handler` with `store` (see `Remote` for `options`), or of a
    `Remote` already built."""
    remote = handler if isinstance(handler, Remote) else Remote(handler, store, **options)
    return WsgiApp(remote, max_body_bytes=max_body_bytes)
