"""Objects and secrets: every API endpoint has a known rule for whose objects it reaches (and
another user's object is a 404 where objects are owned); no secret (an endpoint's secret header,
an API key, the callback secret, the signing secrets, a password) appears in any API answer,
admin page, log line, admin log entry, archive record or error page, after a run that uses every
one of them."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from agents.models import AgentPool
from sas_project.tokens.services import token_create
from scheduler.archive import job_records
from scheduler.models import AlertSubscription, CallbackSecret, Delivery, Job
from scheduler.services import job_submit
from supervisor.deliveries import send_due
from supervisor.subscriptions import subscription_create
from tests.api.support import V1, client_for, make_user
from tests.factories import make_policy, make_pool, make_workflow, step
from tests.security.test_outbound import Canary, hang_up

pytestmark = pytest.mark.django_db

#: Whose objects each API path reaches.
OWNED_BY_SUBMITTER = "a submitter's own jobs; operators every job; another's is a 404"
OPERATOR_ON_ANY_JOB = "operators act on any job or step (role-level: submitters get 403)"
DEFINITIONS = "shared definitions, readable and writable by role"
OWNED_TOKEN = "the owner's tokens; administrators any; another's is a 404"
OWNED_SCHEDULE = "a submitter's own schedules; operators every one; another's is a 404"
SUPERVISOR_VIEW = "every job: operators and viewers read; actions operators only (403 otherwise)"
SIGNED_ATTEMPT = "no user: the signed token names one attempt; forged, expired or reused is 4xx"
SIGNAL_SENDER = "a submitter signals its own jobs; operators any; another's is a 404, a viewer's 403"
APPROVER = "the step's group (operators when none); a job the user may not see is a 404"
OWN_SECRET = "the signed-in submitter's own callback secret: the path names no user"
BY_BUSINESS_KEY = "a submitter's signal or event reaches its own jobs only; an operator's any"
SIGNED_SOURCE = "no user: the source's Standard Webhooks signature; forged, stale or unsigned is a 401"
EVENT_REPLAY = "operators replay any event (role-level: submitters, viewers and event senders get 403)"

RULES = {
    "/api/v1/jobs/": OWNED_BY_SUBMITTER,
    "/api/v1/jobs/batch/": OWNED_BY_SUBMITTER,
    "/api/v1/signals/": BY_BUSINESS_KEY,
    "/api/v1/events/": BY_BUSINESS_KEY,
    "/api/v1/events/{source}/": SIGNED_SOURCE,
    "/api/v1/events/{event}/replay/": EVENT_REPLAY,
    "/api/v1/jobs/{job_id}/": OWNED_BY_SUBMITTER,
    "/api/v1/jobs/{job_id}/events/": OWNED_BY_SUBMITTER,
    "/api/v1/jobs/{job_id}/cancel/": OPERATOR_ON_ANY_JOB,
    "/api/v1/jobs/{job_id}/compensate/": OPERATOR_ON_ANY_JOB,
    "/api/v1/jobs/{job_id}/pause/": OPERATOR_ON_ANY_JOB,
    "/api/v1/jobs/{job_id}/resume/": OPERATOR_ON_ANY_JOB,
    "/api/v1/steps/{step_id}/retry/": OPERATOR_ON_ANY_JOB,
    "/api/v1/steps/{step_id}/resolve/": OPERATOR_ON_ANY_JOB,
    "/api/v1/jobs/{job_id}/rerun/": OPERATOR_ON_ANY_JOB,
    "/api/v1/attention/": SUPERVISOR_VIEW,
    "/api/v1/attention/bulk/": SUPERVISOR_VIEW,
    "/api/v1/supervisor/": SUPERVISOR_VIEW,
    "/api/v1/schedules/": OWNED_SCHEDULE,
    "/api/v1/schedules/{name}/": OWNED_SCHEDULE,
    "/api/v1/schedules/{name}/pause/": OWNED_SCHEDULE,
    "/api/v1/schedules/{name}/resume/": OWNED_SCHEDULE,
    "/api/v1/schedules/{name}/backfill/": OWNED_SCHEDULE,
    "/api/v1/callbacks/{token}/": SIGNED_ATTEMPT,
    "/api/v1/callbacks/{token}/heartbeat/": SIGNED_ATTEMPT,
    "/api/v1/jobs/{job_id}/signals/": SIGNAL_SENDER,
    "/api/v1/jobs/{job_id}/steps/{step_name}/items/": OWNED_BY_SUBMITTER,
    "/api/v1/jobs/{job_id}/steps/{step_name}/approve/": APPROVER,
    "/api/v1/jobs/{job_id}/steps/{step_name}/reject/": APPROVER,
    "/api/v1/policies/": DEFINITIONS,
    "/api/v1/policies/{name}/": DEFINITIONS,
    "/api/v1/policies/{name}/revisions/": DEFINITIONS,
    "/api/v1/pools/": DEFINITIONS,
    "/api/v1/pools/{name}/": DEFINITIONS,
    "/api/v1/workflows/": DEFINITIONS,
    "/api/v1/workflows/{name}/": DEFINITIONS,
    "/api/v1/alerts/": DEFINITIONS,
    "/api/v1/alerts/{name}/": DEFINITIONS,
    "/api/v1/tokens/": OWNED_TOKEN,
    "/api/v1/tokens/{token_id}/": OWNED_TOKEN,
    "/api/v1/tokens/{token_id}/revoke/": OWNED_TOKEN,
    "/api/v1/callback-secret/": OWN_SECRET,
    "/api/v1/callback-secret/rotate/": OWN_SECRET,
}


def test_every_api_endpoint_has_a_known_object_rule() -> None:
    paths = set(SchemaGenerator().get_schema(request=None, public=True)["paths"])
    assert paths == set(RULES), (
        f"unclassified: {sorted(paths - set(RULES))}; gone: {sorted(set(RULES) - paths)}"
    )


@pytest.fixture
def two_submitters() -> tuple[User, User, Job]:
    make_policy("default")
    make_workflow("chain", step("a"))
    ada, sam = make_user("ada", "submitters"), make_user("sam", "submitters")
    return ada, sam, job_submit(workflow="chain", input={}, submitter=ada).job


@pytest.mark.parametrize("path", ["/jobs/{job}/", "/jobs/{job}/events/"])
def test_another_submitters_job_is_a_404(path: str, two_submitters: tuple[User, User, Job]) -> None:
    ada, sam, job = two_submitters
    url = V1 + path.format(job=job.pk)
    assert client_for(ada).get(url).status_code == 200
    refused = client_for(sam).get(url)
    # The same answer as for a job that does not exist: nothing tells the job is someone else's.
    assert refused.status_code == 404 and refused.json()["detail"] == f"job {job.pk} does not exist"
    assert client_for(make_user("olga", "operators")).get(url).status_code == 200


def test_a_submitters_list_and_idempotency_keys_are_its_own(two_submitters: tuple[User, User, Job]) -> None:
    ada, sam, _ = two_submitters
    assert client_for(sam).get(f"{V1}/jobs/").json()["results"] == []
    body = {"workflow": "chain", "input": {}}
    first = client_for(ada).post(f"{V1}/jobs/", body, format="json", headers={"Idempotency-Key": "k1"})
    other = client_for(sam).post(f"{V1}/jobs/", body, format="json", headers={"Idempotency-Key": "k1"})
    assert first.status_code == other.status_code == 201
    assert first.json()["id"] != other.json()["id"]


@pytest.mark.parametrize(
    ("method", "path"), [("get", "/tokens/{token}/"), ("post", "/tokens/{token}/revoke/")]
)
def test_another_users_token_is_a_404(method: str, path: str, two_submitters: tuple[User, User, Job]) -> None:
    ada, sam, _ = two_submitters
    token, _ = token_create(user=ada, name="ada's")
    response = getattr(client_for(sam), method)(V1 + path.format(token=token.pk), {}, format="json")
    assert response.status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


# --- secrets --------------------------------------------------------------------------------------

ENDPOINT_SECRET = "Bearer endpoint-secret-4f1c"
CALLBACK_SECRET = "callback-secret-77aa"
PASSWORD = "password-9d3e-long-enough"


@pytest.fixture
def canary() -> Iterator[Canary]:
    server = Canary()
    yield server
    hang_up()
    server.server.shutdown()
    server.server.server_close()


def test_no_secret_appears_in_any_answer_admin_page_or_log_line(
    canary: Canary, drain: Any, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.SAS_CALLBACK_SECRET = CALLBACK_SECRET
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    caplog.set_level(logging.DEBUG)
    base = f"http://127.0.0.1:{canary.port}"
    make_pool("web", kind="http", endpoints=[base])
    AgentPool.objects.get(name="web").endpoints.update(
        secret_header_name="Authorization", secret_header_value=ENDPOINT_SECRET
    )
    make_policy("default")
    make_workflow("remote", step("call", pool="web", path="/do", compensation="/undo"))
    subscription_create(name="hooks", actor=None, webhook_url=f"{base}/alerts", kinds=["job_failed"])
    root = User.objects.create_superuser("root", "root@example.invalid", PASSWORD)
    _, key = token_create(user=root, name="admin")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    # A run that uses every secret: the call (secret header), the callback (signed), the API
    # (the key), a sign-in (the password) and a wrong one.
    submitted = api.post(
        f"{V1}/jobs/", {"workflow": "remote", "input": {}, "callback_url": f"{base}/done"}, format="json"
    )
    assert submitted.status_code == 201
    drain()
    send_due()
    assert Delivery.objects.get().status == "delivered"
    assert [hit["path"] for hit in canary.hits] == ["/do", "/done"]
    Client().post("/accounts/login/", {"username": "root", "password": PASSWORD})
    Client().post("/accounts/login/", {"username": "root", "password": PASSWORD + "x"})
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}x")
    assert api.get(f"{V1}/jobs/").status_code == 401
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    job_id = submitted.json()["id"]
    answers = [
        api.get(f"{V1}{path}")
        for path in (
            "/jobs/",
            f"/jobs/{job_id}/",
            f"/jobs/{job_id}/events/",
            "/pools/",
            "/pools/web/",
            "/workflows/",
            "/policies/",
            "/alerts/",
            "/alerts/hooks/",
            "/tokens/",
        )
    ]
    assert {a.status_code for a in answers} == {200}
    admin = Client()
    admin.force_login(root)
    pool = AgentPool.objects.get(name="web")
    pages = [
        admin.get(path)
        for path in (
            f"/admin/agents/agentpool/{pool.pk}/change/",
            "/admin/tokens/apitoken/",
            "/admin/scheduler/delivery/",
            f"/admin/scheduler/job/{job_id}/change/",
            "/ops/jobs/" + job_id + "/",
        )
    ]
    assert {p.status_code for p in pages} == {200}
    texts = [r.content.decode() for r in answers + pages]
    texts += [record.getMessage() for record in caplog.records]
    texts += [str(record.__dict__) for record in caplog.records]
    # What the archive would hold of the job, and the history it records.
    texts += list(job_records([uuid.UUID(job_id)]).values())
    texts += [entry.change_message + entry.object_repr for entry in LogEntry.objects.all()]
    # The signing secrets: the subscription's, and the submitter's that signed the callback.
    signing = [
        AlertSubscription.objects.get(name="hooks").signing_secret,
        CallbackSecret.objects.get(user=root).signing_secret,
    ]
    for secret in (ENDPOINT_SECRET, "endpoint-secret-4f1c", key, CALLBACK_SECRET, PASSWORD, *signing):
        leaks = [text[:200] for text in texts if secret in text]
        assert not leaks, f"{secret[:6]}… leaked: {leaks}"


def test_an_error_page_shows_nothing_of_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> Any:
        raise RuntimeError(f"database password {PASSWORD} at db.internal")

    monkeypatch.setattr("supervisor.selectors.overview", broken)
    client = Client(raise_request_exception=False)
    client.force_login(make_user("olga", "operators"))
    response = client.get("/ops/")
    assert response.status_code == 500
    body = response.content.decode()
    assert PASSWORD not in body and "db.internal" not in body and "Traceback" not in body
