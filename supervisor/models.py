"""Remediation policies (admin-editable, versioned, audited) and the supervisor lease."""

from __future__ import annotations

from django.conf import settings as django_settings
from django.db import models


class OnExhausted(models.TextChoices):
    #: Undo what the job's steps did, in reverse dependency order.
    COMPENSATE = "compensate", "Compensate the job"
    #: End the job `failed` and leave side effects as they are.
    FAIL = "fail", "Fail the job"
    #: Park the step for an operator; the job shows `needs_attention`.
    HOLD = "hold", "Hold for an operator"


RETRYABLE_OUTCOMES = ("transient_failure", "no_answer", "business_failure")


def default_retry_on() -> list[str]:
    return ["transient_failure", "no_answer"]


class RemediationPolicy(models.Model):
    """How the supervisor treats a step that failed or did not answer.

    Read at decision time, so an edit applies to in-flight steps at their next decision. Every
    edit bumps `version` and writes a PolicyRevision (see supervisor.policies.policy_update).
    """

    name = models.SlugField(max_length=100, unique=True)
    version = models.PositiveIntegerField(default=1)
    timeout_seconds = models.FloatField(default=10.0, help_text="Deadline of one attempt.")
    max_attempts = models.PositiveIntegerField(default=3, help_text="Calls in total, first included.")
    backoff_initial_seconds = models.FloatField(default=1.0)
    backoff_multiplier = models.FloatField(default=2.0)
    backoff_max_seconds = models.FloatField(default=60.0)
    backoff_jitter = models.FloatField(
        default=0.5,
        help_text="Fraction of the delay drawn at random: 0 = none, 1 = full jitter.",
    )
    retry_on = models.JSONField(default=default_retry_on, help_text="Outcomes that are retried.")
    reassign_after_attempts = models.PositiveIntegerField(
        null=True, blank=True, help_text="After this many failed calls move to the alternate pool."
    )
    on_exhausted = models.CharField(
        max_length=16, choices=OnExhausted.choices, default=OnExhausted.COMPENSATE
    )
    reconcile_before_retry = models.BooleanField(
        default=False,
        help_text="For an unknown outcome, ask the remote (status path) before calling again.",
    )
    step_budget_seconds = models.FloatField(
        null=True, blank=True, help_text="Total time across all attempts of a step."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "remediation policies"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(on_exhausted__in=OnExhausted.values),
                name="policy_on_exhausted_valid",
            ),
            models.CheckConstraint(condition=models.Q(timeout_seconds__gt=0), name="policy_timeout_positive"),
            models.CheckConstraint(condition=models.Q(max_attempts__gte=1), name="policy_max_attempts_min"),
            models.CheckConstraint(
                condition=models.Q(backoff_jitter__gte=0, backoff_jitter__lte=1),
                name="policy_jitter_fraction",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"


class PolicyRevision(models.Model):
    """Append-only: the full settings of each version of a policy, who made it and what changed."""

    policy = models.ForeignKey(RemediationPolicy, on_delete=models.CASCADE, related_name="revisions")
    version = models.PositiveIntegerField()
    settings = models.JSONField(help_text="All fields of the policy at this version.")
    changes = models.JSONField(default=dict, help_text="{field: [old, new]} against the previous version.")
    changed_by = models.ForeignKey(
        django_settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    changed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["policy_id", "version"]
        constraints = [
            models.UniqueConstraint(fields=["policy", "version"], name="policyrevision_unique_version"),
        ]

    def __str__(self) -> str:
        return f"{self.policy_id} v{self.version}"


class SupervisorLease(models.Model):
    """One row per lease name. Only the holder remediates; the token fences stale holders."""

    name = models.CharField(max_length=50, primary_key=True, default="supervisor")
    holder = models.CharField(max_length=200, blank=True, default="")
    #: Grows by one on every change of holder; remediations check it in their transaction.
    token = models.BigIntegerField(default=0)
    expires_at = models.DateTimeField(null=True, blank=True)
    acquired_at = models.DateTimeField(null=True, blank=True)
    last_scan_at = models.DateTimeField(null=True, blank=True)
    #: Figures of the last scan: examined, remediated, duration_ms, lag_ms, batches.
    last_scan = models.JSONField(default=dict, blank=True)
    handovers = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder or 'nobody'} (token {self.token})"


class LeaseTerm(models.Model):
    """One finished term of a lease holder: written by the database itself (a trigger on the
    lease row, supervisor/migrations/0003) in the statement that hands the lease to the next
    holder, so the record costs no round trip and cannot be skipped.

    A holder acts only in transactions that see `expires_at` in the future under the lease row's
    lock (`lease_fence`), and the next holder takes over only once `expires_at` has passed, so a
    term's `expired_at` is never after the next term's `acquired_at`: the terms of a lease never
    overlap (the many-hosts test checks this on the record)."""

    lease = models.CharField(max_length=50)
    token = models.BigIntegerField()
    holder = models.CharField(max_length=200)
    acquired_at = models.DateTimeField(null=True, blank=True)
    #: The last moment this holder could act: its lease's expiry when the next holder took it.
    expired_at = models.DateTimeField(null=True, blank=True)
    #: When the next holder took the lease, and who (its term's `acquired_at` and `holder`).
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.CharField(max_length=200)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.lease} term {self.token} of {self.holder}"


class AlertKind(models.TextChoices):
    #: A step is held for an operator (the job needs attention).
    STEP_NEEDS_ATTENTION = "step_needs_attention", "A step needs attention"
    #: A job failed.
    JOB_FAILED = "job_failed", "A job failed"
    #: A job was compensated.
    JOB_COMPENSATED = "job_compensated", "A job was compensated"
    #: The supervisor's last scan is older than three intervals.
    SUPERVISOR_STALE = "supervisor_stale", "The supervisor stopped scanning"
    #: An endpoint's circuit opened (most of its recent calls failed).
    CIRCUIT_OPENED = "circuit_opened", "An endpoint's circuit opened"


def all_alert_kinds() -> list[str]:
    return list(AlertKind.values)


class AlertSubscription(models.Model):
    """Who is told when something needs a person: a webhook (signed, like completion callbacks)
    and/or an email address, for some kinds of alert."""

    name = models.SlugField(max_length=100, unique=True)
    webhook_url = models.CharField(max_length=500, blank=True, default="")
    email = models.EmailField(blank=True, default="")
    kinds = models.JSONField(default=all_alert_kinds, help_text="The alert kinds this subscription wants.")
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        django_settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=~(models.Q(webhook_url="") & models.Q(email="")),
                name="alertsubscription_has_target",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class MetricsCheckpoint(models.Model):
    """The counters behind /metrics, carried forward from the event history: every scrape adds
    the events recorded since the last one (up to `event_id`) and stores the totals here, so the
    counters hold across every web and cluster process and outlive the history they came from."""

    name = models.CharField(max_length=50, primary_key=True, default="metrics")
    event_id = models.BigIntegerField(default=0)
    totals = models.JSONField(default=dict)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name} up to event {self.event_id}"
