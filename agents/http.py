"""The HTTP agent: one POST (or, to reconcile, one GET) to an untrusted remote.

Contract (docs/architecture.md, "How one step runs"): 2xx = success with the JSON body as output, except 202
Accepted: the remote took the call and will POST the result to the `X-SAS-Callback-URL` every
call carries (the attempt stays in flight, its deadline still applies); 4xx other than 408/429 =
business failure; 408, 429, 5xx and refused connections = transient failure; a
request sent with no answer before the deadline = no answer (it may have happened). A cancel
(`AttemptKind.CANCEL`: a POST to the step's `cancel_path` with the call's operation ID, no
callback URL) reads its answer the same way, except that a 202 is a success. No retries
here (the supervisor owns them), no redirects followed, and every connection made only to an
address the outbound-URL guard checked (agents.egress). The whole call, connecting included,
ends by the step's deadline whatever pace the remote answers at (`agents.egress.deadline`), and
the answer is read capped at SAS_MAX_RESPONSE_BYTES decoded bytes (a compressed answer is refused
as soon as it decodes past the cap).

One client per worker process: its connection pool keeps connections to the remotes alive
between calls, and its TLS context is built once (building one costs about as much CPU as a
whole step). Each call still sets its own deadline, the time left to the step's. A forked or
recycled worker is a new process and builds its own client: a client is never shared across a
fork.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import os
import time
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from agents.egress import TooLarge, deadline, outbound_client, read_capped
from agents.outcome import ACCEPTED, CallResult, CallSpec, Outcome
from agents.validation import reserved_header_name, valid_field_value, validate_endpoint_url
from sas_project.conf import sas_settings
from sas_project.errors import InvalidInput

#: The error of a call whose endpoint's secret header has a name the service sets itself.
NOT_SENT_RESERVED = (
    "not sent: the endpoint's secret header has a reserved name (check the endpoint's secret header)"
)
#: The error of a call whose request could not be built (it names no header value).
NOT_SENT = "not sent: a header value is not a valid HTTP field value (check the endpoint's secret header)"


def _excerpt(body: bytes) -> str:
    return body[: sas_settings.response_excerpt_bytes].decode("utf-8", errors="replace")


#: The longest wait a Retry-After is read as (a day): a policy caps the retry far below it anyway.
MAX_RETRY_AFTER = 86_400.0
#: The statuses whose Retry-After is read (RFC 9110: "the service is unavailable", "too many
#: requests"); elsewhere the header says nothing about this call.
RETRY_AFTER_STATUSES = frozenset({429, 503})


def retry_after(status: int, value: str, *, now: dt.datetime | None = None) -> float | None:
    """The seconds a Retry-After header asks for (delay-seconds or an HTTP-date, RFC 9110
    10.2.3), within [0, MAX_RETRY_AFTER]; None on another status or a value that is neither."""
    value = value.strip()
    if status not in RETRY_AFTER_STATUSES or not value:
        return None
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        seconds = (when - (now or dt.datetime.now(dt.UTC))).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def _classify(spec: CallSpec, status: int, body: bytes, location: str) -> tuple[str, Any, str]:
    """(outcome, output, error) for an HTTP answer."""
    output: Any = None
    note = ""
    if body:
        try:
            output = json.loads(body)
        except ValueError:
            output = None
        except RecursionError:
            # Nesting deep enough to exhaust the parser's stack: read as a body that is not JSON.
            output, note = None, "the answer nests too deeply to read: the output is recorded as null"
    if spec.is_reconcile:
        if status == 200:
            return Outcome.SUCCEEDED, output, note
        if status == 404:
            return Outcome.NOT_HAPPENED, None, "the remote has no record of this operation"
        return Outcome.TRANSIENT_FAILURE, None, f"status query answered HTTP {status}"
    if status == 202 and not spec.is_cancel:
        # Accepted: the remote reports the result later, to the callback URL the call carried.
        # A cancel carries none: the remote taking it is all it asks for.
        return ACCEPTED, None, ""
    if 200 <= status < 300:
        return Outcome.SUCCEEDED, output, note
    if 300 <= status < 400:
        return Outcome.BUSINESS_FAILURE, None, f"redirect to {location[:200]!r} not followed"
    if status in (408, 429) or status >= 500:
        return Outcome.TRANSIENT_FAILURE, None, f"HTTP {status}"
    return Outcome.BUSINESS_FAILURE, None, f"HTTP {status}"


#: The pool of the service's canary (supervisor.canary): created by the service, never by a
#: user (the name is reserved), its one endpoint SAS_CANARY_URL or SAS_PUBLIC_URL.
CANARY_POOL = "sas-canary"
#: The service's own route the canary calls: it drops the first call of each operation ID.
CANARY_PATH = "/canaryz"

_client: httpx.Client | None = None
_client_pid: int | None = None
_own_client: tuple[int, str, httpx.Client] | None = None


def client() -> httpx.Client:
    """This process's HTTP client (a new one after a fork)."""
    global _client, _client_pid
    if _client is None or _client_pid != os.getpid():
        # Every new connection is checked by the outbound-URL guard (agents.egress): resolved
        # once, each address checked, connected to a checked address. Reused ones cost nothing.
        _client = outbound_client(
            # The client is shared by every job this worker runs: a cookie one remote sets must
            # never travel with another job's call, so none is kept.
            cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
            # A worker makes one call at a time; a few idle connections per remote cover the
            # endpoints it alternates between. Idle ones are dropped before a typical server's
            # keep-alive timeout closes them under us.
            limits=httpx.Limits(max_connections=20, max_keepalive_connections=10, keepalive_expiry=4.0),
        )
        _client_pid = os.getpid()
    return _client


def canary_url() -> str:
    """The URL the canary's calls go to: the canary route under SAS_CANARY_URL or SAS_PUBLIC_URL
    ("" without either)."""
    base = sas_settings.canary_base_url
    return f"{base}{CANARY_PATH}" if base else ""


def _canary_client(spec: CallSpec) -> httpx.Client | None:
    """The client for a call of the canary pool to the service's own canary route: the guard lets
    it reach that URL's host and port, which may be internal (loopback, a cluster-internal
    name) and need not be in SAS_OUTBOUND_INTERNAL_HOSTS. Any other call gets None: the pool's
    name opens no other URL, and the lists that hold users' endpoints stay as they are."""
    global _own_client
    own = canary_url()
    if spec.pool != CANARY_POOL or spec.is_reconcile or not own:
        return None
    if spec.base_url.rstrip("/") + spec.path != own:
        return None
    parts = urlsplit(own)
    if _own_client is None or _own_client[:2] != (os.getpid(), own):
        port = parts.port or (443 if parts.scheme == "https" else 80)
        _own_client = (
            os.getpid(),
            own,
            outbound_client(
                own=((parts.hostname or "").lower(), port),
                cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
            ),
        )
    return _own_client[2]


def call_http(spec: CallSpec) -> CallResult:
    started = time.monotonic()

    def elapsed_ms() -> int:
        return int((time.monotonic() - started) * 1000)

    canary = _canary_client(spec)
    try:
        # The URL's form and the host lists only: the address is checked when connecting. The
        # canary's URL is the service's own.
        base = spec.base_url.rstrip("/") if canary else validate_endpoint_url(spec.base_url, resolve=False)
    except InvalidInput as exc:
        return CallResult(Outcome.BUSINESS_FAILURE, error=f"endpoint refused: {exc.message}")
    if any(reserved_header_name(name) for name in spec.headers):
        # Saved before names were checked at save time: a secret under Host or Idempotency-Key
        # would replace what the service sends. Refused here, nothing sent.
        return CallResult(Outcome.BUSINESS_FAILURE, error=NOT_SENT_RESERVED)
    headers = {
        "Idempotency-Key": spec.operation_id,
        "X-SAS-Attempt": str(spec.attempt),
        "Accept": "application/json",
        **spec.headers,
    }
    if spec.callback_url and not spec.is_reconcile:
        headers["X-SAS-Callback-URL"] = spec.callback_url
    if not all(valid_field_value(value) for value in headers.values()):
        # Saved before the check at save time existed: refused here, never quoted (a secret).
        return CallResult(Outcome.BUSINESS_FAILURE, error=NOT_SENT)
    if spec.is_reconcile:
        method, content = "GET", None
        url = base + spec.path.replace("{operation_id}", quote(spec.operation_id, safe=""))
    else:
        method = "POST"
        content = json.dumps(spec.payload, separators=(",", ":")).encode()
        headers["Content-Type"] = "application/json"
        url = base + spec.path
    timeout = max(spec.timeout, 0.001)
    # Built (a first time, with its TLS context) before the deadline starts: a connection is made
    # under it.
    http_client = canary or client()
    try:
        with (
            deadline(timeout),
            http_client.stream(
                method, url, content=content, headers=headers, timeout=httpx.Timeout(timeout)
            ) as response,
        ):
            body = read_capped(response, sas_settings.max_response_bytes)
            outcome, output, error = _classify(
                spec, response.status_code, body, response.headers.get("location", "")
            )
            asked = (
                retry_after(response.status_code, response.headers.get("retry-after", ""))
                if outcome == Outcome.TRANSIENT_FAILURE
                else None
            )
            if asked is not None:
                error = f"{error}; the remote asked to wait {asked:g}s (Retry-After)"
            return CallResult(
                outcome,
                output=output,
                status_code=response.status_code,
                latency_ms=elapsed_ms(),
                excerpt=_excerpt(body),
                error=error,
                retry_after=asked,
            )
    except InvalidInput as exc:
        # The connect-time check refused the address: nothing was sent.
        return CallResult(
            Outcome.BUSINESS_FAILURE, latency_ms=elapsed_ms(), error=f"endpoint refused: {exc.message}"
        )
    except TooLarge:
        return CallResult(
            Outcome.TRANSIENT_FAILURE,
            latency_ms=elapsed_ms(),
            error=f"answer larger than {sas_settings.max_response_bytes} bytes",
        )
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        # The request never reached the remote: nothing can have happened.
        return CallResult(Outcome.TRANSIENT_FAILURE, latency_ms=elapsed_ms(), error=f"connect: {exc}")
    except (httpx.LocalProtocolError, UnicodeEncodeError):
        # The request could not be built, so nothing was sent; the library's message would quote
        # the offending header value, which may be the endpoint's secret.
        return CallResult(Outcome.BUSINESS_FAILURE, latency_ms=elapsed_ms(), error=NOT_SENT)
    except httpx.TimeoutException as exc:
        return CallResult(Outcome.NO_ANSWER, latency_ms=elapsed_ms(), error=f"no answer in time: {exc!r}")
    except httpx.TransportError as exc:
        # Sent (at least partly) and then the connection broke: the remote may have done it.
        return CallResult(Outcome.NO_ANSWER, latency_ms=elapsed_ms(), error=f"connection lost: {exc!r}")
    except httpx.HTTPError as exc:
        return CallResult(Outcome.BUSINESS_FAILURE, latency_ms=elapsed_ms(), error=f"bad request: {exc!r}")
