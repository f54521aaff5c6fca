"""Schedules as the API reads and writes them (scheduler.schedules holds their rules)."""

from __future__ import annotations

from rest_framework import serializers

from sas_project.api import NAME_PATTERN, ReplaceMixin, StrictSerializer
from scheduler.models import JITTER_MAX_SECONDS, CatchUp, Overlap, Schedule
from scheduler.schedules import PAUSE_AFTER_MAX, SCHEDULE_FIELDS


class ScheduleSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", allow_null=True, read_only=True)
    paused = serializers.SerializerMethodField(help_text="Whether the schedule is paused.")
    last_job = serializers.SerializerMethodField(help_text="The job of the last firing, if any.")

    class Meta:
        model = Schedule
        fields = [
            "name",
            *SCHEDULE_FIELDS,
            "paused",
            "next_fire_at",
            "next_due_at",
            "last_fired_at",
            "last_job",
            "last_error",
            "job_failures",
            "created_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_paused(self, schedule: Schedule) -> bool:
        return schedule.paused_at is not None

    def get_last_job(self, schedule: Schedule) -> str | None:
        return str(schedule.last_job_id) if schedule.last_job_id else None


class ScheduleWriteSerializer(StrictSerializer):
    """Creating a schedule: a name, a workflow, and either `run_at` or `cron`."""

    name = serializers.RegexField(NAME_PATTERN, max_length=100)
    workflow = serializers.CharField(max_length=100, help_text="Each firing submits its latest version.")
    input = serializers.DictField(required=False, help_text="The jobs' input (default {}).")
    business_key = serializers.CharField(required=False, allow_blank=True, max_length=200)
    priority = serializers.IntegerField(required=False, min_value=-1000, max_value=1000)
    run_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="Fire once, at this instant (ISO 8601; without an offset, UTC).",
    )
    cron = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=100,
        help_text="Fire at every time of this five-field cron expression (minute hour day month weekday).",
    )
    timezone = serializers.CharField(
        required=False, max_length=64, help_text="The cron expression's time zone (IANA name; default UTC)."
    )
    catch_up = serializers.ChoiceField(
        choices=CatchUp.choices,
        required=False,
        help_text="After downtime: `once` submits one job for the latest missed firing, `skip` none.",
    )
    overlap = serializers.ChoiceField(
        choices=Overlap.choices,
        required=False,
        help_text=(
            "What a firing does while the job of the previous firing is live: `skip` starts nothing, "
            "`buffer_one` keeps one firing waiting (others skipped), `buffer_all` keeps every firing "
            "waiting, started in order as each job settles, `cancel_other` cancels the live job and "
            "starts, `allow_all` (the default) starts regardless."
        ),
    )
    jitter_seconds = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=JITTER_MAX_SECONDS,
        help_text="Each firing starts up to this many seconds after its fire time (default 0).",
    )
    pause_after_failures = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=PAUSE_AFTER_MAX,
        help_text=(
            "The schedule pauses itself after this many firings in a row that could not submit, or "
            "jobs in a row it started that ended failed or compensated (null: SAS_SCHEDULE_MAX_FAILURES)."
        ),
    )


class ScheduleReplaceSerializer(ReplaceMixin, ScheduleWriteSerializer):
    """Replacing a schedule (PUT) states every value; it cannot be renamed."""


class ScheduleBackfillSerializer(StrictSerializer):
    """A backfill: the past range whose fire times that made no job are started now."""

    start = serializers.DateTimeField(
        help_text="The range's first instant (ISO 8601; without an offset, UTC)."
    )
    end = serializers.DateTimeField(help_text="The range's last instant, included; not after now.")


class BackfilledFiringSerializer(serializers.Serializer):
    fire_at = serializers.DateTimeField(help_text="A fire time of the range.")
    job = serializers.UUIDField(source="job_id", help_text="Its job.")
    started = serializers.BooleanField(
        help_text="True: this backfill started the job; false: the fire time had made it already."
    )


class ScheduleBackfillAnswerSerializer(serializers.Serializer):
    fire_times = BackfilledFiringSerializer(many=True, help_text="Every fire time of the range, in order.")
    started = serializers.IntegerField(help_text="How many jobs this backfill started.")
    already_fired = serializers.IntegerField(help_text="How many fire times had made their job already.")
