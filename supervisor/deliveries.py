"""Sending the outbox (scheduler.models.Delivery): completion callbacks and alerts.

Every supervisor loop hands what is due to its `Sender`: a few threads beside the loop
(SAS_DELIVERY_CONCURRENCY, 8) that send while the loop goes on scanning, so no receiver can hold
the loop. The loop claims only as many messages as there are free threads and never waits for a
send. A message is claimed in a short transaction (`FOR UPDATE SKIP LOCKED`) that sets its next
try past the longest a send can take (`claim_seconds()`): no other sender takes it while it is
being sent, and a sender that dies or is stopped mid-send leaves it due again after that, never
lost. It is then sent outside any transaction and its result recorded: delivered, or due again
after the backoff. A receiver gets a message twice only when its sender died between the
receiver's answer and the record; the message's `Idempotency-Key` tells.

A send has a wall-clock deadline, SAS_DELIVERY_TIMEOUT (10 s), for connecting, sending and the
answer's status and headers (agents.egress.deadline), whatever pace the receiver answers at; past
it the try has failed. Only the status counts: the answer's body is never read, the connection is
closed after the headers.

Webhooks and callbacks are POSTs of the JSON payload, signed for their receiver alone the
Standard Webhooks way (supervisor.signing: `webhook-id`, `webhook-timestamp`,
`webhook-signature`; the former `X-SAS-Signature` beside while SAS_LEGACY_SIGNATURE is on).
Their URLs go through the outbound-URL guard at send time too, with the lists of their kind
(callbacks, webhooks: http(s), no credentials, the allowed hosts, and every connection only to a
checked address: agents.egress), and redirects are not followed.
2xx is delivered; anything else is tried again, with exponential backoff, up to `MAX_TRIES`,
then kept as `failed`, visible in the admin and on the job.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
from django.core.mail import EmailMessage, get_connection
from django.db import connection, transaction
from django.db.models.functions import Now

from agents.egress import deadline, outbound_client
from agents.validation import OutboundKind, validate_endpoint_url
from sas_project.conf import sas_settings
from sas_project.errors import InvalidInput
from scheduler.models import Delivery, DeliveryKind, DeliveryStatus
from supervisor import signing

logger = logging.getLogger("supervisor.deliveries")

MAX_TRIES = 20
MAX_BACKOFF = 3600.0
BATCH = 50


def claim_seconds() -> float:
    """A claimed message is not due again before this: more than a send can take (its deadline,
    with room for a resolver thread that answers late and for the record)."""
    return 3 * sas_settings.delivery_timeout + 30


def backoff(tries: int) -> float:
    """Seconds before try `tries` + 1: SAS_DELIVERY_RETRY_SECONDS (5 s), doubling, at most an
    hour, with some jitter."""
    base = min(sas_settings.delivery_retry_seconds * 2 ** max(tries - 1, 0), MAX_BACKOFF)
    return base * random.uniform(0.8, 1.0)


def sign(delivery: Delivery, body: bytes) -> dict[str, str]:
    """The signing headers of one try of `delivery` (supervisor.signing)."""
    return signing.headers_for(delivery, body)


def send_due(limit: int = BATCH) -> int:
    """Send the messages whose try is due, one after the other in this thread; returns how many
    were tried. (The loop sends through a `Sender` instead.)"""
    claimed = _claim(limit)
    for delivery in claimed:
        _record(delivery, *_send(delivery))
    return len(claimed)


class Sender:
    """Sends the outbox in up to `concurrency` threads beside the thread that feeds it.

    `pump()` claims as many due messages as there are free threads and returns at once; each
    thread sends one message by its deadline, records the result and closes its own database
    connection. `stop()` takes no more and waits for the sends in flight, each over by its
    deadline.
    """

    def __init__(self, concurrency: int | None = None) -> None:
        self.concurrency = concurrency or sas_settings.delivery_concurrency
        self._threads = ThreadPoolExecutor(self.concurrency, thread_name_prefix="sas-delivery")
        self._in_flight: set[Future[None]] = set()
        #: The last claim filled every free thread: more may be due as soon as one is free.
        self.more_due = False

    def free(self) -> int:
        self._in_flight = {future for future in self._in_flight if not future.done()}
        return self.concurrency - len(self._in_flight)

    def pump(self) -> int:
        """Hand due messages to free threads; returns how many were handed over."""
        free = self.free()
        if free <= 0:
            return 0
        claimed = _claim(free)
        self.more_due = len(claimed) == free
        for delivery in claimed:
            self._in_flight.add(self._threads.submit(_send_and_record, delivery))
        return len(claimed)

    def stop(self) -> None:
        """Take no more; wait for the sends in flight (each ends by its deadline)."""
        self._threads.shutdown(wait=True, cancel_futures=True)
        self._in_flight.clear()


def _send_and_record(delivery: Delivery) -> None:
    try:
        _record(delivery, *_send(delivery))
    except Exception:
        # The claim stands: the message is due again after it, never lost.
        logger.exception("delivery %s: send or record failed", delivery.key)
    finally:
        # This thread's own connection: the next message it sends opens a fresh one.
        connection.close()


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
                tries=delivery.tries, next_try_at=Now() + dt.timedelta(seconds=claim_seconds())
            )
    return due


def _send(delivery: Delivery) -> tuple[bool, int | None, str]:
    """(delivered, status code, error)."""
    if delivery.kind == DeliveryKind.EMAIL:
        return _send_email(delivery)
    body = json.dumps(delivery.payload, separators=(",", ":"), sort_keys=True).encode()
    # Checked against the lists of the message's kind (callbacks, webhooks), never the agents'.
    kind = OutboundKind(delivery.kind)
    try:
        url = validate_endpoint_url(delivery.target, resolve=False, kind=kind)
    except InvalidInput as exc:
        return False, None, f"refused: {exc.message}"
    headers = {
        "Content-Type": "application/json",
        "Idempotency-Key": delivery.key,
        "X-SAS-Delivery": delivery.kind,
    }
    headers.update(sign(delivery, body))
    timeout = sas_settings.delivery_timeout
    try:
        with (
            outbound_client(timeout=timeout, kind=kind) as client,
            deadline(timeout),
            # The status is all that counts: leaving the block without reading the body closes
            # the connection, whatever the receiver still had to send.
            client.stream("POST", url, content=body, headers=headers) as response,
        ):
            status = response.status_code
    except InvalidInput as exc:
        return False, None, f"refused: {exc.message}"
    except httpx.HTTPError as exc:
        return False, None, f"{type(exc).__name__}: {exc}"[:500]
    if 200 <= status < 300:
        return True, status, ""
    return False, status, f"HTTP {status}"


def _send_email(delivery: Delivery) -> tuple[bool, int | None, str]:
    payload: dict[str, Any] = delivery.payload
    subject = f"[scheduler-agent-supervisor] {payload.get('alert', 'alert')}"
    body = json.dumps(payload, indent=2, sort_keys=True)
    try:
        # Each exchange with the mail server waits at most the send's timeout.
        mailer = get_connection(timeout=sas_settings.delivery_timeout)
        EmailMessage(
            subject, body, to=[delivery.target], headers={"X-SAS-Key": delivery.key}, connection=mailer
        ).send()
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
