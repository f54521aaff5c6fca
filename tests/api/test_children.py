"""Sub-workflows in the API: a child job names its parent job and step, the parent's workflow step
names its child, and the job renders the same through every reader."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agents.fake import FakeRemote
from scheduler import selectors
from scheduler.models import Job
from scheduler.services import job_submit
from tests.api.support import V1, client_for, make_user, submit
from tests.factories import make_workflow, step

pytestmark = pytest.mark.django_db


def order_with_refund() -> None:
    make_workflow("refund", step("credit"))
    make_workflow(
        "order",
        step("charge"),
        {"name": "refund", "kind": "workflow", "workflow": "refund", "depends_on": ["charge"]},
    )


@pytest.mark.sqlite
def test_a_child_names_its_parent_and_the_parents_step_names_its_child(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    order_with_refund()
    sam = make_user("sam", "submitters")
    client = client_for(sam)
    parent_id = submit(client, "order", {"n": 1}).json()["id"]
    drain()
    child = Job.objects.get(parent_job_id=parent_id)
    parent = client.get(f"{V1}/jobs/{parent_id}/").json()
    assert parent["parent_job"] is None and parent["parent_step"] == ""
    steps = {s["name"]: s for s in parent["steps"]}
    assert steps["refund"]["type"] == "workflow" and steps["refund"]["child_job"] == str(child.pk)
    assert steps["charge"]["child_job"] is None
    # The child is the submitter's too: they may read it, and it points back.
    read = client.get(f"{V1}/jobs/{child.pk}/").json()
    assert read["parent_job"] == parent_id and read["parent_step"] == "refund"
    listed = {j["id"]: j for j in client.get(f"{V1}/jobs/").json()["results"]}
    assert listed[str(child.pk)]["parent_job"] == parent_id


def test_a_waiting_workflow_step_says_it_waits_for_its_child(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    order_with_refund()
    fake_remote.script("credit", "transient_failure")
    olga = make_user("olga", "operators")
    job = job_submit(workflow="order", input={}).job
    drain()
    child = Job.objects.get(parent_job=job)
    steps = {s["name"]: s for s in client_for(olga).get(f"{V1}/jobs/{job.pk}/").json()["steps"]}
    assert steps["refund"]["status"] == "waiting"
    assert steps["refund"]["waiting_for"] == {
        "kind": "workflow",
        "workflow": "refund",
        "child_job": str(child.pk),
        "tries": 1,
    }


def test_the_fast_renderings_of_parents_and_children_equal_drfs_own(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    from rest_framework import serializers as drf

    from scheduler.serializers import JobSerializer, JobSummarySerializer, StepSerializer

    order_with_refund()
    fake_remote.script("credit", "transient_failure")
    user = make_user("operator-olga", "operators")
    job_submit(workflow="order", input={}, submitter=user)
    drain()
    generic: Any = drf.ModelSerializer.to_representation
    for job in Job.objects.all():
        job = selectors.job_detail(user=user, job_id=job.pk)
        assert JobSerializer(job).data == generic(JobSerializer(job), job)
        assert (
            JobSerializer(selectors.job_for_reading(user=user, job_id=job.pk)).data == JobSerializer(job).data
        )
        assert JobSummarySerializer(job).data == generic(JobSummarySerializer(job), job)
        for one in job.steps.all():
            assert StepSerializer(one).data == generic(StepSerializer(one), one)
