"""Request rates, the login lockout's answer, and the client's address.

The API limits every request it lets past authentication and permissions: per signed-in user
(`SAS_THROTTLE_USER`, 200 a second, `SAS_THROTTLE_USER_BURST` 1,200 at once) and, for anonymous
requests (the schema, the docs, unknown URLs), per client address (`SAS_THROTTLE_ANON`, 300 a
minute, `SAS_THROTTLE_ANON_BURST` 60 at once). Over the rate, 429 with `Retry-After`; every
counted answer carries `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset`
(`rate_limit_headers`).

Each client has a bucket (GCRA: the theoretical arrival time of its next request, `tat`) in the
database table `api_rate_bucket` (sas_project.tokens.models.RateBucket), read and written by one
statement per request (`rate_bucket_take`), so every web process on every host counts the same
requests. A failure of that statement lets the request through (logged): the limiter must not
turn a database hiccup into 500s on its own. docs/security.md ("Request rates") says why
the database and not a cache.

Failed sign-ins to the console and the admin are counted by django-axes (settings.py, "Login
protection"); `lockout_response` is its answer to a locked account or address: 429 and a page
saying how long to wait.

`client_ip` is the one answer to "who is asking" for the throttles and for the login lockout
(django-axes): the peer's address, or with `SAS_TRUSTED_PROXIES` = n proxies in front (a load
balancer), the address the n-th proxy from the right saw in `X-Forwarded-For`. Entries further
left are the client's to write, so they are never believed.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from sas_project.conf import sas_settings
from sas_project.database import is_postgresql

logger = logging.getLogger(__name__)


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


# --- rates ----------------------------------------------------------------------------------------

#: `N/s`, `N/min`, `N/hour`, `N/day` (DRF's notation: the period's first letter counts, so the
#: values deployments already set still parse); `off`, `none` or empty for no limit.
RATE_PATTERN = re.compile(r"^\s*(?:|off|none|[1-9][0-9]*/[smhd][a-z]*)\s*$", re.IGNORECASE)
PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True)
class RatePolicy:
    """A sustained rate of one request every `interval` seconds, and up to `burst` at once."""

    interval: float
    burst: int

    @property
    def per_second(self) -> float:
        return 1.0 / self.interval


def parse_rate(rate: str) -> tuple[int, float] | None:
    """`100/s` -> (100, 1.0), `1200/min` -> (1200, 60.0); None for `off`. A value
    RATE_PATTERN refuses is a ValueError (settings.py refuses it at start)."""
    text = rate.strip().lower()
    if text in ("", "off", "none"):
        return None
    if not RATE_PATTERN.match(text):
        raise ValueError(f"not a rate: {rate!r} (write it as 100/s, 1200/min or off)")
    count, period = text.split("/")
    return int(count), PERIODS[period[0]]


def rate_policy(scope: str) -> RatePolicy | None:
    """The policy of `user` or `anon`, read at each request (a changed setting applies at once);
    None when the rate is off."""
    parsed = parse_rate(sas_settings.throttle_rates.get(scope, ""))
    if parsed is None:
        return None
    count, seconds = parsed
    return RatePolicy(interval=seconds / count, burst=max(sas_settings.throttle_bursts[scope], 1))


# --- the buckets ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RateDecision:
    """One request's answer from its bucket, and what the headers say about it."""

    allowed: bool
    #: The most requests the bucket lets through at once (RateLimit-Limit).
    limit: int
    #: Requests the client may still make at once (RateLimit-Remaining).
    remaining: int
    #: Seconds until the bucket is full again (RateLimit-Reset).
    reset: float
    #: Seconds until the next request would be let through: 0 when this one was.
    retry_after: float


# One statement per request: the bucket's row is created full (its first request is always let
# through), or updated under its row lock from the old row's values (every SET expression reads
# the row as it was). GCRA: a request at `now` is refused when max(tat, now) + interval - window
# > now, window = burst x interval; a refused request leaves `tat` as it was. `seen_at` carries
# the statement's one `now` from VALUES into the update, on the database's clock unless the
# caller gives it (tests).
_TAKE_POSTGRESQL = """
INSERT INTO api_rate_bucket AS b (key, tat, seen_at, refused)
VALUES (
    %(key)s,
    COALESCE(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) + %(interval)s::float8,
    COALESCE(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8),
    false
)
ON CONFLICT (key) DO UPDATE SET
    refused = GREATEST(b.tat, excluded.seen_at) + %(interval)s::float8 - %(window)s::float8
        > excluded.seen_at,
    tat = CASE
        WHEN GREATEST(b.tat, excluded.seen_at) + %(interval)s::float8 - %(window)s::float8
            > excluded.seen_at THEN b.tat
        ELSE GREATEST(b.tat, excluded.seen_at) + %(interval)s::float8
    END,
    seen_at = excluded.seen_at
RETURNING tat, seen_at, refused
"""

# The same on SQLite (the single host of `make run`): its scalar max() for GREATEST, and its
# clock, which stays the same within one statement.
_TAKE_SQLITE = """
INSERT INTO api_rate_bucket AS b (key, tat, seen_at, refused)
VALUES (
    %(key)s,
    COALESCE(%(now)s, (julianday('now') - 2440587.5) * 86400.0) + %(interval)s,
    COALESCE(%(now)s, (julianday('now') - 2440587.5) * 86400.0),
    0
)
ON CONFLICT (key) DO UPDATE SET
    refused = max(b.tat, excluded.seen_at) + %(interval)s - %(window)s > excluded.seen_at,
    tat = CASE
        WHEN max(b.tat, excluded.seen_at) + %(interval)s - %(window)s > excluded.seen_at THEN b.tat
        ELSE max(b.tat, excluded.seen_at) + %(interval)s
    END,
    seen_at = excluded.seen_at
RETURNING tat, seen_at, refused
"""

#: At most one log line a minute per process while the store keeps failing.
_FAILURE_LOG_SECONDS = 60.0
_failures = {"last_logged": -math.inf, "unlogged": 0}


def rate_bucket_take(
    *, key: str, policy: RatePolicy, now: float | None = None, window: float | None = None
) -> RateDecision | None:
    """Count one request of `key` against `policy`: one statement, atomic under the bucket's row
    lock, whichever process asks. `now` (seconds since the epoch) replaces the database's clock.

    Returns None when the store failed (the database is down, the table is missing): the caller
    lets the request through. `window` replaces the policy's (burst x interval). The failure is
    logged (once a minute at most), and the caller's transaction goes on (`_read`)."""
    sql = _TAKE_POSTGRESQL if is_postgresql() else _TAKE_SQLITE
    # A window past a year (math.inf: never refused) is a year: wider than any work, and a
    # number every driver carries.
    window = min(policy.interval * policy.burst if window is None else window, 3.2e7)
    params = {"key": key, "now": now, "interval": policy.interval, "window": window}
    row = _read(sql, params, key=key)
    if row is None:
        return None  # an upsert with RETURNING returns its row: None is a failed store
    tat, at, refused = float(row[0]), float(row[1]), bool(row[2])
    if refused:
        return RateDecision(
            allowed=False,
            limit=policy.burst,
            remaining=0,
            reset=max(tat - at, 0.0),
            retry_after=max(tat + policy.interval - window - at, 0.0),
        )
    # Rounded before the floor: the times are seconds since the epoch (some 1.8e9), where a
    # double carries about 2e-7 s, so a whole number of requests comes out a hair short (a full
    # bucket of 60 at 0.2 s read 58.99999 and said 58). A thousandth of a request is below any
    # client's notice.
    remaining = math.floor(round((at + window - tat) / policy.interval, 3))
    return RateDecision(
        allowed=True,
        limit=policy.burst,
        remaining=min(max(remaining, 0), policy.burst),
        reset=max(tat - at, 0.0),
        retry_after=0.0,
    )


def _read(sql: str, params: dict[str, Any] | list[Any], *, key: str) -> tuple[Any, ...] | None:
    """The first row of `sql` on the bucket store; None when there is none or the store failed
    (logged). Inside a transaction the statement runs in a savepoint, so that a failure leaves
    the caller's transaction usable; outside one (an API request) it costs no extra statement."""
    savepoint = transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
    try:
        with savepoint, connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
    except DatabaseError:
        _log_store_failure(key)
        return None
    return tuple(row) if row is not None else None


def _log_store_failure(key: str) -> None:
    clock = time.monotonic()
    if clock - _failures["last_logged"] < _FAILURE_LOG_SECONDS:
        _failures["unlogged"] += 1
        return
    skipped, _failures["unlogged"], _failures["last_logged"] = _failures["unlogged"], 0, clock
    logger.warning(
        "the API's rate limiter could not count a request of %s; it was let through "
        "(%d more since the last warning)",
        key,
        skipped,
        exc_info=True,
        extra={"rate_key": key, "unlogged_failures": skipped},
    )


# --- budgets of work --------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkBudget:
    """Seconds of work a client may spend a second, sustained (`per_second`), and at once above
    it (`burst`): a bucket in `api_rate_bucket` whose `tat` runs ahead of the clock by the work
    spent, 1 / per_second bucket-seconds per second of work."""

    per_second: float
    burst: float


_OWED_POSTGRESQL = (
    "SELECT tat - extract(epoch FROM statement_timestamp())::float8 FROM api_rate_bucket WHERE key = %s"
)
_OWED_SQLITE = "SELECT tat - (julianday('now') - 2440587.5) * 86400.0 FROM api_rate_bucket WHERE key = %s"


def work_budget_wait(*, key: str, budget: WorkBudget) -> float:
    """Seconds until `key` may start more work: 0 while what it spent lately is within the burst.
    One indexed read; 0 when the store fails (a budget must not turn a hiccup into refusals)."""
    sql = _OWED_POSTGRESQL if is_postgresql() else _OWED_SQLITE
    row = _read(sql, [key], key=key)
    ahead = float(row[0]) if row is not None and row[0] is not None else 0.0
    return max(ahead - budget.burst / budget.per_second, 0.0)


def work_budget_spend(*, key: str, budget: WorkBudget, seconds: float) -> None:
    """Count `seconds` of work against `key`'s budget: never refused (the work is done), it
    pushes the bucket's `tat` ahead, and `work_budget_wait` refuses the next while it is too far."""
    if seconds <= 0:
        return
    # A window as wide as the work can ever be: the take below is never refused.
    policy = RatePolicy(interval=seconds / budget.per_second, burst=1)
    rate_bucket_take(key=key, policy=policy, window=math.inf)


def rate_buckets_prune(*, idle_seconds: float = 60.0, now: float | None = None) -> int:
    """Delete the buckets full for `idle_seconds` or more: the same as no row for the next
    request, and the table stays as small as the number of clients active lately. Run by the
    supervisor's lease holder (supervisor.loop). Returns how many rows went."""
    from sas_project.tokens.models import RateBucket

    at = time.time() if now is None else now
    deleted, _ = RateBucket.objects.filter(tat__lt=at - idle_seconds).delete()
    return int(deleted)


# --- DRF's throttles and the headers ---------------------------------------------------------------

#: Where a request's decision waits for `rate_limit_headers` (a WSGI environ key of ours).
DECISION_KEY = "sas.rate_limit"


class _BucketThrottle(BaseThrottle):
    """A DRF throttle counting in the buckets above; `key_for` names the request's bucket, or
    None when this throttle does not count the request."""

    scope: str
    decision: RateDecision | None = None

    def key_for(self, request: Request) -> str | None:
        raise NotImplementedError

    def allow_request(self, request: Request, view: Any) -> bool:
        policy = rate_policy(self.scope)
        key = self.key_for(request)
        if policy is None or key is None:
            return True
        self.decision = rate_bucket_take(key=key, policy=policy)
        if self.decision is None:
            return True
        request.META[DECISION_KEY] = self.decision
        return self.decision.allowed

    def wait(self) -> float | None:
        return None if self.decision is None else self.decision.retry_after

    def get_ident(self, request: Request) -> str:
        return client_ip(request)


class UserThrottle(_BucketThrottle):
    """Per signed-in user (anonymous requests are AnonThrottle's)."""

    scope = "user"

    def key_for(self, request: Request) -> str | None:
        user = request.user
        return f"user:{user.pk}" if user is not None and user.is_authenticated else None


class AnonThrottle(_BucketThrottle):
    """Per client address, for anonymous requests only."""

    scope = "anon"

    def key_for(self, request: Request) -> str | None:
        user = request.user
        return None if user is not None and user.is_authenticated else f"anon:{self.get_ident(request)}"


def rate_limit_headers(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """Middleware: an answer whose request was counted says where its client stands
    (draft-ietf-httpapi-ratelimit-headers, the three fields of its drafts up to -07):
    `RateLimit-Limit` (the burst), `RateLimit-Remaining` (requests left at once) and
    `RateLimit-Reset` (seconds until the bucket is full again). A 429 also has DRF's
    `Retry-After`."""

    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        decision = request.META.get(DECISION_KEY)
        if isinstance(decision, RateDecision):
            response["RateLimit-Limit"] = str(decision.limit)
            response["RateLimit-Remaining"] = str(decision.remaining)
            response["RateLimit-Reset"] = str(math.ceil(decision.reset))
        return response

    return middleware
