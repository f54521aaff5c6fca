"""The REST API where other systems post what happened (/api/v1/events/): an inbound event
starts the jobs whose workflows' triggers take it and reaches the jobs waiting for it
(scheduler.services.events). Built on the shared base in sas_project.api."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from sas_project.api import WRITE_ERRORS, ApiView, SubmitterAccess, validated
from sas_project.named_views import operation
from scheduler.serializers import InboundEventAnswerSerializer, InboundEventSerializer
from scheduler.services.events import event_receive


class EventsView(ApiView):
    permission_classes = [SubmitterAccess]

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
