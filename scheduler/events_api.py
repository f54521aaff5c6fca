"""The REST API where other systems post what happened (/api/v1/events/): an inbound event
starts the jobs whose workflows' triggers take it and reaches the jobs waiting for it
(scheduler.services.events). Built on the shared base in sas_project.api."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, inline_serializer
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from sas_project.api import (
    WRITE_ERRORS,
    ApiView,
    OperatorAccess,
    RoleAccess,
    errors,
    idempotency_key_parameter,
    validated,
)
from sas_project.idempotency import idempotent
from sas_project.named_views import operation
from sas_project.permissions import can_post_events
from scheduler.serializers import (
    EventReplayAnswerSerializer,
    EventReplaySerializer,
    InboundEventAnswerSerializer,
    InboundEventSerializer,
)
from scheduler.services.event_sources import SIGNED_HEADERS, event_receive_signed
from scheduler.services.events import event_receive, event_replay


class EventSenderAccess(RoleAccess):
    """Submitters (and above) and event senders, the role that may post events and nothing else."""

    message = "This needs the event sender role (or submitter, operator, or administrator)."
    readers = writers = staticmethod(can_post_events)


class EventsView(ApiView):
    permission_classes = [EventSenderAccess]

    @operation(
        "events",
        "events_receive",
        "Receive an event from another system",
        description=(
            "Each trigger of the latest version of every workflow that takes the event's type starts "
            "one job, submitted by you (`started`; a trigger that cannot is listed in `refused`, and "
            "the others go on). Every live job with a step waiting for an event of this type whose "
            "`match` holds for it receives it (`signalled`; submitters reach their own jobs only, "
            "operators any). 202 with what it did. The same `source` and `id` again, within "
            "SAS_EVENT_RETENTION_HOURS (a week), does nothing: 200 with the first answer and "
            "`duplicate: true`. 400: a bad type, id, source or data."
        ),
        request=InboundEventSerializer,
        responses={
            202: InboundEventAnswerSerializer,
            200: OpenApiResponse(InboundEventAnswerSerializer, description="A duplicate: the first answer."),
            **WRITE_ERRORS,
        },
    )
    def post(self, request: Request) -> Response:
        body = validated(InboundEventSerializer, request.data)
        receipt = event_receive(
            type=body["type"],
            id=body["id"],
            source=body["source"],
            data=body.get("data"),
            sender=request.user,
        )
        answer = InboundEventAnswerSerializer(receipt.answer).data
        return Response(answer, status=status.HTTP_202_ACCEPTED if receipt.created else status.HTTP_200_OK)


#: A provider's event as it signs it (a Standard Webhooks payload), for the schema: read from the
#: raw body once its signature verifies (nothing parses it before).
PROVIDER_EVENT = inline_serializer(
    "ProviderEvent",
    fields={
        "type": serializers.CharField(max_length=100, help_text="The event's type, e.g. payment.succeeded."),
        "timestamp": serializers.CharField(
            required=False, help_text="When it happened, as the provider says."
        ),
        "data": serializers.JSONField(
            required=False, help_text="What happened (absent: the body less its `type` is the data)."
        ),
    },
)


class SourceEventsView(ApiView):
    """A provider's signed events (scheduler.services.event_sources): no token, the Standard
    Webhooks signature with the source's secret is the credential."""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]

    @operation(
        "events",
        "events_receive_signed",
        "Receive an event a provider signed",
        description=(
            'For a provider posting straight to the service: the body is its own JSON (`{"type", '
            '"data", ...}`, a Standard Webhooks payload), signed with the event source\'s secret '
            "(`webhook-id`, `webhook-timestamp` within five minutes, `webhook-signature`; during a "
            "rotation the previous secret verifies too). The event's id is `webhook-id`, its source "
            "the source's name; it does what `POST /api/v1/events/` does, its jobs submitted by the "
            "source's user. 401: the signature does not verify (nothing done). 404: no such source."
        ),
        parameters=[
            OpenApiParameter("source", str, OpenApiParameter.PATH, description="The event source's name."),
            *(OpenApiParameter(h, str, OpenApiParameter.HEADER, required=True) for h in SIGNED_HEADERS),
        ],
        request=PROVIDER_EVENT,
        responses={
            202: InboundEventAnswerSerializer,
            200: OpenApiResponse(InboundEventAnswerSerializer, description="A duplicate: the first answer."),
            **errors(400, 401, 404, 413),
        },
    )
    def post(self, request: Request, source: str) -> Response:
        # The raw body, as signed: read before anything parses it.
        receipt = event_receive_signed(source, body=request.body, headers=request.headers)
        answer = InboundEventAnswerSerializer(receipt.answer).data
        return Response(answer, status=status.HTTP_202_ACCEPTED if receipt.created else status.HTTP_200_OK)


class EventReplayView(ApiView):
    """An operator's replay of a received event (scheduler.services.events.event_replay)."""

    permission_classes = [OperatorAccess]

    @operation(
        "events",
        "events_replay",
        "Replay a received event",
        description=(
            "The event as it came, acted on again as today's workflows and jobs take it: each "
            "matching trigger of the latest versions starts a new job (submitted by the event's "
            "sender, as the first were), and each live job still waiting for an event of its type "
            "whose `match` holds receives it, its history naming you. The replay is kept as an "
            "event of its own (`replay_of`, you, the reason) on the Events page. Operators only. "
            "404: no such event (or no longer kept). 400: the event is itself a replay."
        ),
        parameters=[
            OpenApiParameter("event", int, OpenApiParameter.PATH, description="The event's stored id."),
            idempotency_key_parameter("returns the first replay's answer"),
        ],
        request=EventReplaySerializer,
        responses={202: EventReplayAnswerSerializer, **WRITE_ERRORS, **errors(404, 422)},
    )
    def post(self, request: Request, event: int) -> Response:
        body = validated(EventReplaySerializer, request.data)

        def replay() -> Response:
            receipt = event_replay(event, actor=request.user, reason=body["reason"])
            answer = EventReplayAnswerSerializer(receipt.answer).data
            return Response(answer, status=status.HTTP_202_ACCEPTED)

        return idempotent(request, request.data, replay)
