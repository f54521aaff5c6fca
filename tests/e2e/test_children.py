"""End to end, with real `qcluster` processes, the sandbox remote and PostgreSQL: a sub-workflow.

A parent's child job survives the kill of every cluster while it runs, and once a cluster is back
the child finishes and its parent's step settles once: one child, one `child_succeeded`, and each
remote operation performed once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from scheduler.definitions import workflow_create
from scheduler.models import Event, EventKind, Job, JobStatus, Step, StepStatus
from scheduler.services import job_submit
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
