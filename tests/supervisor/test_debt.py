"""Remediation debt (supervisor.debt): read from the step rows, not from the supervisor's word; a
holder that renews its lease but leaves the debt is taken over, and the alert tells once."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction
from django.db.models import F
from django.test import Client
from django.utils import timezone
from django_q.models import OrmQ

from agents.fake import FakeRemote
from scheduler.models import Delivery, Job, Step, StepStatus
from scheduler.services import job_submit
from supervisor.debt import PROGRESS_GRACE, debt_watch, remediation_debt
from supervisor.lease import LeaseGrant, lease_acquire, lease_fence
from supervisor.models import LeaseTerm, SupervisorLease
from supervisor.scan import ScanReport
from supervisor.subscriptions import subscription_create
from tests.api.support import V1, client_for, make_user
from tests.factories import chain, make_workflow, step
from tests.supervisor.test_operations import metrics, total

pytestmark = pytest.mark.django_db
Supervise = Callable[..., ScanReport]
S = StepStatus
INTERVAL = 1.0


@pytest.fixture(autouse=True)
def one_second_interval(settings: Any) -> None:
    settings.SAS_SUPERVISOR_INTERVAL = INTERVAL
    settings.SAS_LEASE_SECONDS = 30  # a holder that renews: its lease never runs out here


def overdue(job: Job, seconds: float) -> Step:
    """Job's dispatched step lost its task and is `seconds` past its deadline."""
    OrmQ.objects.all().delete()
    Step.objects.filter(job=job, status=S.DISPATCHED).update(
        deadline=timezone.now() - dt.timedelta(seconds=seconds)
    )
    return Step.objects.get(job=job, status=S.DISPATCHED)


def stalled_holder(name: str = "stuck", *, for_seconds: float = 3600) -> None:
    """`name` holds the lease (and keeps renewing it) since `for_seconds` ago."""
    assert lease_acquire(name) is not None
    SupervisorLease.objects.update(acquired_at=timezone.now() - dt.timedelta(seconds=for_seconds))


@pytest.mark.sqlite
def test_the_debt_counts_steps_more_than_two_intervals_past_due_and_nothing_sooner(
    fake_remote: FakeRemote,
) -> None:
    chain(n=1)
    recent, old = (job_submit(workflow="chain", input={}).job for _ in range(2))
    overdue(recent, 1.5)
    overdue(old, 30)
    debt = remediation_debt()
    assert debt.steps == 1 and 29 < debt.oldest_seconds < 40
    # A retry whose backoff ended long ago is debt too; in a paused job it is not.
    Step.objects.filter(job=old).update(status=S.ATTEMPT_FAILED)
    Step.objects.filter(job=old).update(status=S.RETRY_WAIT, not_before=F("deadline"))
    assert remediation_debt().steps == 1
    Job.objects.filter(pk=old.pk).update(paused_at=timezone.now())
    assert remediation_debt().steps == 0


@pytest.mark.sqlite
def test_a_wait_whose_time_came_long_ago_is_debt(fake_remote: FakeRemote, drain: Callable[[], int]) -> None:
    make_workflow(
        "later", step("a"), {"name": "wait", "kind": "timer", "wait_seconds": 60, "depends_on": ["a"]}
    )
    job_submit(workflow="later", input={})
    drain()
    Step.objects.filter(name="wait").update(deadline=timezone.now() - dt.timedelta(seconds=10))
    assert remediation_debt().steps == 1


@pytest.mark.sqlite
def test_a_working_supervisor_pays_the_debt(fake_remote: FakeRemote, supervise: Supervise) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    overdue(job, 30)
    assert remediation_debt().steps == 1
    supervise()
    assert remediation_debt().steps == 0


@pytest.mark.sqlite
def test_a_holder_that_renews_but_leaves_the_debt_is_taken_over_and_steps_down(
    fake_remote: FakeRemote, supervise: Supervise
) -> None:
    subscription_create(
        name="ops",
        actor=None,
        webhook_url="https://hooks.example.com/x",
        kinds=["supervisor_not_remediating"],
    )
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    stalled_holder("stuck")
    token = SupervisorLease.objects.get().token
    late = overdue(job, 2.5 * INTERVAL)  # in debt, but not three intervals past due yet
    assert debt_watch(holder="peer") == ""
    late = overdue(job, 3 * INTERVAL + 1)
    assert debt_watch(holder="peer") == "took_over"
    lease = SupervisorLease.objects.get()
    assert (lease.holder, lease.token, lease.handovers) == ("peer", token + 1, 1)
    # The old holder's next action finds the fence, and its next scan does not act.
    with transaction.atomic():
        assert not lease_fence(LeaseGrant(holder="stuck", token=token))
    assert not supervise(holder="stuck").acted
    # The finished term says the old holder could act no later than the takeover.
    term = LeaseTerm.objects.get(token=token)
    assert term.holder == "stuck" and term.ended_by == "peer" and term.expired_at <= term.ended_at
    (alert,) = Delivery.objects.filter(payload__alert="supervisor_not_remediating")
    assert alert.payload["holder"] == "stuck" and alert.payload["taken_over_by"] == "peer"
    assert alert.payload["debt_steps"] == 1
    # The new holder remediates at once.
    assert supervise(holder="peer").acted
    late.refresh_from_db()
    assert late.attempt == 2 and remediation_debt().steps == 0


@pytest.mark.sqlite
def test_a_new_holder_gets_its_own_time_before_it_can_be_taken_over(fake_remote: FakeRemote) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    overdue(job, 3600)
    stalled_holder("fresh", for_seconds=1)
    assert debt_watch(holder="peer") == ""
    assert SupervisorLease.objects.get().holder == "fresh"


@pytest.mark.sqlite
def test_the_holder_seeing_its_own_debt_alerts_once_and_keeps_the_lease(fake_remote: FakeRemote) -> None:
    subscription_create(
        name="ops",
        actor=None,
        webhook_url="https://hooks.example.com/x",
        kinds=["supervisor_not_remediating"],
    )
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    overdue(job, 3600)
    stalled_holder("alone")
    assert debt_watch(holder="alone") == "alerted"
    assert debt_watch(holder="alone") == "alerted"
    assert SupervisorLease.objects.get().holder == "alone"
    assert Delivery.objects.filter(payload__alert="supervisor_not_remediating").count() == 1


@pytest.mark.sqlite
def test_the_debt_is_in_the_metrics_the_api_supervisorz_and_the_console(fake_remote: FakeRemote) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    overdue(job, 60)
    stalled_holder("stuck")
    found = metrics(Client())
    assert total(found, "sas_remediation_debt_steps") == 1
    assert 59 < total(found, "sas_remediation_debt_oldest_seconds") < 90
    body = client_for(make_user("vera", "viewers")).get(f"{V1}/supervisor/").json()
    assert body["remediation_debt"]["steps"] == 1 and body["remediation_debt"]["oldest_seconds"] > 59
    SupervisorLease.objects.update(last_scan_at=timezone.now())
    response = Client().get("/supervisorz")
    assert response.status_code == 503 and response.json()["status"] == "not_remediating"
    assert "stuck" not in response.content.decode()  # no holder named to strangers
    console = Client()
    console.force_login(make_user("olga", "operators"))
    page = console.get("/ops/")
    assert page.status_code == 200 and "1 step overdue" in page.content.decode()


@pytest.mark.sqlite
def test_a_holder_working_through_a_backlog_is_not_taken_over(fake_remote: FakeRemote) -> None:
    """Its batches commit remediations (progressed_at, written in their transactions): it is
    slow, not stalled. The debt is still shown."""
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    overdue(job, 3 * INTERVAL * 2)  # past the threshold, not past what progress shelters
    stalled_holder("busy")
    SupervisorLease.objects.update(progressed_at=timezone.now())
    assert debt_watch(holder="peer") == ""
    assert SupervisorLease.objects.get().holder == "busy" and remediation_debt().steps == 1


@pytest.mark.sqlite
def test_a_batch_that_remediates_records_progress_and_one_that_fails_does_not(
    fake_remote: FakeRemote, supervise: Supervise, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    overdue(job, 30)
    monkeypatch.setenv("SAS_FAULT_REMEDIATION_FAILS", "1")
    with pytest.raises(Exception, match="injected fault"):
        supervise()
    assert SupervisorLease.objects.get().progressed_at is None
    monkeypatch.delenv("SAS_FAULT_REMEDIATION_FAILS")
    supervise()
    assert SupervisorLease.objects.get().progressed_at is not None


@pytest.mark.sqlite
def test_progress_elsewhere_does_not_shelter_a_holder_that_leaves_its_oldest_debt_alone_too_long(
    fake_remote: FakeRemote,
) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    overdue(job, 3 * INTERVAL * PROGRESS_GRACE + 5)
    stalled_holder("partial")
    SupervisorLease.objects.update(progressed_at=timezone.now())
    assert debt_watch(holder="peer") == "took_over"
