"""Signals addressed by business key (scheduler.services.correlation): one row per request to
`POST /api/v1/signals/`, with the jobs it reached, or, when it reached none, kept for a job with
that key that starts within SAS_SIGNAL_LOOKBACK_SECONDS. Inbound events
(scheduler.services.events): one row per event (`POST /api/v1/events/`), de-duplicated by its
source and id, with what it did."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from scheduler.models.jobs import Job
from scheduler.models.outbox import SigningSecrets


class KeyedSignal(models.Model):
    """A signal sent by business key. `reached` lists the live jobs it was delivered to when it
    came (each got a `Signal` row of its own, with its event). When it reached none it is
    `buffered`: the first job with its business key (and workflow, when named) whose workflow
    takes the name and that is created before `expires_at` claims it (`consumed_job`, a guarded
    write: at most one job), and gets it as a buffered signal; past `expires_at` the supervisor
    marks it `expired_at`."""

    business_key = models.CharField(max_length=200)
    #: The workflow it is for ("" for any workflow that takes the name).
    workflow = models.CharField(max_length=100, blank=True, default="")
    name = models.CharField(max_length=100)
    payload = models.JSONField(null=True, blank=True)
    sender = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # NULL, not "": the unique constraint binds only the requests that were given a key.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    request_hash = models.CharField(max_length=64, blank=True, default="")
    #: The ids of the jobs it was delivered to when it came (as text).
    reached = models.JSONField(default=list, blank=True)
    buffered = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    consumed_job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    consumed_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["sender", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="keyedsignal_unique_idempotency_key",
            ),
        ]
        indexes = [
            # What a new job with a business key claims, and what the sweep expires: the buffered
            # signals still waiting, only.
            models.Index(
                fields=["business_key", "name", "id"],
                condition=Q(buffered=True, consumed_at__isnull=True, expired_at__isnull=True),
                name="keyedsignal_waiting_idx",
            ),
            models.Index(
                fields=["expires_at"],
                condition=Q(buffered=True, consumed_at__isnull=True, expired_at__isnull=True),
                name="keyedsignal_expiry_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} -> key {self.business_key}"


class InboundEvent(models.Model):
    """An event posted to `POST /api/v1/events/`, kept SAS_EVENT_RETENTION_HOURS with the answer
    it was given: the same (`source`, `event_id`) posted again within that time is answered with
    it, and does nothing (the unique constraint decides between two posted at once). Written in
    the transaction that starts its jobs and signals the jobs waiting for it."""

    type = models.CharField(max_length=100)
    source = models.CharField(max_length=100)
    #: The event's own id (the API's `id`): unique per source.
    event_id = models.CharField(max_length=200)
    data = models.JSONField(null=True, blank=True)
    sender = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    received_at = models.DateTimeField(default=timezone.now)
    #: What it did, as the API answered it: {"started", "signalled", "refused"}.
    answer = models.JSONField(default=dict, blank=True)
    #: An operator's replay of an event (scheduler.services.events.event_replay) is a row of its
    #: own naming the event it replays, who replayed it and why; it goes when that event goes.
    replay_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="replays", db_index=False
    )
    replayed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    replay_reason = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        ordering = ["id"]
        constraints = [
            # One event per source and id; its replays carry the same and are not duplicates.
            models.UniqueConstraint(
                fields=["source", "event_id"],
                condition=Q(replay_of__isnull=True),
                name="inboundevent_unique_source_id",
            ),
        ]
        indexes = [
            # The supervisor's prune: the rows past the retention window, oldest first.
            models.Index(fields=["received_at"], name="inboundevent_received_idx"),
            # An event's replays, and the delete of an event's replays with it.
            models.Index(
                fields=["replay_of"], condition=Q(replay_of__isnull=False), name="inboundevent_replay_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.source}/{self.event_id}"


class EventSource(SigningSecrets):
    """A provider that posts its events straight to the service (`POST /api/v1/events/<name>/`),
    each signed the Standard Webhooks way with this source's secret (`signing_secret`, and during
    a rotation `previous_signing_secret` until `previous_signing_until`): no token, the signature
    is the credential (scheduler.services.events.event_verify). Its events start jobs submitted
    by `run_as` and reach every job whose wait matches them."""

    name = models.CharField(max_length=100, unique=True, help_text="The events' `source`.")
    run_as = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The user the jobs its events start are submitted as.",
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
