"""The canary (supervisor.canary): a job of the service's own whose route drops the first call of
each operation, so that it succeeds only through the supervisor's retry; judged within its
expected time, alerted once when not, and kept out of users' lists, counters and the archive."""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from agents.fake import FakeRemote
from agents.http import CANARY_PATH, CANARY_POOL
from agents.services import pool_save
from sas_project.errors import InvalidInput
from scheduler.definitions import workflow_create
from scheduler.models import (
    CANARY_WORKFLOW,
    AlertKind,
    ArchivedJob,
    Delivery,
    Event,
    EventKind,
    Job,
    JobStatus,
    Step,
)
from scheduler.services import job_submit
from scheduler.services.retention import ARCHIVE_AFTER, archive_settled
from supervisor import canary
from supervisor.canary import canary_tick, expected_seconds
from supervisor.models import CanaryCall, CanaryState
from supervisor.scan import ScanReport
from supervisor.subscriptions import subscription_create
from tests.api.support import V1, client_for, make_user
from tests.factories import chain, make_policy, make_pool, make_workflow, step
from tests.supervisor.test_operations import metrics, total

Supervise = Callable[..., ScanReport]


@pytest.fixture
def canary_on(settings: Any, db: None) -> None:
    """The canary on (the suite runs with it off), its route under the test client's host."""
    settings.SAS_CANARY_SECONDS = 60
    settings.SAS_PUBLIC_URL = "http://testserver"


def _canary_job() -> Job:
    job = Job.objects.filter(workflow__name=CANARY_WORKFLOW).order_by("-created_at").first()
    assert job is not None
    return job


def _post(client: Client, operation_id: str) -> Any:
    return client.post(
        CANARY_PATH, data=b"{}", content_type="application/json", headers={"Idempotency-Key": operation_id}
    )


# --- firing -----------------------------------------------------------------------------------------


@pytest.mark.sqlite
def test_the_canary_fires_nothing_while_it_is_off(db: None) -> None:
    assert canary_tick() is False
    assert not Job.objects.exists()


@pytest.mark.sqlite
def test_a_canary_tick_submits_one_job_of_the_canary_workflow_a_period(canary_on: None) -> None:
    now = timezone.now()
    assert canary_tick(now=now) is True
    job = _canary_job()
    assert job.submitter is None
    step_row = Step.objects.get(job=job)
    assert step_row.pool.name == CANARY_POOL and step_row.status == "dispatched"
    assert list(step_row.pool.endpoints.values_list("url", flat=True)) == ["http://testserver"]
    # Within the period nothing more; after it, the next one.
    assert canary_tick(now=now + dt.timedelta(seconds=30)) is False
    assert canary_tick(now=now + dt.timedelta(seconds=61)) is True
    assert Job.objects.filter(workflow__name=CANARY_WORKFLOW).count() == 2
    assert CanaryState.objects.get().last_job_id == _canary_job().pk


@pytest.mark.sqlite
def test_the_canary_s_endpoint_follows_sas_canary_url(canary_on: None, settings: Any) -> None:
    now = timezone.now()
    canary_tick(now=now)
    settings.SAS_CANARY_URL = "http://sas-web/"
    canary_tick(now=now + dt.timedelta(seconds=canary.period_seconds()))
    step_row = Step.objects.get(job=_canary_job())
    assert step_row.endpoint is not None and step_row.endpoint.url == "http://sas-web"
    assert list(step_row.pool.endpoints.values_list("url", flat=True)) == ["http://sas-web"]


@pytest.mark.sqlite
def test_the_canary_names_are_reserved_for_the_service(db: None) -> None:
    with pytest.raises(InvalidInput, match="reserved"):
        pool_save(name=CANARY_POOL, endpoints=["https://example.com"])
    make_pool()
    make_policy()
    with pytest.raises(InvalidInput, match="reserved"):
        workflow_create(name=CANARY_WORKFLOW, steps=[step("a")])


# --- the route --------------------------------------------------------------------------------------


@pytest.mark.sqlite
def test_the_route_drops_the_first_call_of_an_operation_and_answers_the_second(canary_on: None) -> None:
    canary_tick()
    step_row = Step.objects.get(job=_canary_job())
    # The first call is held until its deadline has passed (here already: held the margin only).
    Step.objects.filter(pk=step_row.pk).update(deadline=timezone.now() - dt.timedelta(seconds=5))
    client = Client()
    first = _post(client, step_row.operation_id)
    assert first.status_code == 408 and first.json()["canary"] == "dropped"
    second = _post(client, step_row.operation_id)
    assert second.status_code == 200 and second.json() == {
        "operation_id": step_row.operation_id,
        "canary": "answered",
    }
    assert CanaryCall.objects.filter(operation_id=step_row.operation_id).count() == 1


@pytest.mark.sqlite
def test_the_route_serves_only_the_canary_s_operations(canary_on: None, drain: Callable[[], int]) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    client = Client()
    assert _post(client, str(Step.objects.get(job=job).operation_id)).status_code == 404
    assert _post(client, "not-an-operation").status_code == 404
    assert client.post(CANARY_PATH).status_code == 404  # no Idempotency-Key
    assert client.get(CANARY_PATH).status_code == 405
    assert not CanaryCall.objects.exists()


@pytest.mark.sqlite
def test_the_route_is_served_before_the_host_check_and_the_https_redirect(
    canary_on: None, settings: Any
) -> None:
    """The clusters call it at an internal name (SAS_CANARY_URL), over plain HTTP."""
    settings.SECURE_SSL_REDIRECT = True
    canary_tick()
    step_row = Step.objects.get(job=_canary_job())
    CanaryCall.objects.create(operation_id=step_row.operation_id, first_at=timezone.now())
    answer = _post(Client(HTTP_HOST="sas-web"), step_row.operation_id)
    assert answer.status_code == 200 and answer.json()["canary"] == "answered"
    assert _post(Client(HTTP_HOST="10.1.2.3:8000"), "nope").status_code == 404


# --- end to end in one process, over real HTTP ------------------------------------------------------


@pytest.mark.slow
def test_a_canary_job_succeeds_only_through_the_supervisor_s_retry_over_http(
    live_server: Any, settings: Any, drain: Callable[[], int], supervise: Supervise
) -> None:
    """The agent calls the live server's route: the first call gets no answer before its
    deadline, the supervisor retries the step, and the retry is answered. The guard lets the
    canary reach its own (loopback) URL although no list names loopback."""
    settings.SAS_CANARY_SECONDS = 60
    settings.SAS_PUBLIC_URL = live_server.url
    settings.SAS_OUTBOUND_INTERNAL_HOSTS = []
    settings.SAS_AGENT_ALLOWED_HOSTS = []
    canary_tick()
    job = _canary_job()
    drain()  # the first call: no answer in time
    for _ in range(10):
        supervise()
        drain()
        job.refresh_from_db()
        if job.status == JobStatus.SUCCEEDED:
            break
    assert job.status == JobStatus.SUCCEEDED
    kinds = list(Event.objects.filter(job=job).order_by("id").values_list("kind", flat=True))
    assert EventKind.STEP_NO_ANSWER in kinds or EventKind.STEP_TIMED_OUT in kinds
    step_row = Step.objects.get(job=job)
    outcomes = list(step_row.attempts.order_by("number").values_list("outcome", flat=True))
    assert outcomes == ["no_answer", "succeeded"]
    # Judged at the next tick: its submit-to-success time is recorded.
    canary_tick()
    state = CanaryState.objects.get()
    assert state.last_success_at == job.finished_at
    assert state.last_recovery_seconds is not None and state.last_recovery_seconds > 0
    assert state.failing_since is None
    # The first call, held past its deadline, ends before the live server does.
    time.sleep(canary.HOLD_PAST_DEADLINE + 0.5)


@pytest.mark.slow
def test_the_canary_s_exception_opens_the_guard_to_no_other_pool(
    live_server: Any, settings: Any, drain: Callable[[], int]
) -> None:
    """A user's pool with the service's own URL as its endpoint is still refused at loopback."""
    settings.SAS_PUBLIC_URL = live_server.url
    make_pool("mine", kind="http", endpoints=[live_server.url])
    make_workflow("mine", step("call", pool="mine", path=CANARY_PATH, compensation=""))
    settings.SAS_OUTBOUND_INTERNAL_HOSTS = []
    settings.SAS_AGENT_ALLOWED_HOSTS = []
    job = job_submit(workflow="mine", input={}).job
    drain()
    attempt = Step.objects.get(job=job).attempts.get()
    assert attempt.outcome == "business_failure" and "not a public address" in attempt.error


# --- out of users' sight ----------------------------------------------------------------------------


@pytest.mark.sqlite
def test_canary_jobs_are_left_out_of_the_job_lists_unless_asked_for(
    canary_on: None, fake_remote: FakeRemote, drain: Callable[[], int]
) -> None:
    chain(n=1)
    mine = job_submit(workflow="chain", input={}).job
    canary_tick()
    operator = client_for(make_user("olga", "operators"))
    listed = [row["id"] for row in operator.get(f"{V1}/jobs/").json()["results"]]
    assert listed == [str(mine.pk)]
    asked = operator.get(f"{V1}/jobs/", {"workflow": CANARY_WORKFLOW}).json()["results"]
    assert [row["id"] for row in asked] == [str(_canary_job().pk)]
    from supervisor.selectors.jobs import JobFilters, jobs_search

    assert list(jobs_search(JobFilters())) == [mine]


@pytest.mark.sqlite
def test_a_canary_step_past_its_deadline_is_left_out_of_needs_attention_unless_asked_for(
    canary_on: None,
) -> None:
    from supervisor.selectors.attention import AttentionFilters, needs_attention

    canary_tick()
    step_row = Step.objects.get(job=_canary_job())
    Step.objects.filter(pk=step_row.pk).update(deadline=timezone.now() - dt.timedelta(minutes=1))
    assert needs_attention().total == 0
    asked = needs_attention(AttentionFilters(workflow=CANARY_WORKFLOW))
    assert [item.step.pk for item in asked.items] == [step_row.pk]


@pytest.mark.sqlite
def test_canary_jobs_are_left_out_of_the_metrics_job_and_attempt_counters(
    canary_on: None, fake_remote: FakeRemote, drain: Callable[[], int], settings: Any
) -> None:
    settings.SAS_METRICS_SETTLE_SECONDS = 0
    chain(n=1)
    client = Client()
    metrics(client)  # starts the counters
    job_submit(workflow="chain", input={})
    canary_tick()
    drain()
    assert _canary_job().status == JobStatus.SUCCEEDED  # the fake remote answers at once
    found = metrics(client)
    assert total(found, "sas_jobs_submitted_total") == 1
    assert total(found, "sas_jobs_submitted_total", workflow=CANARY_WORKFLOW) == 0
    assert total(found, "sas_jobs_settled_total", workflow=CANARY_WORKFLOW) == 0
    assert total(found, "sas_attempts_total", pool=CANARY_POOL) == 0
    assert total(found, "sas_attempts_total") == 1


@pytest.mark.sqlite
def test_metrics_show_the_canary_s_last_success_and_its_recovery_time(
    canary_on: None, fake_remote: FakeRemote, drain: Callable[[], int]
) -> None:
    client = Client()
    before = metrics(client)
    assert total(before, "sas_canary_last_success_age_seconds") == float("inf")
    assert total(before, "sas_canary_expected_seconds") == expected_seconds()
    canary_tick()
    drain()
    canary_tick()  # judges it
    found = metrics(client)
    job = _canary_job()
    assert job.finished_at is not None
    age = total(found, "sas_canary_last_success_age_seconds")
    assert math.isfinite(age) and age >= 0
    recovery = (job.finished_at - job.created_at).total_seconds()
    assert total(found, "sas_canary_recovery_seconds") == pytest.approx(recovery)


@pytest.mark.sqlite
def test_no_canary_figures_while_the_canary_is_off(db: None) -> None:
    assert total(metrics(Client()), "sas_canary_last_success_age_seconds") == 0
    assert not [name for name, _ in metrics(Client()) if name.startswith("sas_canary")]


@pytest.mark.sqlite
def test_retention_deletes_canary_jobs_without_archiving_them(
    canary_on: None, fake_remote: FakeRemote, drain: Callable[[], int], settings: Any, tmp_path: Any
) -> None:
    settings.SAS_ARCHIVE_DIR = tmp_path
    chain(n=1)
    mine = job_submit(workflow="chain", input={}).job
    canary_tick()
    drain()
    archive_settled(now=timezone.now() + ARCHIVE_AFTER + dt.timedelta(minutes=1), batch_size=1)
    assert not Job.objects.filter(workflow__name=CANARY_WORKFLOW).exists()
    assert list(ArchivedJob.objects.values_list("job_id", flat=True)) == [mine.pk]


# --- the alert --------------------------------------------------------------------------------------


def _canary_alerts() -> list[Delivery]:
    return list(Delivery.objects.filter(payload__alert=AlertKind.CANARY_UNREMEDIATED))


@pytest.mark.sqlite
def test_canary_unremediated_fires_once_when_a_canary_job_is_late(canary_on: None) -> None:
    subscription_create(
        name="oncall", actor=None, webhook_url="https://hooks.example.com/a", kinds=["canary_unremediated"]
    )
    now = timezone.now()
    canary_tick(now=now)  # fires; nothing runs it
    job = _canary_job()
    canary_tick(now=now + dt.timedelta(seconds=expected_seconds() - 1))
    assert _canary_alerts() == []
    canary_tick(now=now + dt.timedelta(seconds=expected_seconds() + 1))
    alerts = _canary_alerts()
    assert len(alerts) == 1
    assert alerts[0].payload["job_id"] == str(job.pk) and alerts[0].payload["status"] == job.status
    # The run of failures goes on (the next canary is late too): still one alert.
    canary_tick(now=now + dt.timedelta(seconds=canary.period_seconds() + 1))
    canary_tick(now=now + dt.timedelta(seconds=canary.period_seconds() + expected_seconds() + 2))
    assert len(_canary_alerts()) == 1
    assert CanaryState.objects.get().failing_since == job.created_at


@pytest.mark.sqlite
def test_a_canary_success_ends_the_run_of_failures_and_the_next_late_one_alerts_again(
    canary_on: None, fake_remote: FakeRemote, drain: Callable[[], int]
) -> None:
    subscription_create(
        name="oncall", actor=None, webhook_url="https://hooks.example.com/a", kinds=["canary_unremediated"]
    )
    now = timezone.now()
    canary_tick(now=now)
    canary_tick(now=now + dt.timedelta(seconds=expected_seconds() + 1))
    assert len(_canary_alerts()) == 1
    later = now + dt.timedelta(seconds=canary.period_seconds() + 1)
    canary_tick(now=later)  # the next canary, which the fake remote answers
    drain()
    canary_tick(now=later + dt.timedelta(seconds=1))
    assert CanaryState.objects.get().failing_since is None
    fake_remote.script("call", "no_answer")
    again = later + dt.timedelta(seconds=canary.period_seconds() + 1)
    canary_tick(now=again)
    canary_tick(now=again + dt.timedelta(seconds=expected_seconds() + 1))
    assert len(_canary_alerts()) == 2


@pytest.mark.sqlite
def test_canary_unremediated_can_be_subscribed_to_over_the_api(db: None) -> None:
    admin = client_for(make_user("ada", "administrators"))
    answer = admin.post(
        f"{V1}/alerts/",
        {"name": "oncall", "webhook_url": "https://hooks.example.com/a", "kinds": ["canary_unremediated"]},
        format="json",
    )
    assert answer.status_code == 201, answer.content
    assert answer.json()["kinds"] == ["canary_unremediated"]
