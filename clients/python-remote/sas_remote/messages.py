"""What a handler deals with: the `Request` it gets, the `Response` the remote answers, and
what it raises or returns (`Refused`, `TryLater`, `later(work)`; `AttemptGivenUp` from a
heartbeat). No I/O here: sas_remote.core applies the rules.
"""

from __future__ import annotations

import hashlib
import http
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

#: Body fields that change between attempts of one operation (the attempt's number, where earlier
#: attempts got to by their heartbeats): left out of the request's fingerprint.
VOLATILE_FIELDS = frozenset({"attempt", "heartbeat_details"})
#: The longest operation ID accepted (the scheduler's are far shorter).
MAX_KEY_LENGTH = 255


# --- what a handler raises or returns -------------------------------------------------------------


class Refused(Exception):
    """A business failure: the operation will not happen (an amount over a limit, an unknown
    customer). Recorded and answered again to every repeat; the scheduler does not retry it by
    default. `status` is the answer's 4xx (not 408 or 429, which the scheduler reads as transient)."""

    def __init__(self, message: str, *, status: int = 422, code: str = "refused") -> None:
        if not 400 <= status < 500 or status in (408, 429):
            raise ValueError(f"a refusal answers a 4xx other than 408 and 429, not {status}")
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


class TryLater(Exception):
    """A transient failure (a dependency is down): 503 with `Retry-After`, nothing recorded, so
    the scheduler's next attempt runs the handler again."""

    def __init__(self, message: str = "try again later", *, retry_after: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class AttemptGivenUp(Exception):
    """Raised by `heartbeat()` when the scheduler answered 410: it gave the attempt up. The work
    should stop; nothing is recorded, so the next attempt (which carries the last heartbeat's
    details as `request.heartbeat_details`) runs the handler again and may resume."""


class Heartbeat(Protocol):
    def __call__(self, details: Any = None) -> None:
        """Report that the work is alive, with `details` (any JSON, at most 16 KiB: how far it
        got). Raises AttemptGivenUp when the scheduler gave the attempt up."""


@dataclass(frozen=True)
class Accepted:
    """What a handler returns to answer 202 and do `work` in the background."""

    work: Callable[[Heartbeat], Any]


def later(work: Callable[[Heartbeat], Any]) -> Accepted:
    """Answer 202 now; `work(heartbeat)` runs on a worker thread and its return value (or its
    `Refused`) is recorded and POSTed to the call's callback URL."""
    return Accepted(work)


# --- requests and responses ---------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One call of the scheduler, as the handler sees it."""

    method: str
    path: str
    #: The request's headers, names in lower case.
    headers: Mapping[str, str]
    body: bytes
    #: The JSON body (an object).
    data: dict[str, Any]

    @property
    def operation_id(self) -> str:
        """The stable ID of the operation, the same on every attempt: the idempotency key."""
        return self.headers.get("idempotency-key", "")

    @property
    def attempt(self) -> int | None:
        value = self.headers.get("x-sas-attempt", "")
        return int(value) if value.isdigit() else None

    @property
    def callback_url(self) -> str:
        return self.headers.get("x-sas-callback-url", "").strip()

    @property
    def input(self) -> Any:
        """The job's input (or what the step's input mapping made of it)."""
        return self.data.get("input")

    @property
    def results(self) -> dict[str, Any]:
        """The outputs of the steps this one depends on, by step name."""
        results = self.data.get("results")
        return results if isinstance(results, dict) else {}

    @property
    def step(self) -> str:
        return str(self.data.get("step", ""))

    @property
    def job_id(self) -> str:
        return str(self.data.get("job_id", ""))

    @property
    def compensates(self) -> str | None:
        """For an undo (a compensation path): the operation ID it undoes."""
        value = self.data.get("compensates")
        return value if isinstance(value, str) else None

    @property
    def heartbeat_details(self) -> Any:
        """The last details an earlier attempt of this operation reported, or None."""
        return self.data.get("heartbeat_details")


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, status: int, payload: Any, *extra: tuple[str, str]) -> Response:
        return cls.raw(status, json.dumps(payload, separators=(",", ":")), *extra)

    @classmethod
    def raw(cls, status: int, text: str, *extra: tuple[str, str]) -> Response:
        body = text.encode()
        headers = (("Content-Type", "application/json"), ("Content-Length", str(len(body))), *extra)
        return cls(status, body, headers)

    @property
    def status_line(self) -> str:
        """`200 OK`: the status as WSGI's start_response takes it."""
        try:
            return f"{self.status} {http.HTTPStatus(self.status).phrase}"
        except ValueError:
            return f"{self.status} Unknown"


def fingerprint(path: str, data: Mapping[str, Any]) -> str:
    """Equal for every attempt of one request, different for another request (see VOLATILE_FIELDS)."""
    stable = {k: v for k, v in data.items() if k not in VOLATILE_FIELDS}
    canonical = json.dumps([path, stable], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def no_constants(name: str) -> Any:
    """Refuses NaN and the infinities, which JSON does not have (json.loads' parse_constant)."""
    raise ValueError(f"{name} is not JSON")


def error_response(status: int, code: str, detail: str, *extra: tuple[str, str]) -> Response:
    return Response.json(status, {"error": detail, "code": code}, *extra)


REPLAYED = ("Idempotent-Replayed", "true")


Handler = Callable[[Request], Any]
