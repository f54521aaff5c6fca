"""The items the supervision loops set aside because handling them raised
(scheduler.services.quarantine): no item stops a loop.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class QuarantineLoop(models.TextChoices):
    """The loops that serve many jobs or users, each isolating its items."""

    #: The scan's remediation batches (timeouts, retries, reconciles, give-ups).
    REMEDIATION = "remediation", "Remediation"
    #: The scan's sweep of jobs past their whole-job deadline.
    JOB_DEADLINES = "job_deadlines", "Job deadlines"
    #: The scan's sweep of waits whose time came (timers, wait timeouts).
    WAITS = "waits", "Waits"
    #: The scan's sweep of sub-workflow steps.
    CHILDREN = "children", "Children"
    #: The start of jobs waiting for their concurrency key (scheduler.services.flow).
    CONCURRENCY = "concurrency", "Concurrency keys"
    #: The schedules' firings.
    SCHEDULES = "schedules", "Schedules"
    #: The scan's at-risk sweep (supervisor.sla): a job whose check raises is left unflagged.
    AT_RISK = "at_risk", "At-risk check"
    #: History retention's archive and deletion batches.
    RETENTION = "retention", "Retention"


class Quarantine(models.Model):
    """One item a loop set aside because handling it raised (scheduler.services.quarantine): what
    it was, the error, and what was done with it (a step held for an operator, a job made to need
    attention, a schedule moved on or paused). The loop's queries leave an item quarantined less
    than SAS_QUARANTINE_RETRY_SECONDS ago alone, so one item costs one failure per period, never
    one per pass. Kept for the record, the metric `sas_quarantined_total{loop}` and the
    `quarantined` alert (written once per row by the supervisor's loop)."""

    loop = models.CharField(max_length=20, choices=QuarantineLoop.choices)
    job_id = models.UUIDField(null=True, blank=True)
    step_id = models.BigIntegerField(null=True, blank=True)
    #: What else names the item (a schedule's name, a batch of history).
    subject = models.CharField(max_length=200, blank=True, default="")
    #: `<exception type>: <message>`, at most 2,000 characters.
    error = models.TextField()
    #: What the loop did with it: held, needs_attention, schedule_paused, skipped.
    action = models.CharField(max_length=30)
    created_at = models.DateTimeField()
    #: Set once the `quarantined` alert is written for it.
    alerted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=Q(loop__in=QuarantineLoop.values), name="quarantine_loop_valid"),
        ]
        indexes = [
            # The loops' "quarantined lately" exclusions read by job and by step.
            models.Index(fields=["job_id", "created_at"], name="quarantine_job_idx"),
            models.Index(fields=["step_id", "created_at"], name="quarantine_step_idx"),
            # The supervisor's alert writer: the rows not alerted yet.
            models.Index(
                fields=["id"], condition=Q(alerted_at__isnull=True), name="quarantine_unalerted_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.loop}: {self.subject or self.step_id or self.job_id}: {self.action}"
