"""Schedules as the API reads and writes them (scheduler.schedules holds their rules)."""

from __future__ import annotations

from rest_framework import serializers

from sas_project.api import NAME_PATTERN, ReplaceMixin, StrictSerializer
from scheduler.models import CatchUp, Schedule
from scheduler.schedules import SCHEDULE_FIELDS


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
            "last_fired_at",
            "last_job",
            "last_error",
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


class ScheduleReplaceSerializer(ReplaceMixin, ScheduleWriteSerializer):
    """Replacing a schedule (PUT) states every value; it cannot be renamed."""
