"""The client's errors: one base, `SasError`; `SasApiError` for an answer the API refused, read
from its error body; `SasConnectionError` when no answer came at all."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from datetime import UTC
from typing import Any

import httpx


class SasError(Exception):
    """Anything the client raises on purpose."""


@dataclass
class FieldError:
    """One entry of a problem document's `errors` (or of DRF's `{field: [message]}` entries)."""

    field: str | None
    detail: str
    code: str | None = None


@dataclass
class SasApiError(SasError):
    """The API answered with an error status.

    Reads the fields that both of the service's error shapes carry: `detail` and `code` (its
    original `{"detail", "code", "field", ...}` body, and RFC 9457 problem details with `title`,
    `status`, `type`, `instance` plus the same extensions); `errors` (the problem details'
    `[{"field", "detail", "code"}]`) when present, else DRF's `{field: [message]}` entries."""

    status: int
    code: str
    detail: str
    field: str | None = None
    errors: list[FieldError] = dataclasses.field(default_factory=list)
    body: Any = None
    headers: dict[str, str] = dataclasses.field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.detail}"

    @property
    def retry_after(self) -> float | None:
        return parse_retry_after(self.headers.get("retry-after"))

    @classmethod
    def from_response(cls, response: httpx.Response) -> SasApiError:
        try:
            body: Any = json.loads(response.content) if response.content else None
        except ValueError:
            body = response.text
        headers = {k.lower(): v for k, v in response.headers.items()}
        if not isinstance(body, dict):
            # Not the API's own error shape (a proxy's page, an empty 502): the status says it all.
            text = body.strip()[:500] if isinstance(body, str) and body.strip() else response.reason_phrase
            return cls(
                status=response.status_code, code="http_error", detail=text, body=body, headers=headers
            )
        detail = body.get("detail") or body.get("title") or response.reason_phrase
        return cls(
            status=response.status_code,
            code=str(body.get("code") or "error"),
            detail=str(detail),
            field=body.get("field") if isinstance(body.get("field"), str) else None,
            errors=_field_errors(body),
            body=body,
            headers=headers,
        )


@dataclass
class SasConnectionError(SasError):
    """No answer: the service could not be reached (or stopped answering) after the retries
    this call was allowed."""

    message: str

    def __str__(self) -> str:
        return self.message


def _field_errors(body: dict[str, Any]) -> list[FieldError]:
    listed = body.get("errors")
    if isinstance(listed, list):
        return [
            FieldError(
                field=_text(item.get("field") or item.get("pointer")),
                detail=str(item.get("detail") or item.get("message") or ""),
                code=_text(item.get("code")),
            )
            for item in listed
            if isinstance(item, dict)
        ]
    reserved = {"detail", "code", "field", "type", "title", "status", "instance"}
    found: list[FieldError] = []
    for name, messages in body.items():
        if name in reserved or not isinstance(messages, list):
            continue
        found += [FieldError(field=name, detail=str(m)) for m in messages if isinstance(m, str)]
    return found


def parse_retry_after(value: str | None) -> float | None:
    """`Retry-After` in seconds (the service sends seconds; an HTTP date is read too)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from datetime import datetime
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
