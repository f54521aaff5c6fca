"""The service's one exception family. Each error knows its HTTP status (see scheduler.api)."""

from __future__ import annotations


class SasError(Exception):
    """Base of every error the service raises on purpose."""

    http_status = 400
    code = "invalid"

    def __init__(self, message: str, **detail: object) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class InvalidInput(SasError):
    """The request names something unknown or is malformed."""

    http_status = 400
    code = "invalid"


class NotFound(SasError):
    http_status = 404
    code = "not_found"


class InvalidTransition(SasError):
    """A state machine refused a transition that is not in its table."""

    http_status = 409
    code = "invalid_transition"


class StaleWrite(SasError):
    """A guarded write found the row changed (another writer acted first)."""

    http_status = 409
    code = "stale"


class ActionNotAllowed(SasError):
    """An operator action that the current state does not allow."""

    http_status = 409
    code = "not_allowed"


class LimitReached(SasError):
    """A user already has the most of something a setting allows."""

    http_status = 409
    code = "limit_reached"


class IdempotencyConflict(SasError):
    """An idempotency key reused with a different request: 422, as the IETF draft on the
    Idempotency-Key header says (409 is for a request still in progress)."""

    http_status = 422
    code = "idempotency_conflict"


class Archived(SasError):
    """The object existed but history retention archived it: the answer names the archive object."""

    http_status = 410
    code = "archived"
