"""Bad input to every console action: a clear 4xx, never a 500, and nothing changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from agents.fake import FakeRemote
from sas_project.permissions import role_groups_ensure
from scheduler.models import Attempt, Event, Job, Step
from tests.supervisor.test_console import held_job, held_step

pytestmark = pytest.mark.django_db

#: The console's own requests come from htmx; a plain form post (no JavaScript) is redirected back
#: with the same message shown as a flash.
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def ops(client: Client, settings: Any) -> Client:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    role_groups_ensure()
    user = User.objects.create_user("olga")
    user.groups.add(Group.objects.get(name="operators"))
    client.force_login(user)
    return client


def counts() -> tuple[int, int, int, int]:
    return Job.objects.count(), Step.objects.count(), Attempt.objects.count(), Event.objects.count()


@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("/ops/steps/999999999/retry/", {}),
        ("/ops/steps/999999999/resolve/", {"output": "{}", "reason": "checked by phone"}),
        ("/ops/steps/99999999999999999999999/retry/", {}),
        ("/ops/jobs/0b8a1c3e-5d7f-4e21-9a6b-2c4d6e8f0a1b/act/", {"action": "cancel"}),
        ("/ops/jobs/not-a-uuid/act/", {"action": "cancel"}),
        ("/ops/steps/abc/retry/", {}),
    ],
)
def test_unknown_ids_are_404_and_change_nothing(ops: Client, path: str, data: dict) -> None:
    before = counts()
    response = ops.post(path, data, **HTMX)
    assert response.status_code == 404
    assert ops.post(path, data).status_code in (302, 404)
    assert counts() == before


@pytest.mark.parametrize(
    "data",
    [
        {"output": "[1, 2]", "reason": "r"},
        {"output": "not json", "reason": "r"},
        {"output": '{"a": "\\u0000"}', "reason": "r"},
        {"output": "[" * 5000 + "]" * 5000, "reason": "r"},
        {"output": "{}", "reason": "x" * 100_000},
        {"output": "{}"},
    ],
)
def test_a_bad_resolve_is_a_clear_400_and_changes_nothing(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable, data: dict
) -> None:
    step = held_step(held_job(drain, fake_remote, supervise))
    before = counts()
    response = ops.post(f"/ops/steps/{step.pk}/resolve/", data, **HTMX)
    assert 400 <= response.status_code < 500
    assert ops.post(f"/ops/steps/{step.pk}/resolve/", data).status_code in (302, 400)
    assert counts() == before


@pytest.mark.parametrize(
    "data",
    [
        {"action": "explode"},
        {"action": "retry", "stage": "run", "step": "abc"},
        {"action": "retry", "stage": "nonsense", "step": "1"},
        {},
    ],
)
def test_a_bad_bulk_request_is_a_clear_400_and_changes_nothing(ops: Client, data: dict) -> None:
    before = counts()
    response = ops.post("/ops/attention/bulk/", data)
    assert response.status_code == 400
    assert counts() == before


def test_an_unknown_job_action_is_400(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    before = counts()
    response = ops.post(f"/ops/jobs/{job.pk}/act/", {"action": "delete_everything"}, **HTMX)
    assert response.status_code == 400
    assert counts() == before


def test_a_body_over_the_limit_is_refused_without_a_500(ops: Client, settings: Any) -> None:
    response = ops.post("/ops/attention/bulk/", {"reason": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)})
    assert 400 <= response.status_code < 500


@pytest.mark.parametrize(
    "query", ["?older_than=abc", "?older_than=-5", "?workflow=" + "x" * 5000, "?page=999999", "?page=abc"]
)
def test_bad_filters_never_break_the_lists(ops: Client, query: str) -> None:
    assert ops.get("/ops/attention/" + query).status_code in (200, 400)
    assert ops.get("/ops/jobs/" + query).status_code in (200, 400, 404)
