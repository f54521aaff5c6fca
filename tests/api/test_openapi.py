"""The schema's additions (sas_project.openapi) and the queue agent's AsyncAPI document, kept true:
every request example validates against its schema; every counted operation documents the 429
and the RateLimit-* headers, which the API really sends; and what the service sends (completion
callbacks, alerts, the calls and status queries a remote receives, the queue messages), built by
the service's own code and sent to a receiver on loopback, matches the documented schemas and
headers."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.urls import resolve
from django.utils import timezone
from django_q.models import OrmQ
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from jsonschema import Draft7Validator, Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from rest_framework.test import APIClient

from agents.fake import FakeRemote
from agents.http import call_http
from agents.outcome import AttemptKind, CallSpec, Outcome
from agents.queue import (
    BYTES_HEADER,
    COMPRESSION_HEADER,
    DEAD_ERROR,
    DEAD_REASON,
    DEAD_REASONS,
    TRIES_HEADER,
    BadReply,
    Heartbeat,
    Reply,
    message_of,
    parse_reply,
)
from sas_project import openapi
from scheduler.models import (
    AlertKind,
    Delivery,
    DeliveryKind,
    Job,
    JobStatus,
    QuarantineLoop,
    Step,
    StepStatus,
)
from scheduler.services import job_submit
from scheduler.services.quarantine import Quarantiner
from scheduler.services.retention import ArchiveUnwritable
from supervisor import deliveries
from supervisor.alerts import (
    archive_failed_alert,
    quarantines_alert,
    reactions_handle,
    supervisor_stale_check,
)
from supervisor.canary import canary_tick
from supervisor.canary import expected_seconds as canary_expected_seconds
from supervisor.debt import debt_watch
from supervisor.models import SupervisorLease
from supervisor.scan import ScanReport
from supervisor.subscriptions import subscription_create
from tests.api.support import V1, client_for, make_user
from tests.factories import chain, failing_endpoint_history, make_policy, make_pool, make_workflow, step

ASYNCAPI = Path(__file__).resolve().parents[2] / "docs" / "asyncapi.yaml"
METHODS = ("get", "put", "post", "patch", "delete")
#: Headers any HTTP client sends by itself: not part of the contract.
TRANSPORT_HEADERS = {
    "host",
    "content-length",
    "content-type",
    "accept",
    "accept-encoding",
    "connection",
    "user-agent",
}


@cache
def schema() -> dict[str, Any]:
    """The schema /api/schema/ serves, as JSON (no request, no database)."""
    document = SchemaGenerator().get_schema(request=None, public=True)
    return dict(json.loads(OpenApiJsonRenderer().render(document)))


def operations() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, item in schema()["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


def validator(ref: str) -> Draft202012Validator:
    """A validator for the schema `ref` (`#/components/...`) of the OpenAPI document, its own
    `$ref`s resolved in the document (OAS 3.1 schemas are JSON Schema 2020-12)."""
    registry: Registry[Any] = Registry().with_resource(
        "urn:openapi", Resource(contents=schema(), specification=DRAFT202012)
    )
    return Draft202012Validator(
        {"$ref": f"urn:openapi{ref}"},
        registry=registry,
        format_checker=Draft202012Validator.FORMAT_CHECKER,
    )


def body_validator(operation: dict[str, Any]) -> Draft202012Validator:
    return validator(operation["requestBody"]["content"]["application/json"]["schema"]["$ref"])


def errors_of(check: Draft202012Validator | Draft7Validator, value: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in check.iter_errors(value)]


WITH_BODY = [(op["operationId"], op) for _p, _m, op in operations() if "requestBody" in op]


# --- request examples -------------------------------------------------------------------------------


def test_the_schema_is_openapi_3_1() -> None:
    assert schema()["openapi"].startswith("3.1.")


@pytest.mark.parametrize(("operation_id", "operation"), WITH_BODY, ids=[i for i, _ in WITH_BODY])
def test_every_request_body_has_an_example_its_schema_accepts(
    operation_id: str, operation: dict[str, Any]
) -> None:
    (media,) = operation["requestBody"]["content"].values()
    (example,) = media["examples"].values()
    assert example["value"] == openapi.REQUEST_EXAMPLES[operation_id]
    assert errors_of(body_validator(operation), example["value"]) == []


def test_every_example_names_an_operation_with_a_body() -> None:
    assert set(openapi.REQUEST_EXAMPLES) == {operation_id for operation_id, _ in WITH_BODY}


def test_an_example_its_schema_does_not_accept_is_caught() -> None:
    operation = dict(WITH_BODY)["jobs_submit"]
    wrong = {**openapi.REQUEST_EXAMPLES["jobs_submit"], "priority": 5000, "colour": "red"}
    del wrong["workflow"]
    found = errors_of(body_validator(operation), wrong)
    assert len(found) == 3 and any("workflow" in e for e in found) and any("colour" in e for e in found)


@pytest.mark.django_db
def test_the_definition_examples_are_accepted_by_the_api_in_order() -> None:
    """The examples of the definitions, sent by an administrator to an empty service, make the
    objects the job example then uses: they describe the service, not only its schema."""
    admin = client_for(make_user("ada", "administrators"))
    examples = openapi.REQUEST_EXAMPLES
    for name, fields in (("standard", {}), ("shipping", {"on_exhausted": "hold"})):
        assert admin.post(f"{V1}/policies/", {"name": name, **fields}, format="json").status_code == 201
    assert admin.post(f"{V1}/policies/", examples["policies_create"], format="json").status_code == 201
    for pool in ("inventory", "shipping", "payments-dr"):
        created = admin.post(f"{V1}/pools/", {"name": pool, "kind": "http"}, format="json")
        assert created.status_code == 201, created.json()
    # The group the example's approval is reassigned to (groups are made in the admin).
    from django.contrib.auth.models import Group

    Group.objects.get_or_create(name="finance-leads")
    # Without its endpoints, whose example host names resolve nowhere (the guard resolves them).
    pools = admin.post(f"{V1}/pools/", {**examples["pools_create"], "endpoints": []}, format="json")
    assert pools.status_code == 201, pools.json()
    created = admin.post(f"{V1}/workflows/", examples["workflows_create"], format="json")
    assert created.status_code == 201, created.json()
    submitter = client_for(make_user("sam", "submitters"))
    job = submitter.post(f"{V1}/jobs/", examples["jobs_submit"], format="json")
    assert job.status_code == 201, job.json()
    batch = submitter.post(f"{V1}/jobs/batch/", examples["jobs_submit_batch"], format="json")
    assert batch.status_code == 201, batch.json()
    schedule = admin.post(f"{V1}/schedules/", examples["schedules_create"], format="json")
    assert schedule.status_code == 201, schedule.json()
    alerts = admin.post(f"{V1}/alerts/", examples["alerts_create"], format="json")
    assert alerts.status_code == 201, alerts.json()


# --- rates -----------------------------------------------------------------------------------------

#: Values the URL patterns accept, to find each path's view.
SAMPLE_PARAMETERS = {
    "job_id": "2f6e1d7a-9c3b-4d2e-8a41-0b5c6d7e8f90",
    "step_id": "1",
    "token_id": "1",
    "token": "abc",
    "name": "x",
    "step_name": "x",
}


def view_of(path: str) -> Any:
    for name, value in SAMPLE_PARAMETERS.items():
        path = path.replace(f"{{{name}}}", value)
    return resolve(path).func.cls  # type: ignore[attr-defined]


def test_the_counted_operations_document_the_429_and_the_rate_headers_and_the_exempt_ones_do_not() -> None:
    exempt = []
    for path, _method, operation in operations():
        responses = operation["responses"]
        if not view_of(path)().get_throttles():
            exempt.append(operation["operationId"])
            assert "429" not in responses
            assert not any("RateLimit-Limit" in r.get("headers", {}) for r in responses.values())
            continue
        refused = responses["429"]
        assert set(refused["headers"]) == {
            "Retry-After",
            "RateLimit-Limit",
            "RateLimit-Remaining",
            "RateLimit-Reset",
        }
        # The same error body as the operation's other errors (sas_project.api.errors()).
        assert refused["content"] == responses["401"]["content"]
        for code, response in responses.items():
            documented = set(response.get("headers", {}))
            rate = {"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}
            # A 401 is refused before the request is counted.
            assert (rate <= documented) == (code != "401"), (operation["operationId"], code)
    assert sorted(exempt) == ["attempts_callback", "attempts_heartbeat"]


def headers_documented(response: dict[str, Any]) -> set[str]:
    return set(response.get("headers", {}))


@pytest.mark.django_db
def test_a_real_429_and_a_real_200_carry_what_the_schema_documents(settings: Any) -> None:
    settings.SAS_THROTTLE_USER = "1/min"
    settings.SAS_THROTTLE_USER_BURST = 2
    documented = schema()["paths"]["/api/v1/jobs/"]["get"]["responses"]
    client = client_for(make_user("sam", "submitters"))
    answers = [client.get(f"{V1}/jobs/") for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    ok, refused = answers[0], answers[2]
    assert headers_documented(documented["200"]) <= set(ok.headers)
    assert headers_documented(documented["429"]) <= set(refused.headers)
    error_ref = documented["429"]["content"]["application/problem+json"]["schema"]["$ref"]
    assert errors_of(validator(error_ref), refused.json()) == []
    assert refused.json()["code"] == "throttled"


@pytest.mark.django_db
def test_a_remote_callback_answer_carries_no_rate_headers() -> None:
    answer = APIClient().post(f"{V1}/callbacks/forged/", {"outcome": "succeeded"}, format="json")
    assert answer.status_code == 403
    assert "RateLimit-Limit" not in answer.headers and "Retry-After" not in answer.headers


# --- a receiver on loopback ----------------------------------------------------------------------


@dataclasses.dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    """An HTTP server on loopback recording every request; it answers `status` with `answer`."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.status = 200
        self.answer: Any = {"ok": True}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                receiver.requests.append(Received(self.command, self.path, dict(self.headers), body))
                data = json.dumps(receiver.answer).encode()
                self.send_response(receiver.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _handle  # noqa: N815 - the names http.server dispatches to

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    from agents import http

    made = Receiver()
    yield made
    if http._client is not None:  # the agent's kept-alive connections end before the server
        http._client.close()
        http._client = None
    made.server.shutdown()
    made.server.server_close()


def check_headers(
    sent: dict[str, str], documented: list[dict[str, Any]], *, extra: frozenset[str] | set[str] = frozenset()
) -> None:
    """Every required documented header was sent, each with a value its schema accepts, and
    nothing was sent that is not documented (besides the transport's own and `extra`)."""
    sent_lower = {name.lower(): value for name, value in sent.items()}
    for parameter in documented:
        name = parameter["name"].lower()
        if parameter.get("required"):
            assert name in sent_lower, f"{parameter['name']} documented as sent, not sent"
        if name in sent_lower:
            assert errors_of(Draft202012Validator(parameter["schema"]), sent_lower[name]) == [], name
    names = {p["name"].lower() for p in documented} | TRANSPORT_HEADERS | {e.lower() for e in extra}
    assert set(sent_lower) <= names, f"sent but not documented: {set(sent_lower) - names}"


def webhook(name: str, method: str = "post") -> dict[str, Any]:
    return dict(schema()["webhooks"][name][method])


# --- completion callbacks and alerts ----------------------------------------------------------------


def test_the_schema_describes_what_the_service_sends() -> None:
    hooks = schema()["webhooks"]
    assert set(hooks) == {"jobSettled", "alert", "remoteCall", "remoteStatusQuery", "remoteCancel"}
    callbacks = hooks["remoteCall"]["post"]["callbacks"]
    by_id = {op["operationId"]: op for _p, _m, op in operations()}
    result = callbacks["result"]["{$request.header.X-SAS-Callback-URL}"]["post"]
    beat = callbacks["heartbeat"]["{$request.header.X-SAS-Callback-URL}heartbeat/"]["post"]
    assert result["requestBody"] == by_id["attempts_callback"]["requestBody"]
    assert beat["responses"] == by_id["attempts_heartbeat"]["responses"]
    # Every alert kind the service has is described.
    kinds = {
        k for variant in openapi.ALERT_WEBHOOK_SCHEMA["oneOf"] for k in variant["properties"]["alert"]["enum"]
    }
    assert kinds == set(AlertKind.values)


def sent_deliveries(receiver: Receiver) -> list[Received]:
    while deliveries.send_due():
        pass
    return [r for r in receiver.requests if r.method == "POST"]


@pytest.mark.django_db
def test_the_completion_callbacks_the_service_sends_match_the_schema(
    drain: Callable[[], int],
    fake_remote: FakeRemote,
    supervise: Callable[..., ScanReport],
    receiver: Receiver,
) -> None:
    make_policy("once", max_attempts=1, on_exhausted="fail")
    chain(n=2)
    make_workflow("fails", step("only", policy="once"))
    fake_remote.script("only", Outcome.BUSINESS_FAILURE)
    submitter = make_user("sam", "submitters")
    done = job_submit(
        workflow="chain", input={"order_id": "A-1"}, callback_url=f"{receiver.url}/cb", submitter=submitter
    )
    failed = job_submit(workflow="fails", input={}, callback_url=f"{receiver.url}/cb")
    for _ in range(2):
        drain()
        supervise()
    assert Job.objects.get(pk=done.job.pk).status == JobStatus.SUCCEEDED
    sent = sent_deliveries(receiver)
    bodies = {json.loads(r.body)["id"]: json.loads(r.body) for r in sent}
    assert bodies[str(done.job.pk)]["status"] == "succeeded"
    assert bodies[str(failed.job.pk)]["status"] == "failed"
    documented = webhook("jobSettled")
    check = validator(documented["requestBody"]["content"]["application/json"]["schema"]["$ref"])
    for request in sent:
        assert errors_of(check, json.loads(request.body)) == []
        check_headers(request.headers, documented["parameters"])
    # The submitter's secret signs: the documented optional signature is there when it has one.
    signed = next(r for r in sent if json.loads(r.body)["id"] == str(done.job.pk))
    assert signed.headers["webhook-signature"].startswith("v1,")
    # The schema is not a catch-all: a body the service would not send is refused.
    assert errors_of(check, {**bodies[str(done.job.pk)], "status": "running"})


@pytest.mark.django_db
def test_the_alerts_the_service_sends_match_the_schema(
    drain: Callable[[], int],
    fake_remote: FakeRemote,
    supervise: Callable[..., ScanReport],
    receiver: Receiver,
    settings: Any,
) -> None:
    subscription_create(name="ops", actor=None, webhook_url=f"{receiver.url}/alerts")
    make_policy("hold", max_attempts=1, on_exhausted="hold")
    make_policy("once", max_attempts=1, on_exhausted="fail")
    make_workflow("held", step("only", policy="hold"))
    make_workflow("fails", step("only", policy="once"))
    chain(n=2)
    fake_remote.script("only", Outcome.TRANSIENT_FAILURE, Outcome.BUSINESS_FAILURE)
    fake_remote.script("s2", Outcome.BUSINESS_FAILURE)
    job_submit(workflow="held", input={})
    job_submit(workflow="fails", input={})
    job_submit(workflow="chain", input={})
    drain()
    supervise()
    drain()
    reactions_handle()
    SupervisorLease.objects.update(last_scan_at=timezone.now() - dt.timedelta(seconds=30))
    assert supervisor_stale_check(1.0)
    now = timezone.now()
    archive_failed_alert(
        ArchiveUnwritable(
            error=OSError(28, "No space left on device"),
            location="/var/lib/sas/archive",
            failures=3,
            failing_since=now,
            retry_at=now + dt.timedelta(minutes=5),
        )
    )
    Quarantiner(QuarantineLoop.SCHEDULES, source="schedule").other(
        "schedule nightly", ValueError("day is out of range for month"), action="moved_on"
    )
    assert quarantines_alert() == 1
    late = job_submit(workflow="chain", input={}).job
    OrmQ.objects.all().delete()
    Step.objects.filter(job=late, status=StepStatus.DISPATCHED).update(deadline=now - dt.timedelta(hours=1))
    SupervisorLease.objects.update(acquired_at=now - dt.timedelta(hours=1), progressed_at=None)
    assert debt_watch(holder="peer") == "took_over"
    settings.SAS_CANARY_SECONDS = 60
    canary_tick(now=now)
    canary_tick(now=now + dt.timedelta(seconds=canary_expected_seconds() + 1))
    sent = sent_deliveries(receiver)
    documented = webhook("alert")
    check = validator(documented["requestBody"]["content"]["application/json"]["schema"]["$ref"])
    kinds = set()
    for request in sent:
        body = json.loads(request.body)
        kinds.add(body["alert"])
        assert errors_of(check, body) == [], body
        check_headers(request.headers, documented["parameters"])
        assert request.headers["X-SAS-Delivery"] == "webhook"
    assert {
        "step_needs_attention",
        "job_failed",
        "job_compensated",
        "supervisor_stale",
        "archive_failed",
        "quarantined",
        "supervisor_not_remediating",
        "canary_unremediated",
    } <= kinds
    assert Delivery.objects.filter(kind=DeliveryKind.WEBHOOK).count() == len(sent)


@pytest.mark.django_db
def test_the_alert_of_a_circuit_the_scan_opens_matches_the_schema(
    supervise: Callable[..., ScanReport],
) -> None:
    # An email subscription: the same body as the webhook's, written by the same code.
    subscription_create(name="ops", actor=None, email="ops@example.com", kinds=["circuit_opened"])
    make_pool("web", kind="http", endpoints=["http://a.example:1", "http://b.example:1"])
    make_workflow("w", step("s1", pool="web", path="/do", compensation="/undo"))
    failing_endpoint_history("w", "http://a.example:1")
    supervise()
    (alert,) = Delivery.objects.filter(kind=DeliveryKind.EMAIL)
    assert alert.payload["alert"] == "circuit_opened"
    assert errors_of(validator("#/components/schemas/AlertWebhook"), alert.payload) == []


# --- the remote contract -----------------------------------------------------------------------------


def order_workflow(pool: str, fake_remote: FakeRemote, *, paths: dict[str, str]) -> None:
    """Reserve, then charge: the charge gets no answer, a status query says it never happened,
    the next call is refused, and the reservation is undone: every kind of request a remote
    receives, each built by the claim (scheduler.services.claims) and recorded by the fake."""
    make_policy("careful", reconcile_before_retry=True, max_attempts=2, on_exhausted="compensate")
    make_workflow(
        "order",
        step("reserve", pool=pool, path=paths["reserve"], compensation=paths["release"]),
        step(
            "charge",
            "reserve",
            pool=pool,
            policy="careful",
            path=paths["charge"],
            compensation=paths["refund"],
            status_path=paths["status"],
        ),
    )
    fake_remote.script("charge", Outcome.NO_ANSWER, Outcome.NOT_HAPPENED, Outcome.BUSINESS_FAILURE)


HTTP_PATHS = {
    "reserve": "/inventory/reserve",
    "release": "/inventory/release",
    "charge": "/payments/charge",
    "refund": "/payments/refund",
    "status": "/payments/{operation_id}",
}
QUEUE_PATHS = {
    "reserve": "inventory.reserve",
    "release": "inventory.release",
    "charge": "payments.charge",
    "refund": "payments.refund",
    "status": "payments.status",
}


def run_order(
    drain: Callable[[], int], supervise: Callable[..., ScanReport], fake_remote: FakeRemote
) -> list[CallSpec]:
    job = job_submit(workflow="order", input={"order_id": "A-1001", "amount": 59.8}).job
    for _ in range(4):
        drain()
        supervise()
    kinds = [(c.payload["step"], c.kind, "compensates" in c.payload) for c in fake_remote.calls]
    assert kinds == [
        ("reserve", AttemptKind.CALL, False),
        ("charge", AttemptKind.CALL, False),
        ("charge", AttemptKind.RECONCILE, False),
        ("charge", AttemptKind.CALL, False),
        ("reserve", AttemptKind.CALL, True),
    ], job.pk
    return fake_remote.calls


@pytest.mark.django_db
def test_the_requests_an_http_remote_receives_match_the_remote_contract(
    drain: Callable[[], int],
    fake_remote: FakeRemote,
    supervise: Callable[..., ScanReport],
    receiver: Receiver,
    settings: Any,
) -> None:
    settings.SAS_PUBLIC_URL = "https://sas.example.com"
    make_pool(
        "shop",
        kind="http",
        endpoints=[
            {"url": receiver.url, "secret_header_name": "Authorization", "secret_header_value": "Bearer s"}
        ],
    )
    order_workflow("shop", fake_remote, paths=HTTP_PATHS)
    specs = run_order(drain, supervise, fake_remote)
    # Each request as the HTTP agent sends it (its deadline renewed: the scenario took time).
    for spec in specs:
        call_http(dataclasses.replace(spec, timeout=5.0))
    call = webhook("remoteCall")
    status = webhook("remoteStatusQuery", "get")
    body_check = validator(call["requestBody"]["content"]["application/json"]["schema"]["$ref"])
    posts = [r for r in receiver.requests if r.method == "POST"]
    (query,) = [r for r in receiver.requests if r.method == "GET"]
    assert len(posts) == 4
    for request in posts:
        assert errors_of(body_check, json.loads(request.body)) == [], request.body
        check_headers(request.headers, call["parameters"], extra={"Authorization"})
        assert request.headers["X-SAS-Callback-URL"].startswith("https://sas.example.com/api/v1/callbacks/")
    assert json.loads(posts[-1].body)["compensates"] and posts[-1].path == "/inventory/release"
    check_headers(query.headers, status["parameters"], extra={"Authorization"})
    assert query.body == b"" and query.path.startswith("/payments/")


@pytest.mark.django_db
def test_the_calls_of_a_fan_out_with_an_input_mapping_match_the_remote_contract(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., ScanReport]
) -> None:
    """The body's other shape: a mapped `input` (no `results`) and a fan-out item's `item` and
    `index`, as the claim builds them (the agent POSTs the payload as it is)."""
    make_workflow(
        "ship_lines",
        step("reserve"),
        {
            **step("ship", "reserve"),
            "for_each": "input.lines",
            "input": {"sku.$": "item.sku", "order.$": "input.order_id"},
        },
    )
    job_submit(
        workflow="ship_lines", input={"order_id": "A-1001", "lines": [{"sku": "BOOK-42"}, {"sku": "PEN-7"}]}
    )
    for _ in range(3):
        drain()
        supervise()
    check = validator("#/components/schemas/RemoteCall")
    items = [c.payload for c in fake_remote.calls if c.payload["step"] == "ship"]
    assert sorted(p["index"] for p in items) == [0, 1] and all("results" not in p for p in items)
    for payload in [c.payload for c in fake_remote.calls]:
        assert errors_of(check, payload) == [], payload


@pytest.mark.django_db
def test_the_cancel_sent_to_a_remote_matches_the_remote_contract(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    from scheduler.services import attempt_claim
    from supervisor.services import job_cancel
    from tests.api.support import make_user

    make_pool("web", kind="http", endpoints=["http://a.example:1"])
    make_workflow(
        "order",
        {**step("charge", pool="web", path="/charge", compensation="/refund"), "cancel_path": "/cancel"},
    )
    job = job_submit(workflow="order", input={}).job
    charge = Step.objects.get(job=job, name="charge")
    attempt_claim(charge.pk, number=1)
    job_cancel(actor=make_user("olga", "operators"), job_id=job.pk)
    drain()
    (sent,) = fake_remote.cancels()
    assert errors_of(validator("#/components/schemas/RemoteCancel"), sent.payload) == [], sent.payload


def test_the_answers_the_contract_documents_are_the_ones_the_agent_tells_apart() -> None:
    responses = webhook("remoteCall")["responses"]
    assert set(responses) == {"200", "202", "3XX", "408", "429", "4XX", "5XX"}
    status = webhook("remoteStatusQuery", "get")["responses"]
    assert set(status) == {"200", "404", "default"}


# --- the queue agent's messages (docs/asyncapi.yaml) ------------------------------------------------


@cache
def asyncapi() -> dict[str, Any]:
    return dict(yaml.safe_load(ASYNCAPI.read_text()))


def resolve_pointer(document: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = document
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def payload_validator(message: str) -> Draft7Validator:
    """The payload schema of a message (AsyncAPI's default schema format is a superset of JSON
    Schema draft 7)."""
    document = asyncapi()
    schema_ = resolve_pointer(document, document["components"]["messages"][message]["payload"]["$ref"])
    Draft7Validator.check_schema(schema_)
    return Draft7Validator(schema_)


def test_the_asyncapi_document_parses_and_every_reference_resolves() -> None:
    document = asyncapi()
    assert document["asyncapi"] == "3.0.0"
    for ref in refs(document):
        assert resolve_pointer(document, ref) is not None, ref
    assert {op["action"] for op in document["operations"].values()} == {"send", "receive"}
    assert document["channels"]["replies"]["address"] == "sas.replies"


def test_the_reply_queue_in_the_document_is_the_default_reply_queue() -> None:
    from sas_project.conf import sas_settings

    document = asyncapi()
    assert document["channels"]["replies"]["address"] == sas_settings.reply_queue
    assert document["channels"]["deadLetters"]["address"] == f"{sas_settings.reply_queue}.dead"


def test_the_dead_letter_headers_and_reasons_in_the_document_are_the_consumers() -> None:
    headers = asyncapi()["components"]["messages"]["DeadLetter"]["headers"]["properties"]
    assert set(headers) == {DEAD_REASON, DEAD_ERROR, TRIES_HEADER, BYTES_HEADER, COMPRESSION_HEADER}
    assert headers[DEAD_REASON]["enum"] == list(DEAD_REASONS)


@pytest.mark.django_db
def test_the_requests_the_queue_agent_publishes_match_the_asyncapi_payload(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., ScanReport]
) -> None:
    make_pool("broker", kind="queue", endpoints=["redis://127.0.0.1:6379/0"])
    order_workflow("broker", fake_remote, paths=QUEUE_PATHS)
    specs = run_order(drain, supervise, fake_remote)
    check = payload_validator("Request")
    messages = [message_of(spec) for spec in specs]
    for message in messages:
        assert errors_of(check, message) == [], message
    assert [m["kind"] for m in messages] == ["call", "call", "status", "call", "call"]
    assert "compensates" in messages[-1]
    assert errors_of(check, {**messages[0], "colour": "red"})


def test_a_fan_out_items_queue_message_names_its_element_and_position() -> None:
    spec = CallSpec(
        job_id="j",
        step_id=1,
        attempt=1,
        operation_id="op-1",
        kind=AttemptKind.CALL,
        agent_kind="queue",
        base_url="redis://127.0.0.1:6379/0",
        path="orders",
        payload={"step": "ship", "input": {"order": 1}, "results": {}, "item": {"sku": "A"}, "index": 3},
        timeout=5,
    )
    message = message_of(spec)
    assert (message["item"], message["index"]) == ({"sku": "A"}, 3)
    assert errors_of(payload_validator("Request"), message) == []


def test_the_documented_replies_and_heartbeats_are_what_the_reply_consumer_reads() -> None:
    messages = asyncapi()["components"]["messages"]
    for name, kind in (("Reply", Reply), ("Heartbeat", Heartbeat)):
        check = payload_validator(name)
        for example in messages[name]["examples"]:
            assert errors_of(check, example["payload"]) == [], example["name"]
            assert isinstance(parse_reply(example["payload"]), kind), example["name"]


@pytest.mark.parametrize(
    ("message", "read_as"),
    [
        ({"operation_id": "op-1", "attempt": 1, "outcome": "succeeded", "output": {"a": 1}}, Reply),
        ({"operation_id": "op-1", "attempt": 2, "outcome": "refused", "error": "no"}, Reply),
        ({"operation_id": "op-1", "attempt": 1, "heartbeat": True}, Heartbeat),
        ({"operation_id": "op-1", "attempt": 1, "heartbeat": True, "outcome": "maybe"}, Heartbeat),
        ({"operation_id": "op-1", "attempt": 1, "outcome": "maybe"}, None),
        ({"operation_id": "op-1", "attempt": 1, "heartbeat": False}, None),
        ({"operation_id": "op-1", "outcome": "succeeded"}, None),
        ({"operation_id": "op-1", "attempt": 0, "outcome": "succeeded"}, None),
        ({"operation_id": "op-1", "attempt": True, "outcome": "succeeded"}, None),
        ({"operation_id": "op-1", "attempt": 2**31, "outcome": "succeeded"}, None),
        ({"operation_id": "", "attempt": 1, "outcome": "succeeded"}, None),
        ({"operation_id": "x" * 201, "attempt": 1, "heartbeat": True}, None),
        ({"attempt": 1, "outcome": "failed"}, None),
    ],
)
def test_the_document_accepts_what_the_reply_consumer_reads_and_refuses_the_rest(
    message: dict[str, Any], read_as: type | None
) -> None:
    accepted_as = [name for name in ("Reply", "Heartbeat") if not errors_of(payload_validator(name), message)]
    if read_as is None:
        with pytest.raises(BadReply):
            parse_reply(message)
        assert accepted_as == []
    else:
        assert isinstance(parse_reply(message), read_as)
        assert accepted_as == [read_as.__name__]


# --- a client generated from the schema -------------------------------------------------------------


@pytest.mark.slow
def test_a_python_client_generates_from_the_schema_without_warnings(tmp_path: Path) -> None:
    pytest.importorskip("openapi_python_client", reason="openapi-python-client (requirements-dev.txt)")
    source = tmp_path / "schema.json"
    source.write_text(json.dumps(schema()))
    bin_dir = Path(sys.executable).parent
    result = subprocess.run(
        [
            str(bin_dir / "openapi-python-client"),
            "generate",
            "--path",
            str(source),
            "--output-path",
            str(tmp_path / "client"),
            "--meta",
            "none",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        # Its post-generation formatting runs ruff, found on PATH.
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"},
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Warning" not in result.stdout + result.stderr, result.stdout + result.stderr
    models = {path.stem for path in (tmp_path / "client" / "models").glob("*.py")}
    assert {"job_submit_request", "completion_callback", "remote_call"} <= models
