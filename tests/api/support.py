"""Helpers shared by the REST API tests (this module holds no tests): users in role groups, API
clients authenticated with a token, a job held for an operator and one failed at its second step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import Group, User
from rest_framework.test import APIClient

from agents.fake import FakeRemote
from sas_project.permissions import role_groups_ensure
from sas_project.tokens.services import token_create
from scheduler.models import Job, JobStatus, Outcome, Step, StepStatus
from scheduler.services import job_submit
from tests.factories import make_policy, make_workflow, step

V1 = "/api/v1"


def make_user(username: str, role: str | None = None) -> User:
    """A user in one role group ("submitters", "operators", "administrators") or in none."""
    role_groups_ensure()
    user = User.objects.create_user(username)
    if role:
        user.groups.add(Group.objects.get(name=role))
    return user


def token_for(user: User) -> str:
    """The value of the Authorization header for `user`."""
    _, key = token_create(user=user, name="tests")
    return f"Token {key}"


def client_for(user: User | None) -> APIClient:
    """An API client sending `Authorization: Token <key>` for `user` (anonymous when None)."""
    client = APIClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=token_for(user))
    return client


def submit(client: APIClient, workflow: str, payload: dict[str, Any] | None = None, **headers: str) -> Any:
    return client.post(
        f"{V1}/jobs/", {"workflow": workflow, "input": payload or {}}, format="json", **headers
    )


def held_step(
    client: APIClient, drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> Step:
    """Submit (through the API) a two-step job whose first step fails once and is held for an
    operator by its policy; returns that held step."""
    make_policy("holding", on_exhausted="hold", max_attempts=1)
    make_workflow("held", step("s1", policy="holding"), step("s2", "s1"))
    fake_remote.script("s1", Outcome.TRANSIENT_FAILURE)
    response = submit(client, "held")
    assert response.status_code == 201, response.json()
    drain()
    supervise()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.status == JobStatus.NEEDS_ATTENTION
    held = job.steps.get(name="s1")
    assert held.status == StepStatus.HELD
    return held


def failed_at_s2(drain: Callable, fake_remote: FakeRemote, supervise: Callable[..., Any]) -> Job:
    """A three-step job that failed at s2 (refused, no retry, `on_exhausted="fail"`)."""
    make_policy("once", max_attempts=1, on_exhausted="fail")
    make_workflow("three", step("s1"), step("s2", "s1", policy="once"), step("s3", "s2"))
    fake_remote.script("s2", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="three", input={"order": 1}).job
    drain()
    supervise()
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    return job
