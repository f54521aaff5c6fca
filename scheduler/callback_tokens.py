"""Callback tokens: the signed credential in an HTTP attempt's callback URL
(`<SAS_PUBLIC_URL>/api/v1/callbacks/<token>/`, sent as X-SAS-Callback-URL; its heartbeats go to
`<callback URL>heartbeat/`).

Signed with the service's secret key (django.core.signing, its own salt), a token names one
attempt (step, attempt number and the step's operation ID) and carries the time it was made: it
cannot be forged, cannot be turned into a token of another attempt or step, and expires after
SAS_CALLBACK_TOKEN_MAX_AGE.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core import signing

from sas_project.conf import sas_settings
from sas_project.errors import SasError
from scheduler.models import Step

SALT = "sas.attempt-callback"


class BadToken(SasError, http_status=403, code="invalid_token"):
    """A token forged, altered, or naming no step of this service."""


class ExpiredToken(SasError, http_status=410, code="token_expired"):
    """A token older than SAS_CALLBACK_TOKEN_MAX_AGE."""


class AlreadyRecorded(SasError, http_status=409, code="already_recorded"):
    """The attempt's outcome is already in: a result is recorded once."""


class AttemptGivenUp(SasError, http_status=410, code="attempt_given_up"):
    """A heartbeat for an attempt that is no longer in flight: the remote may stop its work."""


@dataclass(frozen=True)
class AttemptRef:
    step_id: int
    number: int
    operation_id: str


def token_for(step_id: int, number: int, operation_id: str) -> str:
    return signing.dumps({"s": step_id, "n": number, "o": operation_id}, salt=SALT, compress=False)


def callback_url(step_id: int, number: int, operation_id: str) -> str:
    """The URL a remote POSTs attempt `number`'s result to, or "" without SAS_PUBLIC_URL."""
    base = sas_settings.public_url
    if not base:
        return ""
    return f"{base}/api/v1/callbacks/{token_for(step_id, number, operation_id)}/"


def attempt_of(token: str) -> AttemptRef:
    """The attempt a token names. Raises BadToken (forged, altered, or naming no step of ours) or
    ExpiredToken."""
    try:
        data = signing.loads(token, salt=SALT, max_age=int(sas_settings.callback_token_max_age))
    except signing.SignatureExpired as exc:
        raise ExpiredToken("this callback token has expired") from exc
    except signing.BadSignature as exc:
        raise BadToken("invalid callback token") from exc
    if not isinstance(data, dict):
        raise BadToken("invalid callback token")
    step_id, number, operation_id = data.get("s"), data.get("n"), data.get("o")
    if not isinstance(step_id, int) or not isinstance(number, int) or not isinstance(operation_id, str):
        raise BadToken("invalid callback token")
    # The signature covers the operation ID: a token stays bound to its step even if ids were
    # ever reused.
    if not Step.objects.filter(pk=step_id, operation_id=operation_id).exists():
        raise BadToken("this callback token names no attempt of this service")
    return AttemptRef(step_id=step_id, number=number, operation_id=operation_id)
