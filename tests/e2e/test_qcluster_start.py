"""End to end, a real `qcluster` whose database is away when it starts (a restart, a failover, a
node that boots first): it starts its cluster again until the database answers, then runs and
beats; one that never reaches it exits non-zero after SAS_Q_START_SECONDS, for its process
manager to see. The database is reached through a TCP forwarder that is opened only later."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from supervisor.models import ClusterHeartbeat
from testbed.processes import ClusterProcess
from tests.processes import ARTIFACTS, child_env, database_url, free_port, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


class Forwarder:
    """Listens on `port` once started, and joins each connection to the database's port."""

    def __init__(self, port: int, target: tuple[str, int]) -> None:
        self.port, self.target = port, target
        self.server: socket.socket | None = None
        self.sockets: list[socket.socket] = []  # closed at the stop

    def start(self) -> None:
        self.server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        assert self.server is not None
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.server.accept()
                upstream = socket.create_connection(self.target)
                self.sockets += [client, upstream]
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for sock in self.sockets:
            sock.close()


@pytest.fixture
def away() -> Iterator[tuple[Forwarder, str]]:
    """A forwarder to the test database, not listening yet, and the URL through it."""
    settings = connection.settings_dict
    if connection.vendor != "postgresql":
        pytest.skip("the database reached over TCP")
    port = free_port()
    forwarder = Forwarder(port, (settings.get("HOST") or "127.0.0.1", int(settings.get("PORT") or 5432)))
    url = database_url().replace(f":{settings.get('PORT') or 5432}/", f":{port}/")
    yield forwarder, url
    forwarder.stop()


def start_cluster(name: str, url: str, **env: str) -> ClusterProcess:
    log = ARTIFACTS / f"qcluster-{name}.log"
    log.unlink(missing_ok=True)
    return ClusterProcess(name=name, env=child_env(DATABASE_URL=url, **env), log=log).start()


def said(log: Path, text: str) -> bool:
    return log.exists() and text in log.read_text(errors="replace")


def test_a_cluster_started_while_its_database_is_away_starts_once_it_is_back(
    away: tuple[Forwarder, str],
) -> None:
    forwarder, url = away
    cluster = start_cluster("db-away", url)
    try:
        wait_until(
            lambda: said(cluster.log, "the cluster did not start (try 2)"),
            timeout=60,
            message="the cluster tried again",
        )
        assert cluster.alive
        forwarder.start()
        assert cluster.proc is not None
        pid = cluster.proc.pid
        beat = wait_until(
            lambda: ClusterHeartbeat.objects.filter(pid=pid, stopped_at__isnull=True).first(),
            timeout=60,
            message="the cluster beats once the database is back",
        )
        assert beat.workers == 3
        assert cluster.alive
    finally:
        cluster.stop()
    assert cluster.proc is not None and cluster.proc.returncode == 0


def test_a_cluster_that_never_reaches_its_database_exits_with_an_error(
    away: tuple[Forwarder, str],
) -> None:
    _, url = away
    started = time.monotonic()
    cluster = start_cluster("db-never", url, SAS_Q_START_SECONDS="3")
    try:
        wait_until(lambda: not cluster.alive, timeout=90, message="the cluster gave up")
    finally:
        cluster.kill()
    assert cluster.proc is not None and cluster.proc.returncode not in (0, None)
    assert said(cluster.log, "the cluster did not start (try 1)")
    # It tried for its SAS_Q_START_SECONDS, not for ever (Django's own start included).
    assert time.monotonic() - started < 60
