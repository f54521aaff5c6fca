"""REST API: who may call what. Every endpoint and method, for every role: anonymous is a 401
(asking for a token), a user without the role a 403, a user with it gets past the door."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from agents.fake import FakeRemote
from scheduler.models import AlertSubscription, Job
from scheduler.services import job_submit
from tests.api.support import V1, client_for, make_user
from tests.factories import chain

pytestmark = pytest.mark.django_db

#: Roles from least to most; each includes the ones before it.
ROLES = ["anonymous", "no role", "submitters", "operators", "administrators"]

POLICY = {"name": "p2", "timeout_seconds": 3}
POOL = {"name": "pool2", "kind": "python"}
STEPS = [{"name": "a", "pool": "local", "path": "agents.builtin.noop", "policy": "default"}]
WORKFLOW = {"name": "wf2", "steps": STEPS}

#: (method, path, body, the least role allowed)
ENDPOINTS: list[tuple[str, str, Any, str]] = [
    ("get", "/jobs/", None, "submitters"),
    ("post", "/jobs/", {"workflow": "chain", "input": {}}, "submitters"),
    ("post", "/jobs/batch/", {"jobs": [{"workflow": "chain", "input": {}}]}, "submitters"),
    ("get", "/jobs/{job}/", None, "submitters"),
    ("get", "/jobs/{job}/events/", None, "submitters"),
    ("post", "/jobs/{job}/cancel/", {}, "operators"),
    ("post", "/jobs/{job}/compensate/", {}, "operators"),
    ("post", "/jobs/{job}/pause/", {}, "operators"),
    ("post", "/jobs/{job}/resume/", {}, "operators"),
    ("post", "/steps/{step}/retry/", {}, "operators"),
    ("post", "/steps/{step}/resolve/", {"output": {}}, "operators"),
    ("get", "/policies/", None, "operators"),
    ("post", "/policies/", POLICY, "administrators"),
    ("get", "/policies/default/", None, "operators"),
    ("put", "/policies/default/", {"timeout_seconds": 3}, "administrators"),
    ("patch", "/policies/default/", {"timeout_seconds": 3}, "administrators"),
    ("get", "/policies/default/revisions/", None, "operators"),
    ("get", "/pools/", None, "operators"),
    ("post", "/pools/", POOL, "administrators"),
    ("get", "/pools/local/", None, "operators"),
    ("put", "/pools/local/", {"kind": "python", "endpoints": [], "alternate": None}, "administrators"),
    ("patch", "/pools/local/", {"alternate": None}, "administrators"),
    ("get", "/workflows/", None, "submitters"),
    ("post", "/workflows/", WORKFLOW, "administrators"),
    ("get", "/workflows/chain/", None, "submitters"),
    (
        "put",
        "/workflows/chain/",
        {"description": "", "deadline_seconds": None, "steps": STEPS},
        "administrators",
    ),
    ("patch", "/workflows/chain/", {"description": "v2"}, "administrators"),
    ("get", "/alerts/", None, "operators"),
    ("post", "/alerts/", {"name": "oncall", "email": "oncall@example.com"}, "administrators"),
    ("get", "/alerts/ops/", None, "operators"),
    (
        "put",
        "/alerts/ops/",
        {"webhook_url": "", "email": "o@example.com", "kinds": ["job_failed"], "enabled": True},
        "administrators",
    ),
    ("patch", "/alerts/ops/", {"enabled": False}, "administrators"),
    ("delete", "/alerts/ops/", None, "administrators"),
    ("get", "/callback-secret/", None, "submitters"),
    ("post", "/callback-secret/rotate/", {}, "submitters"),
    ("get", "/tokens/", None, "no role"),
    ("post", "/tokens/", {"name": "ci"}, "no role"),
]


def caller(role: str) -> tuple[APIClient, User | None]:
    if role == "anonymous":
        return client_for(None), None
    user = make_user("caller", None if role == "no role" else role)
    return client_for(user), user


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(
    ("method", "path", "body", "least"), ENDPOINTS, ids=[f"{m.upper()} {p}" for m, p, _, _ in ENDPOINTS]
)
def test_the_role_matrix(method: str, path: str, body: Any, least: str, role: str) -> None:
    chain(n=1)
    AlertSubscription.objects.create(name="ops", email="ops@example.com")
    client, user = caller(role)
    # The job belongs to the caller, so that a submitter may see it.
    owner = user if user is not None else make_user("owner", "submitters")
    job = job_submit(workflow="chain", input={}, submitter=owner).job
    url = V1 + path.format(job=job.pk, step=job.steps.get().pk)
    response = getattr(client, method)(url, body, format="json")
    if role == "anonymous":
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == "Token"
        assert response.json()["code"] == "not_authenticated"
    elif ROLES.index(role) < ROLES.index(least):
        assert response.status_code == 403
        assert response.json()["code"] == "permission_denied" and "role" in response.json()["detail"]
    else:
        assert response.status_code not in (401, 403), response.json()


def test_a_bad_token_is_a_401() -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    response = client.get(f"{V1}/jobs/")
    assert response.status_code == 401 and response.json()["code"] == "authentication_failed"


def test_an_inactive_users_token_is_a_401() -> None:
    user = make_user("gone", "operators")
    client = client_for(user)
    User.objects.filter(pk=user.pk).update(is_active=False)
    assert client.get(f"{V1}/jobs/").status_code == 401


def test_a_session_works_too_with_its_csrf_check() -> None:
    chain(n=1)
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(make_user("sam", "submitters"))
    assert client.get(f"{V1}/jobs/").status_code == 200
    refused = client.post(f"{V1}/jobs/", {"workflow": "chain", "input": {}}, format="json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    assert Job.objects.count() == 0


def test_a_superuser_may_do_everything() -> None:
    chain(n=1)
    root = User.objects.create_superuser("root")
    client = client_for(root)
    assert client.post(f"{V1}/policies/", {"name": "p"}, format="json").status_code == 201
    assert client.get(f"{V1}/jobs/").status_code == 200


# --- the viewer role ------------------------------------------------------------------------------


@pytest.mark.sqlite
def test_a_viewer_reads_everything_and_changes_nothing(fake_remote: FakeRemote, drain: Callable) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}, submitter=make_user("sam", "submitters")).job
    viewer = client_for(make_user("vic", "viewers"))
    for path in (
        "/jobs/",
        f"/jobs/{job.pk}/",
        f"/jobs/{job.pk}/events/",
        "/workflows/",
        "/pools/",
        "/policies/",
        "/attention/",
        "/supervisor/",
    ):
        assert viewer.get(f"{V1}{path}").status_code == 200, path
    assert len(viewer.get(f"{V1}/jobs/").json()["results"]) == 1
    for method, path, body in [
        ("post", "/jobs/", {"workflow": "chain", "input": {}}),
        ("post", f"/jobs/{job.pk}/cancel/", {}),
        ("post", f"/steps/{job.steps.get().pk}/retry/", {}),
        ("post", "/attention/bulk/", {"action": "retry", "step_ids": [1], "dry_run": True}),
        ("post", "/policies/", {"name": "p"}),
    ]:
        assert getattr(viewer, method)(f"{V1}{path}", body, format="json").status_code == 403, path
    assert Job.objects.count() == 1


def test_a_token_and_its_users_permissions_are_one_statement_on_postgresql() -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from sas_project.database import is_postgresql

    if not is_postgresql():
        pytest.skip("SQLite reads the permissions in a second statement")
    chain(n=1)
    sam = client_for(make_user("sam", "submitters"))
    with CaptureQueriesContext(connection) as captured:
        assert sam.get(f"{V1}/jobs/").status_code == 200
    reads = [q["sql"] for q in captured.captured_queries if "auth_permission" in q["sql"]]
    assert len(reads) == 1 and "api_token" in reads[0]
    # The same permissions as Django's own backend finds.
    viewer = client_for(make_user("vera", "viewers"))
    assert viewer.post(f"{V1}/jobs/", {"workflow": "chain", "input": {}}, format="json").status_code == 403
    root = User.objects.create_superuser("root", password="x")
    assert (
        client_for(root).post(f"{V1}/jobs/", {"workflow": "chain", "input": {}}, format="json").status_code
        == 201
    )
