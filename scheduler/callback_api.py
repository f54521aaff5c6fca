"""The REST API where remotes report later (/api/v1/callbacks/<token>/): the result of a call they
accepted with 202, and heartbeats while they work on it. The signed token in the URL is the
credential (scheduler.callback_tokens); the recording is scheduler.callbacks'. Built on the
shared base in sas_project.api."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from sas_project.api import ApiView, errors, validated
from scheduler.callbacks import callback_record, heartbeat_record
from scheduler.serializers import (
    AttemptCallbackResultSerializer,
    AttemptCallbackSerializer,
    AttemptHeartbeatResultSerializer,
    AttemptHeartbeatSerializer,
    drf_datetime,
)


class SignedTokenView(ApiView):
    """A URL whose signed token is the credential: no user token, no session (so no CSRF), and no
    per-user throttle (a busy remote posts many results; a bad token costs one signature check)."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    throttle_classes: list[Any] = []


class AttemptCallbackView(SignedTokenView):
    """Where a remote that answered 202 POSTs the attempt's result (X-SAS-Callback-URL)."""

    @extend_schema(
        operation_id="attempts_callback",
        tags=["callbacks"],
        summary="Report the result of a call the remote accepted (202)",
        description=(
            "The URL comes from the X-SAS-Callback-URL header of the call; its token names one "
            "attempt, is signed, and expires. The first result wins: another POST with the same "
            "token is a 409 and changes nothing. 403: an invalid token; 410: an expired one."
        ),
        request=AttemptCallbackSerializer,
        responses={
            200: AttemptCallbackResultSerializer,
            **errors(400, 403, 409, 410, 413),
        },
        auth=[],
    )
    def post(self, request: Request, token: str) -> Response:
        body = validated(AttemptCallbackSerializer, request.data)
        verdict = callback_record(token, body)
        return Response({"recorded": verdict})


class AttemptHeartbeatView(SignedTokenView):
    """Where a remote that answered 202 reports, while it works, that the attempt is alive
    (`<callback URL>heartbeat/`). Its credential is the callback's token, as for the result."""

    @extend_schema(
        operation_id="attempts_heartbeat",
        tags=["callbacks"],
        summary="Report that an accepted call is still being worked on",
        description=(
            "POST to the callback URL followed by `heartbeat/`, as often as the step's policy "
            "asks (`heartbeat_seconds`): each heartbeat moves the attempt's deadline that far "
            "ahead (never past the job's deadline or the step's budget) and records its details. "
            "200 while the attempt is in flight; 410 once it was given up on (finished, "
            "superseded, or its step moved on): nothing changes and the remote may stop. 403: an "
            "invalid token; 410 `token_expired`: an expired one."
        ),
        request=AttemptHeartbeatSerializer,
        responses={200: AttemptHeartbeatResultSerializer, **errors(400, 403, 410, 413)},
        auth=[],
    )
    def post(self, request: Request, token: str) -> Response:
        body = validated(AttemptHeartbeatSerializer, request.data)
        verdict = heartbeat_record(token, body.get("details"))
        return Response({"recorded": True, "deadline": drf_datetime(verdict.deadline)})
