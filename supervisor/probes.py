"""What a process manager, a load balancer and Prometheus ask: /healthz, /readyz, /supervisorz,
/metrics.

Plain Django views (no session, no DRF): they are called every few seconds and must stay cheap.
No authentication on the probes, and nothing in their answers that a stranger should not read
(no host names, no holders, no error texts). /metrics wants the bearer token SAS_METRICS_TOKEN
and is off without one (unless DJANGO_DEBUG is on): it is answered before the host check and
every rate limit, so it is never open to whoever reaches the port; its exposition is made at most
once per SAS_METRICS_CACHE_SECONDS per process.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from sas_project import dbcode
from sas_project.conf import sas_settings
from supervisor.canary import canaryz
from supervisor.debt import DEBT_INTERVALS, remediation_debt
from supervisor.lease import LEASE_NAME, scan_age, scan_is_stale
from supervisor.models import SupervisorLease

logger = logging.getLogger("supervisor.probes")

#: Once every migration is applied it stays so for the life of the process (an upgrade migrates
#: first, then restarts), so the migration graph is read until the first success only.
_migrated = False


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """The process answers. Touches no database: a restart would not help a database outage."""
    return JsonResponse({"status": "ok"})


def _migrations_applied() -> bool:
    global _migrated
    if not _migrated:
        executor = MigrationExecutor(connection)
        _migrated = not executor.migration_plan(executor.loader.graph.leaf_nodes())
    return _migrated


def _database_code_current() -> bool:
    """The database's functions and triggers are those of this code's files, or those of the
    release that was installed over them (sas_project.dbcode, lenient): during a rolling deploy the
    processes of the previous release stay ready, since the new functions keep their calls working;
    a database two releases apart, or edited by hand, is refused. Read at every probe, unlike the
    migrations: a migrate of another release may replace the code while this process runs."""
    return not dbcode.drift(connection, lenient=True)


def _supervisor_fresh() -> str | None:
    """None when a supervisor scanned within three intervals, else why not."""
    lease = SupervisorLease.objects.filter(pk=LEASE_NAME).only("last_scan_at").first()
    age = scan_age(lease.last_scan_at if lease is not None else None, timezone.now())
    if age is None:
        return "no supervisor has scanned yet"
    if scan_is_stale(age):
        return f"the supervisor's last scan is {age:.0f}s old"
    return None


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """This process can serve: the database answers, every migration is applied and its functions
    and triggers are this code's (sas_project.dbcode). 503 with the reasons otherwise. Nothing
    outside the process and its database counts: with every cluster stopped the web pods stay
    ready (submissions and the remotes' callbacks are still taken), and /supervisorz and the
    SasSupervisorNotScanning alert say the supervisor stopped."""
    checks: dict[str, str] = {}
    reasons: list[str] = []
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception:
        logger.warning("readyz: database unreachable", exc_info=True)
        checks["database"] = "failing"
        reasons.append("the database is unreachable")
    if checks["database"] == "ok":
        try:
            applied = _migrations_applied()
            checks["migrations"] = "ok" if applied else "failing"
            if not applied:
                reasons.append("migrations are not applied")
            current = _database_code_current()
            checks["database_code"] = "ok" if current else "failing"
            if not current:
                reasons.append("the database code differs from its files")
        except Exception:
            logger.warning("readyz: check failed", exc_info=True)
            checks.setdefault("migrations", "unknown")
            checks.setdefault("database_code", "unknown")
            reasons.append("the database refused a check")
    ready = not reasons
    return JsonResponse(
        {"status": "ready" if ready else "unavailable", "checks": checks, "reasons": reasons},
        status=200 if ready else 503,
    )


@never_cache
@require_GET
def supervisorz(request: HttpRequest) -> JsonResponse:
    """Whether a supervisor scanned within three intervals and remediates (its remediation debt,
    supervisor.debt, no older than the takeover threshold past the two intervals that make a
    debt): 200, or 503 with why not. For a blackbox probe or a status page; not a readiness probe
    (a web pod can serve without it)."""
    try:
        stale = _supervisor_fresh()
        debt = remediation_debt()
    except Exception:
        logger.warning("supervisorz: database unreachable", exc_info=True)
        return JsonResponse({"status": "unknown", "reason": "the database is unreachable"}, status=503)
    if stale is not None:
        return JsonResponse(
            {"status": "stale", "reason": stale, "remediation_debt": debt.as_dict()}, status=503
        )
    interval = sas_settings.supervisor_interval
    if debt.oldest_seconds > (DEBT_INTERVALS + sas_settings.debt_takeover_intervals) * interval:
        # Scanning, but not remediating: the takeover did not help (or there is nobody to take over).
        return JsonResponse(
            {
                "status": "not_remediating",
                "reason": f"{debt.steps} steps overdue by up to {debt.oldest_seconds:.0f} s",
                "remediation_debt": debt.as_dict(),
            },
            status=503,
        )
    return JsonResponse({"status": "scanning", "remediation_debt": debt.as_dict()})


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text exposition (supervisor.metrics); 401 without the bearer token
    SAS_METRICS_TOKEN, 404 when none is set (outside debug)."""
    from prometheus_client import CONTENT_TYPE_LATEST

    token = sas_settings.metrics_token
    if not token and not settings.DEBUG:
        return JsonResponse(
            {"detail": "/metrics is off: set SAS_METRICS_TOKEN, the bearer token Prometheus sends."},
            status=404,
        )
    if token:
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            response = JsonResponse({"detail": "A bearer token is required for /metrics."}, status=401)
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
    return HttpResponse(_exposition(), content_type=CONTENT_TYPE_LATEST)


_made: tuple[float, bytes] | None = None
_making = threading.Lock()


def _exposition() -> bytes:
    """The last exposition while it is younger than SAS_METRICS_CACHE_SECONDS, else a new one
    (made by one thread at a time: the others wait for it rather than queue on the row lock)."""
    global _made
    from supervisor.metrics import exposition

    with _making:
        now = time.monotonic()
        if _made is None or now - _made[0] >= sas_settings.metrics_cache_seconds:
            _made = (now, exposition())
        return _made[1]


class ProbesBeforeHostCheck:
    """Answers the probes and /metrics before anything reads the Host header.

    A Kubernetes probe and a Prometheus scrape of a pod send the pod's IP address as `Host`, which
    DJANGO_ALLOWED_HOSTS does not list (and should not: any IP would then do for the console and
    the API), so CommonMiddleware would answer them 400. These views read nothing from the host,
    so they are served here, first in MIDDLEWARE, for GET and HEAD, and the canary's route for
    POST; every other request, and any other method on these paths, goes through the whole stack
    as before."""

    VIEWS = {"/healthz": healthz, "/readyz": readyz, "/supervisorz": supervisorz, "/metrics": metrics}
    #: The canary's route, POSTed to by the clusters at whatever name reaches a web process
    #: (SAS_CANARY_URL: an internal service name, plain HTTP behind a TLS proxy), which neither
    #: the host check nor the HTTPS redirect may turn away.
    POST_VIEWS = {"/canaryz": canaryz}

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        view = self.VIEWS.get(request.path_info)
        if view is not None and request.method in ("GET", "HEAD"):
            response: HttpResponse = view(request)
            return response
        if request.method == "POST" and request.path_info in self.POST_VIEWS:
            return self.POST_VIEWS[request.path_info](request)
        return self.get_response(request)
