"""Every error of the API is an RFC 9457 problem detail served as `application/problem+json`:
`type` (a URN per code), `title`, `status`, `detail`, `instance`, and `errors` with a JSON
pointer for each field at fault; the fields v1 clients read (`detail`, `code`, `field`, DRF's
`{field: [message]}` entries) are still there."""

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
    assert body["type"] == f"urn:sas:problem:{code}" and body["code"] == code
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
    assert [(e["pointer"], e["detail"] == e["message"]) for e in body["errors"]] == [("/amount", True)]


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
