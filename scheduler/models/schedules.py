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


class Overlap(models.TextChoices):
    """What a firing does while the job of the schedule's previous firing (`last_job`) is live."""

    #: Start nothing: the firing is recorded as skipped, with the live job named.
    SKIP = "skip", "Skip"
    #: At most one firing waits and starts when the live job settles; others are skipped.
    BUFFER_ONE = "buffer_one", "Buffer one"
    #: Every firing waits its turn and starts, in fire-time order, as the one before settles.
    BUFFER_ALL = "buffer_all", "Buffer all"
    #: The live job is cancelled (its work undone) and the firing starts.
    CANCEL_OTHER = "cancel_other", "Cancel the other"
    #: Start regardless (the behaviour of schedules made before overlap policies existed).
    ALLOW_ALL = "allow_all", "Allow all"


#: The longest a firing may be delayed by its jitter.
JITTER_MAX_SECONDS = 3600


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
    overlap = models.CharField(max_length=16, choices=Overlap.choices, default=Overlap.ALLOW_ALL)
    #: Each firing starts up to this many seconds after its fire time (the same delay for the
    #: same schedule and fire time, wherever it is computed); the fire time itself is unchanged.
    jitter_seconds = models.PositiveIntegerField(default=0)
    #: Failures in a row before the schedule pauses itself; null: SAS_SCHEDULE_MAX_FAILURES.
    pause_after_failures = models.PositiveIntegerField(null=True, blank=True)
    #: Set while paused: no firing (and none caught up for the pause unless catch_up is once).
    paused_at = models.DateTimeField(null=True, blank=True)
    #: When it fires next; None once a one-off schedule has fired.
    next_fire_at = models.DateTimeField(null=True, blank=True)
    #: When that firing starts: `next_fire_at` plus its jitter (what the loop waits for).
    next_due_at = models.DateTimeField(null=True, blank=True)
    last_fired_at = models.DateTimeField(null=True, blank=True)
    last_job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_constraint=False
    )
    #: Why the last firing submitted nothing (an unknown workflow, say); empty when it worked.
    last_error = models.TextField(blank=True, default="")
    #: Firings in a row that raised (not a refusal: an error of the service); at
    #: SAS_SCHEDULE_MAX_FAILURES the schedule pauses itself. Zero again after a firing that worked.
    failures = models.PositiveIntegerField(default=0)
    #: Jobs in a row it started that ended failed or compensated, read when the next firing
    #: replaces `last_job`; at the same limit the schedule pauses itself. Zero after a success.
    job_failures = models.PositiveIntegerField(default=0)
    #: The last job whose end `job_failures` has counted (each job is counted once).
    counted_job_id = models.UUIDField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(catch_up__in=CatchUp.values), name="schedule_catch_up_valid"),
            models.CheckConstraint(condition=Q(overlap__in=Overlap.values), name="schedule_overlap_valid"),
            models.CheckConstraint(
                condition=Q(jitter_seconds__lte=JITTER_MAX_SECONDS), name="schedule_jitter_bounded"
            ),
            models.CheckConstraint(
                condition=(Q(run_at__isnull=False) & Q(cron="")) | (Q(run_at__isnull=True) & ~Q(cron="")),
                name="schedule_run_at_or_cron",
            ),
        ]
        indexes = [
            # schedules_fire: the schedules whose next firing is due.
            models.Index(
                fields=["next_due_at"],
                condition=Q(paused_at__isnull=True) & Q(next_due_at__isnull=False),
                name="schedule_due_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class FiringStatus(models.TextChoices):
    #: Buffered by the overlap policy: starts when the schedule's live job settles.
    WAITING = "waiting", "Waiting"
    #: Its job was started (by the loop from the buffer, or by a backfill).
    STARTED = "started", "Started"
    #: Started nothing: the overlap policy skipped it, or the schedule paused itself at it.
    SKIPPED = "skipped", "Skipped"


class ScheduleFiring(models.Model):
    """A firing that did not simply start its job at its time: skipped or buffered by the
    schedule's overlap policy (with why), started later from the buffer, or started by a backfill
    (with the user who asked). A firing that started on time needs no row: its job, keyed
    `schedule:<id>:<fire time>`, is its record."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="firings")
    fire_at = models.DateTimeField()
    status = models.CharField(max_length=8, choices=FiringStatus.choices)
    job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_constraint=False
    )
    reason = models.TextField(blank=True, default="")
    #: The user behind a backfill; null for the loop's own firings.
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["schedule", "fire_at"]
        constraints = [
            models.UniqueConstraint(fields=["schedule", "fire_at"], name="schedulefiring_unique_fire_time"),
            models.CheckConstraint(
                condition=Q(status__in=FiringStatus.values), name="schedulefiring_status_valid"
            ),
        ]
        indexes = [
            # schedules_start_buffered: the firings waiting, oldest first per schedule.
            models.Index(
                fields=["schedule", "fire_at"],
                condition=Q(status="waiting"),
                name="schedulefiring_waiting_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id} {self.fire_at:%Y-%m-%d %H:%M:%S} {self.status}"
