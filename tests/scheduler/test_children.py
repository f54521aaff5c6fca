"""Sub-workflow steps: a step starts a child job and waits for it; the child's end settles it once;
cancelling or compensating the parent reaches the child; a retried or redelivered start never
makes a second child."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import override_settings
from django.utils.module_loading import import_string
from django_q.models import OrmQ

from agents.broker import task_of
from agents.fake import FakeRemote
from sas_project.permissions import role_groups_ensure
from scheduler.models import Event, EventKind, Job, JobStatus, Step, StepStatus
from scheduler.outbox import CHILD_SETTLED_TASK, CHILD_START_TASK
from scheduler.services import job_submit
from scheduler.services.children import child_advance
from scheduler.tasks import settle_child, start_child
from supervisor.scan import ScanReport
from supervisor.services import job_cancel, job_compensate, step_retry
from tests.factories import make_policy, make_workflow, step

pytestmark = pytest.mark.django_db
S = StepStatus
J = JobStatus
Drain = Callable[[], int]


def operator(name: str = "olga") -> User:
    role_groups_ensure()
    user = User.objects.create_user(name)
    user.groups.add(Group.objects.get(name="operators"))
    return user


def refund_workflows(*, child: dict[str, Any] | None = None, **sub: Any) -> None:
    """refund: [credit, notify]; order: charge -> refund (a sub-workflow step) -> close."""
    make_workflow("refund", step("credit"), step("notify", "credit"))
    make_workflow(
        "order",
        step("charge"),
        {"name": "refund", "kind": "workflow", "workflow": "refund", "depends_on": ["charge"], **sub},
        step("close", "refund"),
    )


def steps_of(job: Job) -> dict[str, Step]:
    return {s.name: s for s in Step.objects.filter(job=job).select_related("definition")}


def child_of(job: Job) -> Job:
    return Job.objects.get(parent_job=job)


def run(drain: Drain, supervise: Callable[..., ScanReport], rounds: int = 4) -> None:
    """Tasks and scans until nothing is left to do (a failed call waits for the scan's decision)."""
    for _ in range(rounds):
        drain()
        supervise()
    drain()


def run_all_but(lost: str) -> None:
    """Run the queued tasks, in order, except those of function `lost`, which are dropped."""
    while (row := OrmQ.objects.order_by("id").first()) is not None:
        row.delete()
        task = task_of(row.payload)
        if task["func"] != lost:
            import_string(task["func"])(*task["args"])


def kinds(job: Job, kind: str) -> int:
    return Event.objects.filter(job=job, kind=kind).count()


@pytest.mark.sqlite
def test_a_workflow_step_starts_a_child_and_its_success_settles_the_step_with_the_childs_result(
    drain: Drain, fake_remote: FakeRemote
) -> None:
    refund_workflows()
    job = job_submit(workflow="order", input={"order": 7}).job
    drain()
    job.refresh_from_db()
    child = child_of(job)
    steps = steps_of(job)
    assert child.parent_step == "refund" and child.input == {"order": 7}
    assert child.status == J.SUCCEEDED
    assert steps["refund"].status == S.SUCCEEDED
    assert steps["refund"].output == child.result == {"credit": {"ok": "credit"}, "notify": {"ok": "notify"}}
    assert job.status == J.SUCCEEDED and job.result["refund"] == child.result
    # The child's operation IDs derive from the parent step's.
    op = steps["refund"].operation_id
    assert {s.operation_id for s in child.steps.all()} == {f"{op}/credit", f"{op}/notify"}
    started = Event.objects.get(job=job, kind=EventKind.CHILD_STARTED)
    assert started.data["child_job"] == str(child.pk) and started.step_id == steps["refund"].pk
    assert kinds(job, EventKind.CHILD_SUCCEEDED) == 1
    # The close step saw the child's result as its ancestor's output.
    assert fake_remote.calls_for("close")[0].payload["results"]["refund"] == child.result


def test_a_workflow_step_waits_holding_no_worker_and_names_its_child(
    drain: Drain, fake_remote: FakeRemote
) -> None:
    refund_workflows()
    fake_remote.script("credit", "transient_failure")
    job = job_submit(workflow="order", input={}).job
    drain()
    refund = steps_of(job)["refund"]
    child = child_of(job)
    assert refund.status == S.WAITING and refund.pool is None and not refund.attempt
    assert refund.status_reason == f"waiting for child job {child.pk} (workflow 'refund')"
    assert child.status == J.RUNNING


def test_an_output_projection_takes_part_of_the_childs_result(drain: Drain, fake_remote: FakeRemote) -> None:
    refund_workflows(output="output.credit")
    job = job_submit(workflow="order", input={}).job
    drain()
    assert steps_of(job)["refund"].output == {"ok": "credit"}


def test_the_input_mapping_builds_the_childs_input_from_the_input_and_the_results(
    drain: Drain, fake_remote: FakeRemote
) -> None:
    refund_workflows(input={"amount.$": "input.total", "charged.$": "results.charge.ok", "why": "refund"})
    job = job_submit(workflow="order", input={"total": 40, "secret": "x"}).job
    drain()
    child = child_of(job)
    assert child.input == {"amount": 40, "charged": "charge", "why": "refund"}
    assert fake_remote.calls_for("credit")[0].payload["input"] == child.input


def test_a_child_failure_fails_the_step_and_its_policy_decides_the_job(
    drain: Drain, fake_remote: FakeRemote, supervise: Callable[..., ScanReport]
) -> None:
    make_policy("fail-fast", max_attempts=1, on_exhausted="fail")
    refund_workflows(policy="fail-fast")
    fake_remote.script("credit", "business_failure")
    job = job_submit(workflow="order", input={}).job
    run(drain, supervise)
    job.refresh_from_db()
    child = child_of(job)
    refund = steps_of(job)["refund"]
    assert child.status == J.COMPENSATED
    assert refund.status == S.FAILED and refund.error == f"child job {child.pk} compensated"
    # The step's policy says fail: the parent fails without compensating its charge.
    assert job.status == J.FAILED and "charge" not in fake_remote.compensations()
    assert kinds(job, EventKind.CHILD_FAILED) == 1


def test_a_child_failure_without_a_policy_compensates_the_parent(
    drain: Drain, fake_remote: FakeRemote, supervise: Callable[..., ScanReport]
) -> None:
    refund_workflows()
    fake_remote.script("credit", "business_failure")
    job = job_submit(workflow="order", input={}).job
    run(drain, supervise)
    job.refresh_from_db()
    assert job.status == J.COMPENSATED and fake_remote.compensations() == ["charge"]
    assert steps_of(job)["close"].status == S.SKIPPED


def test_a_redelivered_start_or_settle_never_makes_a_second_child_nor_a_second_settling(
    drain: Drain, fake_remote: FakeRemote
) -> None:
    refund_workflows()
    job = job_submit(workflow="order", input={}).job
    drain()
    refund = steps_of(job)["refund"]
    # The tasks delivered again (django-q2's redelivery, a worker killed after its commit).
    assert start_child(refund.pk) == "ignored"
    assert settle_child(refund.pk) == "ignored"
    drain()
    assert Job.objects.filter(parent_job=job).count() == 1
    assert kinds(job, EventKind.CHILD_STARTED) == kinds(job, EventKind.CHILD_SUCCEEDED) == 1


def test_a_start_delivered_twice_before_the_child_settles_starts_it_once(
    drain: Drain, fake_remote: FakeRemote
) -> None:
    refund_workflows()
    fake_remote.script("credit", "transient_failure")
    job = job_submit(workflow="order", input={}).job
    drain()
    refund = steps_of(job)["refund"]
    assert child_advance(refund.pk) == "waiting"
    assert Job.objects.filter(parent_job=job).count() == 1
    assert kinds(job, EventKind.CHILD_STARTED) == 1


def test_an_operator_retry_of_the_step_whose_child_failed_starts_a_new_child(
    drain: Drain, fake_remote: FakeRemote, supervise: Callable[..., ScanReport]
) -> None:
    make_policy("hold", max_attempts=1, on_exhausted="hold")
    refund_workflows(policy="hold")
    fake_remote.script("credit", "business_failure", "business_failure")
    job = job_submit(workflow="order", input={}).job
    run(drain, supervise)
    refund = steps_of(job)["refund"]
    child = child_of(job)
    assert refund.status == S.HELD and child.status == J.COMPENSATED
    step_retry(actor=operator(), step_id=refund.pk, reason="try again")
    run(drain, supervise)
    refund = steps_of(job)["refund"]
    # A second child, the step's next try, under its own operation IDs; it failed too: held again.
    second = Job.objects.get(parent_job=job, parent_try=1)
    assert Job.objects.filter(parent_job=job).count() == 2
    assert {s.operation_id for s in second.steps.all()} == {f"{refund.operation_id}/retry-1/credit"} | {
        f"{refund.operation_id}/retry-1/notify"
    }
    assert refund.status == S.HELD and refund.attempt == 1
    assert kinds(job, EventKind.CHILD_FAILED) == 2


def test_an_operator_retry_of_a_step_whose_child_succeeded_waits_for_the_same_child(
    drain: Drain, fake_remote: FakeRemote, supervise: Callable[..., ScanReport]
) -> None:
    make_policy("hold", max_attempts=1, on_exhausted="hold")
    refund_workflows(policy="hold", output="sum(output.credit)")
    job = job_submit(workflow="order", input={}).job
    run(drain, supervise)
    refund = steps_of(job)["refund"]
    assert refund.status == S.HELD and child_of(job).status == J.SUCCEEDED
    step_retry(actor=operator(), step_id=refund.pk, reason="look again")
    run(drain, supervise)
    assert Job.objects.filter(parent_job=job).count() == 1


def test_cancelling_the_parent_cancels_its_live_child_and_the_step_settles_when_the_child_does(
    drain: Drain, fake_remote: FakeRemote
) -> None:
    refund_workflows()
    fake_remote.script("notify", "transient_failure")
    job = job_submit(workflow="order", input={}).job
    drain()
    child = child_of(job)
    assert child.status == J.RUNNING
    job_cancel(actor=operator(), job_id=job.pk, reason="customer called")
    child.refresh_from_db()
    assert child.status in (J.COMPENSATING, J.CANCELLED) and child.compensation_reason == "cancel"
    drain()
    job.refresh_from_db()
    child.refresh_from_db()
    assert child.status == J.CANCELLED
    # The child's saga undid its credit; the parent's undid its charge, after its step settled.
    # (notify's call failed without a refusal: it may have had an effect, so it is undone too.)
    assert sorted(fake_remote.compensations()) == ["charge", "credit", "notify"]
    assert steps_of(job)["refund"].status == S.FAILED
    assert job.status == J.CANCELLED
    assert kinds(job, EventKind.CHILD_FAILED) == 1


def test_compensating_the_parent_compensates_its_live_child(drain: Drain, fake_remote: FakeRemote) -> None:
    refund_workflows()
    fake_remote.script("notify", "transient_failure")
    job = job_submit(workflow="order", input={}).job
    drain()
    job_compensate(actor=operator(), job_id=job.pk, reason="wrong order")
    drain()
    job.refresh_from_db()
    child = child_of(job)
    assert child.status == J.COMPENSATED and child.compensation_reason == "parent"
    assert job.status == J.COMPENSATED
    assert sorted(fake_remote.compensations()) == ["charge", "credit", "notify"]


def test_a_child_deeper_than_the_limit_fails_the_step_naming_the_limit(
    drain: Drain, fake_remote: FakeRemote
) -> None:
    make_workflow("leaf", step("a"))
    make_workflow("middle", {"name": "inner", "kind": "workflow", "workflow": "leaf"})
    make_workflow("top", {"name": "outer", "kind": "workflow", "workflow": "middle"})
    with override_settings(SAS_MAX_WORKFLOW_DEPTH=1):
        job = job_submit(workflow="top", input={}).job
        drain()
    middle = child_of(job)
    inner = steps_of(middle)["inner"]
    assert inner.status == S.FAILED and "SAS_MAX_WORKFLOW_DEPTH" in inner.error
    assert "at most 1 deep" in inner.status_reason
    assert not Job.objects.filter(parent_job=middle).exists()
    middle.refresh_from_db()
    job.refresh_from_db()
    # No policy: the middle job compensates, and its failure fails (and compensates) the top one.
    assert middle.status == J.COMPENSATED and job.status == J.COMPENSATED


@pytest.mark.sqlite
def test_workflows_that_call_each_other_stop_at_the_submissions_budget_of_jobs(
    drain: Drain, fake_remote: FakeRemote
) -> None:
    """A -> B -> A -> ...: depth alone bounds such a chain (and, fanned out, 100^5 jobs from one
    request); the submission's budget of jobs below it stops it, naming the limit."""
    make_workflow("ping", step("a"))
    make_workflow("pong", {"name": "back", "kind": "workflow", "workflow": "ping"})
    make_workflow("ping", {"name": "there", "kind": "workflow", "workflow": "pong"})  # a new version
    with override_settings(SAS_MAX_WORKFLOW_DEPTH=50, SAS_MAX_DESCENDANT_JOBS=3):
        job = job_submit(workflow="ping", input={}).job
        for _ in range(6):
            drain()
    chain = [job]
    while (below := Job.objects.filter(parent_job=chain[-1]).first()) is not None:
        chain.append(below)
    assert len(chain) == 4  # the submitted job and the three its budget allows
    last = steps_of(chain[-1])
    (refused,) = last.values()
    assert refused.status == S.FAILED and "SAS_MAX_DESCENDANT_JOBS" in refused.error
    failed = Event.objects.get(step=refused, kind=EventKind.STEP_FAILED)
    assert failed.data["limit"] == 3 and failed.data["root_job"] == str(job.pk)


def test_a_child_input_that_breaks_the_child_workflows_schema_fails_the_step_with_the_errors(
    drain: Drain, fake_remote: FakeRemote
) -> None:
    refund_workflows(input={"amount.$": "input.total"})
    refund = Job.objects.none()  # for mypy's sake: the workflow is changed below
    del refund
    from scheduler.models import Workflow

    Workflow.objects.filter(name="refund").update(
        input_schema={"type": "object", "required": ["amount"], "properties": {"amount": {"type": "integer"}}}
    )
    job = job_submit(workflow="order", input={"total": "forty"}).job
    drain()
    step_ = steps_of(job)["refund"]
    assert step_.status == S.FAILED and "input_schema" in step_.error and "/amount" in step_.error
    assert not Job.objects.filter(parent_job=job).exists()
    failed = Event.objects.get(job=job, step=step_, kind=EventKind.STEP_FAILED)
    assert failed.data["errors"][0]["pointer"] == "/amount"
    job.refresh_from_db()
    assert job.status == J.COMPENSATED


def test_the_scan_settles_a_step_whose_settling_task_was_lost(
    drain: Drain, fake_remote: FakeRemote, supervise: Callable[..., ScanReport]
) -> None:
    refund_workflows()
    fake_remote.script("notify", "transient_failure")
    job = job_submit(workflow="order", input={}).job
    drain()
    child = child_of(job)
    supervise()  # the child's notify is retried, and succeeds
    # Every task runs but the child's settling one: lost with the worker that took it.
    run_all_but(CHILD_SETTLED_TASK)
    child.refresh_from_db()
    assert child.status == J.SUCCEEDED
    assert steps_of(job)["refund"].status == S.WAITING
    with override_settings(SAS_SUPERVISOR_INTERVAL=0):
        report = supervise()
    assert report.decisions.get("child_succeeded") == 1
    drain()
    job.refresh_from_db()
    assert job.status == J.SUCCEEDED and kinds(job, EventKind.CHILD_SUCCEEDED) == 1


def test_the_scan_starts_the_child_of_a_step_whose_start_task_was_lost(
    fake_remote: FakeRemote, drain: Drain, supervise: Callable[..., ScanReport]
) -> None:
    refund_workflows()
    job = job_submit(workflow="order", input={}).job
    run_all_but(CHILD_START_TASK)  # the start task is lost with the worker that took it
    assert steps_of(job)["refund"].status == S.WAITING and not Job.objects.filter(parent_job=job).exists()
    with override_settings(SAS_SUPERVISOR_INTERVAL=0):
        report = supervise()
    assert report.decisions.get("child_started") == 1
    drain()
    job.refresh_from_db()
    assert job.status == J.SUCCEEDED


# --- undoing a child that succeeded -------------------------------------------------------------------


def test_a_parent_whose_later_step_fails_compensates_its_succeeded_child_in_reverse_order(
    drain: Drain, fake_remote: FakeRemote, supervise: Callable[..., ScanReport]
) -> None:
    refund_workflows()
    fake_remote.script("close", "business_failure")
    job = job_submit(workflow="order", input={}).job
    run(drain, supervise)
    job.refresh_from_db()
    child = child_of(job)
    refund = steps_of(job)["refund"]
    # close was refused (nothing to undo); the child's steps are undone once each, by the child's
    # own saga, before the charge the refund step depends on.
    assert fake_remote.compensations() == ["notify", "credit", "charge"]
    assert child.status == J.COMPENSATED and child.compensation_reason == "parent"
    assert {s.name: s.status for s in child.steps.all() if s.forward} == {
        "credit": S.COMPENSATED,
        "notify": S.COMPENSATED,
    }
    assert refund.status == S.COMPENSATED and refund.error == ""
    assert job.status == J.COMPENSATED
    assert kinds(job, EventKind.CHILD_COMPENSATING) == 1
    moved = Event.objects.get(job=child, kind=EventKind.JOB_COMPENSATING)
    assert (moved.from_status, moved.to_status) == (J.SUCCEEDED, J.COMPENSATING)
    undone = Event.objects.get(job=job, step=refund, kind=EventKind.STEP_COMPENSATED)
    assert undone.reason == f"child job {child.pk} compensated"


@pytest.mark.sqlite
def test_an_operator_cancel_of_a_parent_after_its_child_succeeded_undoes_the_child(
    drain: Drain, fake_remote: FakeRemote
) -> None:
    refund_workflows()
    fake_remote.script("close", "transient_failure")
    job = job_submit(workflow="order", input={}).job
    drain()
    child = child_of(job)
    assert child.status == J.SUCCEEDED and steps_of(job)["refund"].status == S.SUCCEEDED
    job_cancel(actor=operator(), job_id=job.pk, reason="customer called")
    drain()
    job.refresh_from_db()
    child.refresh_from_db()
    # close's call may have reached its remote: undone first; then the child; then the charge.
    assert fake_remote.compensations() == ["close", "notify", "credit", "charge"]
    assert child.status == J.COMPENSATED
    assert steps_of(job)["refund"].status == S.COMPENSATED
    assert job.status == J.CANCELLED


def test_a_child_with_nothing_to_undo_settles_its_parents_step_at_once(
    drain: Drain, fake_remote: FakeRemote, supervise: Callable[..., ScanReport]
) -> None:
    make_workflow("lookup", step("read", compensation=""))
    make_workflow(
        "order",
        step("charge"),
        {"name": "lookup", "kind": "workflow", "workflow": "lookup", "depends_on": ["charge"]},
        step("close", "lookup"),
    )
    fake_remote.script("close", "business_failure")
    job = job_submit(workflow="order", input={}).job
    run(drain, supervise)
    job.refresh_from_db()
    assert fake_remote.compensations() == ["charge"]
    assert child_of(job).status == J.COMPENSATED
    assert steps_of(job)["lookup"].status == S.COMPENSATED
    assert job.status == J.COMPENSATED


def test_a_child_whose_undo_is_held_leaves_its_parent_needing_attention_until_it_is_undone(
    drain: Drain, fake_remote: FakeRemote, supervise: Callable[..., ScanReport]
) -> None:
    refund_workflows()
    fake_remote.script("close", "business_failure")
    fake_remote.script("notify.compensate", "business_failure")
    job = job_submit(workflow="order", input={}).job
    run(drain, supervise)
    job.refresh_from_db()
    child = child_of(job)
    assert child.status == J.NEEDS_ATTENTION
    assert job.status == J.NEEDS_ATTENTION and "child job" in job_events_reason(job)
    assert steps_of(job)["refund"].status == S.SUCCEEDED
    assert fake_remote.compensations() == ["notify"]  # the charge waits for the child
    held = Step.objects.get(job=child, name="notify.compensate")
    step_retry(actor=operator(), step_id=held.pk, reason="the remote is fixed")
    run(drain, supervise)
    job.refresh_from_db()
    child.refresh_from_db()
    assert child.status == J.COMPENSATED
    assert steps_of(job)["refund"].status == S.COMPENSATED
    assert job.status == J.COMPENSATED
    assert fake_remote.compensations() == ["notify", "notify", "credit", "charge"]


def job_events_reason(job: Job) -> str:
    return Event.objects.filter(job=job, kind=EventKind.JOB_NEEDS_ATTENTION).latest("id").reason


def test_the_scan_settles_a_compensating_parent_whose_childs_notice_was_lost(
    drain: Drain, fake_remote: FakeRemote, supervise: Callable[..., ScanReport]
) -> None:
    refund_workflows()
    fake_remote.script("close", "transient_failure")
    job = job_submit(workflow="order", input={}).job
    drain()
    job_compensate(actor=operator(), job_id=job.pk, reason="wrong order")
    # Every task runs but the child's settling one: lost with the worker that took it.
    run_all_but(CHILD_SETTLED_TASK)
    child = child_of(job)
    assert child.status == J.COMPENSATED
    assert steps_of(job)["refund"].status == S.SUCCEEDED
    with override_settings(SAS_SUPERVISOR_INTERVAL=0):
        report = supervise()
    assert report.decisions.get("child_compensated") == 1
    drain()
    job.refresh_from_db()
    assert steps_of(job)["refund"].status == S.COMPENSATED
    assert job.status == J.COMPENSATED
    assert fake_remote.compensations() == ["close", "notify", "credit", "charge"]
