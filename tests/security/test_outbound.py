"""The outbound-URL guard: no user-supplied URL reaches an internal address unless an allow-list
names it, whether the address is written literally (in any spelling) or is what a host name
resolves to, when the URL is saved and again when the connection is made (to the address that was
checked: no DNS-rebinding window), and redirects stay unfollowed.

Name resolution is the remote boundary: "a host name resolving to X" is made by replacing the
guard's resolver (`agents.validation.resolve`). Real `localhost` is resolved by the system. A canary
HTTP server on loopback counts every connection that gets through: it must stay at zero.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agents import http as http_agent
from agents.http import call_http
from agents.models import AgentPool
from agents.outcome import CallSpec
from agents.queue import call_queue
from agents.services import pool_save
from agents.validation import (
    OutboundKind,
    OutboundRefused,
    checked_addresses,
    pinned_broker_url,
    validate_callback_url,
    validate_endpoint_url,
    validate_outbound_url,
    validate_webhook_url,
)
from sas_project.errors import InvalidInput
from scheduler.models import AttemptKind, Delivery, DeliveryKind, Job, Outcome
from supervisor.deliveries import send_due
from supervisor.subscriptions import subscription_create
from testbed.processes import INTERNAL_HOSTS_SETTINGS, ROOT
from tests.api.support import V1, client_for, make_user
from tests.factories import chain

pytestmark = pytest.mark.sqlite

#: (class, address): every class of internal address, IPv4 and IPv6, in its plain spelling.
INTERNAL = [
    ("loopback", "127.0.0.1"),
    ("loopback", "127.255.0.9"),
    ("loopback", "::1"),
    ("private", "10.0.0.1"),
    ("private", "172.16.5.4"),
    ("private", "192.168.1.1"),
    ("private", "fd12:3456::1"),
    ("link-local", "169.254.10.10"),
    ("link-local", "fe80::1"),
    ("cloud metadata", "169.254.169.254"),
    ("cloud metadata", "fd00:ec2::254"),
    ("cloud metadata", "100.100.100.200"),
    ("non-public", "100.64.0.1"),
    ("multicast", "224.0.0.1"),
    ("multicast", "ff02::1"),
    ("unspecified", "0.0.0.0"),  # noqa: S104 - a target to refuse, not a bind
    ("unspecified", "::"),
    ("reserved", "240.0.0.1"),
    ("site-local", "fec0::1"),
]

#: The same targets written the other ways a resolver accepts: IPv4-mapped IPv6, NAT64, 6to4,
#: decimal, octal, hexadecimal and shortened IPv4.
SPELLINGS = [
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[::ffff:169.254.169.254]",
    "[::ffff:10.0.0.1]",
    "[64:ff9b::a9fe:a9fe]",
    "[2002:7f00:1::]",
    "2130706433",
    "0177.0.0.1",
    "0x7f000001",
    "0x7f.0.0.1",
    "127.1",
    "017700000001",
    "2852039166",  # 169.254.169.254
    "[fe80::1%25eth0]",
]

PUBLIC = ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111"]


def url_for(address: str, port: int | None = None) -> str:
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    return f"http://{host}{f':{port}' if port else ''}/hook"


@pytest.fixture(autouse=True)
def guard_defaults(settings: Any) -> None:
    """The guard as it ships: nothing internal is named (the suite names loopback elsewhere)."""
    for name in INTERNAL_HOSTS_SETTINGS:
        setattr(settings, name, [])
    settings.SAS_AGENT_ALLOWED_HOSTS = []
    settings.SAS_CALLBACK_ALLOWED_HOSTS = []
    settings.SAS_WEBHOOK_ALLOWED_HOSTS = []


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Host names resolving to chosen addresses; any other name does not resolve. Each lookup is
    recorded under "calls"."""
    answers: dict[str, list[str]] = {"calls": []}

    def resolve(host: str, port: int) -> list[str]:
        answers["calls"].append(host)
        if host not in answers:
            raise OSError(f"{host}: name does not resolve")
        return list(answers[host])

    monkeypatch.setattr("agents.validation.resolve", resolve)
    return answers


class Canary:
    """An HTTP server on loopback counting the requests that reach it; with `location` it
    answers every request with a redirect there."""

    def __init__(self, location: str = "") -> None:
        self.hits: list[dict[str, str]] = []
        canary = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                canary.hits.append({"path": self.path, "host": self.headers.get("host", "")})
                self.send_response(302 if location else 200)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = _answer  # noqa: N815 - the names http.server dispatches to

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = False
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def hang_up() -> None:
    """Close the agents' kept-alive connections, so that a server's handler threads end."""
    if http_agent._client is not None:
        http_agent._client.close()
        http_agent._client = None


@pytest.fixture
def canary() -> Iterator[Canary]:
    server = Canary()
    yield server
    hang_up()
    server.server.shutdown()
    server.server.server_close()


def call(base: str, path: str = "/pay") -> Any:
    return call_http(
        CallSpec(
            job_id="j",
            step_id=1,
            attempt=1,
            operation_id="op-1",
            kind=AttemptKind.CALL,
            agent_kind="http",
            base_url=base,
            path=path,
            payload={},
            timeout=2.0,
        )
    )


# --- save time: the address matrix ----------------------------------------------------------------


@pytest.mark.parametrize(("kind", "address"), INTERNAL, ids=[f"{k} {a}" for k, a in INTERNAL])
def test_an_internal_address_is_refused_when_saved(kind: str, address: str) -> None:
    with pytest.raises(OutboundRefused, match=f"not a public address \\({kind}\\)"):
        validate_endpoint_url(url_for(address))


@pytest.mark.parametrize(("kind", "address"), INTERNAL, ids=[f"{k} {a}" for k, a in INTERNAL])
def test_a_host_name_resolving_to_an_internal_address_is_refused_when_saved(
    kind: str, address: str, resolver: dict[str, list[str]]
) -> None:
    resolver["innocent.example.com"] = [address]
    with pytest.raises(OutboundRefused, match=f"\\({kind}\\)"):
        validate_endpoint_url("https://innocent.example.com/hook")


@pytest.mark.parametrize("host", SPELLINGS)
def test_every_spelling_of_an_internal_address_is_refused(host: str) -> None:
    with pytest.raises(OutboundRefused):
        validate_endpoint_url(f"http://{host}/")


def test_one_internal_address_among_public_ones_is_enough_to_refuse(resolver: dict[str, list[str]]) -> None:
    resolver["mixed.example.com"] = ["93.184.216.34", "10.1.2.3"]
    with pytest.raises(OutboundRefused, match="private"):
        validate_endpoint_url("https://mixed.example.com/")


@pytest.mark.parametrize("address", PUBLIC)
def test_a_public_address_is_accepted(address: str, resolver: dict[str, list[str]]) -> None:
    resolver["public.example.com"] = [address]
    assert validate_endpoint_url(url_for(address)) == url_for(address)
    assert validate_endpoint_url("https://public.example.com/x/") == "https://public.example.com/x"


def test_real_localhost_is_refused_unless_named(settings: Any) -> None:
    with pytest.raises(OutboundRefused, match="loopback"):
        validate_endpoint_url("http://localhost:8100")
    settings.SAS_OUTBOUND_INTERNAL_HOSTS = ["localhost:8100"]
    assert validate_endpoint_url("http://localhost:8100") == "http://localhost:8100"
    with pytest.raises(OutboundRefused):
        validate_endpoint_url("http://localhost:5432")


def test_a_name_that_does_not_resolve_yet_is_left_to_the_connect_time_check(
    resolver: dict[str, list[str]],
) -> None:
    assert validate_endpoint_url("https://not-yet.example.com") == "https://not-yet.example.com"


@pytest.mark.django_db
def test_a_pool_endpoint_on_the_metadata_address_is_a_400_and_saves_nothing() -> None:
    with pytest.raises(InvalidInput, match="cloud metadata") as refused:
        pool_save(name="web", kind="http", endpoints=["http://169.254.169.254/latest/meta-data"])
    assert refused.value.detail["field"] == "endpoints"
    assert not AgentPool.objects.filter(name="web").exists()


# --- the allow-lists -----------------------------------------------------------------------------


def test_the_internal_hosts_list_names_hosts_ports_addresses_and_networks(
    settings: Any, resolver: dict[str, list[str]]
) -> None:
    resolver["payments.internal"] = ["10.2.0.7"]
    resolver["ledger.internal"] = ["10.3.0.9"]
    settings.SAS_OUTBOUND_INTERNAL_HOSTS = ["payments.internal", "10.3.0.0/16:8443", "127.0.0.1:9000"]
    assert validate_endpoint_url("https://payments.internal")
    assert validate_endpoint_url("https://ledger.internal:8443")
    assert validate_endpoint_url("http://127.0.0.1:9000")
    for refused in ("https://ledger.internal", "http://127.0.0.1:9001", "http://169.254.169.254/"):
        with pytest.raises(OutboundRefused):
            validate_endpoint_url(refused)


def test_hosts_an_administrator_listed_in_the_agent_allow_list_may_be_internal(
    settings: Any, resolver: dict[str, list[str]]
) -> None:
    resolver["warehouse.internal"] = ["192.168.4.4"]
    settings.SAS_AGENT_ALLOWED_HOSTS = ["warehouse.internal"]
    assert validate_endpoint_url("http://warehouse.internal") == "http://warehouse.internal"
    with pytest.raises(InvalidInput, match="SAS_AGENT_ALLOWED_HOSTS"):
        validate_endpoint_url("http://10.0.0.1")


# --- one set of lists per kind of URL ------------------------------------------------------------


def test_a_host_the_agent_allow_list_names_is_no_callback_or_webhook_target(
    settings: Any, resolver: dict[str, list[str]]
) -> None:
    # An administrator lets agents reach an internal service; a submitter's callback URL (or a
    # webhook) naming it must not make the service POST to any path of it.
    resolver["payments.internal"] = ["10.2.0.7"]
    settings.SAS_AGENT_ALLOWED_HOSTS = ["payments.internal"]
    assert validate_endpoint_url("https://payments.internal") == "https://payments.internal"
    assert checked_addresses("payments.internal", 443) == ["10.2.0.7"]
    with pytest.raises(OutboundRefused, match="SAS_CALLBACK_INTERNAL_HOSTS"):
        validate_callback_url("https://payments.internal/refund", resolve=True)
    with pytest.raises(OutboundRefused, match="SAS_CALLBACK_INTERNAL_HOSTS"):
        checked_addresses("payments.internal", 443, OutboundKind.CALLBACK)
    with pytest.raises(OutboundRefused, match="SAS_WEBHOOK_INTERNAL_HOSTS"):
        validate_webhook_url("https://payments.internal/alerts")
    with pytest.raises(OutboundRefused, match="SAS_WEBHOOK_INTERNAL_HOSTS"):
        checked_addresses("payments.internal", 443, OutboundKind.WEBHOOK)


def test_the_agent_internal_hosts_list_does_not_open_internal_hosts_to_callbacks_or_webhooks(
    settings: Any, resolver: dict[str, list[str]]
) -> None:
    resolver["ledger.internal"] = ["10.3.0.9"]
    settings.SAS_OUTBOUND_INTERNAL_HOSTS = ["ledger.internal", "127.0.0.1:9000"]
    assert checked_addresses("ledger.internal", 443) == ["10.3.0.9"]
    assert validate_endpoint_url("http://127.0.0.1:9000") == "http://127.0.0.1:9000"
    for kind in (OutboundKind.CALLBACK, OutboundKind.WEBHOOK):
        with pytest.raises(OutboundRefused):
            checked_addresses("ledger.internal", 443, kind)
        with pytest.raises(OutboundRefused):
            checked_addresses("127.0.0.1", 9000, kind)
    with pytest.raises(OutboundRefused):
        validate_callback_url("http://127.0.0.1:9000/done")
    with pytest.raises(OutboundRefused):
        validate_webhook_url("http://127.0.0.1:9000/alerts")


def test_each_kind_reaches_the_internal_hosts_its_own_list_names(
    settings: Any, resolver: dict[str, list[str]]
) -> None:
    resolver["receiver.internal"] = ["10.4.0.2"]
    settings.SAS_CALLBACK_INTERNAL_HOSTS = ["receiver.internal"]
    settings.SAS_WEBHOOK_INTERNAL_HOSTS = ["127.0.0.1:8766"]
    assert checked_addresses("receiver.internal", 443, OutboundKind.CALLBACK) == ["10.4.0.2"]
    assert validate_callback_url("https://receiver.internal/done", resolve=True)
    assert validate_webhook_url("http://127.0.0.1:8766/alerts") == "http://127.0.0.1:8766/alerts"
    with pytest.raises(OutboundRefused, match="SAS_OUTBOUND_INTERNAL_HOSTS"):
        checked_addresses("receiver.internal", 443)
    with pytest.raises(OutboundRefused):
        checked_addresses("receiver.internal", 443, OutboundKind.WEBHOOK)
    with pytest.raises(OutboundRefused):
        validate_endpoint_url("http://127.0.0.1:8766")


def test_each_kind_has_its_own_restrictive_list(settings: Any, resolver: dict[str, list[str]]) -> None:
    settings.SAS_AGENT_ALLOWED_HOSTS = ["agents.example.com"]
    settings.SAS_CALLBACK_ALLOWED_HOSTS = ["hooks.example.com"]
    settings.SAS_WEBHOOK_ALLOWED_HOSTS = ["alerts.example.com"]
    assert validate_endpoint_url("https://agents.example.com")
    assert validate_callback_url("https://hooks.example.com/done")
    assert validate_webhook_url("https://alerts.example.com/in")
    with pytest.raises(InvalidInput, match="not in SAS_CALLBACK_ALLOWED_HOSTS"):
        validate_callback_url("https://agents.example.com/refund")
    with pytest.raises(InvalidInput, match="not in SAS_WEBHOOK_ALLOWED_HOSTS"):
        validate_webhook_url("https://hooks.example.com/in")
    with pytest.raises(InvalidInput, match="not in SAS_AGENT_ALLOWED_HOSTS"):
        validate_endpoint_url("https://alerts.example.com")


@pytest.mark.django_db
def test_an_alert_webhook_on_a_host_only_agents_may_reach_is_a_400(
    settings: Any, resolver: dict[str, list[str]]
) -> None:
    resolver["payments.internal"] = ["10.2.0.7"]
    settings.SAS_AGENT_ALLOWED_HOSTS = ["payments.internal"]
    with pytest.raises(InvalidInput, match="not a public address") as refused:
        subscription_create(actor=None, name="ops", webhook_url="https://payments.internal/x")
    assert refused.value.detail["field"] == "webhook_url"


# --- a submission never waits on a name server ------------------------------------------------------


@pytest.mark.django_db
def test_a_submission_with_a_callback_url_looks_no_name_up(monkeypatch: pytest.MonkeyPatch) -> None:
    # A name server that never answers would hold the request and its transaction: the lookup is
    # left to the connect-time check of the outbox, so the resolver is never asked.
    asked: list[str] = []

    def hanging_resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        raise AssertionError("a submission must not resolve its callback host")

    monkeypatch.setattr("agents.validation.resolve", hanging_resolver)
    chain(n=1)
    client = client_for(make_user("sam", "submitters"))
    response = client.post(
        f"{V1}/jobs/",
        {"workflow": "chain", "input": {}, "callback_url": "https://slow-dns.example.com/done"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["callback_url"] == "https://slow-dns.example.com/done"
    assert asked == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url", ["http://10.0.0.1/done", "http://[::1]:8000/", "http://2130706433/", "http://169.254.169.254/"]
)
def test_a_submission_with_a_literal_internal_callback_address_is_still_a_400(url: str) -> None:
    chain(n=1)
    client = client_for(make_user("sam", "submitters"))
    response = client.post(
        f"{V1}/jobs/", {"workflow": "chain", "input": {}, "callback_url": url}, format="json"
    )
    assert response.status_code == 400, response.json()
    assert response.json()["field"] == "callback_url" and "not a public address" in response.json()["detail"]
    assert Job.objects.count() == 0


def test_a_broker_url_is_checked_with_its_own_schemes_and_may_carry_a_password(
    resolver: dict[str, list[str]],
) -> None:
    redis = {"redis": 6379, "rediss": 6379}
    resolver["cache.example.com"] = ["93.184.216.34"]
    url = "rediss://:s3cret@cache.example.com:6380/0"
    assert validate_outbound_url(url, schemes=redis, what="broker URL", credentials=True, query=True) == url
    with pytest.raises(OutboundRefused):
        validate_outbound_url("redis://127.0.0.1:6379/0", schemes=redis, credentials=True)
    with pytest.raises(InvalidInput, match="must use redis or rediss"):
        validate_outbound_url("http://cache.example.com", schemes=redis)
    assert checked_addresses("cache.example.com", 6380) == ["93.184.216.34"]
    resolver["cache.example.com"] = ["10.0.0.5"]
    with pytest.raises(OutboundRefused):
        checked_addresses("cache.example.com", 6380)


@pytest.mark.django_db
def test_a_queue_pools_broker_on_an_internal_address_is_a_400_and_saves_nothing(
    resolver: dict[str, list[str]],
) -> None:
    resolver["redis.internal"] = ["10.1.2.3"]
    for broker in ("redis://127.0.0.1:6379/0", "redis://redis.internal:6379/0", "amqp://[::1]:5672/"):
        with pytest.raises(InvalidInput, match="not a public address") as refused:
            pool_save(name="mq", kind="queue", endpoints=[broker])
        assert refused.value.detail["field"] == "endpoints"
    assert not AgentPool.objects.filter(name="mq").exists()


def test_a_broker_connection_goes_to_the_checked_address_except_under_tls(
    settings: Any, resolver: dict[str, list[str]]
) -> None:
    resolver["mq.example.com"] = ["93.184.216.34"]
    assert pinned_broker_url("redis://mq.example.com/0") == "redis://93.184.216.34:6379/0"
    assert pinned_broker_url("amqp://mq.example.com:5673/vh") == "amqp://93.184.216.34:5673/vh"
    assert pinned_broker_url("rediss://mq.example.com:6380/0") == "rediss://mq.example.com:6380/0"
    resolver["mq.example.com"] = ["127.0.0.1"]  # rebound after the save
    with pytest.raises(OutboundRefused):
        pinned_broker_url("redis://mq.example.com/0")
    settings.SAS_OUTBOUND_INTERNAL_HOSTS = ["mq.example.com"]
    assert pinned_broker_url("redis://mq.example.com/0") == "redis://127.0.0.1:6379/0"


def test_a_message_to_a_loopback_broker_saved_before_is_refused_without_connecting() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    with listener:
        result = call_queue(
            CallSpec(
                job_id="j",
                step_id=1,
                attempt=1,
                operation_id="op-1",
                kind=AttemptKind.CALL,
                agent_kind="queue",
                base_url=f"redis://127.0.0.1:{port}/0",
                path="orders",
                payload={},
                timeout=2.0,
            )
        )
        assert result.outcome == Outcome.BUSINESS_FAILURE and "loopback" in result.error
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing connected


# --- connect time ---------------------------------------------------------------------------------


def test_a_call_to_a_loopback_endpoint_saved_before_is_refused_without_reaching_it(
    canary: Canary,
) -> None:
    result = call(f"http://127.0.0.1:{canary.port}")
    assert result.outcome == Outcome.BUSINESS_FAILURE and "endpoint refused" in result.error
    assert "loopback" in result.error
    assert canary.hits == []


def test_a_name_rebound_to_loopback_after_the_save_is_refused_at_connect_time(
    canary: Canary, resolver: dict[str, list[str]]
) -> None:
    resolver["rebind.example.com"] = ["93.184.216.34"]
    base = validate_endpoint_url(f"http://rebind.example.com:{canary.port}")
    resolver["rebind.example.com"] = ["127.0.0.1"]  # the attacker's DNS answers differently now
    result = call(base)
    assert result.outcome == Outcome.BUSINESS_FAILURE and "not a public address (loopback)" in result.error
    assert canary.hits == []


def test_the_connection_goes_to_the_checked_address_with_the_original_host_header(
    canary: Canary, resolver: dict[str, list[str]], settings: Any
) -> None:
    # The name resolves only through the guard's resolver: reaching the canary proves the
    # connection used the checked address rather than a second lookup of its own.
    resolver["svc.example.com"] = ["127.0.0.1"]
    settings.SAS_OUTBOUND_INTERNAL_HOSTS = ["svc.example.com"]
    for _ in range(3):
        assert call(f"http://svc.example.com:{canary.port}").outcome == Outcome.SUCCEEDED
    assert [hit["host"] for hit in canary.hits] == [f"svc.example.com:{canary.port}"] * 3
    # One lookup for one kept-alive connection: the pooled client adds no per-call cost.
    assert resolver["calls"] == ["svc.example.com"]


def test_a_redirect_to_an_internal_address_is_not_followed(canary: Canary, settings: Any) -> None:
    settings.SAS_OUTBOUND_INTERNAL_HOSTS = ["127.0.0.1"]
    redirector = Canary(location=f"http://127.0.0.1:{canary.port}/steal")
    try:
        result = call(f"http://127.0.0.1:{redirector.port}")
    finally:
        hang_up()
        redirector.server.shutdown()
        redirector.server.server_close()
    assert result.outcome == Outcome.BUSINESS_FAILURE and "not followed" in result.error
    assert len(redirector.hits) == 1 and canary.hits == []


@pytest.mark.django_db
def test_a_callback_to_an_internal_address_is_refused_at_send_time_and_reaches_nothing(
    canary: Canary,
) -> None:
    Delivery.objects.create(
        kind=DeliveryKind.CALLBACK,
        key="job-1:succeeded",
        target=f"http://127.0.0.1:{canary.port}/done",
        payload={"id": "job-1"},
    )
    assert send_due() == 1
    delivery = Delivery.objects.get()
    assert delivery.status == "pending" and delivery.last_error.startswith("refused:")
    assert "loopback" in delivery.last_error
    assert canary.hits == []


@pytest.mark.django_db
def test_a_callback_to_a_named_internal_host_is_delivered(canary: Canary, settings: Any) -> None:
    settings.SAS_CALLBACK_INTERNAL_HOSTS = [f"127.0.0.1:{canary.port}"]
    Delivery.objects.create(
        kind=DeliveryKind.CALLBACK,
        key="job-2:succeeded",
        target=f"http://127.0.0.1:{canary.port}/done",
        payload={"id": "job-2"},
    )
    send_due()
    assert Delivery.objects.get().status == "delivered" and len(canary.hits) == 1


@pytest.mark.django_db
def test_a_callback_to_a_host_only_agents_may_reach_is_refused_at_connect_time(
    canary: Canary, resolver: dict[str, list[str]], settings: Any
) -> None:
    # The submission looked no name up; the outbox's connection is checked with the callback lists.
    resolver["payments.internal"] = ["127.0.0.1"]
    settings.SAS_OUTBOUND_INTERNAL_HOSTS = ["payments.internal"]
    Delivery.objects.create(
        kind=DeliveryKind.CALLBACK,
        key="job-3:succeeded",
        target=f"http://payments.internal:{canary.port}/refund",
        payload={"id": "job-3"},
    )
    send_due()
    delivery = Delivery.objects.get()
    assert delivery.status == "pending" and "SAS_CALLBACK_INTERNAL_HOSTS" in delivery.last_error
    assert canary.hits == []


# --- the demo of `make run` -------------------------------------------------------------------------


@pytest.mark.slow
def test_make_run_names_its_sandbox_and_the_demo_loads_only_with_it(tmp_path: Path) -> None:
    makefile = (ROOT / "Makefile").read_text()
    found = re.search(r"^run: export SAS_OUTBOUND_INTERNAL_HOSTS \?= (\S+)$", makefile, re.MULTILINE)
    assert found, "make run must name the sandbox in SAS_OUTBOUND_INTERNAL_HOSTS"
    assert found.group(1) == "127.0.0.1:$(DEMO_SANDBOX_PORT),localhost:$(DEMO_SANDBOX_PORT)"
    assert re.search(r"^DEMO_SANDBOX_PORT \?= 8100$", makefile, re.MULTILINE)
    assert "sandbox_remote --port ${DEMO_SANDBOX_PORT:-8100}" in (ROOT / "Procfile").read_text()
    sandbox_hosts = found.group(1).replace("$(DEMO_SANDBOX_PORT)", "8100")
    # The SQLite default of `make run`, in a fresh folder, without the suite's own allow-list.
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SAS_OUTBOUND_INTERNAL_HOSTS")}
    env["SAS_VAR_DIR"] = str(tmp_path)

    def manage(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=300,
        )

    assert manage("migrate", "--noinput").returncode == 0
    refused = manage("load_demo")
    assert refused.returncode != 0 and "not a public address (loopback)" in refused.stderr
    loaded = manage("load_demo", SAS_OUTBOUND_INTERNAL_HOSTS=sandbox_hosts)
    assert loaded.returncode == 0, loaded.stderr
    assert "demo loaded" in loaded.stdout
    # The demo's Redis (a free port chosen by make run) is named beside the sandbox, and only it.
    assert "SAS_OUTBOUND_INTERNAL_HOSTS=$$SAS_OUTBOUND_INTERNAL_HOSTS,127.0.0.1:$$port" in makefile
    broker = "redis://127.0.0.1:6390/0"
    refused = manage("load_demo", "--broker", broker, SAS_OUTBOUND_INTERNAL_HOSTS=sandbox_hosts)
    assert refused.returncode != 0 and "not a public address (loopback)" in refused.stderr
    named = f"{sandbox_hosts},127.0.0.1:6390"
    loaded = manage("load_demo", "--broker", broker, SAS_OUTBOUND_INTERNAL_HOSTS=named)
    assert loaded.returncode == 0, loaded.stderr
