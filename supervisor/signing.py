"""Signing what the outbox sends, the Standard Webhooks way (https://www.standardwebhooks.com/).

Every completion callback and alert webhook carries:

- `webhook-id`: the message's outbox key (Delivery.key), the same on every try of one message,
  so that a receiver de-duplicates retries;
- `webhook-timestamp`: when this try was sent (Unix seconds; each try is signed anew), so that a
  receiver refuses a message replayed outside its tolerance (the reference verifiers: 5 minutes);
- `webhook-signature`: `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">` with the secret of
  the message's receiver: the alert subscription's own, or, for a completion callback, its job's
  submitter's. During a rotation the previous secret signs too (a second `v1,` signature, space
  separated) for SAS_SIGNING_ROTATION_GRACE_SECONDS, so a receiver may change its key at any
  moment of that period.

A receiver of one subscription (or one submitter's callbacks) cannot sign a message another
would accept. A callback of a job without a submitter (its user deleted), or an alert of a
subscription since deleted, has no key to be signed with and goes without `webhook-signature`.

Until the next release, the former `X-SAS-Signature: sha256=<hex HMAC-SHA256 of the body with
SAS_CALLBACK_SECRET>` is sent beside them (SAS_LEGACY_SIGNATURE turns it off): one key shared by
every receiver and no timestamp, kept only so that receivers can move over.

Secrets are created and rotated here only; they appear in no log line, event, job API answer or
archive record.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from standardwebhooks import Webhook

from sas_project.audit import definition_logged
from sas_project.conf import sas_settings
from scheduler.models import (
    AlertSubscription,
    CallbackSecret,
    Delivery,
    DeliveryKind,
    SigningSecrets,
    signing_secret_new,
)
from supervisor.subscriptions import subscription_get


def legacy_signature(body: bytes) -> str:
    """The value of the former X-SAS-Signature for `body` (one shared key, no timestamp)."""
    digest = hmac.new(sas_settings.callback_secret.encode(), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def signing_keys(holder: SigningSecrets, *, now: dt.datetime) -> list[str]:
    """The secrets that sign for `holder` at `now`: its current one, and during a rotation's
    grace period the one it replaced."""
    keys = [holder.signing_secret]
    if (
        holder.previous_signing_secret
        and holder.previous_signing_until is not None
        and holder.previous_signing_until > now
    ):
        keys.append(holder.previous_signing_secret)
    return keys


def signatures(keys: list[str], *, msg_id: str, timestamp: dt.datetime, body: bytes) -> str:
    """The `webhook-signature` value: one `v1,<base64>` per key, space separated."""
    data = body.decode()
    return " ".join(Webhook(key).sign(msg_id, timestamp, data) for key in keys)


def _holder(delivery: Delivery) -> SigningSecrets | None:
    """Whose secrets sign `delivery`: the subscription of an alert, the submitter of a callback's
    job (the secret created on first need)."""
    if delivery.kind == DeliveryKind.WEBHOOK:
        return delivery.subscription
    if delivery.kind == DeliveryKind.CALLBACK and delivery.job is not None:
        submitter = delivery.job.submitter
        return callback_secret_get(submitter) if submitter is not None else None
    return None


def headers_for(delivery: Delivery, body: bytes, *, now: dt.datetime | None = None) -> dict[str, str]:
    """The signing headers of one try of `delivery` with `body`, sent at `now`."""
    sent = (now or timezone.now()).astimezone(dt.UTC).replace(microsecond=0)
    headers = {"webhook-id": delivery.key, "webhook-timestamp": str(int(sent.timestamp()))}
    holder = _holder(delivery)
    if holder is not None:
        headers["webhook-signature"] = signatures(
            signing_keys(holder, now=sent), msg_id=delivery.key, timestamp=sent, body=body
        )
    if sas_settings.legacy_signature:
        headers["X-SAS-Signature"] = legacy_signature(body)
    return headers


# --- the secrets ----------------------------------------------------------------------------------


def _rotate(holder: SigningSecrets, *, now: dt.datetime) -> list[str]:
    """Give `holder` a new secret; the current one keeps signing for the grace period. Returns
    the fields to save."""
    holder.previous_signing_secret = holder.signing_secret
    holder.previous_signing_until = now + dt.timedelta(seconds=sas_settings.signing_rotation_grace_seconds)
    holder.signing_secret = signing_secret_new()
    holder.signing_rotated_at = now
    return ["signing_secret", "previous_signing_secret", "previous_signing_until", "signing_rotated_at"]


def callback_secret_get(user: Any) -> CallbackSecret:
    """`user`'s callback secret, created on first need (two first needs at once make one)."""
    found = CallbackSecret.objects.filter(user=user).first()
    if found is not None:
        return found
    try:
        with transaction.atomic():
            return CallbackSecret.objects.create(user=user)
    except IntegrityError:
        return CallbackSecret.objects.get(user=user)


@transaction.atomic
def callback_secret_rotate(*, user: Any, now: dt.datetime | None = None) -> CallbackSecret:
    """Give `user` a new callback secret, the previous one still signing for the grace period;
    recorded with the user in the admin log (never the secret)."""
    callback_secret_get(user)
    secret = CallbackSecret.objects.select_for_update().get(user=user)
    fields = _rotate(secret, now=now or timezone.now())
    secret.save(update_fields=fields)
    definition_logged(user, secret, created=False, changes={"signing_secret": None})
    return secret


@transaction.atomic
def subscription_secret_rotate(name: str, *, actor: Any, now: dt.datetime | None = None) -> AlertSubscription:
    """Give subscription `name` a new signing secret, the previous one still signing for the
    grace period; recorded with `actor` in the admin log (never the secret)."""
    subscription_get(name)
    subscription = AlertSubscription.objects.select_for_update().get(name=name)
    fields = _rotate(subscription, now=now or timezone.now())
    subscription.save(update_fields=[*fields, "updated_at"])
    definition_logged(actor, subscription, created=False, changes={"signing_secret": None})
    return subscription
