"""REST API: the OpenAPI schema is valid and warning-free, its documentation is served from local
static files, and a fuzz run (schemathesis) against the WSGI application, as an administrator,
gets no 5xx and only answers that conform to the schema."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from functools import cache
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.core.management import call_command
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from sas_project.tokens.services import token_create
from scheduler.callback_tokens import token_for as token_for_attempt
from scheduler.models import AlertSubscription, Schedule
from scheduler.services import job_submit
from tests.api.support import make_user, token_for
from tests.factories import chain, make_pool

pytestmark = pytest.mark.django_db


def test_the_schema_validates_without_warnings(tmp_path: Path) -> None:
    # --fail-on-warn turns any drf-spectacular warning (an untyped field, a guessed serializer,
    # an enum name collision) into an error.
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out), stderr=StringIO())
    text = out.read_text()
    assert "/api/v1/jobs/{job_id}/events/" in text and "tokenAuth" in text


def test_the_schema_is_served_to_anyone() -> None:
    response = APIClient().get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    assert {"/api/v1/jobs/", "/api/v1/policies/{name}/", "/api/v1/steps/{step_id}/retry/"} <= set(
        schema["paths"]
    )


def test_every_list_documents_its_pages_and_errors_are_problem_details() -> None:
    schema = APIClient().get("/api/schema/", {"format": "json"}).json()

    def parameters(path: str) -> set[str]:
        return {p["name"] for p in schema["paths"][path]["get"].get("parameters", [])}

    assert {"cursor", "page", "page_size"} <= parameters("/api/v1/jobs/")
    assert {"cursor", "page", "page_size"} <= parameters("/api/v1/jobs/{job_id}/events/")
    assert {"page", "page_size"} <= parameters("/api/v1/policies/") and "cursor" not in parameters(
        "/api/v1/policies/"
    )
    jobs = schema["paths"]["/api/v1/jobs/"]["get"]["responses"]
    assert set(jobs["400"]["content"]) == {"application/problem+json"}
    assert jobs["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/PaginatedJobSummaryList")


def test_the_docs_page_uses_local_static_files_only() -> None:
    response = APIClient().get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in page
    assert "cdn" not in page.lower() and "unpkg" not in page.lower()
    # Its start-up script is a file of its own (no inline script under the CSP), naming the schema.
    assert '<script src="/api/docs/?script="></script>' in page and "<script>" not in page
    script = APIClient().get("/api/docs/", {"script": ""})
    assert script["Content-Type"].startswith("application/javascript")
    assert "/api/schema/" in script.content.decode()


# --- fuzzing ------------------------------------------------------------------------------------

#: Objects the fuzz run's data fixture creates; half of the generated requests address them, so
#: that generated bodies reach the services behind the 404s (filled in per test).
KNOWN: dict[str, Any] = {}
#: Examples per operation in the fuzzing phase (the coverage phase adds its boundary and negative
#: cases on top): the run stays under a minute. API_FUZZ_EXAMPLES=500 digs deeper.
MAX_EXAMPLES = int(os.environ.get("API_FUZZ_EXAMPLES", 10))


@pytest.fixture
def in_process_requests() -> Iterator[None]:
    """The WSGI handler closes "old" connections around each request, which would close the
    test's own transaction; Django's test client disconnects it the same way."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def fuzz_data(in_process_requests: None) -> None:
    """Definitions and a live job for the generated requests to find."""
    chain(n=2)
    make_pool("http-pool", kind="http", endpoints=["http://127.0.0.1:9"])
    job = job_submit(workflow="chain", input={}, callback_url="https://hooks.example.com/done").job
    AlertSubscription.objects.create(name="oncall", email="oncall@example.com")
    # A webhook-only subscription answers email "" (its schema says so, with no email format).
    AlertSubscription.objects.create(name="chat", webhook_url="https://hooks.example.com/alerts")
    Schedule.objects.create(name="nightly", workflow="chain", cron="0 3 * * *")
    first = job.steps.order_by("id").first()
    assert first is not None
    # Another user's token: revoking it (the fuzzer is an administrator) leaves the fuzzer's own.
    token, _ = token_create(user=make_user("someone"), name="fuzzed")
    KNOWN.update(
        job_id=str(job.pk),
        step_id=first.pk,
        token=token_for_attempt(first.pk, 1, first.operation_id),
        token_id=token.pk,
    )


@pytest.fixture
def admin_token() -> str:
    return token_for(make_user("fuzzer", "administrators"))


def known_path_parameters(path: str) -> dict[str, Any]:
    if "{" not in path:
        return {}
    if "{step_name}" in path:
        return {"job_id": KNOWN["job_id"], "step_name": "s1"}
    if "{job_id}" in path:
        return {"job_id": KNOWN["job_id"]}
    if "{step_id}" in path:
        return {"step_id": KNOWN["step_id"]}
    if "{token_id}" in path:
        return {"token_id": KNOWN["token_id"]}
    if "{token}" in path:
        return {"token": KNOWN["token"]}
    if "{event}" in path:
        # No event is kept in the fuzzer's database: the replay answers 404.
        return {"event": 1}
    if "{source}" in path:
        # A provider's signed events: no such source answers 404, an unsigned event 401.
        return {"source": "payments-provider"}
    names = {
        "policies": "default",
        "pools": "local",
        "workflows": "chain",
        "alerts": "oncall",
        "schedules": "nightly",
    }
    return {"name": names[path.split("/")[3]]}


@cache
def wsgi_handler() -> WSGIHandler:
    return WSGIHandler()


def application(environ: dict[str, Any], start_response: Any) -> Any:
    """The project's WSGI application, built at the first request (not at collection)."""
    return wsgi_handler()(environ, start_response)


def generated_schema() -> dict[str, Any]:
    """The schema /api/schema/ serves (same generator), as JSON."""
    document = SchemaGenerator().get_schema(request=None, public=True)
    return dict(json.loads(OpenApiJsonRenderer().render(document)))


# Built at collection from the generator: no request, no database. (schemathesis' lazy loader,
# schemathesis.pytest.from_fixture, cannot be used with pytest 9: it sets `Node._nodeid`.)
schema = schemathesis.openapi.from_dict(generated_schema())
schema.app = application
schema.config.update(base_url="http://localhost")
schema.config.generation.update(database="none")


@schema.hook
def before_generate_path_parameters(context: schemathesis.HookContext, strategy: Any) -> Any:
    path = context.operation.path if context.operation else ""
    return st.one_of(strategy, st.builds(lambda: known_path_parameters(path)))


@pytest.mark.slow
@pytest.mark.usefixtures("fuzz_data")
@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_generated_requests_get_no_5xx_and_answers_that_conform(case: Any, admin_token: str) -> None:
    case.call_and_validate(
        headers={"Authorization": admin_token},
        checks=[not_a_server_error, response_schema_conformance],
    )
