"""The outbox: messages to receivers outside the service (completion callbacks, alerts), written
in the transaction of what they tell; the alert subscriptions and per-submitter secrets they are
signed with; and the events the database queues for the supervisor's alerts (EventReaction).
"""

from __future__ import annotations

import base64
import secrets

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class DeliveryKind(models.TextChoices):
    #: A job's completion callback, POSTed to the URL its submitter gave.
    CALLBACK = "callback", "Completion callback"
    #: An alert POSTed to a subscription's webhook.
    WEBHOOK = "webhook", "Alert webhook"
    #: An alert sent to a subscription's email address.
    EMAIL = "email", "Alert email"


class DeliveryStatus(models.TextChoices):
    #: Waiting for its (next) try.
    PENDING = "pending", "Pending"
    #: The receiver took it (2xx; or the mail server accepted it).
    DELIVERED = "delivered", "Delivered"
    #: Given up after its tries; kept, visible, and retried only by hand.
    FAILED = "failed", "Failed"


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
    #: An approval step waits for an operator's decision.
    APPROVAL_REQUESTED = "approval_requested", "An approval is requested"
    #: Writing the history archive failed (a full or read-only disk): archiving backs off.
    ARCHIVE_FAILED = "archive_failed", "The history archive cannot be written"
    #: A loop that serves many jobs set one item aside (held it for an operator, paused a
    #: schedule) because handling it raised: the rest went on (scheduler.services.quarantine).
    QUARANTINED = "quarantined", "An item was quarantined by a supervision loop"
    #: Remediable steps are overdue for longer than the takeover threshold while the lease
    #: holder keeps renewing: another cluster took the lease (supervisor.debt).
    SUPERVISOR_NOT_REMEDIATING = "supervisor_not_remediating", "The supervisor is not remediating"
    #: A canary job (the recovery path exercised end to end) did not succeed in its expected time.
    CANARY_UNREMEDIATED = "canary_unremediated", "The canary job was not remediated in time"
    #: A signal sent by business key was kept for a job to come and none with its key started
    #: within the lookback (scheduler.services.correlation): its sender's signal was lost to it.
    SIGNAL_EXPIRED = "signal_expired", "A signal by business key expired unclaimed"
    #: A wait (an approval, a signal) with no decision reached a `remind` rung of its escalation.
    APPROVAL_REMINDER = "approval_reminder", "A wait for a decision is reminded"
    #: A wait with no decision was reassigned, held, failed or continued by its escalation.
    WAIT_ESCALATED = "wait_escalated", "A wait for a decision escalated"
    #: A job is likely to miss its workflow's SLA (supervisor.sla): once per job, with its
    #: `job_at_risk` event.
    JOB_AT_RISK = "job_at_risk", "A job is at risk of missing its SLA"


def all_alert_kinds() -> list[str]:
    return list(AlertKind.values)


#: The prefix of a Standard Webhooks secret: `whsec_` and the base64 of the key's bytes.
SIGNING_SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret


def signing_secret_new() -> str:
    """A new Standard Webhooks signing secret: `whsec_` and 32 random bytes in base64."""
    return SIGNING_SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


class SigningSecrets(models.Model):
    """The keys a receiver verifies messages with (supervisor.signing): the current one, and the
    one it replaced, which still signs until `previous_until` so that receivers can change their
    key without refusing a message. Never shown in logs, events, the job API or the archive."""

    signing_secret = models.CharField(max_length=100, default=signing_secret_new)
    previous_signing_secret = models.CharField(max_length=100, blank=True, default="")
    #: The previous secret signs (beside the current one) until this instant.
    previous_signing_until = models.DateTimeField(null=True, blank=True)
    signing_rotated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True


class AlertSubscription(SigningSecrets):
    """Who is told when something needs a person: a webhook (signed with the subscription's own
    secret) and/or an email address, for some kinds of alert.

    Data the outbox points at (Delivery.subscription), so it lives here, below the supervisor,
    which writes the alerts (supervisor.alerts) and owns the editing (supervisor.subscriptions)."""

    name = models.SlugField(max_length=100, unique=True)
    webhook_url = models.CharField(max_length=500, blank=True, default="")
    email = models.EmailField(blank=True, default="")
    kinds = models.JSONField(default=all_alert_kinds, help_text="The alert kinds this subscription wants.")
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        # The table keeps the name it was created with (docs/decisions/0021).
        db_table = "supervisor_alertsubscription"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=~(models.Q(webhook_url="") & models.Q(email="")),
                name="alertsubscription_has_target",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class CallbackSecret(SigningSecrets):
    """A submitter's key for the completion callbacks of its jobs: created on first need (the
    first callback sent, or the first time the user reads it over the API), rotated by the user
    (POST /api/v1/callback-secret/rotate/). One per user: a receiver of one user's callbacks
    cannot sign another's."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="callback_secret"
    )
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"callback secret of user {self.user_id}"


class Delivery(models.Model):
    """The outbox: a message to send to a receiver outside the service, written in the same
    transaction as what it tells, then sent (and retried with backoff) by the supervisor loop.

    `key` is the message's idempotency key, unique: a message is written at most once however often
    what it tells is recorded, and the receiver gets it as `Idempotency-Key` to de-duplicate the
    retries of one message.
    """

    kind = models.CharField(max_length=16, choices=DeliveryKind.choices)
    key = models.CharField(max_length=255, unique=True)
    #: The URL (callback, webhook) or email address.
    target = models.CharField(max_length=500)
    #: Who receives it: the URL's `host:port` (scheduler.outbox.receiver_of); empty for an email.
    #: The sender takes turns between receivers and keeps a circuit breaker for each.
    receiver = models.CharField(max_length=300, blank=True, default="", db_default="")
    payload = models.JSONField(default=dict)
    # By name: the job module reads its deliveries (Job.callbacks), so this one does not import it.
    job = models.ForeignKey(
        "scheduler.Job",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="deliveries",
        db_index=False,
    )
    subscription = models.ForeignKey(
        AlertSubscription,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="deliveries",
        db_index=False,
    )
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    tries = models.PositiveIntegerField(default=0)
    next_try_at = models.DateTimeField(default=timezone.now)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "deliveries"
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=DeliveryKind.values), name="delivery_kind_valid"),
            models.CheckConstraint(
                condition=Q(status__in=DeliveryStatus.values), name="delivery_status_valid"
            ),
        ]
        indexes = [
            # The sender's claim (pending messages whose try is due, oldest first) and the
            # /metrics gauge of what is not delivered: delivered rows, the many, stay out.
            models.Index(
                fields=["next_try_at"], condition=~Q(status="delivered"), name="delivery_undelivered_idx"
            ),
            # A job's callbacks (job page, API).
            models.Index(fields=["job", "id"], name="delivery_job_idx"),
            # The alerts' lane of the sender's claim (supervisor.deliveries): alerts due are read
            # first, whatever the callbacks' backlog.
            models.Index(
                fields=["next_try_at"],
                condition=Q(status="pending") & ~Q(kind="callback"),
                name="delivery_alert_due_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.key} ({self.status})"


class EventReaction(models.Model):
    """An event someone reacts to (the supervisor's alerts), queued for them by the database: a
    trigger on the event table (scheduler/sql/, generated from scheduler.outbox.REACTION_KINDS)
    copies each event of those kinds here, whoever wrote it (the unit of work, the hot path's
    functions, the set-wise scan), in the event's transaction. The reader takes rows oldest first,
    skipping locked ones, and deletes them in the transaction of its reaction: each is handled
    once, and none is missed for being written outside Python.

    A copy of the event's fields, not a key to it: the event table is partitioned and large, and
    this queue is short."""

    event_id = models.BigIntegerField()
    kind = models.CharField(max_length=40)
    job_id = models.UUIDField()
    step_id = models.BigIntegerField(null=True, blank=True)
    attempt = models.PositiveIntegerField(null=True, blank=True)
    reason = models.TextField(blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.kind} (event {self.event_id})"
