"""Reporting accepted work to the scheduler: the result POSTed to the call's callback URL, and
heartbeats to `<callback URL>heartbeat/`.

What the scheduler answers (its docs/api.md, "Results later" and "Heartbeats"): a result gets 200
when recorded and 409 when that attempt already has one (a repeat: delivered all the same); a
heartbeat gets 200 while the attempt is in flight; both get 410 once the scheduler gave the
attempt up (or the URL's token expired): stop, a later delivery of the operation will ask again.
403 (a bad token) and 400 will not change by trying again. 5xx, 429, 408 and connection errors
are tried again with exponential backoff.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx

log = logging.getLogger("sas_remote")


class Delivery(enum.StrEnum):
    #: The scheduler has the result (200), or had it already (409).
    DELIVERED = "delivered"
    #: 410: the scheduler gave the attempt up; the result waits in the store for the next delivery.
    GIVEN_UP = "given_up"
    #: Another 4xx: the URL or the result is wrong, and trying again would not help.
    REFUSED = "refused"
    #: Every try failed (5xx, 429, connection errors).
    UNDELIVERED = "undelivered"


def heartbeat_url(callback_url: str) -> str:
    return callback_url.rstrip("/") + "/heartbeat/"


class CallbackClient:
    """POSTs results and heartbeats. `tries` tries a result at most, waiting `backoff` seconds
    after the first failure, doubling up to `max_backoff`."""

    def __init__(
        self,
        *,
        client: httpx.Client | None = None,
        tries: int = 8,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        timeout: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # One client: its pool keeps the connection to the scheduler open between reports.
        self._client = client or httpx.Client(timeout=timeout, follow_redirects=False)
        self._tries = max(tries, 1)
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._sleep = sleep

    def close(self) -> None:
        self._client.close()

    def _post(self, url: str, payload: dict[str, Any]) -> int | None:
        """The status of one POST, None when no answer came."""
        try:
            return self._client.post(url, json=payload).status_code
        except httpx.HTTPError as exc:
            log.warning("POST %s: %s", _redacted(url), exc)
            return None

    def post_result(self, url_of: Callable[[], str], result: dict[str, Any]) -> Delivery:
        """POST `result` to `url_of()` (asked again before every try: a newer delivery of the
        operation may have brought a newer callback URL) until an answer settles it."""
        wait = self._backoff
        for number in range(1, self._tries + 1):
            url = url_of()
            status = self._post(url, result)
            if status is not None and (200 <= status < 300 or status == 409):
                return Delivery.DELIVERED
            if status == 410:
                return Delivery.GIVEN_UP
            if status is not None and 400 <= status < 500 and status not in (408, 429):
                log.error("result refused by %s: HTTP %s", _redacted(url), status)
                return Delivery.REFUSED
            if number < self._tries:
                self._sleep(wait)
                wait = min(wait * 2, self._max_backoff)
        return Delivery.UNDELIVERED

    def post_heartbeat(self, callback_url: str, details: Any) -> int | None:
        """One heartbeat (not tried again: the next one follows soon); its status, None when no
        answer came."""
        return self._post(heartbeat_url(callback_url), {"details": details})


def _redacted(url: str) -> str:
    """`url` without its last segments: the callback token is a credential, kept out of logs."""
    head, _, _token = url.rstrip("/").rpartition("/callbacks/")
    return f"{head}/callbacks/..." if head else url.split("?", 1)[0][:60]
