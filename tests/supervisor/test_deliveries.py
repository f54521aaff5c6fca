"""Sending the outbox against hostile receivers: a real loopback server that trickles, holds or
floods, and the supervisor loop beside it."""

from __future__ import annotations

import contextlib
import datetime as dt
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db.models import Q
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from agents import egress
from scheduler.models import AlertKind, AlertSubscription, Delivery, DeliveryKind, DeliveryStatus, Job
from scheduler.outbox import receiver_of
from scheduler.services import job_submit
from supervisor import deliveries
from supervisor.alerts import alert_write
from supervisor.loop import run_loop
from supervisor.metrics import exposition
from supervisor.models import ReceiverBreaker, SupervisorLease
from testbed.processes import wait_until
from tests.factories import chain

Behaviour = Callable[[socket.socket, threading.Event], None]


class Receiver:
    """A raw HTTP receiver on loopback: each connection runs `behaviour` in its own thread."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.stop = threading.Event()
        self.accepted = 0
        self.sent = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.1)
        self.port = self._server.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/done"
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(5)
            _read_request(conn)
            self.behaviour(conn, self.stop)

    def close(self) -> None:
        self.stop.set()
        self._accepting.join(5)
        for thread in self._threads:
            thread.join(5)
        self._server.close()


def _read_request(conn: socket.socket) -> None:
    """The whole request (a socket closed with unread data would reset the connection)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += conn.recv(65536)


def trickle_headers(conn: socket.socket, stop: threading.Event) -> None:
    """The status line, then a header byte every 0.2 s for 40 s: each well within any read
    timeout."""
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    for _ in range(200):
        if stop.wait(0.2):
            return
        conn.sendall(b"X")


def black_hole(conn: socket.socket, stop: threading.Event) -> None:
    """Takes the request and never answers."""
    stop.wait(60)


@pytest.fixture
def receivers(settings: Any) -> Iterator[Callable[[Behaviour], Receiver]]:
    made: list[Receiver] = []

    def make(behaviour: Behaviour) -> Receiver:
        receiver = Receiver(behaviour)
        settings.SAS_OUTBOUND_INTERNAL_HOSTS = [
            *settings.SAS_OUTBOUND_INTERNAL_HOSTS,
            f"127.0.0.1:{receiver.port}",
        ]
        made.append(receiver)
        return receiver

    settings.SAS_OUTBOUND_INTERNAL_HOSTS = []
    yield make
    for receiver in made:
        receiver.close()


def callback(target: str, n: int = 1) -> Delivery:
    return Delivery.objects.create(
        kind=DeliveryKind.CALLBACK, key=f"job-{n}:succeeded", target=target, payload={"id": f"job-{n}"}
    )


@pytest.mark.django_db
def test_a_receiver_trickling_its_answer_is_cut_at_the_deadline_as_a_failed_try(
    receivers: Callable[[Behaviour], Receiver], settings: Any
) -> None:
    settings.SAS_DELIVERY_TIMEOUT = 1
    receiver = receivers(trickle_headers)
    callback(receiver.url)
    started = time.monotonic()
    assert deliveries.send_due() == 1
    took = time.monotonic() - started
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.tries) == (DeliveryStatus.PENDING, 1)
    assert delivery.last_error.startswith("ReadTimeout")
    assert took < 30  # the receiver would go on for 40 s


@pytest.mark.django_db
def test_a_callback_whose_name_server_does_not_answer_fails_its_try_by_the_deadline(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    from agents import validation

    settings.SAS_DELIVERY_TIMEOUT = 0.5
    released = threading.Event()

    def silent(host: str, port: int) -> list[str]:
        released.wait(30)
        return ["203.0.113.9"]

    monkeypatch.setattr(validation, "resolve", silent)
    callback("https://hooks.slow-dns.example.com/done")
    started = time.monotonic()
    deliveries.send_due()
    took = time.monotonic() - started
    released.set()
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.tries) == (DeliveryStatus.PENDING, 1)
    assert "no name resolution" in delivery.last_error
    assert took < 10  # (the resolver would answer after 30 s; a loaded machine has room)


@pytest.mark.django_db
def test_a_huge_answer_is_not_read(receivers: Callable[[Behaviour], Receiver]) -> None:
    size = 256 * 1024 * 1024

    def flood(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n".encode())
        chunk = bytes(1024 * 1024)
        while receiver.sent < size and not stop.is_set():
            conn.sendall(chunk)
            receiver.sent += len(chunk)

    receiver = receivers(flood)
    callback(receiver.url)
    deliveries.send_due()
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.last_status_code) == (DeliveryStatus.DELIVERED, 200)
    wait_until(lambda: receiver.accepted == 1, timeout=5, message="the receiver reached")
    time.sleep(0.5)  # whatever the socket buffers take
    assert receiver.sent < 64 * 1024 * 1024


@pytest.mark.django_db(transaction=True)  # the senders are threads with their own connections
def test_the_loop_keeps_scanning_while_receivers_hold_its_sends(
    receivers: Callable[[Behaviour], Receiver], settings: Any
) -> None:
    # Held far longer than the waits below, so that a loaded machine still scans while they hold.
    settings.SAS_DELIVERY_TIMEOUT = 15
    settings.SAS_DELIVERY_CONCURRENCY = 2
    holes = receivers(black_hole)
    trickler = receivers(trickle_headers)
    for n in range(3):
        callback(holes.url, n)
    callback(trickler.url, 9)
    stop = threading.Event()
    loop = threading.Thread(
        target=run_loop, kwargs={"holder": "loop-1", "should_stop": stop.is_set, "interval": 0.1}
    )
    loop.start()
    try:
        wait_until(lambda: holes.accepted + trickler.accepted == 2, timeout=10, message="both senders busy")
        # While both senders are held, the loop goes on scanning.
        seen: set[Any] = set()

        def scanned_thrice() -> bool:
            seen.add(SupervisorLease.objects.get().last_scan_at)
            return len(seen) >= 3

        wait_until(scanned_thrice, timeout=10, interval=0.05, message="scans while the sends are held")
        # It claimed no more than it has senders for.
        assert holes.accepted + trickler.accepted == 2
    finally:
        stop.set()
        loop.join(30)
    assert not loop.is_alive()
    # Stopping waited for the sends in flight: cut at their deadline, each a failed try.
    tried = Delivery.objects.filter(tries=1)
    assert tried.count() == 2
    assert all(d.status == DeliveryStatus.PENDING and "Timeout" in d.last_error for d in tried)
    # The ones never handed over are untouched, due as before.
    assert Delivery.objects.filter(tries=0).count() == 2


@pytest.mark.django_db(transaction=True)
def test_the_loop_sends_more_than_its_senders_as_they_free_up(
    receivers: Callable[[Behaviour], Receiver], settings: Any
) -> None:
    settings.SAS_DELIVERY_CONCURRENCY = 2

    def accept(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")

    receiver = receivers(accept)
    for n in range(7):
        callback(receiver.url, n)
    stop = threading.Event()
    loop = threading.Thread(
        target=run_loop, kwargs={"holder": "loop-1", "should_stop": stop.is_set, "interval": 60}
    )
    loop.start()
    try:
        # One pass, then the sleep between passes hands over the rest as senders free up.
        wait_until(
            lambda: Delivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == 7,
            timeout=20,
            message="all delivered within the first interval",
        )
    finally:
        stop.set()
        loop.join(30)


@pytest.mark.django_db(transaction=True)  # the loop closes and reopens its connection
def test_each_pass_of_the_loop_goes_with_the_next_scan_figures_to_the_metrics() -> None:
    run_loop(holder="loop-1", should_stop=lambda: False, interval=0, max_scans=3)
    figures = SupervisorLease.objects.get().last_scan
    assert figures["longest_pass_ms"] >= figures["pass_ms"] >= 0
    served = {
        sample.name: sample.value
        for family in text_string_to_metric_families(exposition().decode())
        for sample in family.samples
    }
    assert served["sas_supervisor_pass_seconds"] == figures["pass_ms"] / 1000
    assert served["sas_supervisor_longest_pass_seconds"] == figures["longest_pass_ms"] / 1000


# --- fair, alerts first ------------------------------------------------------------------------


def answer(status: int) -> Behaviour:
    def behaviour(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n".encode())

    return behaviour


def backlog(targets: list[str], n: int, *, job: Job | None = None, prefix: str = "hole") -> None:
    """`n` callbacks due an hour ago, spread over `targets`."""
    due = timezone.now() - dt.timedelta(hours=1)
    Delivery.objects.bulk_create(
        Delivery(
            kind=DeliveryKind.CALLBACK,
            key=f"{prefix}-{i}:succeeded",
            target=targets[i % len(targets)],
            receiver=receiver_of(targets[i % len(targets)]),
            payload={"id": f"{prefix}-{i}"},
            job=job,
            next_try_at=due + dt.timedelta(milliseconds=i),
        )
        for i in range(n)
    )


@contextlib.contextmanager
def looping(interval: float = 0.2) -> Iterator[None]:
    stop = threading.Event()
    loop = threading.Thread(
        target=run_loop, kwargs={"holder": "loop-1", "should_stop": stop.is_set, "interval": interval}
    )
    loop.start()
    try:
        yield
    finally:
        stop.set()
        loop.join(60)
    assert not loop.is_alive()


@pytest.mark.sqlite
@pytest.mark.django_db(transaction=True)  # the senders are threads with their own connections
def test_an_alert_is_sent_within_a_delivery_timeout_behind_hundreds_of_black_holed_callbacks(
    receivers: Callable[[Behaviour], Receiver], settings: Any
) -> None:
    settings.SAS_DELIVERY_TIMEOUT = 1.5
    settings.SAS_DELIVERY_CONCURRENCY = 4
    settings.SAS_DELIVERY_BREAKER_FAILURES = 10_000  # the lanes alone, no breaker
    holes = [receivers(black_hole) for _ in range(5)]
    backlog([hole.url for hole in holes], 300)
    alerted = receivers(answer(204))
    AlertSubscription.objects.create(
        name="ops", webhook_url=alerted.url, kinds=[AlertKind.SUPERVISOR_STALE.value]
    )
    with looping():
        wait_until(
            lambda: sum(hole.accepted for hole in holes) >= 4,
            timeout=10,
            message="the callbacks' threads held",
        )
        assert alert_write(AlertKind.SUPERVISOR_STALE, "stale:1", {"age_seconds": 99}) == 1
        written = time.monotonic()
        wait_until(
            lambda: Delivery.objects.filter(
                kind=DeliveryKind.WEBHOOK, status=DeliveryStatus.DELIVERED
            ).exists(),
            timeout=10,
            interval=0.05,
            message="the alert delivered",
        )
        took = time.monotonic() - written
    assert alerted.accepted == 1
    # Within a few timeouts, where behind the backlog it would wait 300 / 4 tries of 1.5 s.
    assert took < settings.SAS_DELIVERY_TIMEOUT * 4
    # The callbacks' lane never took more than its threads.
    assert sum(hole.accepted for hole in holes) < 300


@pytest.mark.sqlite
@pytest.mark.django_db(transaction=True)
def test_a_submitter_with_hundreds_of_black_holed_receivers_takes_only_its_share_of_the_threads(
    receivers: Callable[[Behaviour], Receiver], settings: Any
) -> None:
    settings.SAS_DELIVERY_TIMEOUT = 1.5
    settings.SAS_DELIVERY_CONCURRENCY = 4
    settings.SAS_DELIVERY_BREAKER_FAILURES = 10_000  # the turns alone, no breaker
    chain("c", n=1)
    noisy = job_submit(workflow="c", input={}, submitter=User.objects.create(username="noisy")).job
    quiet = job_submit(workflow="c", input={}, submitter=User.objects.create(username="quiet")).job
    holes = [receivers(black_hole) for _ in range(8)]
    backlog([hole.url for hole in holes], 400, job=noisy)
    fine = receivers(answer(200))
    # The quiet submitter's callbacks are the newest of all: first come would be served last.
    backlog([fine.url], 6, job=quiet, prefix="quiet")
    Delivery.objects.filter(job=quiet).update(next_try_at=timezone.now())
    with looping():
        wait_until(
            lambda: Delivery.objects.filter(job=quiet, status=DeliveryStatus.DELIVERED).count() == 6,
            timeout=120,
            interval=0.05,
            message="the quiet submitter's callbacks delivered",
        )
        noisy_tried = Delivery.objects.filter(job=noisy, tries__gt=0).count()
    # They go as threads free up, taking turns with the noisy ones: a few rounds of those were
    # tried first, whatever the machine's pace (first come would have tried all 400 first).
    assert noisy_tried < 40


@pytest.mark.sqlite
@pytest.mark.django_db
def test_the_claim_takes_turns_between_submitters_then_between_their_receivers(
    settings: Any, django_user_model: type[User]
) -> None:
    chain("c", n=1)
    one = job_submit(workflow="c", input={}, submitter=django_user_model.objects.create(username="one")).job
    two = job_submit(workflow="c", input={}, submitter=django_user_model.objects.create(username="two")).job
    backlog(["https://a.example.com/x", "https://b.example.com/x"], 6, job=one, prefix="one")
    backlog(["https://c.example.com/x"], 3, job=two, prefix="two")
    Delivery.objects.filter(job=two).update(next_try_at=timezone.now())  # the newest
    taken = [(d.job_id, d.receiver) for d in deliveries._claim(6)]
    assert taken == [
        (one.pk, "a.example.com:443"),
        (two.pk, "c.example.com:443"),
        (one.pk, "b.example.com:443"),
        (two.pk, "c.example.com:443"),
        (one.pk, "a.example.com:443"),
        (two.pk, "c.example.com:443"),
    ]
    # What a sender has in flight counts as turns taken: its next claim goes round the others.
    left = ["one-3:succeeded", "one-4:succeeded", "one-5:succeeded"]  # b, a, b
    keys = dict(Delivery.objects.values_list("pk", "key"))

    def turns(busy: dict[tuple[int | None, str], int]) -> list[str]:
        return [keys[pk] for pk, _ in deliveries._candidates(deliveries.Lane.CALLBACKS, 3, busy)]

    assert turns({}) == left
    assert turns({(one.submitter_id, "b.example.com:443"): 2}) == [left[1], left[0], left[2]]


@pytest.mark.sqlite
@pytest.mark.django_db
def test_a_receivers_breaker_opens_after_failures_in_a_row_then_lets_one_probe_through(
    receivers: Callable[[Behaviour], Receiver], settings: Any
) -> None:
    settings.SAS_DELIVERY_RETRY_SECONDS = 0
    settings.SAS_DELIVERY_BREAKER_FAILURES = 2
    settings.SAS_DELIVERY_BREAKER_OPEN_SECONDS = 1
    down = True
    receiver = receivers(lambda conn, stop: answer(503 if down else 204)(conn, stop))
    backlog([receiver.url], 1, prefix="first")
    assert deliveries.send_due() == 1
    Delivery.objects.update(next_try_at=timezone.now())
    assert deliveries.send_due() == 1
    # Two failures in a row: open. The receiver's messages wait, their tries not counted.
    breaker = ReceiverBreaker.objects.get()
    assert (breaker.receiver, breaker.failures) == (receiver_of(receiver.url), 2)
    assert breaker.open_until is not None and breaker.open_until > timezone.now()
    backlog([receiver.url], 3, prefix="later")
    Delivery.objects.update(next_try_at=timezone.now())
    assert deliveries.send_due() == 0
    assert receiver.accepted == 2
    assert list(Delivery.objects.filter(key__startswith="later").values_list("tries", flat=True)) == [0, 0, 0]
    # Past the open period, half-open: one message is the probe; it fails and the breaker reopens.
    time.sleep(1.1)
    assert deliveries.send_due() == 1
    assert deliveries.send_due() == 0
    assert ReceiverBreaker.objects.get().failures == 3
    # The receiver is back: the next probe is delivered, the breaker closes, the rest go.
    down = False
    time.sleep(1.1)
    Delivery.objects.update(next_try_at=timezone.now())
    assert deliveries.send_due() == 1
    assert not ReceiverBreaker.objects.exists()
    assert deliveries.send_due() == 3
    assert Delivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == 4


@pytest.mark.sqlite
@pytest.mark.django_db(transaction=True)
def test_name_lookups_that_hang_are_abandoned_and_hold_neither_the_senders_nor_an_alerts_lookup(
    monkeypatch: pytest.MonkeyPatch, receivers: Callable[[Behaviour], Receiver], settings: Any
) -> None:
    from agents import validation

    settings.SAS_DELIVERY_TIMEOUT = 0.5
    settings.SAS_RESOLVER_THREADS = 2
    settings.SAS_DELIVERY_BREAKER_FAILURES = 10_000
    alerted = receivers(answer(204))
    released = threading.Event()
    hung: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        if host.startswith("hung-"):
            hung.append(host)
            released.wait(30)
            raise OSError("the name server never answered")
        return ["127.0.0.1"]

    monkeypatch.setattr(validation, "resolve", resolver)
    backlog([f"https://hung-{i}.example.com/done" for i in range(10)], 10)
    settings.SAS_DELIVERY_CONCURRENCY = 10
    sender = deliveries.Sender()
    try:
        assert sender.pump() == 10
        # Every send gives up at its deadline and is recorded: its thread is free again, while
        # the lookups hang on.
        wait_until(
            lambda: Delivery.objects.filter(last_error__contains="no name resolution").count() == 10,
            timeout=3,
            interval=0.05,
            message="every send over by its deadline",
        )
        # An alert whose receiver's name resolves at once is not held by the hung lookups.
        AlertSubscription.objects.create(
            name="ops",
            webhook_url=f"http://alerts.example.com:{alerted.port}/done",
            kinds=["supervisor_stale"],
        )
        assert alert_write(AlertKind.SUPERVISOR_STALE, "stale:1", {}) == 1
        assert sender.pump() == 1
        alert = wait_until(
            lambda: (
                Delivery.objects.filter(kind=DeliveryKind.WEBHOOK)
                .filter(Q(status=DeliveryStatus.DELIVERED) | ~Q(last_error=""))
                .first()
            ),
            timeout=3,
            interval=0.05,
            message="the alert's try recorded",
        )
        assert (alert.status, alert.last_error) == (DeliveryStatus.DELIVERED, "")
    finally:
        released.set()
        sender.stop()
    # The lookups nobody waited for any more were dropped, never run: the hung name server saw
    # no more lookups than there are resolver threads.
    time.sleep(0.3)
    assert len(hung) <= 2


@pytest.mark.sqlite
def test_callers_of_one_hanging_name_share_its_lookup(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    import httpcore

    from agents import validation
    from agents.validation import OutboundKind

    settings.SAS_RESOLVER_THREADS = 1
    released = threading.Event()
    calls: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        calls.append(host)
        released.wait(10)
        return ["203.0.113.7"]

    monkeypatch.setattr(validation, "resolve", resolver)
    errors: list[Exception] = []

    def ask() -> None:
        try:
            egress._checked_within("slow.example.com", 443, OutboundKind.CALLBACK, 0.3)
        except httpcore.ConnectTimeout as exc:
            errors.append(exc)

    askers = [threading.Thread(target=ask) for _ in range(5)]
    for thread in askers:
        thread.start()
    for thread in askers:
        thread.join(5)
    released.set()
    assert len(errors) == 5 and calls == ["slow.example.com"]


@pytest.mark.sqlite
@pytest.mark.django_db
def test_the_outbox_due_per_lane_and_the_open_breakers_are_in_the_metrics() -> None:
    from supervisor.metrics import _gauge_rows, _gauge_rows_python

    backlog(["https://a.example.com/x", "https://b.example.com/x"], 3)
    Delivery.objects.create(
        kind=DeliveryKind.WEBHOOK,
        key="alert:x:1:webhook",
        target="https://ops.example.com/x",
        next_try_at=timezone.now() - dt.timedelta(seconds=30),
    )
    Delivery.objects.create(kind=DeliveryKind.EMAIL, key="alert:x:1:email", target="ops@example.com")
    Delivery.objects.create(
        kind=DeliveryKind.CALLBACK,
        key="later:succeeded",
        target="https://a.example.com/x",
        next_try_at=timezone.now() + dt.timedelta(hours=1),
    )
    ReceiverBreaker.objects.create(
        receiver="a.example.com:443", failures=5, open_until=timezone.now() + dt.timedelta(minutes=1)
    )
    ReceiverBreaker.objects.create(receiver="b.example.com:443", failures=1)
    served = {
        (sample.name, tuple(sample.labels.values())): sample.value
        for family in text_string_to_metric_families(exposition().decode())
        for sample in family.samples
    }
    assert served["sas_outbox_due", ("alerts",)] == 2
    assert served["sas_outbox_due", ("callbacks",)] == 3
    assert 3600 <= served["sas_outbox_oldest_due_seconds", ("callbacks",)] < 3700
    assert 30 <= served["sas_outbox_oldest_due_seconds", ("alerts",)] < 100
    assert served["sas_outbox_breakers_open", ()] == 1

    def outbox(rows: list[tuple[str, str, float]]) -> list[tuple[str, str, int]]:
        return sorted((m, label, int(v)) for m, label, v in rows if m in ("outbox_due", "breakers_open"))

    assert outbox(_gauge_rows()) == outbox(_gauge_rows_python())


@pytest.mark.sqlite
@pytest.mark.django_db
def test_a_receiver_refusing_one_message_is_up_and_its_breaker_stays_closed(
    receivers: Callable[[Behaviour], Receiver], settings: Any
) -> None:
    settings.SAS_DELIVERY_RETRY_SECONDS = 0
    settings.SAS_DELIVERY_BREAKER_FAILURES = 2
    status = 503
    receiver = receivers(lambda conn, stop: answer(status)(conn, stop))
    backlog([receiver.url], 1)
    assert deliveries.send_due() == 1
    assert ReceiverBreaker.objects.get().failures == 1
    # A 404 (one path of a host many submitters share, say) is an answer: the receiver is up.
    status = 404
    Delivery.objects.update(next_try_at=timezone.now())
    assert deliveries.send_due() == 1
    assert not ReceiverBreaker.objects.exists()
    Delivery.objects.update(next_try_at=timezone.now())
    assert deliveries.send_due() == 1
    Delivery.objects.update(next_try_at=timezone.now())
    assert deliveries.send_due() == 1  # four refusals, and never shut out
    assert not ReceiverBreaker.objects.exists()
