"""Request rates, the login lockout's answer, and the client's address.

The API throttles every request it lets past authentication and permissions: per user
(`SAS_THROTTLE_USER`) and, for anonymous requests (the schema, the docs, unknown URLs, later the
remotes' callbacks), per client address (`SAS_THROTTLE_ANON`). Over the rate, DRF answers 429 with
`Retry-After`. The counts live in the `throttle` cache: in each web process's memory by default,
so a client gets the rate from every gunicorn worker it reaches (docs/security.md); point
`CACHES["throttle"]` at a shared cache to count across processes.

Failed sign-ins to the console and the admin are counted by django-axes (settings.py, "Login
protection"); `lockout_response` is its answer to a locked account or address: 429 and a page
saying how long to wait.

`client_ip` is the one answer to "who is asking" for the throttles and for the login lockout
(django-axes): the peer's address, or with `SAS_TRUSTED_PROXIES` = n proxies in front (a load
balancer), the address the n-th proxy from the right saw in `X-Forwarded-For`. Entries further
left are the client's to write, so they are never believed.
"""

from __future__ import annotations

from typing import Any, cast

from django.conf import settings
from django.core.cache import BaseCache, caches
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.connection import ConnectionProxy
from rest_framework.request import Request
from rest_framework.throttling import AnonRateThrottle, UserRateThrottle

from sas_project.conf import sas_settings


def client_ip(request: HttpRequest | Request) -> str:
    """The client's address, believing only the proxies SAS_TRUSTED_PROXIES counts."""
    meta: dict[str, Any] = request.META
    peer = str(meta.get("REMOTE_ADDR") or "")
    proxies = sas_settings.trusted_proxies
    if proxies <= 0:
        return peer
    hops = [hop.strip() for hop in str(meta.get("HTTP_X_FORWARDED_FOR") or "").split(",") if hop.strip()]
    if len(hops) < proxies:
        return peer
    return hops[-proxies]


def lockout_response(
    request: HttpRequest, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    """django-axes' answer (AXES_LOCKOUT_CALLABLE) to a sign-in from a locked account or address."""
    minutes = max(1, round(settings.AXES_COOLOFF_TIME.total_seconds() / 60))
    context = {"failure_limit": settings.AXES_FAILURE_LIMIT, "minutes": minutes}
    response = render(request, "registration/locked_out.html", context, status=429)
    response["Retry-After"] = str(int(settings.AXES_COOLOFF_TIME.total_seconds()))
    return response


class _Rates:
    """Rates read at each request (so a changed setting applies at once) and counted in the
    `throttle` cache."""

    scope: str

    #: Resolved at each use, per thread, as django.core.cache.cache is.
    cache = cast(BaseCache, ConnectionProxy(caches, "throttle"))

    def get_rate(self) -> str | None:
        rate = sas_settings.throttle_rates.get(self.scope, "").strip()
        return None if rate.lower() in ("", "off", "none") else rate

    def get_ident(self, request: Request) -> str:
        return client_ip(request)


class UserThrottle(_Rates, UserRateThrottle):
    """Per signed-in user (per address for anonymous requests, which AnonThrottle also counts)."""

    scope = "user"


class AnonThrottle(_Rates, AnonRateThrottle):
    """Per client address, for anonymous requests only."""

    scope = "anon"
