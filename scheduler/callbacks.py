"""Results that arrive later: an HTTP remote that answered 202 POSTs the result of one attempt to
the callback URL the call carried (`X-SAS-Callback-URL: <SAS_PUBLIC_URL>/api/v1/callbacks/<token>/`).

The token is the credential, so the callback needs no user: it is signed with the service's
secret key (django.core.signing, its own salt), names one attempt (step, attempt number and the
step's operation ID) and carries the time it was made, so it cannot be forged, cannot be turned
into a token of another attempt or step, and expires after SAS_CALLBACK_TOKEN_MAX_AGE. The first
result of an attempt wins: a second POST with the same token is refused and changes nothing. A
result for an attempt the supervisor already gave up on (no answer in time) is late evidence,
recorded as a late HTTP answer is (scheduler.services.outcomes).

While it works, the remote may POST heartbeats to `<callback URL>heartbeat/` with the same token
(scheduler.services.heartbeats): each says the attempt is alive and moves its deadline when the
policy sets a heartbeat interval. One for an attempt already given up on changes nothing and is
refused with 410, so that the remote can stop.
"""

from __future__ import annotations

from typing import Any

from agents.outcome import CallResult, Outcome
from sas_project.validation import json_storable
from scheduler.callback_tokens import AlreadyRecorded, AttemptGivenUp, BadToken, attempt_of
from scheduler.services.heartbeats import GONE, UNKNOWN, HeartbeatVerdict, attempt_heartbeat
from scheduler.services.outcomes import async_result_record

SOURCE = "agent:callback"

#: Callback outcomes and what they are.
CALLBACK_OUTCOMES: dict[str, str] = {
    "succeeded": Outcome.SUCCEEDED,
    "refused": Outcome.BUSINESS_FAILURE,
    "failed": Outcome.TRANSIENT_FAILURE,
}


def result_of(body: dict[str, Any]) -> CallResult:
    """The CallResult a validated callback body (outcome, output, error) stands for."""
    outcome = CALLBACK_OUTCOMES[body["outcome"]]
    output = body.get("output") if outcome == Outcome.SUCCEEDED else None
    json_storable(output, "output")
    error = "" if outcome == Outcome.SUCCEEDED else str(body.get("error") or "")[:2000]
    return CallResult(outcome, output=output, error=error)


def callback_record(token: str, body: dict[str, Any]) -> str:
    """Record the result a remote POSTed for the attempt its token names. Returns "recorded" or
    "late" (evidence for an attempt already given up on); raises BadToken, ExpiredToken, or
    AlreadyRecorded (the attempt has its result: nothing changes)."""
    ref = attempt_of(token)
    verdict = async_result_record(ref.step_id, number=ref.number, result=result_of(body), source=SOURCE)
    if verdict == "duplicate":
        raise AlreadyRecorded("this attempt's result was already recorded")
    if verdict == "unknown":
        raise BadToken("this callback token names no attempt of this service")
    return verdict


def heartbeat_record(token: str, details: Any) -> HeartbeatVerdict:
    """Record a heartbeat (with optional `details`) of the attempt its token names. Raises
    BadToken, ExpiredToken, AttemptGivenUp (the attempt is no longer in flight: nothing changes),
    or InvalidInput (details that cannot be kept)."""
    ref = attempt_of(token)
    verdict = attempt_heartbeat(ref.step_id, number=ref.number, details=details, source=SOURCE)
    if verdict.verdict == UNKNOWN:
        raise BadToken("this callback token names no attempt of this service")
    if verdict.verdict == GONE:
        raise AttemptGivenUp(
            f"attempt {ref.number} of operation {ref.operation_id} is no longer in flight: its "
            "heartbeats change nothing"
        )
    return verdict
