"""Sending the outbox (scheduler.models.Delivery): completion callbacks and alerts.

Every supervisor loop sends what is due after its scan. A message is claimed in a short
transaction (`FOR UPDATE SKIP LOCKED`) that sets its next try past the longest a send can take
(`CLAIM_SECONDS`): no other sender takes it while it is being sent, and a sender that dies
mid-send leaves it due again after that, never lost. It is then sent outside any transaction and
its result recorded: delivered, or due again after the backoff. A receiver gets a message twice
only when its sender died between the receiver's answer and the record; the message's
`Idempotency-Key` tells.

Webhooks and callbacks are POSTs of the JSON payload, signed: `X-SAS-Signature:
sha256=<hex HMAC-SHA256 of the raw body with SAS_CALLBACK_SECRET>`. Their URLs go through the
outbound-URL guard at send time too (http(s), no credentials, the allowed hosts, and every
connection only to a checked public address: agents.egress), and redirects are not followed.
2xx is delivered; anything else is tried again, with exponential backoff, up to `MAX_TRIES`,
then kept as `failed`, visible in the admin and on the job.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
from typing import Any

import httpx
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models.functions import Now

from agents.egress import outbound_client
from agents.validation import validate_endpoint_url
from sas_project.conf import sas_settings
from sas_project.errors import InvalidInput
from scheduler.models import Delivery, DeliveryKind, DeliveryStatus
from supervisor import signing

logger = logging.getLogger("supervisor.deliveries")

MAX_TRIES = 20
MAX_BACKOFF = 3600.0
SEND_TIMEOUT = 10.0
#: A claimed message is not due again before this: more than a send can take (connect, write
#: and read each bounded by SEND_TIMEOUT).
CLAIM_SECONDS = 4 * SEND_TIMEOUT
BATCH = 50


def backoff(tries: int) -> float:
    """Seconds before try `tries` + 1: SAS_DELIVERY_RETRY_SECONDS (5 s), doubling, at most an
    hour, with some jitter."""
    base = min(sas_settings.delivery_retry_seconds * 2 ** max(tries - 1, 0), MAX_BACKOFF)
    return base * random.uniform(0.8, 1.0)


def sign(delivery: Delivery, body: bytes) -> dict[str, str]:
    """The signing headers of one try of `delivery` (supervisor.signing)."""
    return signing.headers_for(delivery, body)


def send_due(limit: int = BATCH) -> int:
    """Send the messages whose try is due; returns how many were tried."""
    claimed = _claim(limit)
    for delivery in claimed:
        _record(delivery, *_send(delivery))
    return len(claimed)


def _claim(limit: int) -> list[Delivery]:
    with transaction.atomic():
        due = list(
            Delivery.objects.select_for_update(skip_locked=True)
            .filter(status=DeliveryStatus.PENDING, next_try_at__lte=Now())
            .order_by("next_try_at")[:limit]
        )
        for delivery in due:
            delivery.tries += 1
            Delivery.objects.filter(pk=delivery.pk).update(
                tries=delivery.tries, next_try_at=Now() + dt.timedelta(seconds=CLAIM_SECONDS)
            )
    return due


def _send(delivery: Delivery) -> tuple[bool, int | None, str]:
    """(delivered, status code, error)."""
    if delivery.kind == DeliveryKind.EMAIL:
        return _send_email(delivery)
    body = json.dumps(delivery.payload, separators=(",", ":"), sort_keys=True).encode()
    try:
        url = validate_endpoint_url(delivery.target, resolve=False)
    except InvalidInput as exc:
        return False, None, f"refused: {exc.message}"
    headers = {
        "Content-Type": "application/json",
        "Idempotency-Key": delivery.key,
        "X-SAS-Delivery": delivery.kind,
    }
    headers.update(sign(delivery, body))
    try:
        with outbound_client(timeout=SEND_TIMEOUT) as client:
            response = client.post(url, content=body, headers=headers)
    except InvalidInput as exc:
        return False, None, f"refused: {exc.message}"
    except httpx.HTTPError as exc:
        return False, None, f"{type(exc).__name__}: {exc}"[:500]
    if 200 <= response.status_code < 300:
        return True, response.status_code, ""
    return False, response.status_code, f"HTTP {response.status_code}"


def _send_email(delivery: Delivery) -> tuple[bool, int | None, str]:
    payload: dict[str, Any] = delivery.payload
    subject = f"[scheduler-agent-supervisor] {payload.get('alert', 'alert')}"
    body = json.dumps(payload, indent=2, sort_keys=True)
    try:
        EmailMessage(subject, body, to=[delivery.target], headers={"X-SAS-Key": delivery.key}).send()
    except Exception as exc:  # noqa: BLE001 - any failure of the mail server is a retry
        return False, None, f"{type(exc).__name__}: {exc}"[:500]
    return True, None, ""


def _record(delivery: Delivery, delivered: bool, status_code: int | None, error: str) -> None:
    """The try's result, written only if nobody tried the message again meanwhile."""
    mine = Delivery.objects.filter(pk=delivery.pk, tries=delivery.tries, status=DeliveryStatus.PENDING)
    if delivered:
        mine.update(
            status=DeliveryStatus.DELIVERED, delivered_at=Now(), last_status_code=status_code, last_error=""
        )
        return
    final = delivery.tries >= MAX_TRIES
    mine.update(
        status=DeliveryStatus.FAILED if final else DeliveryStatus.PENDING,
        next_try_at=Now() + dt.timedelta(seconds=backoff(delivery.tries)),
        last_status_code=status_code,
        last_error=error,
    )
    logger.warning(
        "delivery failed",
        extra={
            "delivery": delivery.key,
            "kind": delivery.kind,
            "tries": delivery.tries,
            "status_code": status_code,
            "error": error,
            "job_id": str(delivery.job_id) if delivery.job_id else None,
            "final": final,
        },
    )


def delivery_retry(*, actor: Any, delivery_ids: list[int]) -> int:
    """Send given-up messages again from a first try (an operator's decision, recorded with the
    user in the admin log). Returns how many were put back."""
    from sas_project.audit import definition_logged

    with transaction.atomic():
        failed = list(
            Delivery.objects.select_for_update().filter(pk__in=delivery_ids, status=DeliveryStatus.FAILED)
        )
        for delivery in failed:
            Delivery.objects.filter(pk=delivery.pk).update(
                status=DeliveryStatus.PENDING, tries=0, next_try_at=Now(), last_error=""
            )
            definition_logged(actor, delivery, created=False, changes={"status": ["failed", "pending"]})
    return len(failed)
