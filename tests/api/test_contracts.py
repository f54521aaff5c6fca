"""Input contracts: a workflow's JSON Schema (2020-12), checked when saved, and every input that
enters checked against it (submission, schedule, an operator's edited retry, a rerun) with a 400
listing each error's JSON pointer, creating nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.fake import FakeRemote
from scheduler.models import Job, Outcome, Schedule, Step, StepStatus, Workflow
from tests.api.support import V1, client_for, make_user, submit
from tests.factories import make_policy, make_pool, step

pytestmark = pytest.mark.django_db

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["order", "amount"],
    "properties": {
        "order": {"type": "integer"},
        "amount": {"type": "number", "minimum": 0},
        "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}},
    },
    "$defs": {"line": {"type": "object", "required": ["sku"], "properties": {"sku": {"type": "string"}}}},
}


@pytest.fixture
def admin() -> APIClient:
    return client_for(make_user("ada", "administrators"))


@pytest.fixture
def sam() -> APIClient:
    return client_for(make_user("sam", "submitters"))


def define(admin: APIClient, schema: Any = SCHEMA, name: str = "order") -> Any:
    make_pool()
    make_policy("once", max_attempts=1, on_exhausted="hold")
    body = {"name": name, "input_schema": schema, "steps": [step("charge", policy="once")]}
    return admin.post(f"{V1}/workflows/", body, format="json")


@pytest.mark.sqlite
def test_a_submission_that_breaks_the_contract_is_a_400_with_each_pointer_and_creates_nothing(
    admin: APIClient, sam: APIClient, drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    assert define(admin).status_code == 201
    bad = {"order": "1001", "amount": -5, "lines": [{"sku": "A"}, {"qty": 2}]}
    response = submit(sam, "order", bad)
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == "input" and "does not match the workflow's input_schema" in body["detail"]
    pointers = {e["input_pointer"] for e in body["errors"]}
    assert pointers == {"/order", "/amount", "/lines/1"}
    assert not Job.objects.exists()
    missing = submit(sam, "order", {})
    assert {e["input_pointer"] for e in missing.json()["errors"]} == {""}
    good = submit(sam, "order", {"order": 1001, "amount": 25, "lines": [{"sku": "A"}]})
    assert good.status_code == 201, good.json()
    drain()
    assert Job.objects.get().status == "succeeded"


def test_the_schema_is_read_back_kept_by_patch_and_dropped_by_a_put_without_it(admin: APIClient) -> None:
    define(admin)
    assert admin.get(f"{V1}/workflows/order/").json()["input_schema"] == SCHEMA
    patched = admin.patch(f"{V1}/workflows/order/", {"description": "v2"}, format="json")
    assert patched.status_code == 200 and patched.json()["input_schema"] == SCHEMA
    steps = patched.json()["steps"]
    put = admin.put(
        f"{V1}/workflows/order/",
        {"description": "v3", "deadline_seconds": None, "steps": steps},
        format="json",
    )
    assert put.status_code == 200, put.json()
    assert put.json()["input_schema"] is None
    assert list(Workflow.objects.filter(name="order").values_list("version", flat=True)) == [3, 2, 1]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "objekt"}, "not a JSON Schema (2020-12) at /type"),
        ({"$ref": "https://example.com/schema.json"}, "may refer only inside itself"),
        ({"properties": {"a": {"$ref": "http://169.254.169.254/"}}}, "may refer only inside itself"),
        ([1, 2], "must be a JSON Schema object"),
        ({"description": "x" * 70_000}, "larger than 64 KiB"),
    ],
)
def test_a_bad_schema_is_refused_when_the_workflow_is_saved(
    admin: APIClient, schema: Any, message: str
) -> None:
    response = define(admin, schema)
    assert response.status_code == 400
    assert message in response.json()["detail"]
    assert not Workflow.objects.exists()


def test_a_schedule_whose_input_breaks_the_contract_is_refused(admin: APIClient, sam: APIClient) -> None:
    define(admin)
    body = {"name": "nightly", "workflow": "order", "cron": "0 3 * * *", "input": {"order": 1}}
    response = sam.post(f"{V1}/schedules/", body, format="json")
    assert response.status_code == 400
    assert [e["input_pointer"] for e in response.json()["errors"]] == [""]
    assert not Schedule.objects.exists()
    body["input"] = {"order": 1, "amount": 3}
    assert sam.post(f"{V1}/schedules/", body, format="json").status_code == 201


def test_an_edited_retry_and_a_rerun_are_held_to_the_contract(
    admin: APIClient,
    sam: APIClient,
    drain: Callable[[], int],
    fake_remote: FakeRemote,
    supervise: Callable[..., Any],
) -> None:
    define(admin)
    olga = client_for(make_user("olga", "operators"))
    fake_remote.script("charge", Outcome.BUSINESS_FAILURE)
    job_id = submit(sam, "order", {"order": 1, "amount": 3}).json()["id"]
    drain()
    supervise()
    charge = Step.objects.get(job_id=job_id, name="charge")
    assert charge.status == StepStatus.HELD
    refused = olga.post(
        f"{V1}/steps/{charge.pk}/retry/", {"input": {"order": 1, "amount": "three"}}, format="json"
    )
    assert refused.status_code == 400 and refused.json()["errors"][0]["input_pointer"] == "/amount"
    charge.refresh_from_db()
    assert charge.status == StepStatus.HELD and charge.input_override is None
    olga.post(f"{V1}/jobs/{job_id}/compensate/", {"reason": "x"}, format="json")
    drain()
    rerun = olga.post(
        f"{V1}/jobs/{job_id}/rerun/", {"from_step": "charge", "input": {"order": "x"}}, format="json"
    )
    assert rerun.status_code == 400 and Job.objects.count() == 1


# --- the work a check may cost ----------------------------------------------------------------


def _deep(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    for _ in range(depth):
        schema = {"not": schema}
    return schema


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"$ref": "#"}, "refers to itself without consuming any input"),
        ({"allOf": [{"$ref": "#/$defs/a"}], "$defs": {"a": {"anyOf": [{"$ref": "#"}]}}}, "without consuming"),
        (
            {"$defs": {"a": {"$anchor": "loop", "not": {"$ref": "#loop"}}}, "$ref": "#loop"},
            "without consuming",
        ),
        ({"type": "string", "pattern": "^(a)\\1$"}, "cannot run in linear time"),
        ({"patternProperties": {"(?=x)": {}}}, "cannot run in linear time"),
        (
            {"patternProperties": {"^x": {}}, "properties": {"a": {"unevaluatedProperties": False}}},
            "may not combine patternProperties with unevaluatedProperties",
        ),
        (_deep(900), "nested too deeply"),
    ],
)
def test_a_schema_whose_check_could_not_end_in_linear_time_is_refused_on_save(
    admin: APIClient, schema: Any, message: str
) -> None:
    response = define(admin, schema)
    assert response.status_code == 400, response.json()
    assert message in response.json()["detail"]
    assert not Workflow.objects.exists()


def test_a_recursive_schema_that_consumes_input_is_accepted_and_checks(
    admin: APIClient, sam: APIClient
) -> None:
    tree = {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#"}}}}
    assert define(admin, tree).status_code == 201
    bad = submit(sam, "order", {"children": [{"children": [{"children": 5}]}]})
    assert bad.status_code == 400
    assert [e["input_pointer"] for e in bad.json()["errors"]] == ["/children/0/children/0/children"]


def test_a_backtracking_pattern_runs_in_linear_time_on_any_submitters_input(
    admin: APIClient, sam: APIClient
) -> None:
    """`^(a+)+$` against 50,000 a's and a b: Python's `re` would backtrack for longer than the
    universe; RE2 answers at once, for the value and for the keys of patternProperties."""
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "pattern": "^(a+)+$"}},
        "patternProperties": {"^(a+)+$": {"type": "integer"}},
        "additionalProperties": {"type": "boolean"},
    }
    assert define(admin, schema).status_code == 201
    evil = "a" * 50_000 + "b"
    response = submit(sam, "order", {"name": evil, evil: "x", "aaa": "y"})
    assert response.status_code == 400
    # "aaa" matches the pattern (so must be an integer), the long key does not (so a boolean).
    assert [e["input_pointer"] for e in response.json()["errors"]] == ["/aaa", f"/{evil}", "/name"]
    assert submit(sam, "order", {"name": "aaaa", "aa": 1, "other": True}).status_code == 201


def test_unique_items_compares_canonical_forms_once_each_never_every_pair(
    admin: APIClient, sam: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """jsonschema compares every pair of items (4,000 objects: 46 s); the check hashes each
    item's canonical form once. Its answers are JSON Schema's equality: keys in any order, 1 and
    1.0 equal, true and 1 not."""

    def every_pair(*args: Any) -> Any:
        raise AssertionError("jsonschema's pairwise uniqueItems ran")

    monkeypatch.setattr("jsonschema._keywords.uniq", every_pair)
    schema = {"type": "object", "properties": {"lines": {"type": "array", "uniqueItems": True}}}
    assert define(admin, schema).status_code == 201

    def lines(*items: Any) -> Any:
        return submit(sam, "order", {"lines": list(items)})

    items = [{"sku": f"S{i}", "lines": [i, {"q": i}]} for i in range(4000)]
    assert lines(*items).status_code == 201
    twin = {"lines": [3999, {"q": 3999.0}], "sku": "S3999"}
    refused = lines(*items, twin)
    assert refused.status_code == 400 and "items 3999 and 4000 are equal" in refused.json()["detail"]
    assert refused.json()["errors"][0]["input_pointer"] == "/lines"
    assert lines(1, True, "1", [1], {"1": 1}).status_code == 201
    assert lines(0, False).status_code == 201
    assert lines(1, 1.0).status_code == 400


def test_a_schema_stored_before_the_checks_on_save_answers_400_never_500(
    admin: APIClient, sam: APIClient
) -> None:
    assert define(admin).status_code == 201
    Workflow.objects.filter(name="order").update(input_schema={"$ref": "#"})
    response = submit(sam, "order", {"order": 1, "amount": 1})
    assert response.status_code == 400
    assert "input_schema cannot be applied" in response.json()["detail"]
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_contract_is_checked_before_the_submissions_transaction_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its work is the web process's CPU: no transaction (no snapshot, no connection held in one)
    waits on it. Checked once; again inside only if the workflow's contract changed meanwhile."""
    from django.db import connection

    from scheduler import contracts
    from scheduler.services import job_submit
    from tests.factories import make_workflow
    from tests.factories import step as a_step

    make_pool()
    make_policy("once", max_attempts=1, on_exhausted="hold")
    make_workflow("order", a_step("charge", policy="once"))
    Workflow.objects.filter(name="order").update(input_schema=SCHEMA)
    seen: list[bool] = []
    real = contracts.input_check

    def watched(schema: Any, value: Any, **options: Any) -> None:
        seen.append(connection.in_atomic_block)
        real(schema, value, **options)

    monkeypatch.setattr(contracts, "input_check", watched)
    job_submit(workflow="order", input={"order": 1, "amount": 2})
    assert seen == [False]
    with pytest.raises(Exception, match="does not match"):
        job_submit(workflow="order", input={"order": "x"})
    assert seen == [False, False] and Job.objects.count() == 1
