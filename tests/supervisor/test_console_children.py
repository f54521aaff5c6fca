"""Sub-workflows in the console and the admin: the job page links a parent's step to its child
and the child to its parent, the DAG draws a workflow step apart, and the admin's step form takes
a workflow step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from agents.fake import FakeRemote
from scheduler.models import Job, StepDefinitionKind, Workflow
from scheduler.services import job_submit
from tests.api.support import make_user
from tests.factories import make_workflow, step
from tests.supervisor.test_admin import admin_client, root, step_row, steps_formset

__all__ = ["admin_client", "root"]  # the admin tests' fixtures, used here too

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def test_the_job_page_links_the_step_to_its_child_and_the_child_to_its_parent(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    make_workflow("refund", step("credit"))
    make_workflow("order", step("charge"), {"name": "refund", "kind": "workflow", "workflow": "refund"})
    fake_remote.script("credit", "transient_failure")
    job = job_submit(workflow="order", input={}).job
    drain()
    child = Job.objects.get(parent_job=job)
    client = Client()
    client.force_login(make_user("olga", "operators"))
    page = client.get(f"/ops/jobs/{job.pk}/").content.decode()
    assert f'href="/ops/jobs/{child.pk}/"' in page and "child job" in page
    # The DAG draws the sub-workflow step apart, naming its workflow.
    assert 'data-step="refund" data-status="waiting" data-kind="workflow"' in page
    assert "workflow refund" in page
    back = client.get(f"/ops/jobs/{child.pk}/").content.decode()
    assert 'id="parent-job"' in back and f'href="/ops/jobs/{job.pk}/"' in back


def test_the_admin_saves_a_workflow_step(admin_client: Client) -> None:
    make_workflow("refund", step("credit"))
    row = {"name": "refund", "kind": "workflow", "child_workflow": "refund", "depends_on": "a"}
    data = {"name": "order", "description": "", "deadline_seconds": "", **steps_formset(step_row("a"), row)}
    response = admin_client.post("/admin/scheduler/workflow/add/", data)
    assert response.status_code == 302, response.content.decode()[-3000:]
    saved = Workflow.objects.get(name="order").steps.get(name="refund")
    assert saved.kind == StepDefinitionKind.WORKFLOW and saved.child_workflow == "refund"
