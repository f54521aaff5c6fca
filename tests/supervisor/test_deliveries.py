"""Sending the outbox against hostile receivers: a real loopback server that trickles, holds or
floods, and the supervisor loop beside it."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scheduler.models import Delivery, DeliveryKind, DeliveryStatus
from supervisor import deliveries
from supervisor.loop import run_loop
from supervisor.metrics import exposition
from supervisor.models import SupervisorLease
from testbed.processes import wait_until

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
        released.wait(10)
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
    assert took < 2


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
    settings.SAS_DELIVERY_TIMEOUT = 6
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
        wait_until(lambda: holes.accepted + trickler.accepted == 2, timeout=5, message="both senders busy")
        # While both senders are held, the loop goes on scanning.
        seen: set[Any] = set()

        def scanned_thrice() -> bool:
            seen.add(SupervisorLease.objects.get().last_scan_at)
            return len(seen) >= 3

        wait_until(scanned_thrice, timeout=4, interval=0.05, message="scans while the sends are held")
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
