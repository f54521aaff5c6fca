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

**Fair, alerts first.** The outbox has two lanes. Alerts (webhooks, emails) are claimed first, and
besides the callbacks' threads (SAS_DELIVERY_CONCURRENCY) the sender keeps threads only alerts
take (SAS_DELIVERY_ALERT_THREADS): a backlog of callbacks never holds an alert longer than a free
thread takes to come, one delivery timeout at most. Within a lane a claim takes turns, set-wise in
the database (`_candidates`): first between submitters, then between each submitter's receivers
(`Delivery.receiver`, the URL's `host:port`), each receiver's messages oldest first, counting
what the sender has in flight as turns taken. A submitter whose thousand receivers never answer
holds its share of the threads, not all of them.

**A circuit breaker per receiver** (supervisor.models.ReceiverBreaker, in the database, so every
cluster's sender shares it): SAS_DELIVERY_BREAKER_FAILURES failed tries in a row (no answer, a
connection error, a 5xx, 408 or 429) open it for SAS_DELIVERY_BREAKER_OPEN_SECONDS (another 4xx
is an answer: the receiver is up, only that message or its path is refused); its
receiver's messages are then not claimed (their tries not counted: they wait, and count again
when sent). Past that one claim takes one message as a probe (half-open); the probe delivered
closes the breaker, failed it opens it again.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import logging
import random
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
from django.core.mail import EmailMessage, get_connection
from django.db import connection, transaction
from django.db.models import Case, Exists, F, IntegerField, OuterRef, Q, Value, When, Window
from django.db.models.functions import Now, RowNumber

from agents.egress import deadline, outbound_client
from agents.validation import OutboundKind, validate_endpoint_url
from sas_project.conf import sas_settings
from sas_project.errors import InvalidInput
from scheduler.models import Delivery, DeliveryKind, DeliveryStatus
from supervisor import signing
from supervisor.models import ReceiverBreaker

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


class Lane(enum.StrEnum):
    """The outbox's lanes, alerts first."""

    #: Alert webhooks and emails: claimed first, with threads of their own.
    ALERTS = "alerts"
    #: Jobs' completion callbacks.
    CALLBACKS = "callbacks"


def send_due(limit: int = BATCH) -> int:
    """Send the messages whose try is due, alerts first, one after the other in this thread;
    returns how many were tried. (The loop sends through a `Sender` instead.)"""
    claimed = _claim(limit)
    for delivery in claimed:
        _send_and_record(delivery, close=False)
    return len(claimed)


class Sender:
    """Sends the outbox in threads beside the thread that feeds it: up to `concurrency`
    callbacks at once, and `alert_threads` more that only alerts take.

    `pump()` claims as many due messages as there are free threads, alerts first, and returns at
    once; each thread sends one message by its deadline, records the result and closes its own
    database connection. `stop()` takes no more and waits for the sends in flight, each over by
    its deadline.
    """

    def __init__(self, concurrency: int | None = None, alert_threads: int | None = None) -> None:
        self.concurrency = concurrency or sas_settings.delivery_concurrency
        self.alert_threads = alert_threads or sas_settings.delivery_alert_threads
        self.threads = self.concurrency + self.alert_threads
        self._threads = ThreadPoolExecutor(self.threads, thread_name_prefix="sas-delivery")
        self._in_flight: dict[Future[None], tuple[Lane, int | None, str]] = {}
        # Whether the last claim of each lane filled its room (or had none): more may be due.
        self._filled = {Lane.ALERTS: False, Lane.CALLBACKS: False}

    def _reap(self) -> None:
        self._in_flight = {future: what for future, what in self._in_flight.items() if not future.done()}

    def _busy(self, lane: Lane) -> Counter[tuple[int | None, str]]:
        return Counter(
            (submitter, receiver) for on, submitter, receiver in self._in_flight.values() if on is lane
        )

    def free(self) -> int:
        self._reap()
        return self.threads - len(self._in_flight)

    def callback_room(self) -> int:
        """Threads callbacks may take now: free ones, leaving the alerts' own."""
        free = self.free()
        callbacks = sum(1 for lane, _, _ in self._in_flight.values() if lane is Lane.CALLBACKS)
        return max(min(free, self.concurrency - callbacks), 0)

    @property
    def more_due(self) -> bool:
        """The last claim filled a lane's room and that lane has room again: more may be due."""
        return (self._filled[Lane.ALERTS] and self.free() > 0) or (
            self._filled[Lane.CALLBACKS] and self.callback_room() > 0
        )

    def pump(self) -> int:
        """Hand due messages to free threads, alerts first; returns how many were handed over."""
        handed = self._hand(Lane.ALERTS, self.free())
        return handed + self._hand(Lane.CALLBACKS, self.callback_room())

    def _hand(self, lane: Lane, room: int) -> int:
        claimed = _claim_turns(lane, room, self._busy(lane))
        self._filled[lane] = len(claimed) == room
        for delivery, submitter in claimed:
            future = self._threads.submit(_send_and_record, delivery)
            self._in_flight[future] = (lane, submitter, delivery.receiver)
        return len(claimed)

    def stop(self) -> None:
        """Take no more; wait for the sends in flight (each ends by its deadline)."""
        self._threads.shutdown(wait=True, cancel_futures=True)
        self._in_flight.clear()


def _send_and_record(delivery: Delivery, *, close: bool = True) -> None:
    try:
        delivered, status_code, error = _send(delivery)
        _record(delivery, delivered, status_code, error)
        _breaker_note(delivery, delivered, status_code, error)
    except Exception:
        # The claim stands: the message is due again after it, never lost.
        logger.exception("delivery %s: send or record failed", delivery.key)
    finally:
        if close:
            # This thread's own connection: the next message it sends opens a fresh one.
            connection.close()


#: What a sender has in flight: how many messages of each (submitter, receiver) it is sending.
Busy = Mapping[tuple[int | None, str], int]


def _of(submitter: int | None) -> Q:
    return Q(job__submitter__isnull=True) if submitter is None else Q(job__submitter_id=submitter)


def _candidates(lane: Lane, limit: int, busy: Busy) -> list[tuple[int, int | None]]:
    """(id, submitter) of up to `limit` messages of `lane` due now, in the order the lane takes
    turns: the first of each submitter, then the second of each, ...; a submitter's turns go
    round its receivers, each receiver's messages oldest first. What is in flight (`busy`) counts
    as turns already taken, so the claims that fill threads one at a time as they free up take
    turns too. Receivers whose breaker is open are left out. One statement (window functions, on
    PostgreSQL and SQLite alike)."""
    due = Delivery.objects.filter(status=DeliveryStatus.PENDING, next_try_at__lte=Now()).exclude(
        Exists(ReceiverBreaker.objects.filter(receiver=OuterRef("receiver"), open_until__gt=Now()))
    )
    due = (
        due.filter(kind=DeliveryKind.CALLBACK)
        if lane is Lane.CALLBACKS
        else due.exclude(kind=DeliveryKind.CALLBACK)
    )
    per_submitter: Counter[int | None] = Counter()
    for (submitter, _), n in busy.items():
        per_submitter[submitter] += n
    turns = (
        due.annotate(
            submitter=F("job__submitter_id"),
            in_receiver=Window(
                RowNumber(),
                partition_by=[F("job__submitter_id"), F("receiver")],
                order_by=[F("next_try_at").asc(), F("id").asc()],
            ),
            busy_receiver=Case(
                *(When(_of(s) & Q(receiver=r), then=Value(n)) for (s, r), n in busy.items()),
                default=Value(0),
                output_field=IntegerField(),
            ),
            busy_submitter=Case(
                *(When(_of(s), then=Value(n)) for s, n in per_submitter.items()),
                default=Value(0),
                output_field=IntegerField(),
            ),
        )
        .order_by()
        .values("id", "next_try_at", "submitter", "in_receiver", "busy_receiver", "busy_submitter")
    )
    sql, params = turns.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT id, submitter FROM (
                SELECT id, submitter, next_try_at, busy_submitter, row_number() OVER (
                    PARTITION BY submitter ORDER BY in_receiver + busy_receiver, next_try_at, id
                ) AS in_submitter
                FROM ({sql}) AS turns WHERE in_receiver <= %s
            ) AS rounds ORDER BY in_submitter + busy_submitter, next_try_at, id LIMIT %s
            """,  # noqa: S608 - the inner statement is the ORM's, its values parameters
            [*params, limit, limit],
        )
        return [(row[0], row[1]) for row in cursor.fetchall()]


def _claim(limit: int, lane: Lane | None = None) -> list[Delivery]:
    """Claim up to `limit` due messages of `lane` (alerts first, then callbacks, when None)."""
    if lane is None:
        alerts = _claim(limit, Lane.ALERTS)
        return alerts + (_claim(limit - len(alerts), Lane.CALLBACKS) if len(alerts) < limit else [])
    return [delivery for delivery, _ in _claim_turns(lane, limit, {})]


def _claim_turns(lane: Lane, limit: int, busy: Busy) -> list[tuple[Delivery, int | None]]:
    """Claim up to `limit` due messages of `lane` in its turns (`_candidates`), each with its
    submitter; a half-open breaker's receiver gives one, its probe."""
    if limit <= 0:
        return []
    candidates = _candidates(lane, limit, busy)
    if not candidates:
        return []
    with transaction.atomic():
        locked = {
            delivery.pk: delivery
            for delivery in Delivery.objects.select_for_update(skip_locked=True).filter(
                pk__in=[pk for pk, _ in candidates], status=DeliveryStatus.PENDING, next_try_at__lte=Now()
            )
        }
        half_open = set(
            ReceiverBreaker.objects.filter(
                receiver__in={d.receiver for d in locked.values()},
                failures__gte=sas_settings.delivery_breaker_failures,
            ).values_list("receiver", flat=True)
        )
        due: list[tuple[Delivery, int | None]] = []
        probing: set[str] = set()
        for pk, submitter in candidates:
            delivery = locked.get(pk)
            if delivery is None:
                continue
            if delivery.receiver in half_open:
                # One probe per half-open breaker, whichever sender's claim moves it first.
                if delivery.receiver in probing or not _probe_take(delivery.receiver):
                    continue
                probing.add(delivery.receiver)
            delivery.tries += 1
            due.append((delivery, submitter))
        Delivery.objects.filter(pk__in=[d.pk for d, _ in due]).update(
            tries=F("tries") + 1, next_try_at=Now() + dt.timedelta(seconds=claim_seconds())
        )
    return due


def _probe_take(receiver: str) -> bool:
    """Take the half-open breaker's probe: it stays shut to the others until the probe's
    longest send is over (its result closes or reopens it before that)."""
    shut = Q(open_until__isnull=True) | Q(open_until__lte=Now())  # none: the threshold was lowered
    return bool(
        ReceiverBreaker.objects.filter(shut, receiver=receiver).update(
            open_until=Now() + dt.timedelta(seconds=claim_seconds())
        )
    )


#: Answers that say the receiver itself is unwell (beside any 5xx): they count on its breaker.
UNWELL = frozenset({408, 429})


def _breaker_note(delivery: Delivery, delivered: bool, status_code: int | None, error: str) -> None:
    """A try's result on its receiver's breaker: an answer that says the receiver is up (2xx, or a
    4xx refusing this message: other messages to it may well go) closes it; no answer, a
    connection error, a 5xx, 408 or 429 counts, and opens it at the threshold. A refusal by the
    outbound guard sent nothing and says nothing of the receiver."""
    receiver = delivery.receiver
    if not receiver or delivery.kind == DeliveryKind.EMAIL or error.startswith("refused:"):
        return
    answered = status_code is not None and status_code < 500 and status_code not in UNWELL
    if delivered or answered:
        ReceiverBreaker.objects.filter(receiver=receiver).delete()
        return
    ReceiverBreaker.objects.bulk_create([ReceiverBreaker(receiver=receiver)], ignore_conflicts=True)
    threshold = sas_settings.delivery_breaker_failures
    ReceiverBreaker.objects.filter(receiver=receiver).update(
        failures=F("failures") + 1,
        last_error=error[:500],
        open_until=Case(
            When(
                failures__gte=threshold - 1,
                then=Now() + dt.timedelta(seconds=sas_settings.delivery_breaker_open_seconds),
            ),
            default=F("open_until"),
        ),
    )
    if ReceiverBreaker.objects.filter(receiver=receiver, failures=threshold).exists():
        logger.warning("receiver %s: circuit breaker opened", receiver, extra={"receiver": receiver})


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
