"""Every error of the API is an RFC 9457 problem detail served as `application/problem+json`:
`type` (the page of its code, which the service serves), `title`, `status`, `detail`, `instance`,
and `errors` with a JSON pointer into the request body for each field at fault; the fields v1
clients read (`detail`, `code`, `field`, DRF's `{field: [message]}` entries) are still there."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from scheduler.models import Job
from tests.api.support import V1, client_for, make_user, submit
from tests.factories import chain, make_policy, make_pool, step

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]


def assert_problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["type"] == f"/problems/{code}/" and body["code"] == code
    assert body["status"] == status and body["title"] and body["detail"]
    assert body["instance"] == response.wsgi_request.path
    return body


def test_a_missing_job_is_a_problem_detail() -> None:
    client = client_for(make_user("sam", "submitters"))
    body = assert_problem(client.get(f"{V1}/jobs/00000000-0000-0000-0000-000000000000/"), 404, "not_found")
    assert body["title"] == "Not Found" and "errors" not in body


def test_an_anonymous_request_is_a_problem_detail_that_still_says_how_to_authenticate() -> None:
    response = APIClient().get(f"{V1}/jobs/")
    body = assert_problem(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"] == "Token" and body["title"] == "Unauthorized"


def test_field_errors_list_each_field_with_its_pointer_and_keep_drfs_entries() -> None:
    chain(n=1)
    client = client_for(make_user("sam", "submitters"))
    response = client.post(
        f"{V1}/jobs/batch/",
        {"jobs": [{"workflow": "chain", "input": {}}, {"workflow": "chain", "input": 5, "priority": "high"}]},
        format="json",
    )
    body = assert_problem(response, 400, "invalid")
    where = {(e["field"], e["pointer"]) for e in body["errors"]}
    assert where == {("jobs[1].input", "#/jobs/1/input"), ("jobs[1].priority", "#/jobs/1/priority")}
    assert all(e["detail"] and e["code"] for e in body["errors"])
    # v1's shape is still there: the first error's field and message, and DRF's entries.
    assert body["field"] == "jobs" and body["detail"].startswith("jobs[1].")
    assert body["jobs"]["1"]["input"] and not Job.objects.exists()


def test_an_unknown_field_is_named_in_errors() -> None:
    body = assert_problem(
        client_for(make_user("ada", "administrators")).post(
            f"{V1}/policies/", {"name": "p", "colour": "red"}, format="json"
        ),
        400,
        "invalid",
    )
    assert [(e["field"], e["pointer"]) for e in body["errors"]] == [("colour", "#/colour")]


def test_an_input_contract_keeps_its_pointers_into_the_input_with_a_detail_each() -> None:
    make_pool()
    make_policy("once", max_attempts=1)
    admin = client_for(make_user("ada", "administrators"))
    schema = {"type": "object", "properties": {"amount": {"type": "number", "minimum": 0}}}
    made = admin.post(
        f"{V1}/workflows/",
        {"name": "order", "input_schema": schema, "steps": [step("charge", policy="once")]},
        format="json",
    )
    assert made.status_code == 201, made.json()
    body = assert_problem(submit(admin, "order", {"amount": -5}), 400, "invalid")
    assert [(e["pointer"], e["input_pointer"], e["detail"] == e["message"]) for e in body["errors"]] == [
        ("#/input/amount", "/amount", True)
    ]
    # In a batch, the pointer goes into the item.
    batch = admin.post(
        f"{V1}/jobs/batch/",
        {
            "jobs": [
                {"workflow": "order", "input": {"amount": 1}},
                {"workflow": "order", "input": {"amount": -1}},
            ]
        },
        format="json",
    )
    body = assert_problem(batch, 400, "invalid")
    assert [e["pointer"] for e in body["errors"]] == ["#/jobs/1/input/amount"]


def test_a_state_conflict_and_a_throttled_request_are_problem_details(settings: Any) -> None:
    chain(n=1)
    ops = client_for(make_user("olga", "operators"))
    job = submit(ops, "chain").json()["id"]
    assert ops.post(f"{V1}/jobs/{job}/cancel/").status_code == 200
    assert_problem(ops.post(f"{V1}/jobs/{job}/cancel/"), 409, "not_allowed")
    settings.SAS_THROTTLE_USER = "1/min"
    settings.SAS_THROTTLE_USER_BURST = 1
    answers = [ops.get(f"{V1}/jobs/") for _ in range(3)]
    throttled = [a for a in answers if a.status_code == 429]
    assert throttled, [a.status_code for a in answers]
    assert_problem(throttled[0], 429, "throttled")
    assert int(throttled[0]["Retry-After"]) >= 1


def test_every_problem_type_has_a_page_that_says_what_to_do(client: Any) -> None:
    from sas_project.problems import PROBLEM_TYPES

    index = client.get("/problems/")
    assert index.status_code == 200
    for code, problem in PROBLEM_TYPES.items():
        page = client.get(f"/problems/{code}/")
        assert page.status_code == 200, code
        text = page.content.decode()
        assert f'data-code="{code}"' in text and problem.to_do.split("`")[0][:30] in text
        assert f'href="{code}/"' in index.content.decode()
    assert client.get("/problems/no-such-code/").status_code == 404


def test_every_code_the_service_answers_with_has_a_problem_type() -> None:
    """The service's own errors (every SasError, in every app) and DRF's, which reach the handler."""
    import importlib

    from rest_framework import exceptions

    from sas_project import api
    from sas_project.errors import SasError
    from sas_project.problems import PROBLEM_TYPES

    for module in ("scheduler.callback_tokens", "scheduler.api", "supervisor.api", "agents.api"):
        importlib.import_module(module)
    errors: list[type] = [SasError]
    codes = set()
    while errors:
        cls = errors.pop()
        errors += cls.__subclasses__()
        if cls is not SasError:
            codes.add(cls.code)
    drf = [
        exceptions.ValidationError,
        exceptions.ParseError,
        exceptions.AuthenticationFailed,
        exceptions.NotAuthenticated,
        exceptions.PermissionDenied,
        exceptions.NotFound,
        exceptions.MethodNotAllowed,
        exceptions.NotAcceptable,
        exceptions.UnsupportedMediaType,
        exceptions.Throttled,
        api.PayloadTooLarge,
        api.Conflict,
    ]
    codes |= {cls.default_code for cls in drf}
    assert codes - set(PROBLEM_TYPES) == set()


def test_an_errors_type_resolves_to_its_page(client: Any) -> None:
    sam = client_for(make_user("sam", "submitters"))
    answer = sam.get(f"{V1}/jobs/00000000-0000-0000-0000-000000000000/")
    page = client.get(answer.json()["type"])
    assert page.status_code == 200 and 'data-code="not_found"' in page.content.decode()


def test_a_service_errors_field_is_a_pointer_into_the_body() -> None:
    client = client_for(make_user("ada", "administrators"))
    chain(n=1)
    body = assert_problem(
        client.post(
            f"{V1}/workflows/",
            {"name": "w", "steps": [step("s")], "concurrency": {"key": "", "limit": 1}},
            format="json",
        ),
        400,
        "invalid",
    )
    assert {e["pointer"] for e in body["errors"]} <= {"#/concurrency/key", "#/concurrency"}, body


def test_a_failure_inside_the_api_is_a_problem_detail_with_the_same_members(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from scheduler import api as scheduler_api

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(scheduler_api.JobsView, "get", broken)
    client = client_for(make_user("sam", "submitters"))
    client.raise_request_exception = False
    body = assert_problem(client.get(f"{V1}/jobs/"), 500, "error")
    assert "a bug" not in body["detail"]
