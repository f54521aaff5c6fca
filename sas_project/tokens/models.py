"""API tokens: several per user, each named, expiring, with its last use, revocable.

Only a token's SHA-256 digest is stored (the key is shown once, when it is made), so neither a
database dump nor the admin shows a usable key; its first characters (`prefix`) let the owner
recognise it. A revoked token is kept, with who revoked it and when.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone


class TokenStatus(models.TextChoices):
    ACTIVE = "active", "active"
    EXPIRED = "expired", "expired"
    REVOKED = "revoked", "revoked"


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="What the token is for.")
    #: sha256 of the key, hex: what a request's key is looked up by (unique index).
    digest = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=8, editable=False, help_text="The key's first characters.")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    #: None: never (only when SAS_TOKEN_LIFETIME_DAYS is 0).
    expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    #: Written at most every SAS_TOKEN_LAST_USED_SECONDS (sas_project.auth).
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )

    class Meta:
        db_table = "api_token"
        verbose_name = "API token"
        # A user's tokens, newest first (the console's and the API's list).
        indexes = [models.Index(fields=["user", "-created_at"], name="api_token_user_idx")]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def status_at(self, now: dt.datetime | None = None) -> str:
        if self.revoked_at is not None:
            return TokenStatus.REVOKED
        if self.expires_at is not None and self.expires_at <= (now or timezone.now()):
            return TokenStatus.EXPIRED
        return TokenStatus.ACTIVE

    @property
    def status(self) -> str:
        return self.status_at()


class RateBucket(models.Model):
    """One API client's request rate (sas_project.throttling): a GCRA bucket, written by one
    `INSERT ... ON CONFLICT DO UPDATE ... RETURNING` per request, so every web process counts the
    same requests. Times are seconds since the epoch on the database's clock. On PostgreSQL the
    table is UNLOGGED (migration 0003): losing it in a crash only refills every bucket.

    A row whose `tat` has passed is a full bucket, the same as no row: `rate_buckets_prune`
    deletes those."""

    #: `user:<id>` or `anon:<address>`.
    key = models.CharField(max_length=200, primary_key=True)
    #: The theoretical arrival time: when the bucket is full again.
    tat = models.FloatField()
    #: When the last request was counted (or refused).
    seen_at = models.FloatField()
    #: Whether the last request was refused (read back by the statement's RETURNING).
    refused = models.BooleanField(default=False)

    class Meta:
        db_table = "api_rate_bucket"
        verbose_name = "API rate bucket"

    def __str__(self) -> str:
        return self.key


class LargeRequest(models.Model):
    """A large API request in flight (sas_project.inflight): one row from after its checks until
    its answer, so that every web process sees how many of one user's large requests are being
    served. `expires_at` bounds a row whose process died before removing it. UNLOGGED on
    PostgreSQL (migration 0005), as the rate buckets."""

    #: `user:<id>`.
    key = models.CharField(max_length=200)
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "api_large_request"
        indexes = [models.Index(fields=["key", "id"], name="api_large_request_key_idx")]

    def __str__(self) -> str:
        return f"{self.key} ({self.pk})"


class IdempotentRequest(models.Model):
    """The answer to a request sent with an `Idempotency-Key` (sas_project.idempotency): a rerun,
    a bulk action. The same user sending the same key again gets this answer back, marked
    `Idempotent-Replayed: true`, and nothing is done twice; a different request under the key is
    a 422. Written in the transaction of the action it answers, so the action and its record
    commit together or not at all. Kept `SAS_IDEMPOTENCY_KEY_HOURS`, then pruned by the
    supervisor's lease holder."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    #: SHA-256 of the method, the path and the canonical JSON of the body.
    fingerprint = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField()
    body = models.JSONField(encoder=DjangoJSONEncoder)
    #: The answer's Location header, if it had one.
    location = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        db_table = "api_idempotent_request"
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="idempotent_request_unique_key")]

    def __str__(self) -> str:
        return self.key
