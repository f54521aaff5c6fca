"""Scheduled submissions: a workflow submitted once at an instant, or at every time of a cron
expression (fired by the supervisor loop, scheduler.schedules).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from scheduler.models.jobs import Job


class CatchUp(models.TextChoices):
    #: After downtime, the firings missed meanwhile make one job (for the latest of them).
    ONCE = "once", "Submit once"
    #: After downtime, missed firings are skipped; the next one is on time.
    SKIP = "skip", "Skip"


class Schedule(models.Model):
    """Submits a job of a workflow at `run_at`, or at every time of a cron expression in a time zone.

    Each firing submits exactly once: its idempotency key names the schedule and the fire time,
    so two clusters firing the same minute make one job (scheduler.schedules).
    """

    name = models.SlugField(max_length=100, unique=True)
    workflow = models.CharField(
        max_length=100, help_text="Workflow name (its latest version at each firing)."
    )
    input = models.JSONField(default=dict)
    business_key = models.CharField(max_length=200, blank=True, default="")
    priority = models.IntegerField(default=0)
    #: Once, at this instant; or...
    run_at = models.DateTimeField(null=True, blank=True)
    #: ... at every time of this five-field cron expression, in `timezone`.
    cron = models.CharField(max_length=100, blank=True, default="")
    timezone = models.CharField(max_length=64, default="UTC")
    catch_up = models.CharField(max_length=8, choices=CatchUp.choices, default=CatchUp.ONCE)
    #: Set while paused: no firing (and none caught up for the pause unless catch_up is once).
    paused_at = models.DateTimeField(null=True, blank=True)
    #: When it fires next; None once a one-off schedule has fired.
    next_fire_at = models.DateTimeField(null=True, blank=True)
    last_fired_at = models.DateTimeField(null=True, blank=True)
    last_job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_constraint=False
    )
    #: Why the last firing submitted nothing (an unknown workflow, say); empty when it worked.
    last_error = models.TextField(blank=True, default="")
    #: Firings in a row that raised (not a refusal: an error of the service); at
    #: SAS_SCHEDULE_MAX_FAILURES the schedule pauses itself. Zero again after a firing that worked.
    failures = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(catch_up__in=CatchUp.values), name="schedule_catch_up_valid"),
            models.CheckConstraint(
                condition=(Q(run_at__isnull=False) & Q(cron="")) | (Q(run_at__isnull=True) & ~Q(cron="")),
                name="schedule_run_at_or_cron",
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_fire_at"],
                condition=Q(paused_at__isnull=True) & Q(next_fire_at__isnull=False),
                name="schedule_due_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.name
