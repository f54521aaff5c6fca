"""Conditional steps: `when` (JMESPath over `input` and `results`), checked when a workflow is
saved, evaluated when the step is ready; a false condition skips the step with its reason, its
dependents that have only skipped dependencies are skipped too (unless they run anyway), and
compensation leaves skipped steps alone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agents.fake import FakeRemote
from sas_project.errors import InvalidInput
from scheduler.definitions import workflow_create
from scheduler.models import Event, EventKind, Job, JobStatus, Outcome, Step, StepStatus
from scheduler.services import job_submit
from scheduler.services.wakeups import approval_decide
from tests.factories import make_policy, make_pool, make_workflow, step

pytestmark = pytest.mark.django_db
S = StepStatus


def steps_of(job: Job) -> dict[str, Step]:
    return {s.name: s for s in Step.objects.filter(job=job)}


def order(**charge: Any) -> None:
    """reserve -> charge (unless prepaid) -> ship, which runs whether or not the charge did."""
    make_workflow(
        "order",
        step("reserve"),
        {**step("charge", "reserve"), "when": "!(input.prepaid)", **charge},
        {**step("ship", "charge"), "run_if_skipped": True},
    )


@pytest.mark.sqlite
def test_a_false_condition_skips_the_step_with_its_reason_and_the_job_goes_on(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    order()
    paid = job_submit(workflow="order", input={"prepaid": True}).job
    unpaid = job_submit(workflow="order", input={"prepaid": False}).job
    drain()
    for job in (paid, unpaid):
        job.refresh_from_db()
        assert job.status == JobStatus.SUCCEEDED
    skipped = steps_of(paid)["charge"]
    assert skipped.status == S.SKIPPED
    assert skipped.status_reason == "its condition '!(input.prepaid)' is false"
    event = Event.objects.get(step=skipped, kind=EventKind.STEP_SKIPPED)
    assert event.data == {"when": "!(input.prepaid)", "value": False}
    assert [c.payload["step"] for c in fake_remote.calls if c.job_id == str(paid.pk)] == ["reserve", "ship"]
    called = [c.payload["step"] for c in fake_remote.calls if c.job_id == str(unpaid.pk)]
    assert called == ["reserve", "charge", "ship"]
    assert paid.result == {"reserve": paid.result["reserve"], "charge": None, "ship": paid.result["ship"]}


def test_a_step_whose_dependencies_were_all_skipped_is_skipped_unless_it_runs_anyway(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    make_workflow(
        "branches",
        {**step("big"), "when": "input.amount > `100`"},
        step("after_big", "big"),
        {**step("small"), "when": "input.amount <= `100`"},
        {**step("join", "after_big", "small")},
    )
    job = job_submit(workflow="branches", input={"amount": 50}).job
    drain()
    steps = steps_of(job)
    assert steps["big"].status == S.SKIPPED
    assert steps["after_big"].status == S.SKIPPED
    assert steps["after_big"].status_reason == "every step it depends on was skipped (big)"
    # A join after one branch taken and one skipped runs.
    assert (steps["small"].status, steps["join"].status) == (S.SUCCEEDED, S.SUCCEEDED)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED


def test_a_condition_reads_the_results_of_the_steps_it_depends_on(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    make_workflow(
        "after_check",
        step("check"),
        {**step("escalate", "check"), "when": "results.check.risk == 'high'"},
    )
    fake_remote.script("check", Outcome.SUCCEEDED)
    job = job_submit(workflow="after_check", input={}).job
    drain()
    # The fake remote answers {"step": ..., ...}: no `risk`, so the condition is false.
    assert steps_of(job)["escalate"].status == S.SKIPPED


def test_compensation_leaves_skipped_steps_alone(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    make_policy("once", max_attempts=1)
    make_workflow(
        "undo",
        step("reserve"),
        {**step("charge", "reserve"), "when": "input.charge"},
        {**step("ship", "charge", policy="once"), "run_if_skipped": True},
    )
    fake_remote.script("ship", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="undo", input={"charge": False}).job
    drain()
    supervise()  # the refusal is not retried: the policy compensates
    drain()
    job.refresh_from_db()
    steps = steps_of(job)
    assert job.status == JobStatus.COMPENSATED
    assert (steps["reserve"].status, steps["charge"].status) == (S.COMPENSATED, S.SKIPPED)
    assert not Step.objects.filter(job=job, name="charge.compensate").exists()


def test_a_wait_step_may_have_a_condition(drain: Callable[[], int], fake_remote: FakeRemote) -> None:
    make_workflow(
        "refund",
        step("check"),
        {"name": "approve", "kind": "approval", "depends_on": ["check"], "when": "input.amount > `100`"},
        {**step("pay", "approve"), "run_if_skipped": True},
    )
    small = job_submit(workflow="refund", input={"amount": 20}).job
    big = job_submit(workflow="refund", input={"amount": 250}).job
    drain()
    small.refresh_from_db()
    assert small.status == JobStatus.SUCCEEDED and steps_of(small)["approve"].status == S.SKIPPED
    assert steps_of(big)["approve"].status == S.WAITING
    from tests.scheduler.test_waits import operator

    approval_decide(job_id=big.pk, step_name="approve", actor=operator(), approve=True)
    drain()
    big.refresh_from_db()
    assert big.status == JobStatus.SUCCEEDED


def test_a_condition_that_cannot_be_evaluated_holds_the_step(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    make_workflow("odd", {**step("a"), "when": "length(input.n)"})
    job = job_submit(workflow="odd", input={"n": 5}).job
    job.refresh_from_db()
    held = steps_of(job)["a"]
    assert held.status == S.HELD and job.status == JobStatus.NEEDS_ATTENTION
    assert "cannot be evaluated" in held.status_reason


@pytest.mark.parametrize(
    ("when", "message"),
    [
        ("input.(", "not a JMESPath expression"),
        ("", None),
        ("job.amount", "reads 'job'"),
        ("results.later.ok", "results.later, which is not a step it depends on"),
        ("x" * 1001, "1 to 1000 characters"),
    ],
)
def test_a_condition_is_checked_when_the_workflow_is_saved(when: str, message: str | None) -> None:
    make_pool()
    make_policy()
    steps = [step("first"), {**step("second", "first"), "when": when}, step("later", "second")]
    if message is None:
        workflow_create(name="ok", steps=steps)
        return
    with pytest.raises(InvalidInput, match=message):
        workflow_create(name="bad", steps=steps)
