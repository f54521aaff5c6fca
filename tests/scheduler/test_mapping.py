"""Input mapping and output projection: a step may declare the `input` its remote receives (a
JMESPath expression, or a JSON template whose `.$` keys hold expressions) and which part of the
answer becomes its `output`; both are checked when the workflow is saved, with a 400 naming the
step and the path, and a step without them receives and keeps what it did before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.fake import FakeRemote
from agents.outcome import CallResult, Outcome
from sas_project.errors import InvalidInput
from scheduler.models import Attempt, Event, EventKind, Job, JobStatus, Step, StepStatus
from scheduler.services import job_submit
from tests.api.support import V1, client_for, make_user
from tests.factories import make_policy, make_pool, make_workflow, step

pytestmark = pytest.mark.django_db
S = StepStatus


@pytest.fixture
def ada() -> APIClient:
    return client_for(make_user("ada", "administrators"))


def steps_of(job: Job) -> dict[str, Step]:
    return {s.name: s for s in Step.objects.filter(job=job)}


def order(**charge: Any) -> None:
    make_workflow("order", step("reserve"), {**step("charge", "reserve"), **charge})


@pytest.mark.sqlite
def test_a_template_builds_the_input_the_remote_receives_from_the_job_input_and_results(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    order(input={"amount.$": "input.total", "currency": "EUR", "hold.$": "results.reserve.hold", "n": [1]})
    fake_remote.script("reserve", CallResult(Outcome.SUCCEEDED, output={"hold": "H-7"}))
    job = job_submit(workflow="order", input={"total": 42, "secret": "x"}).job
    drain()
    (call,) = fake_remote.calls_for("charge")
    assert call.payload["input"] == {"amount": 42, "currency": "EUR", "hold": "H-7", "n": [1]}
    # The mapped input replaces the whole job input and the ancestors' results.
    assert "results" not in call.payload
    assert call.payload["operation_id"] == steps_of(job)["charge"].operation_id
    # A step without a mapping receives what it always did.
    (reserve,) = fake_remote.calls_for("reserve")
    assert reserve.payload["input"] == {"total": 42, "secret": "x"} and reserve.payload["results"] == {}


def test_an_expression_mapping_sends_its_value_and_an_output_projection_keeps_part_of_the_answer(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    make_workflow(
        "order",
        {**step("reserve"), "output": "{hold: output.hold, amount: input.total}"},
        {**step("charge", "reserve"), "input": "results.reserve"},
    )
    fake_remote.script("reserve", CallResult(Outcome.SUCCEEDED, output={"hold": "H-1", "noise": [1, 2]}))
    job = job_submit(workflow="order", input={"total": 9}).job
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert steps_of(job)["reserve"].output == {"hold": "H-1", "amount": 9}
    (call,) = fake_remote.calls_for("charge")
    assert call.payload["input"] == {"hold": "H-1", "amount": 9}


def test_the_undo_of_a_mapped_step_receives_the_same_mapped_input_and_the_projected_output(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    make_policy("once", max_attempts=1)
    make_workflow(
        "order",
        {**step("charge"), "input": {"amount.$": "input.total"}, "output": "output.charge_id"},
        step("ship", "charge", policy="once"),
    )
    fake_remote.script("charge", CallResult(Outcome.SUCCEEDED, output={"charge_id": "C-1", "fee": 1}))
    fake_remote.script("ship", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="order", input={"total": 5}).job
    drain()
    supervise()
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPENSATED
    (undo,) = [c for c in fake_remote.calls if c.payload.get("compensates")]
    assert undo.payload["input"] == {"amount": 5}
    assert undo.payload["original_output"] == "C-1"


def test_a_mapping_that_cannot_be_evaluated_fails_the_step_without_calling_the_remote(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    order(input={"total.$": "sum(input.lines)"})  # a sum of strings: a type error at run time
    job = job_submit(workflow="order", input={"lines": ["a", "b"]}).job
    drain()
    charge = steps_of(job)["charge"]
    assert fake_remote.calls_for("charge") == []
    attempt = Attempt.objects.get(step=charge)
    assert attempt.outcome == Outcome.BUSINESS_FAILURE
    assert attempt.error.startswith("the step's input mapping cannot be evaluated")


def test_an_output_projection_that_cannot_be_evaluated_holds_the_step_and_keeps_the_answer(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    order(output="sum(output.fees)")
    fake_remote.script("charge", CallResult(Outcome.SUCCEEDED, output={"fees": ["x"]}))
    job = job_submit(workflow="order", input={}).job
    drain()
    charge = steps_of(job)["charge"]
    job.refresh_from_db()
    assert charge.status == S.HELD and job.status == JobStatus.NEEDS_ATTENTION
    assert charge.status_reason.startswith("its output expression 'sum(output.fees)' cannot be evaluated")
    held = Event.objects.get(step=charge, kind=EventKind.STEP_HELD)
    assert held.data == {"answer": {"fees": ["x"]}}
    assert Attempt.objects.get(step=charge).outcome == Outcome.SUCCEEDED


@pytest.mark.parametrize(
    ("charge", "message"),
    [
        ({"input": {"amount.$": "input.total +"}}, "step 'charge' input.amount.$: not a JMESPath expression"),
        ({"input": {"a": {"b.$": "secrets.key"}}}, "step 'charge' input.a.b.$ reads 'secrets'"),
        ({"input": {"x.$": "results.ship.id"}}, "step 'charge' input.x.$ reads results.ship"),
        ({"input": {"x.$": "item"}}, "step 'charge' input.x.$ reads 'item'"),
        ({"input": {"x": 1, "x.$": "input.x"}}, "both 'x' and 'x.$' are given"),
        ({"input": 7}, "step 'charge' input must be an expression (a string) or a JSON object or list"),
        ({"output": "results.ship"}, "step 'charge' output reads results.ship"),
        ({"output": "answer.id"}, "step 'charge' output reads 'answer'"),
        ({"when": "input.a && !input.prepaid"}, "step 'charge' when: `!` binds tighter than `.`"),
    ],
)
def test_a_mapping_is_checked_when_the_workflow_is_saved(charge: dict[str, Any], message: str) -> None:
    make_workflow("base", step("reserve"))
    with pytest.raises(InvalidInput) as caught:
        make_workflow(
            "order", step("reserve"), {**step("charge", "reserve"), **charge}, step("ship", "charge")
        )
    assert message in caught.value.message


def test_the_definitions_api_answers_a_bad_mapping_with_a_400_naming_the_step_and_path(
    ada: APIClient,
) -> None:
    make_pool("local")
    make_policy("default")
    body = {
        "name": "order",
        "steps": [
            {
                "name": "charge",
                "pool": "local",
                "path": "agents.builtin.noop",
                "policy": "default",
                "input": {"amount.$": "input.total +"},
            }
        ],
    }
    response = ada.post(f"{V1}/workflows/", body, format="json")
    assert response.status_code == 400
    assert "step 'charge' input.amount.$" in str(response.json())
    body["steps"][0]["input"] = {"amount.$": "input.total"}
    body["steps"][0]["output"] = "output.id"
    response = ada.post(f"{V1}/workflows/", body, format="json")
    assert response.status_code == 201, response.json()
    charge = response.json()["steps"][0]
    assert (charge["input"], charge["output"]) == ({"amount.$": "input.total"}, "output.id")


# --- what an expression may cost --------------------------------------------------------------

DOUBLING = "input.s" + " | join('', [@, @])" * 25  # 482 characters: 4 bytes become 128 MiB
SHARING = "input" + " | [@, @]" * 40  # references only: 2^40 copies in its JSON


@pytest.mark.parametrize(
    ("mapping", "expected"),
    [
        ({"input": {"blob.$": DOUBLING}}, "join would make a string of"),
        ({"input": SHARING}, "larger than 1048576 bytes of JSON"),
        ({"input": {"a.$": "to_string(" + SHARING + ")"}}, "larger than 1048576 bytes of JSON"),
        # Each value under the limit, the template's values together over it.
        ({"input": {f"k{i}.$": "input.half" for i in range(3)}}, "larger than"),
    ],
)
def test_an_expression_making_a_value_past_the_limit_fails_the_step_without_calling_the_remote(
    drain: Callable[[], int], fake_remote: FakeRemote, mapping: dict[str, Any], expected: str
) -> None:
    order(**mapping)
    job = job_submit(workflow="order", input={"s": "abcd", "half": "x" * 500_000}).job
    drain()
    charge = steps_of(job)["charge"]
    assert fake_remote.calls_for("charge") == []
    attempt = Attempt.objects.get(step=charge)
    assert attempt.outcome == Outcome.BUSINESS_FAILURE
    assert (
        attempt.error.startswith("the step's input mapping cannot be evaluated") and expected in attempt.error
    )


def test_an_expression_nested_past_the_parsers_depth_is_a_400_on_save_never_a_500(ada: APIClient) -> None:
    make_pool("local")
    make_policy("default")
    for expression in ("!" * 998 + "@", "(" * 490 + "input" + ")" * 490):
        body = {
            "name": "order",
            "steps": [
                {
                    "name": "charge",
                    "pool": "local",
                    "path": "agents.builtin.noop",
                    "policy": "default",
                    "when": expression,
                }
            ],
        }
        response = ada.post(f"{V1}/workflows/", body, format="json")
        assert response.status_code == 400, response.content[:200]
        assert (
            "nests too deeply" in response.json()["detail"]
            or "1 to 1000 characters" in response.json()["detail"]
        )
