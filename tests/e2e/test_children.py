"""End to end, with real `qcluster` processes, the sandbox remote and PostgreSQL: a sub-workflow.

A parent's child job survives the kill of every cluster while it runs, and once a cluster is back
the child finishes and its parent's step settles once: one child, one `child_succeeded`, and each
remote operation performed once. A child that fails (the remote declines its one call) is
followed, after its step's backoff, by a new child under `<step's operation ID>/retry-1`, and the
parent succeeds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from scheduler.definitions import workflow_create
from scheduler.models import Event, EventKind, Job, JobStatus, Step, StepStatus
from scheduler.services import job_submit
from supervisor.policies import policy_create
from tests.e2e.test_qcluster import load_demo
from tests.processes import Cluster, Sandbox, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

RESERVE = {"pool": "inventory", "path": "/inventory/reserve", "policy": "standard"}


def test_a_child_that_runs_while_every_cluster_is_killed_settles_its_parent_once(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    load_demo(sandbox)
    workflow_create(
        name="restock",
        steps=[
            {"name": "pause", "kind": "timer", "wait_seconds": 3},
            {"name": "reserve", **RESERVE, "depends_on": ["pause"]},
        ],
    )
    workflow_create(
        name="order_with_restock",
        steps=[
            {"name": "first", **RESERVE},
            {
                "name": "restock",
                "kind": "workflow",
                "workflow": "restock",
                "input": {"sku.$": "input.sku", "quantity": 2},
                "depends_on": ["first"],
            },
            {"name": "last", **RESERVE, "depends_on": ["restock"]},
        ],
    )
    first = clusters("c1")
    job = job_submit(workflow="order_with_restock", input={"sku": "A1", "quantity": 1}).job

    def child_waits() -> bool:
        return Step.objects.filter(job__parent_job=job, name="pause", status=StepStatus.WAITING).exists()

    wait_until(child_waits, timeout=30, interval=0.1, message="the child job runs")
    first.kill()  # SIGKILL while the child runs
    time.sleep(4)  # its timer comes due with nothing running
    assert Step.objects.get(job=job, name="restock").status == StepStatus.WAITING
    clusters("c2")
    clusters("c3")  # two clusters: still one settling

    wait_until(
        lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED,
        timeout=90,
        interval=0.25,
        message="the parent succeeded",
    )
    time.sleep(1)  # any second settling would have happened by now
    children = Job.objects.filter(parent_job=job)
    assert children.count() == 1
    child = children.get()
    assert child.status == JobStatus.SUCCEEDED and child.input == {"sku": "A1", "quantity": 2}
    assert Event.objects.filter(job=job, kind=EventKind.CHILD_STARTED).count() == 1
    assert Event.objects.filter(job=job, kind=EventKind.CHILD_SUCCEEDED).count() == 1
    job.refresh_from_db()
    assert job.result["restock"] == child.result
    effects = sandbox.stats()["effects"]
    operations = [
        s.operation_id
        for s in Step.objects.filter(job__in=[job, child], name__in=["first", "reserve", "last"])
    ]
    assert len(operations) == 3 and [effects[op] for op in operations] == [1, 1, 1]


def test_a_child_that_fails_once_is_restarted_as_a_new_child_and_the_parent_succeeds(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    load_demo(sandbox)
    quick = {"timeout_seconds": 5, "backoff_multiplier": 1, "backoff_jitter": 0}
    # The child's charge is not retried (a decline is a business failure): its child compensates.
    policy_create(
        name="once", actor=None, **quick, max_attempts=1, backoff_initial_seconds=0, backoff_max_seconds=0
    )
    # The parent's step restarts a child that failed, after a backoff the scan's sweep waits out.
    policy_create(
        name="children",
        actor=None,
        **quick,
        max_attempts=3,
        backoff_initial_seconds=1,
        backoff_max_seconds=1,
        retry_on=["transient_failure", "no_answer", "business_failure"],
        on_exhausted="fail",
    )
    charge = {"pool": "payments", "path": "/payments/charge", "compensation_path": "/payments/refund"}
    workflow_create(name="payment", steps=[{"name": "charge", **charge, "policy": "once"}])
    workflow_create(
        name="order_with_payment",
        steps=[
            {"name": "first", **RESERVE},
            {
                "name": "pay",
                "kind": "workflow",
                "workflow": "payment",
                "depends_on": ["first"],
                "policy": "children",
            },
            {"name": "last", **RESERVE, "depends_on": ["pay"]},
        ],
    )
    sandbox.config(script={"/payments/charge": ["decline"]})  # the first charge only
    clusters("c1")
    job = job_submit(workflow="order_with_payment", input={"amount": 5}).job

    wait_until(
        lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED,
        timeout=90,
        interval=0.25,
        message="the parent succeeded",
    )
    first, second = Job.objects.filter(parent_job=job).order_by("parent_try")
    assert (first.status, first.compensation_reason) == (JobStatus.COMPENSATED, "failure")
    assert second.status == JobStatus.SUCCEEDED and second.parent_try == 1
    pay = Step.objects.get(job=job, name="pay")
    assert pay.status == StepStatus.SUCCEEDED and pay.output == second.result
    assert Event.objects.filter(job=job, kind=EventKind.RETRY_SCHEDULED).count() == 1
    assert Event.objects.filter(job=job, kind=EventKind.CHILD_STARTED).count() == 2
    ops = [Step.objects.get(job=child, name="charge").operation_id for child in (first, second)]
    assert ops == [f"{pay.operation_id}/charge", f"{pay.operation_id}/retry-1/charge"]
    # The declined charge took no effect; the retried one took effect once.
    effects = sandbox.stats()["effects"]
    assert effects.get(ops[0], 0) == 0 and effects[ops[1]] == 1
