"""Retries at the HTTP transport, so that the hand-written facade and the generated client
(`sas_client.openapi`) share them.

A request is retried only when sending it twice cannot do a thing twice: a read (GET, HEAD,
OPTIONS), a request carrying an `Idempotency-Key` (the service answers a replay with the first
answer), or one its sender marked idempotent (`extensions={"sas_idempotent": True}`: a batch whose
every item carries its own key). Those are retried on 429, on 5xx and when no answer came (the
connection failed or timed out), after `Retry-After` when the answer gave one, else after an
exponential backoff, with a random part added so that many clients do not all come back at the
same instant. Any other request is sent once: its 429 or 5xx is the caller's to handle.

`RetryTransport` (httpx.Client) and `AsyncRetryTransport` (httpx.AsyncClient) differ only in how
they send and sleep: whether to retry, and after how long, is `RetryPolicy.decide`'s.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from sas_client.errors import parse_retry_after

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
#: The request extension that marks a request safe to send again.
IDEMPOTENT = "sas_idempotent"


@dataclass(frozen=True)
class RetryPolicy:
    """How idempotent requests are retried. `attempts` counts the first try."""

    attempts: int = 5
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    #: The random part: up to this fraction of the wait is added to it.
    jitter: float = 0.5
    #: A `Retry-After` longer than this is not waited for: the answer goes to the caller.
    retry_after_max: float = 120.0

    def backoff(self, retry: int) -> float:
        """The wait before retry number `retry` (0 for the first) when the answer named none."""
        return float(min(self.backoff_max, self.backoff_initial * 2**retry))

    def delay(self, retry: int, retry_after: float | None) -> float:
        base = retry_after if retry_after is not None else self.backoff(retry)
        return base + random.uniform(0, base * self.jitter)

    def decide(
        self, retry: int, response: httpx.Response | None, error: Exception | None = None
    ) -> Retry | None:
        """Whether try number `retry` + 1 (0: the first) of an idempotent request, which got
        `response` or raised `error` (a `httpx.TransportError`: no answer), is sent again: the
        retry to make, or None when the answer (or the error) goes to the caller."""
        if retry + 1 >= self.attempts:
            return None
        if response is None:
            return Retry(self.delay(retry, None), type(error).__name__, None)
        if response.status_code not in RETRIED_STATUSES:
            return None
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        if retry_after is not None and retry_after > self.retry_after_max:
            return None
        return Retry(self.delay(retry, retry_after), str(response.status_code), retry_after)


@dataclass(frozen=True)
class Retry:
    """A decision to send a request again: after `wait` seconds, because of `reason`."""

    wait: float
    reason: str
    retry_after: float | None


@dataclass(frozen=True)
class RetryEvent:
    """A retry about to happen, for a `on_retry` hook (logging, metrics, tests)."""

    request: httpx.Request
    #: 1 for the first retry.
    number: int
    #: Seconds until it is sent.
    wait: float
    #: Why: the status ("429", "503") or the error ("ConnectError", "ReadTimeout").
    reason: str
    #: The answer's `Retry-After` in seconds, when it named one.
    retry_after: float | None
    #: The most tries the policy allows, the first included.
    attempts: int = RetryPolicy.attempts

    def describe(self) -> str:
        """`retrying in 2.1 s (attempt 2 of 5): 503`: one line for a person."""
        return f"retrying in {self.wait:.1f} s (attempt {self.number + 1} of {self.attempts}): {self.reason}"


RetryHook = Callable[[RetryEvent], None]


def is_idempotent(request: httpx.Request) -> bool:
    return (
        request.method in IDEMPOTENT_METHODS
        or "idempotency-key" in request.headers
        or bool(request.extensions.get(IDEMPOTENT))
    )


class RetryTransport(httpx.BaseTransport):
    """Wraps another transport (by default httpx's own) with the retries of `policy`."""

    def __init__(
        self,
        wrapped: httpx.BaseTransport | None = None,
        *,
        policy: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        on_retry: RetryHook | None = None,
    ) -> None:
        self.wrapped = wrapped if wrapped is not None else httpx.HTTPTransport()
        self.policy = policy or RetryPolicy()
        self.sleep = sleep
        self.on_retry = on_retry

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not is_idempotent(request):
            return self.wrapped.handle_request(request)
        retry = 0
        while True:
            response, error = None, None
            try:
                response = self.wrapped.handle_request(request)
            except httpx.TransportError as exc:  # no answer (timeouts included)
                error = exc
            decision = self.policy.decide(retry, response, error)
            if decision is None:
                return _answer(response, error)
            if response is not None:
                response.close()
            retry += 1
            _announce(self.on_retry, request, retry, decision, self.policy)
            self.sleep(decision.wait)

    def close(self) -> None:
        self.wrapped.close()


class AsyncRetryTransport(httpx.AsyncBaseTransport):
    """`RetryTransport` for `httpx.AsyncClient`: the same decisions (`RetryPolicy.decide`), an
    awaited sleep (`asyncio.sleep` unless given)."""

    def __init__(
        self,
        wrapped: httpx.AsyncBaseTransport | None = None,
        *,
        policy: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_retry: RetryHook | None = None,
    ) -> None:
        self.wrapped = wrapped if wrapped is not None else httpx.AsyncHTTPTransport()
        self.policy = policy or RetryPolicy()
        self.sleep = sleep
        self.on_retry = on_retry

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not is_idempotent(request):
            return await self.wrapped.handle_async_request(request)
        retry = 0
        while True:
            response, error = None, None
            try:
                response = await self.wrapped.handle_async_request(request)
            except httpx.TransportError as exc:  # no answer (timeouts included)
                error = exc
            decision = self.policy.decide(retry, response, error)
            if decision is None:
                return _answer(response, error)
            if response is not None:
                await response.aclose()
            retry += 1
            _announce(self.on_retry, request, retry, decision, self.policy)
            await self.sleep(decision.wait)

    async def aclose(self) -> None:
        await self.wrapped.aclose()


def _answer(response: httpx.Response | None, error: Exception | None) -> httpx.Response:
    """The answer that goes to the caller: the response, or the error raised when none came."""
    if response is None:
        raise error or httpx.TransportError("no answer")
    return response


def _announce(
    hook: RetryHook | None, request: httpx.Request, number: int, retry: Retry, policy: RetryPolicy
) -> None:
    if hook is not None:
        hook(RetryEvent(request, number, retry.wait, retry.reason, retry.retry_after, policy.attempts))
