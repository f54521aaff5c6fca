"""Sub-workflow steps that retry: a child that failed on its own is followed by a new child, each
under `<step's operation ID>/retry-<n>`, after its policy's backoff and while its tries last;
then `on_exhausted` decides. An operator's retry is a new child too; a child cancelled is never
retried; a parent that compensates undoes only the child that succeeded."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from rest_framework.renderers import JSONRenderer

from agents.fake import FakeRemote
from sas_project.permissions import role_groups_ensure
from scheduler import selectors
from scheduler.models import Event, EventKind, Job, JobStatus, Step, StepStatus
from scheduler.serializers import JobSerializer
from scheduler.services import job_submit
from scheduler.services.children import child_retry_in, children_due
from supervisor.scan import ScanReport
from supervisor.services import job_cancel, step_retry
from tests.factories import make_policy, make_workflow, step

pytestmark = pytest.mark.django_db
S = StepStatus
J = JobStatus
Drain = Callable[[], int]
Supervise = Callable[..., ScanReport]
RETRIED = ["transient_failure", "no_answer", "business_failure"]


def operator() -> User:
    role_groups_ensure()
    user = User.objects.create_user("olga")
    user.groups.add(Group.objects.get(name="operators"))
    return user


def workflows(**policy: Any) -> None:
    """refund: [credit, notify]; order: charge -> refund (a sub-workflow step retried under
    policy "children") -> close."""
    make_policy("children", **{"retry_on": RETRIED, "max_attempts": 3, **policy})
    make_workflow("refund", step("credit"), step("notify", "credit"))
    make_workflow(
        "order",
        step("charge"),
        {
            "name": "refund",
            "kind": "workflow",
            "workflow": "refund",
            "depends_on": ["charge"],
            "policy": "children",
        },
        step("close", "refund"),
    )


def run(drain: Drain, supervise: Supervise, rounds: int = 4) -> None:
    for _ in range(rounds):
        drain()
        supervise()
    drain()


def children(job: Job) -> list[Job]:
    return list(Job.objects.filter(parent_job=job).order_by("parent_try"))


def refund_of(job: Job) -> Step:
    return Step.objects.select_related("definition").get(job=job, name="refund")


def events(job: Job, kind: str) -> list[Event]:
    return list(Event.objects.filter(job=job, kind=kind).order_by("id"))


def test_a_child_that_fails_twice_then_succeeds_is_retried_as_new_children_and_the_step_succeeds(
    drain: Drain, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    workflows()
    fake_remote.script("credit", "business_failure", "business_failure")
    job = job_submit(workflow="order", input={}).job
    run(drain, supervise)
    job.refresh_from_db()
    refund = refund_of(job)
    first, second, third = children(job)
    assert [c.parent_try for c in (first, second, third)] == [0, 1, 2]
    assert (first.status, second.status, third.status) == (J.COMPENSATED, J.COMPENSATED, J.SUCCEEDED)
    assert refund.status == S.SUCCEEDED and refund.attempt == 2 and refund.output == third.result
    assert job.status == J.SUCCEEDED
    # The first child keeps the step's operation ID; each retry derives its own from it.
    op = refund.operation_id
    assert [Step.objects.get(job=c, name="credit").operation_id for c in (first, second, third)] == [
        f"{op}/credit",
        f"{op}/retry-1/credit",
        f"{op}/retry-2/credit",
    ]
    # Each failure names the child that failed and the try that follows; each start the child
    # it replaces.
    retries = events(job, EventKind.RETRY_SCHEDULED)
    assert [(e.data["child_job"], e.data["attempt"]) for e in retries] == [
        (str(first.pk), 1),
        (str(second.pk), 2),
    ]
    started = events(job, EventKind.CHILD_STARTED)
    assert [(e.data["child_job"], e.data["attempt"], e.data.get("previous_child")) for e in started] == [
        (str(first.pk), 0, None),
        (str(second.pk), 1, str(first.pk)),
        (str(third.pk), 2, str(second.pk)),
    ]
    assert not events(job, EventKind.CHILD_FAILED)


def test_a_retried_child_waits_its_backoff_holding_no_worker_and_starts_when_it_ends(
    drain: Drain, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    workflows(backoff_initial_seconds=30, backoff_multiplier=2, backoff_max_seconds=60)
    fake_remote.script("credit", "business_failure")
    job = job_submit(workflow="order", input={}).job
    run(drain, supervise)
    refund = refund_of(job)
    (first,) = children(job)
    assert first.status == J.COMPENSATED
    assert refund.status == S.WAITING and refund.attempt == 1 and refund.not_before is not None
    waited = (refund.not_before - refund.updated_at).total_seconds()
    assert waited == pytest.approx(30)
    # Not before its time, however often the scan runs.
    assert refund.pk not in children_due(
        refund.not_before - dt.timedelta(seconds=1), grace=dt.timedelta(0), limit=10
    )
    assert refund.pk in children_due(refund.not_before, grace=dt.timedelta(0), limit=10)
    run(drain, supervise)
    assert len(children(job)) == 1
    # Its backoff over (the clock moved past it), the next scan starts the second child.
    Step.objects.filter(pk=refund.pk).update(not_before=refund.not_before - dt.timedelta(seconds=60))
    run(drain, supervise)
    job.refresh_from_db()
    assert len(children(job)) == 2 and job.status == J.SUCCEEDED
    refund = refund_of(job)
    assert refund.status == S.SUCCEEDED and refund.not_before is None


def test_the_backoff_of_a_childs_retry_is_the_policys_capped_exponential() -> None:
    policy = make_policy(
        "b",
        retry_on=RETRIED,
        max_attempts=5,
        backoff_initial_seconds=2,
        backoff_multiplier=3,
        backoff_max_seconds=10,
    )
    failed = Job(status=J.FAILED)
    assert [child_retry_in(policy, child=failed, attempt=n, draw=0.0) for n in range(5)] == [
        2,
        6,
        10,
        10,
        None,
    ]


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (J.CANCELLED, "cancel"),
        (J.COMPENSATED, "cancel"),
        (J.COMPENSATED, "operator"),
        (J.COMPENSATED, "parent"),
    ],
)
def test_a_child_stopped_rather_than_failed_is_never_retried(status: str, reason: str) -> None:
    policy = make_policy("b", retry_on=RETRIED, max_attempts=5)
    assert (
        child_retry_in(policy, child=Job(status=status, compensation_reason=reason), attempt=0, draw=0.0)
        is None
    )
    failed = Job(status=J.COMPENSATED, compensation_reason="failure")
    assert child_retry_in(policy, child=failed, attempt=0, draw=0.0) == 0.0


def test_a_childs_failure_is_not_retried_under_a_policy_that_does_not_retry_business_failures(
    drain: Drain, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    workflows(retry_on=["transient_failure", "no_answer"], on_exhausted="fail")
    fake_remote.script("credit", "business_failure")
    job = job_submit(workflow="order", input={}).job
    run(drain, supervise)
    job.refresh_from_db()
    assert len(children(job)) == 1 and job.status == J.FAILED


def test_when_its_tries_are_spent_the_steps_on_exhausted_decides(
    drain: Drain, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    workflows(max_attempts=2, on_exhausted="fail")
    fake_remote.script("credit", "business_failure", "business_failure")
    job = job_submit(workflow="order", input={}).job
    run(drain, supervise)
    job.refresh_from_db()
    _, second = children(job)
    refund = refund_of(job)
    assert refund.status == S.FAILED and refund.error == f"child job {second.pk} compensated (try 2 of 2)"
    assert job.status == J.FAILED and "charge" not in fake_remote.compensations()
    (failed,) = events(job, EventKind.CHILD_FAILED)
    assert failed.data["child_job"] == str(second.pk) and failed.data["attempt"] == 1


def test_when_its_tries_are_spent_a_compensating_policy_compensates_the_parent(
    drain: Drain, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    workflows(max_attempts=2, on_exhausted="compensate")
    fake_remote.script("credit", "business_failure", "business_failure")
    job = job_submit(workflow="order", input={}).job
    run(drain, supervise)
    job.refresh_from_db()
    assert len(children(job)) == 2
    assert job.status == J.COMPENSATED and fake_remote.compensations() == ["charge"]


def test_an_operator_retry_of_a_held_step_whose_children_failed_starts_a_new_child(
    drain: Drain, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    workflows(max_attempts=2, on_exhausted="hold")
    fake_remote.script("credit", "business_failure", "business_failure")
    job = job_submit(workflow="order", input={}).job
    run(drain, supervise)
    refund = refund_of(job)
    assert refund.status == S.HELD and len(children(job)) == 2
    step_retry(actor=operator(), step_id=refund.pk, reason="the ledger is back")
    run(drain, supervise)
    job.refresh_from_db()
    _, second, third = children(job)
    assert third.parent_try == 2 and third.status == J.SUCCEEDED
    op = refund.operation_id
    assert Step.objects.get(job=third, name="credit").operation_id == f"{op}/retry-2/credit"
    assert refund_of(job).status == S.SUCCEEDED and job.status == J.SUCCEEDED
    waiting = Event.objects.filter(job=job, kind=EventKind.STEP_WAITING, actor__isnull=False).get()
    assert waiting.data["previous_child"] == str(second.pk) and waiting.data["attempt"] == 2


def test_a_child_cancelled_by_an_operator_is_not_retried(
    drain: Drain, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    workflows(on_exhausted="hold")
    fake_remote.script("notify", "transient_failure")
    job = job_submit(workflow="order", input={}).job
    drain()
    (child,) = children(job)
    job_cancel(actor=operator(), job_id=child.pk, reason="not this one")
    run(drain, supervise)
    assert len(children(job)) == 1
    assert refund_of(job).status == S.HELD and not events(job, EventKind.RETRY_SCHEDULED)


def test_a_parent_compensating_after_a_retried_success_undoes_only_the_child_that_succeeded(
    drain: Drain, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    workflows()
    fake_remote.script("credit", "business_failure")
    fake_remote.script("close", "business_failure")
    job = job_submit(workflow="order", input={}).job
    run(drain, supervise, rounds=6)
    job.refresh_from_db()
    failed, succeeded = children(job)
    assert job.status == J.COMPENSATED and refund_of(job).status == S.COMPENSATED
    # The failed child compensated itself (its refused credit had no effect): left alone; the
    # child that succeeded is undone for its parent.
    assert (failed.status, failed.compensation_reason) == (J.COMPENSATED, "failure")
    assert (succeeded.status, succeeded.compensation_reason) == (J.COMPENSATED, "parent")
    undone = [c for c in fake_remote.calls if c.payload.get("compensates")]
    assert sorted(c.payload["step"] for c in undone) == ["charge", "credit", "notify"]
    op = refund_of(job).operation_id
    assert all(c.operation_id.startswith(f"{op}/retry-1/") for c in undone if c.payload["step"] != "charge")


def test_the_job_document_shows_the_latest_child_and_the_try_the_step_is_on(
    drain: Drain, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    workflows(backoff_initial_seconds=30, backoff_max_seconds=30)
    fake_remote.script("credit", "business_failure")
    job = job_submit(workflow="order", input={}).job
    run(drain, supervise)
    (first,) = children(job)
    owner = operator()
    shown = json.loads(
        JSONRenderer().render(JobSerializer(selectors.job_detail(user=owner, job_id=job.pk)).data)
    )
    refund = next(s for s in shown["steps"] if s["name"] == "refund")
    assert refund["child_job"] == str(first.pk)
    assert refund["waiting_for"] == {
        "kind": "workflow",
        "workflow": "refund",
        "child_job": str(first.pk),
        "tries": 2,
    }
    # PostgreSQL's document and light rows say the same.
    light = selectors.job_for_reading(user=owner, job_id=job.pk)
    assert json.loads(JSONRenderer().render(JobSerializer(light).data)) == shown
    document = selectors.job_json(user=owner, job_id=job.pk)
    assert document is not None and json.loads(document) == shown
