"""gunicorn's configuration for the web processes (`gunicorn -c python:sas_project.gunicorn_conf
sas_project.wsgi`), read from the environment; docs/deployment.md explains each value.

Threaded workers (gthread): a request mostly waits on PostgreSQL, and one that is slow (a large
body being read, a contract checked up to its budget, a client that trickles its body) must not
hold the process that the short submissions queue for. With sync workers it did: two bodies
being read took both default workers, and the fault campaign's flood of large submissions
multiplied the ordinary submissions' p99 by five (docs/reliability.md, "Contract and expression
bombs"). Each thread holds its own connection to PostgreSQL, opened after the fork (the app is
not preloaded). gthread also keeps idle client connections alive (`keepalive`), which sync
workers do not.
"""

from __future__ import annotations

import os
from typing import Any

from gunicorn import glogging
from pythonjsonlogger.json import JsonFormatter

from sas_project.logredact import redact_path

#: Where to listen. Behind a load balancer or a reverse proxy, on the host's private address.
bind = os.environ.get("SAS_WEB_BIND", "127.0.0.1:8000")
#: Worker processes. About 2 per core on a host that runs only the web tier.
workers = int(os.environ.get("SAS_WEB_WORKERS", "2"))
worker_class = "gthread"
#: Requests each worker serves at once: a thread each, and a database connection each.
threads = int(os.environ.get("SAS_WEB_THREADS", "4"))
#: A worker whose main loop has not answered the master for this long is killed and replaced.
#: A request's own time is bounded by the service (the database's lock timeout, the contract
#: budget, the body limit), not by this: a threaded worker stays responsive while one request runs.
timeout = int(os.environ.get("SAS_WEB_TIMEOUT", "30"))
#: On SIGTERM, requests in flight get this long to finish before the workers are killed.
graceful_timeout = int(os.environ.get("SAS_WEB_GRACEFUL_TIMEOUT", "30"))
keepalive = 5
#: Replace each worker after this many requests (a guard against slow leaks), spread out.
max_requests = 5000
max_requests_jitter = 500
#: Only these addresses may set X-Forwarded-* headers (the load balancer's).
forwarded_allow_ips = os.environ.get("SAS_WEB_FORWARDED_ALLOW_IPS", "127.0.0.1")
accesslog = "-"
errorlog = "-"


class RedactingLogger(glogging.Logger):
    """gunicorn's access lines (SAS_LOG_FORMAT=text) without callback tokens: every value the
    access_log_format may print (the request line, the path, the raw URI...) is redacted."""

    def atoms(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> dict[str, Any]:
        atoms: dict[str, Any] = super().atoms(resp, req, environ, request_time)
        return {name: redact_path(v) if isinstance(v, str) else v for name, v in atoms.items()}


class JsonLogger(RedactingLogger):
    """gunicorn's own lines as JSON objects, like the service's (SAS_LOG_FORMAT=json): one per
    request (method, path with any callback token redacted, status, bytes, duration, remote
    address, user agent; never the query string or any header but the user agent) and one per
    server message."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        formatter = JsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        )
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.setFormatter(formatter)

    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> None:
        if not self.access_log_enabled:
            return
        status = str(resp.status).split(None, 1)[0]
        self.access_log.info(
            "request",
            extra={
                "remote": environ.get("REMOTE_ADDR"),
                "method": environ.get("REQUEST_METHOD"),
                "path": redact_path(environ.get("PATH_INFO") or ""),
                "status": int(status) if status.isdigit() else status,
                "bytes": getattr(resp, "sent", None),
                "duration_ms": round(request_time.total_seconds() * 1000, 1),
                "user_agent": environ.get("HTTP_USER_AGENT"),
            },
        )


logger_class = JsonLogger if os.environ.get("SAS_LOG_FORMAT", "json") == "json" else RedactingLogger
