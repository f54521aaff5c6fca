"""End to end, with real `qcluster` processes, the sandbox remote and PostgreSQL: wait steps.

A timer's job survives the kill of every cluster and its timer fires once after they come back;
the demo's `order_approval` waits for an approval and a `shipped` signal, holding no worker, and
moves on when they come through the API.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

import pytest
from django.contrib.auth.models import Group, User
from rest_framework.test import APIClient

from sas_project.permissions import role_groups_ensure
from scheduler.definitions import workflow_create
from scheduler.models import Attempt, Event, EventKind, Job, JobStatus, Step, StepStatus
from scheduler.services import job_submit
from tests.e2e.test_qcluster import load_demo
from tests.processes import Cluster, Sandbox, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_timer_due_while_every_cluster_is_down_fires_once_when_one_comes_back(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    load_demo(sandbox)
    workflow_create(
        name="pause_then_reserve",
        steps=[
            {"name": "pause", "kind": "timer", "wait_seconds": 3},
            {
                "name": "reserve",
                "pool": "inventory",
                "path": "/inventory/reserve",
                "policy": "standard",
                "depends_on": ["pause"],
            },
        ],
    )
    first = clusters("c1")
    jobs = [
        job_submit(workflow="pause_then_reserve", input={"sku": "A1", "quantity": 1}).job for _ in range(5)
    ]
    assert set(Step.objects.filter(job__in=jobs, name="pause").values_list("status", flat=True)) == {
        StepStatus.WAITING
    }
    first.kill()  # SIGKILL: nothing runs while the timers come due
    time.sleep(4)
    assert Step.objects.filter(job__in=jobs, name="pause", status=StepStatus.WAITING).count() == 5
    clusters("c2")
    clusters("c3")  # two clusters: each timer still fires once

    def settled() -> bool:
        return Job.objects.filter(pk__in=[j.pk for j in jobs], status=JobStatus.SUCCEEDED).count() == 5

    wait_until(settled, timeout=60, interval=0.25, message="every job succeeded")
    for job in jobs:
        assert Event.objects.filter(job=job, kind=EventKind.TIMER_FIRED).count() == 1
        pause = Step.objects.get(job=job, name="pause")
        assert not Attempt.objects.filter(step=pause).exists()  # a wait never calls
        assert pause.finished_at is not None and pause.finished_at >= pause.created_at + dt.timedelta(
            seconds=3
        )
    effects = sandbox.stats()["effects"]
    assert (
        sorted(effects[s.operation_id] for s in Step.objects.filter(job__in=jobs, name="reserve")) == [1] * 5
    )


def test_the_demo_order_waits_for_its_approval_and_its_signal_through_the_api(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    load_demo(sandbox)
    role_groups_ensure()
    olga = User.objects.create_user("olga")
    olga.groups.add(Group.objects.get(name="operators"))
    api = APIClient()
    api.force_authenticate(olga)
    clusters("c1")
    job = job_submit(
        workflow="order_approval", input={"sku": "A1", "quantity": 1, "amount": 250}, submitter=olga
    ).job

    def step_status(name: str, status: str) -> Callable[[], bool]:
        return lambda: Step.objects.get(job=job, name=name).status == status

    wait_until(step_status("approve_charge", StepStatus.WAITING), timeout=30, message="approval requested")
    # Sent early: kept until `shipped` waits.
    early = api.post(
        f"/api/v1/jobs/{job.pk}/signals/",
        {"name": "shipped", "payload": {"tracking": "1Z999"}},
        format="json",
        HTTP_IDEMPOTENCY_KEY="ship-1",
    )
    assert early.status_code == 202 and early.json()["consumed_by"] is None
    time.sleep(2)  # several scans: an approval wait is never overdue
    assert Step.objects.get(job=job, name="approve_charge").status == StepStatus.WAITING
    approved = api.post(
        f"/api/v1/jobs/{job.pk}/steps/approve_charge/approve/", {"comment": "known customer"}, format="json"
    )
    assert approved.status_code == 200, approved.json()
    wait_until(
        lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=60, message="job succeeded"
    )
    job.refresh_from_db()
    assert job.result["shipped"] == {"tracking": "1Z999"}
    assert job.result["approve_charge"]["by"] == "olga"
    assert {
        s.name: sandbox.stats()["effects"].get(s.operation_id, 0) for s in Step.objects.filter(job=job)
    } == {
        "reserve": 1,
        "approve_charge": 0,
        "charge": 1,
        "ship": 1,
        "shipped": 0,
    }


def test_an_approval_walks_remind_reassign_then_compensates_on_time_one_event_per_rung(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    """The ladder is walked by the real supervisor on time: a reminder at 2 s, finance may decide
    from 4 s, and at 6 s the job compensates what it reserved; each rung once though two clusters
    run the loop."""
    load_demo(sandbox)
    Group.objects.get_or_create(name="finance")
    workflow_create(
        name="escalating_refund",
        steps=[
            {
                "name": "reserve",
                "pool": "inventory",
                "path": "/inventory/reserve",
                "policy": "standard",
                "compensation_path": "/inventory/release",
            },
            {
                "name": "approve",
                "kind": "approval",
                "depends_on": ["reserve"],
                "timeout_seconds": 600,
                "escalation": [
                    {"after_seconds": 2, "do": "remind"},
                    {"after_seconds": 4, "do": "reassign", "group": "finance"},
                    {"after_seconds": 6, "do": "fail"},
                ],
            },
        ],
    )
    clusters("c1")
    clusters("c2")
    job = job_submit(workflow="escalating_refund", input={"sku": "A1", "quantity": 1}).job

    def compensated() -> bool:
        return Job.objects.get(pk=job.pk).status == JobStatus.COMPENSATED

    wait_until(compensated, timeout=90, interval=0.25, message="the ladder's fail rung compensated the job")
    rungs = list(
        Event.objects.filter(job=job, kind__in=[EventKind.WAIT_REMINDED, EventKind.WAIT_ESCALATED]).order_by(
            "id"
        )
    )
    assert [(e.kind, e.data["rung"], e.data["do"]) for e in rungs] == [
        (EventKind.WAIT_REMINDED, 1, "remind"),
        (EventKind.WAIT_ESCALATED, 2, "reassign"),
        (EventKind.WAIT_ESCALATED, 3, "fail"),
    ]
    approve = Step.objects.get(job=job, name="approve")
    assert approve.waiting_since is not None
    for event, after in zip(rungs, (2, 4, 6), strict=True):
        assert event.created_at >= approve.waiting_since + dt.timedelta(seconds=after)
    reserve = Step.objects.get(job=job, name="reserve")
    assert reserve.status == StepStatus.COMPENSATED
