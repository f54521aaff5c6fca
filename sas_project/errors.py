"""The service's one exception family. Each error knows its HTTP status (see scheduler.api)."""

from __future__ import annotations

from typing import Any, ClassVar


class SasError(Exception):
    """Base of every error the service raises on purpose. A subclass names its HTTP status and
    its `code` (the `error` of the answer) in its class line, `class Gone(SasError,
    http_status=410, code="gone")`; what it does not name it keeps from its base."""

    http_status: ClassVar[int] = 400
    code: ClassVar[str] = "invalid"

    def __init_subclass__(
        cls, *, http_status: int | None = None, code: str | None = None, **kwargs: Any
    ) -> None:
        super().__init_subclass__(**kwargs)
        if http_status is not None:
            cls.http_status = http_status
        if code is not None:
            cls.code = code

    def __init__(self, message: str, **detail: object) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class InvalidInput(SasError, http_status=400, code="invalid"):
    """The request names something unknown or is malformed."""


class NotFound(SasError, http_status=404, code="not_found"):
    """Nothing of the kind goes by the name or id the request gives."""


class InvalidTransition(SasError, http_status=409, code="invalid_transition"):
    """A state machine refused a transition that is not in its table."""


class StaleWrite(SasError, http_status=409, code="stale"):
    """A guarded write found the row changed (another writer acted first)."""


class ActionNotAllowed(SasError, http_status=409, code="not_allowed"):
    """An operator action that the current state does not allow."""


class LimitReached(SasError, http_status=409, code="limit_reached"):
    """A user already has the most of something a setting allows."""


class KeyBusy(SasError, http_status=409, code="concurrency_limit"):
    """A job refused because its workflow's concurrency key is at its limit (on_limit
    cancel_newest: scheduler.services.flow)."""


class IdempotencyConflict(SasError, http_status=422, code="idempotency_conflict"):
    """An idempotency key reused with a different request: 422, as the IETF draft on the
    Idempotency-Key header says (409 is for a request still in progress)."""


class Archived(SasError, http_status=410, code="archived"):
    """The object existed but history retention archived it: the answer names the archive object."""


class Throttled(SasError, http_status=429, code="throttled"):
    """A client over a budget of its own (beside the request rates of sas_project.throttling):
    `retry_after` (seconds) says when to try again."""
