"""TLS brokers of queue pools: the certificate must chain to a trusted authority and name the host
the pool was saved with (`rediss://` against a real `redis-server` with TLS, `amqps://` against a
TLS listener on loopback: the handshake is what is being checked)."""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme

from agents.outcome import ACCEPTED, Outcome
from agents.queue import broker_connection, call_queue, tls_options
from testbed.processes import free_port, redis_server_binary, stop_group, wait_until
from tests.agents.test_async_agents import queue_call


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@dataclass
class TlsRedis:
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"rediss://localhost:{self.port}/0"


def start_tls_redis(ca: trustme.CA, name: str, folder: Path) -> TlsRedis:
    """A `redis-server` that speaks only TLS, with a certificate `ca` issued for `name`."""
    cert = ca.issue_cert(name)
    cert.cert_chain_pems[0].write_to_path(str(folder / "server.pem"))
    cert.private_key_pem.write_to_path(str(folder / "server.key"))
    port = free_port()
    with (folder / "redis.log").open("ab") as out:
        proc = subprocess.Popen(
            [
                redis_server_binary(),
                "--port",
                "0",
                "--tls-port",
                str(port),
                "--tls-cert-file",
                str(folder / "server.pem"),
                "--tls-key-file",
                str(folder / "server.key"),
                "--tls-auth-clients",
                "no",
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def listening() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        except OSError:
            return False
        return True

    wait_until(listening, timeout=30, interval=0.05, message="redis-server with TLS")
    return TlsRedis(port=port, proc=proc)


@pytest.fixture
def tls_redis(ca: trustme.CA, tmp_path: Path) -> Iterator[TlsRedis]:
    server = start_tls_redis(ca, "localhost", tmp_path)
    yield server
    stop_group(server.proc)


@pytest.fixture
def misnamed_tls_redis(ca: trustme.CA, tmp_path: Path) -> Iterator[TlsRedis]:
    server = start_tls_redis(ca, "broker.example", tmp_path)
    yield server
    stop_group(server.proc)


def test_a_rediss_broker_whose_certificate_is_trusted_and_names_it_takes_the_message(
    tls_redis: TlsRedis, ca_file: str, settings: Any
) -> None:
    settings.SAS_BROKER_CA_FILE = ca_file
    result = call_queue(queue_call(tls_redis.url, "tls.work", operation_id="tls-ok"))
    assert result.outcome == ACCEPTED, result.error


def test_a_rediss_broker_whose_certificate_is_not_trusted_is_refused_before_sending(
    tls_redis: TlsRedis,
) -> None:
    # Without SAS_BROKER_CA_FILE only the system's authorities are trusted: the test's is not.
    result = call_queue(queue_call(tls_redis.url, "tls.work", operation_id="tls-untrusted"))
    assert result.outcome == Outcome.TRANSIENT_FAILURE
    assert "certificate verify failed" in result.error


def test_a_rediss_broker_whose_certificate_names_another_host_is_refused_before_sending(
    misnamed_tls_redis: TlsRedis, ca_file: str, settings: Any
) -> None:
    settings.SAS_BROKER_CA_FILE = ca_file
    result = call_queue(queue_call(misnamed_tls_redis.url, "tls.work", operation_id="tls-misnamed"))
    assert result.outcome == Outcome.TRANSIENT_FAILURE
    assert "certificate verify failed" in result.error and "localhost" in result.error


# --- amqps ------------------------------------------------------------------------------------------


@dataclass
class TlsListener:
    """Accepts TLS connections on loopback with a certificate for one name, notes each completed
    handshake, and closes (it speaks no AMQP: the client's TLS checks are what is tested)."""

    port: int
    handshakes: list[str]
    sock: socket.socket


def tls_listener(ca: trustme.CA, name: str) -> Iterator[TlsListener]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(name).configure_cert(context)
    sock = socket.create_server(("127.0.0.1", 0))
    listener = TlsListener(port=sock.getsockname()[1], handshakes=[], sock=sock)

    def serve() -> None:
        while True:
            try:
                client, _ = sock.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(client, server_side=True) as tls:
                    listener.handshakes.append(name)
                    tls.recv(8)
            except OSError:
                client.close()

    threading.Thread(target=serve, daemon=True).start()
    yield listener
    sock.close()


@pytest.fixture
def amqps_listener(ca: trustme.CA) -> Iterator[TlsListener]:
    yield from tls_listener(ca, "localhost")


@pytest.fixture
def misnamed_amqps_listener(ca: trustme.CA) -> Iterator[TlsListener]:
    yield from tls_listener(ca, "broker.example")


def connect(url: str) -> None:
    conn = broker_connection(url, ("", ""))
    try:
        conn.connect()
    finally:
        conn.release()


def test_an_amqps_broker_whose_certificate_names_another_host_is_refused(
    misnamed_amqps_listener: TlsListener, ca_file: str, settings: Any
) -> None:
    settings.SAS_BROKER_CA_FILE = ca_file
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        connect(f"amqps://localhost:{misnamed_amqps_listener.port}//")
    assert misnamed_amqps_listener.handshakes == []


def test_an_amqps_broker_whose_certificate_is_not_trusted_is_refused(
    amqps_listener: TlsListener,
) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        connect(f"amqps://localhost:{amqps_listener.port}//")
    assert amqps_listener.handshakes == []


def test_an_amqps_broker_whose_certificate_is_trusted_and_names_it_completes_the_handshake(
    amqps_listener: TlsListener, ca_file: str, settings: Any
) -> None:
    settings.SAS_BROKER_CA_FILE = ca_file
    with pytest.raises(Exception) as failure:  # noqa: PT011 - the listener speaks no AMQP
        connect(f"amqps://localhost:{amqps_listener.port}//")
    assert not isinstance(failure.value, ssl.SSLError), repr(failure.value)
    wait_until(
        lambda: bool(amqps_listener.handshakes), timeout=10, message=f"a handshake ({failure.value!r})"
    )


def test_tls_checks_the_name_the_pool_was_saved_with_and_plain_schemes_have_no_tls(settings: Any) -> None:
    settings.SAS_BROKER_CA_FILE = "/etc/sas/brokers.pem"
    assert tls_options("amqps://mq.example.com:5671//") == {
        "cert_reqs": ssl.CERT_REQUIRED,
        "server_hostname": "mq.example.com",
        "ca_certs": "/etc/sas/brokers.pem",
    }
    assert tls_options("rediss://cache.example.com:6380/0") == {
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
        "ssl_check_hostname": True,
        "ssl_ca_certs": "/etc/sas/brokers.pem",
    }
    assert tls_options("redis://cache.example.com/0") is False
    assert tls_options("amqp://mq.example.com//") is False
