"""`serve`: run a WSGI application with the standard library alone (wsgiref), for examples,
tests and small remotes. A busy remote runs its app under gunicorn or uWSGI instead.

Unlike `wsgiref.simple_server.make_server`, each request gets a thread (a repeat of an operation
must be able to arrive while the first delivery still runs), and sockets set TCP_NODELAY: wsgiref
writes the headers and the body apart, which Nagle's algorithm would hold back until the caller's
delayed ACK, about 40 ms.
"""

from __future__ import annotations

import signal
import socketserver
import sys
from types import FrameType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer


class _Handler(WSGIRequestHandler):
    disable_nagle_algorithm = True
    quiet = True
    # A client that sends less than its Content-Length (or nothing) must not hold a thread forever.
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        if not self.quiet:
            super().log_message(format, *args)


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


def make_server(
    app: Any, *, host: str = "127.0.0.1", port: int = 8000, access_log: bool = False
) -> ThreadingWSGIServer:
    """A threading wsgiref server of `app`, listening (not yet serving)."""
    handler = type("Handler", (_Handler,), {"quiet": not access_log})
    server = ThreadingWSGIServer((host, port), handler)
    server.set_app(app)
    return server


def serve(app: Any, *, host: str = "127.0.0.1", port: int = 8000, access_log: bool = False) -> None:
    """Serve `app` until SIGTERM or Ctrl-C; then let accepted work finish (when `app` is one of
    sas_remote's) and return. Prints `listening on http://host:port` once it listens."""
    server = make_server(app, host=host, port=port, access_log=access_log)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    bound_host, bound_port = server.server_address[:2]
    print(f"listening on http://{bound_host!s}:{bound_port}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        remote = getattr(app, "remote", None)
        if remote is not None:
            remote.close()
        sys.stdout.flush()
