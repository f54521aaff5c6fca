"""REST API: bad input on every write endpoint is a 4xx with a clear message and changes nothing;
never a 500. Also: JSON errors everywhere under /api/, and the browsable API renders."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.conf import settings
from django.contrib.admin.models import LogEntry
from rest_framework.test import APIClient

from agents.models import AgentEndpoint, AgentPool
from scheduler.models import (
    Attempt,
    Event,
    Job,
    PolicyRevision,
    RemediationPolicy,
    Step,
    StepDefinition,
    Workflow,
)
from scheduler.services import job_submit
from tests.api.support import V1, client_for, make_user
from tests.factories import chain

pytestmark = pytest.mark.django_db

MODELS = [
    Job,
    Step,
    Attempt,
    Event,
    Workflow,
    StepDefinition,
    RemediationPolicy,
    PolicyRevision,
    AgentPool,
    AgentEndpoint,
    LogEntry,
]

#: Every write: (method, path). {job} and {step} are filled in with a live job's.
WRITES = [
    ("post", "/jobs/"),
    ("post", "/jobs/{job}/cancel/"),
    ("post", "/jobs/{job}/compensate/"),
    ("post", "/jobs/{job}/pause/"),
    ("post", "/jobs/{job}/resume/"),
    ("post", "/steps/{step}/retry/"),
    ("post", "/steps/{step}/resolve/"),
    ("post", "/policies/"),
    ("put", "/policies/default/"),
    ("patch", "/policies/default/"),
    ("post", "/pools/"),
    ("put", "/pools/local/"),
    ("patch", "/pools/local/"),
    ("post", "/workflows/"),
    ("put", "/workflows/chain/"),
    ("patch", "/workflows/chain/"),
]

DEEP = b"[" * 100_000 + b"]" * 100_000
#: Bodies no endpoint accepts: (what, content type, raw body, expected status, words of the message)
BAD_BODIES: list[tuple[str, str, bytes, int, str]] = [
    ("invalid UTF-8", "application/json", b'{"name": "\xff\xfe"}', 400, "not valid utf-8"),
    ("deep nesting", "application/json", DEEP, 400, "nested too deeply"),
    (
        "nesting over the limit",
        "application/json",
        b"[" * 65 + b"]" * 65,
        400,
        "nesting deeper than 64 levels at $",
    ),
    ("malformed JSON", "application/json", b'{"name": ', 400, "JSON parse error"),
    ("NaN", "application/json", b'{"name": NaN}', 400, "NaN is not valid JSON"),
    (
        "infinity",
        "application/json",
        b'{"timeout_seconds": 1e999}',
        400,
        "a number that is not finite (inf) at $.timeout_seconds",
    ),
    ("NUL character", "application/json", b'{"name": "a\\u0000b"}', 400, "NUL"),
    ("lone surrogate", "application/json", b'{"name": "\\ud800"}', 400, "an unpaired surrogate at $.name"),
    ("a bytes codec", "application/json; charset=bz2_codec", b"{}", 400, "unsupported charset"),
    ("form data", "application/x-www-form-urlencoded", b"name=x", 415, "Content-Type: application/json"),
    ("JSON array", "application/json", b"[1, 2]", 400, "Expected a dictionary"),
    ("JSON string", "application/json", b'"x"', 400, "Expected a dictionary"),
]


def row_counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in MODELS}


@pytest.fixture
def ada() -> APIClient:
    return client_for(make_user("ada", "administrators"))


@pytest.fixture
def live(ada: APIClient) -> Callable[[str], str]:
    """A workflow, a pool, a policy and a running job; returns a function filling in URLs."""
    chain(n=2)
    job = job_submit(workflow="chain", input={}).job
    step_id = job.steps.order_by("id").first().pk  # type: ignore[union-attr]
    return lambda path: V1 + path.format(job=job.pk, step=step_id)


@pytest.mark.parametrize(("method", "path"), WRITES, ids=[f"{m.upper()} {p}" for m, p in WRITES])
def test_a_bad_body_is_refused_with_a_message_and_changes_nothing(
    ada: APIClient, live: Callable[[str], str], method: str, path: str
) -> None:
    before = row_counts()
    for what, content_type, body, expected, message in BAD_BODIES:
        response = ada.generic(method.upper(), live(path), body, content_type=content_type)
        assert response.status_code == expected, (what, response.content[:300])
        error = response.json()
        assert message.lower() in error["detail"].lower() and error["code"], (what, error)
    assert row_counts() == before


@pytest.mark.parametrize(("method", "path"), WRITES, ids=[f"{m.upper()} {p}" for m, p in WRITES])
def test_a_body_over_the_limit_is_a_413_and_changes_nothing(
    ada: APIClient, live: Callable[[str], str], method: str, path: str
) -> None:
    before = row_counts()
    padding = "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    response = ada.generic(
        method.upper(), live(path), f'{{"reason": "{padding}"}}', content_type="application/json"
    )
    assert response.status_code == 413
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert response.json() == {
        "type": "/problems/too_large/",
        "title": "Request Entity Too Large",
        "status": 413,
        "detail": f"The request body is larger than the limit of {limit} bytes.",
        "code": "too_large",
        "instance": response.wsgi_request.path,
    }
    assert row_counts() == before


@pytest.mark.parametrize(("method", "path"), WRITES, ids=[f"{m.upper()} {p}" for m, p in WRITES])
def test_wrong_types_are_a_400_naming_a_field_and_change_nothing(
    ada: APIClient, live: Callable[[str], str], method: str, path: str
) -> None:
    # No field of any write body is a list of numbers.
    fields = ["name", "workflow", "input", "reason", "output", "steps", "kind", "endpoints", "pool"]
    body = {field: [1] for field in [*fields, "timeout_seconds", "description"]}
    before = row_counts()
    response = getattr(ada, method)(live(path), body, format="json")
    assert response.status_code == 400
    assert response.json()["field"] and response.json()["detail"]
    assert row_counts() == before


@pytest.mark.parametrize(
    ("method", "path", "field"),
    [
        ("post", "/jobs/", "workflow"),
        ("post", "/steps/{step}/resolve/", "output"),
        ("post", "/policies/", "name"),
        ("put", "/policies/default/", "timeout_seconds"),
        ("post", "/pools/", "name"),
        ("put", "/pools/local/", "kind"),
        ("post", "/workflows/", "name"),
        ("put", "/workflows/chain/", "description"),
    ],
)
def test_a_missing_required_field_is_a_400_naming_it_and_changes_nothing(
    ada: APIClient, live: Callable[[str], str], method: str, path: str, field: str
) -> None:
    before = row_counts()
    response = getattr(ada, method)(live(path), {}, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert response.json()["detail"] == f"{field}: This field is required."
    assert row_counts() == before


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/jobs/00000000-0000-0000-0000-000000000000/"),
        ("get", "/jobs/00000000-0000-0000-0000-000000000000/events/"),
        ("post", "/jobs/00000000-0000-0000-0000-000000000000/cancel/"),
        ("post", "/steps/123456789/retry/"),
        ("post", "/steps/123456789/resolve/"),
        ("get", "/policies/nope/"),
        ("patch", "/policies/nope/"),
        ("get", "/policies/nope/revisions/"),
        ("get", "/pools/nope/"),
        ("patch", "/pools/nope/"),
        ("get", "/workflows/nope/"),
        ("patch", "/workflows/nope/"),
    ],
)
def test_an_unknown_id_or_name_is_a_404_and_changes_nothing(
    ada: APIClient, live: Callable[[str], str], method: str, path: str
) -> None:
    before = row_counts()
    body = {"output": {}} if path.endswith("resolve/") else {}
    response = getattr(ada, method)(V1 + path, body, format="json")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found" and "does not exist" in response.json()["detail"]
    assert row_counts() == before


@pytest.mark.parametrize(
    "path",
    ["/api/v1/nothing/", "/api/v2/jobs/", "/api/v1/jobs/not-a-uuid/", "/api/v1/steps/-1/retry/", "/api/"],
)
def test_an_unknown_url_under_the_api_is_a_json_404(ada: APIClient, path: str) -> None:
    for method in ("get", "post", "put", "delete"):
        response = getattr(ada, method)(path)
        assert response.status_code == 404
        assert response["Content-Type"] == "application/problem+json"
        assert response.json() == {
            "type": "/problems/not_found/",
            "title": "Not Found",
            "status": 404,
            "detail": "Not found.",
            "code": "not_found",
            "instance": path,
        }


def test_a_missing_trailing_slash_is_pointed_out(ada: APIClient) -> None:
    response = ada.get("/api/v1/jobs")
    assert response.status_code == 404
    assert response.json()["detail"] == "Not found. API URLs end with a slash: /api/v1/jobs/"


def test_a_method_an_endpoint_does_not_have_is_a_405(ada: APIClient, live: Callable[[str], str]) -> None:
    response = ada.delete(live("/jobs/{job}/"))
    assert response.status_code == 405 and response.json()["code"] == "method_not_allowed"


@pytest.mark.parametrize(
    "path",
    [
        "/jobs/",
        "/jobs/{job}/",
        "/jobs/{job}/events/",
        "/policies/",
        "/policies/default/",
        "/policies/default/revisions/",
        "/pools/",
        "/pools/local/",
        "/workflows/",
        "/workflows/chain/",
        "/jobs/{job}/cancel/",
        "/steps/{step}/retry/",
    ],
)
def test_the_browsable_api_renders_for_a_signed_in_user(live: Callable[[str], str], path: str) -> None:
    client = APIClient()
    client.force_login(make_user("sam", "administrators"))
    response = client.get(live(path), HTTP_ACCEPT="text/html")
    assert response.status_code in (200, 405)
    assert response["Content-Type"].startswith("text/html")
    assert client.options(live(path)).status_code == 200
