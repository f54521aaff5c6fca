"""One user's large API requests in flight, across every web process.

A request's cost is bounded by its size (SAS_MAX_BODY_BYTES, the checks of contracts and
expressions), yet a large body still holds a web worker for tenths of a second: reading it,
checking it, writing it. A tenant sending such bodies from several threads at once would hold
every worker of a small web tier, and everyone else's requests would queue behind them. So a
signed-in user may have at most `SAS_LARGE_REQUESTS_PER_USER` requests whose body is over
`SAS_LARGE_REQUEST_BYTES` being served at once; one more is answered 429 (`throttled`, with
`Retry-After: 1`) at once, before its body is read, and changes nothing. Small requests, the
ordinary traffic, pay nothing.

The count is rows in `api_large_request` (sas_project.tokens.models.LargeRequest): a request
inserts its row, counts the unexpired rows of its user up to its own (first come, first
served: of two at once, the later one yields) and removes its row with its answer. A row whose
process died expires after LEASE."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.apps import apps
from django.db import DatabaseError
from django.utils import timezone

from sas_project.conf import sas_settings
from sas_project.errors import Throttled

logger = logging.getLogger(__name__)

#: How long a row counts if its request never removes it (a worker killed mid-request): longer
#: than any request may take.
LEASE = dt.timedelta(seconds=120)


def _rows() -> Any:
    """The model of the rows (sas_project.tokens.models.LargeRequest), looked up by name: the
    tokens app's views stand on the API's base view, which calls this module."""
    return apps.get_model("tokens", "LargeRequest")


def body_bytes(meta: dict[str, Any]) -> int:
    try:
        return max(int(meta.get("CONTENT_LENGTH") or 0), 0)
    except ValueError:
        return 0


def large_request_begin(user: Any, *, size: int) -> int | None:
    """Count a request of `user` with a body of `size` bytes: None when it is not large (or the
    limit is off, or the user anonymous); else the id of its row, to pass to
    `large_request_end`. Raises Throttled when the user already has the most in flight. A
    failure of the store lets the request through (logged), as the rate limits do."""
    limit = sas_settings.large_requests_per_user
    if limit <= 0 or size <= sas_settings.large_request_bytes or not getattr(user, "is_authenticated", False):
        return None
    rows = _rows()
    key = f"user:{user.pk}"
    now = timezone.now()
    try:
        rows.objects.filter(key=key, expires_at__lte=now).delete()
        row = rows.objects.create(key=key, expires_at=now + LEASE)
        ahead = rows.objects.filter(key=key, expires_at__gt=now, pk__lte=row.pk).count()
    except DatabaseError:
        logger.warning(
            "large requests in flight could not be counted for %s; let through", key, exc_info=True
        )
        return None
    if ahead > limit:
        rows.objects.filter(pk=row.pk).delete()
        raise Throttled(
            f"you have {limit} large request(s) (bodies over {sas_settings.large_request_bytes} bytes) "
            "being served: send the next when one has answered (SAS_LARGE_REQUESTS_PER_USER)",
            retry_after=1,
        )
    return int(row.pk)


def large_request_end(row: int | None) -> None:
    """The request of `row` (from `large_request_begin`) has its answer."""
    if row is None:
        return
    try:
        _rows().objects.filter(pk=row).delete()
    except DatabaseError:
        logger.warning("a large request's row could not be removed; it expires", exc_info=True)
