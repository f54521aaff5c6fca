"""The REST API of a schedule's backfill (POST /api/v1/schedules/{name}/backfill/); the rules are
scheduler.schedule_backfill's, the other schedule routes scheduler.api's."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request
from rest_framework.response import Response

from sas_project.api import WRITE_ERRORS, ApiView, SubmitterAccess, errors, validated
from sas_project.named_views import operation
from scheduler.api import schedule_for
from scheduler.schedule_backfill import schedule_backfill
from scheduler.serializers import ScheduleBackfillAnswerSerializer, ScheduleBackfillSerializer


class ScheduleBackfillView(ApiView):
    permission_classes = [SubmitterAccess]

    @operation(
        "schedules",
        "schedules_backfill",
        "Start the fire times of a past range that made no job",
        description=(
            "Each fire time in [start, end] that made no job starts one now, under the key a "
            "normal firing uses (`schedule:<id>:<fire time>`): a fire time that made its job "
            "already is listed with it and starts nothing, so a second backfill of the same range "
            "starts nothing. The schedule's overlap policy does not apply (its jobs start at once), "
            "and a paused schedule may be backfilled. Its owner or an operator. 400, and nothing "
            "started: end before start or after now, more fire times than "
            "SAS_SCHEDULE_BACKFILL_MAX, a job the workflow refuses. 409: its owner may not submit."
        ),
        parameters=[OpenApiParameter("name", str, OpenApiParameter.PATH, description="The schedule's name.")],
        request=ScheduleBackfillSerializer,
        responses={200: ScheduleBackfillAnswerSerializer, **WRITE_ERRORS, **errors(404, 409)},
    )
    def post(self, request: Request, name: str) -> Response:
        schedule_for(request.user, name, change=True)
        body = validated(ScheduleBackfillSerializer, request.data)
        done = schedule_backfill(name, actor=request.user, start=body["start"], end=body["end"])
        started = sum(1 for firing in done if firing.started)
        answer = {"fire_times": done, "started": started, "already_fired": len(done) - started}
        return Response(ScheduleBackfillAnswerSerializer(answer).data)
