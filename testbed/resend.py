"""A campaign client's POST, sent again (under the same `Idempotency-Key`, if any) after a 5xx or a
lost connection, as a careful client does while the campaign restarts the database, kills
processes and drops connections. One home for every driver of the campaign."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

#: How many times a request is sent at most, and the pause before each resend (seconds).
TRIES = 20
PAUSE = 0.5


def not_5xx(response: httpx.Response) -> bool:
    return response.status_code < 500


@dataclass
class Sent:
    """What came of a POST sent until answered."""

    #: The first answer taken (by default, the first that is not a 5xx); None when none came.
    response: httpx.Response | None = None
    #: How many times it was sent; the last status that was not taken (0: none), and what the
    #: last try that was not taken got.
    tries: int = 0
    status: int = 0
    error: str = ""
    #: Whether the first try's answer was cut (`cut_after`): the service did the request, the
    #: client never heard.
    cut: bool = False

    @property
    def resent(self) -> int:
        """Times the request was sent again."""
        return max(self.tries - 1, 0)

    @property
    def failures(self) -> int:
        """Tries whose answer was not taken."""
        return self.tries - (self.response is not None)


def post_until_answered(
    client: httpx.Client | Callable[[], httpx.Client],
    path: str,
    body: Any,
    *,
    key: str = "",
    cut_after: float | None = None,
    taken: Callable[[httpx.Response], bool] = not_5xx,
    tries: int = TRIES,
) -> Sent:
    """POST `body` to `path` until an answer `taken` accepts (by default, any but a 5xx).
    `client` may be a callable that picks a client for each try (a submitter spreading its
    tries over web processes). `cut_after`: the first try gives up reading its answer after that
    many seconds (a client's timeout: the request was done) and the request is sent again."""
    headers = {"Idempotency-Key": key} if key else {}
    sent = Sent()
    for attempt in range(tries):
        if attempt:
            time.sleep(PAUSE)
        cutting = cut_after is not None and not attempt
        timeout = httpx.Timeout(30, read=cut_after) if cutting else httpx.USE_CLIENT_DEFAULT
        http = client() if callable(client) else client
        sent.tries += 1
        try:
            response = http.post(path, json=body, headers=headers, timeout=timeout)
        except httpx.HTTPError as exc:
            sent.cut = sent.cut or (cutting and isinstance(exc, httpx.ReadTimeout))
            sent.error = f"{type(exc).__name__}: {exc}"[:300]
            continue
        if taken(response):
            sent.response = response
            return sent
        sent.status = response.status_code
        sent.error = f"{response.status_code} {response.text[:200]}"
    return sent
