"""Deadlines that warn before they pass (supervisor.sla, the scan's sweep_at_risk): a workflow's
sla_seconds and warn_fraction, the clock and projection rules, the once-only flag with its
event and alert, the jobs list's filter, the job's document, and the sweep's isolation."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from agents.fake import FakeRemote
from agents.outcome import Outcome
from scheduler import selectors
from scheduler.models import (
    AlertKind,
    Attempt,
    Delivery,
    Event,
    EventKind,
    Job,
    Quarantine,
    QuarantineLoop,
    Step,
    StepDefinition,
    StepStatus,
    Workflow,
)
from scheduler.serializers import JobSerializer
from scheduler.services import job_submit
from supervisor import sla
from supervisor.scan import ScanReport
from supervisor.subscriptions import subscription_create
from tests.api.support import V1, client_for, make_user
from tests.api.test_openapi import errors_of, validator
from tests.factories import make_policy, make_pool, make_workflow, step
from tests.supervisor.test_operations import metrics, total

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


def facts(*steps: sla.StepFacts, age: float, sla_seconds: float = 300, warn: float = 0.8) -> sla.JobFacts:
    return sla.JobFacts(
        created_at=NOW - dt.timedelta(seconds=age), sla_seconds=sla_seconds, warn_fraction=warn, steps=steps
    )


def pending(name: str, *deps: str) -> sla.StepFacts:
    return sla.StepFacts(name=name, status=StepStatus.PENDING, depends_on=deps, started_at=None)


MEASURED = {"a": sla.Duration(100, 5), "b": sla.Duration(150, 5), "c": sla.Duration(50, 5)}


@pytest.mark.parametrize(
    ("job", "durations", "expected"),
    [
        # Past its warn fraction (0.8 of 300 s): the clock says so, whatever the steps.
        (facts(pending("a"), age=240), {}, "clock"),
        (facts(pending("a"), age=239), {}, None),
        # 60 s in, a -> b still to run at 100 + 150 s: ends at 310 s, after the SLA.
        (facts(pending("a"), pending("b", "a"), age=60), MEASURED, "projection"),
        # a and c run side by side: the longest chain (a, 100 s) ends at 160 s, in time.
        (facts(pending("a"), pending("c"), age=60), MEASURED, None),
        # a is done: only b is left (150 s), ending at 210 s.
        (
            facts(
                sla.StepFacts("a", StepStatus.SUCCEEDED, (), NOW - dt.timedelta(seconds=50)),
                pending("b", "a"),
                age=60,
            ),
            MEASURED,
            None,
        ),
        # Measured fewer than MIN_SAMPLES times: a step says nothing.
        (
            facts(pending("a"), pending("b", "a"), age=60),
            {"a": sla.Duration(100, 4), "b": sla.Duration(150, 4)},
            None,
        ),
        # A call in flight for 100 s of its 150: 50 s left, plus c's 50 after it.
        (
            facts(
                sla.StepFacts("b", StepStatus.DISPATCHED, (), NOW - dt.timedelta(seconds=100)),
                pending("c", "b"),
                age=150,
            ),
            MEASURED,
            None,
        ),
    ],
)
def test_the_policy_flags_by_the_clock_first_then_by_the_projection_of_the_remaining_chain(
    job: sla.JobFacts, durations: dict[str, sla.Duration], expected: str | None
) -> None:
    decision = sla.at_risk_decide(job, durations, NOW)
    assert (decision.rule if decision else None) == expected


def test_a_projection_decision_carries_its_projected_finish_and_due_time() -> None:
    decision = sla.at_risk_decide(facts(pending("a"), pending("b", "a"), age=60), MEASURED, NOW)
    assert decision is not None
    assert decision.projected_finish == NOW + dt.timedelta(seconds=250)
    assert decision.due_at == NOW + dt.timedelta(seconds=240)
    assert decision.warn_at == NOW + dt.timedelta(seconds=180)


# --- definitions --------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"sla_seconds": 0}, "sla_seconds"),
        ({"sla_seconds": -5}, "sla_seconds"),
        ({"sla_seconds": "soon"}, "sla_seconds"),
        ({"sla_seconds": 60, "warn_fraction": 0}, "warn_fraction"),
        ({"sla_seconds": 60, "warn_fraction": 1.5}, "warn_fraction"),
    ],
)
def test_a_bad_sla_or_warn_fraction_is_a_400_naming_the_field_and_saves_nothing(
    fields: dict[str, Any], field: str
) -> None:
    make_pool()
    make_policy()
    ada = client_for(make_user("ada", "administrators"))
    body = {"name": "order", "steps": [step("reserve")], **fields}
    answer = ada.post(f"{V1}/workflows/", body, format="json")
    assert answer.status_code == 400, answer.content
    assert answer.json()["field"] == field
    assert not Workflow.objects.filter(name="order").exists()


@pytest.mark.django_db
def test_a_workflow_keeps_its_sla_and_a_patch_keeps_them_in_its_next_version() -> None:
    make_pool()
    make_policy()
    ada = client_for(make_user("ada", "administrators"))
    created = ada.post(
        f"{V1}/workflows/",
        {"name": "order", "steps": [step("reserve")], "sla_seconds": 600, "warn_fraction": 0.5},
        format="json",
    )
    assert created.status_code == 201, created.content
    assert (created.json()["sla_seconds"], created.json()["warn_fraction"]) == (600, 0.5)
    patched = ada.patch(f"{V1}/workflows/order/", {"description": "v2"}, format="json")
    assert (patched.json()["sla_seconds"], patched.json()["warn_fraction"]) == (600, 0.5)
    default = ada.post(f"{V1}/workflows/", {"name": "other", "steps": [step("reserve")]}, format="json")
    assert (default.json()["sla_seconds"], default.json()["warn_fraction"]) == (None, 0.8)


# --- the scan ------------------------------------------------------------------------------------


def waiting_workflow(name: str, **fields: Any) -> Workflow:
    """[paid: waits for a signal] -> ship: its jobs stay live until signalled."""
    return make_workflow(
        name, {"name": "paid", "kind": "signal", "signal": "payment"}, step("ship", "paid"), **fields
    )


def submitted(workflow: str, *, age: float) -> Job:
    job = job_submit(workflow=workflow, input={}).job
    Job.objects.filter(pk=job.pk).update(created_at=timezone.now() - dt.timedelta(seconds=age))
    return job


def oncall() -> None:
    subscription_create(
        name="oncall", actor=None, webhook_url="https://hooks.example.com/a", kinds=["job_at_risk"]
    )


def at_risk_events(job: Job) -> list[Event]:
    return list(Event.objects.filter(job_id=job.pk, kind=EventKind.JOB_AT_RISK))


@pytest.mark.django_db
@pytest.mark.sqlite
def test_a_job_past_its_warn_fraction_is_flagged_once_with_its_event_and_alert(
    supervise: Callable[..., ScanReport],
) -> None:
    oncall()
    waiting_workflow("order", sla_seconds=100, warn_fraction=0.5)
    late, early = submitted("order", age=60), submitted("order", age=10)
    report = supervise()
    assert report.decisions.get("at_risk_clock") == 1
    assert Job.objects.get(pk=late.pk).at_risk and not Job.objects.get(pk=early.pk).at_risk
    (event,) = at_risk_events(late)
    assert event.data["rule"] == "clock" and event.source == "supervisor:test-supervisor"
    (alert,) = Delivery.objects.filter(payload__alert=AlertKind.JOB_AT_RISK)
    assert alert.payload["job_id"] == str(late.pk) and alert.payload["rule"] == "clock"
    assert alert.payload["workflow"] == "order" and alert.payload["sla_seconds"] == 100
    assert errors_of(validator("#/components/schemas/AlertWebhook"), alert.payload) == []
    supervise()
    assert len(at_risk_events(late)) == 1
    assert Delivery.objects.filter(payload__alert=AlertKind.JOB_AT_RISK).count() == 1


@pytest.mark.django_db
def test_a_job_whose_workflow_has_no_sla_or_that_settled_is_never_flagged(
    supervise: Callable[..., ScanReport],
) -> None:
    waiting_workflow("plain")
    waiting_workflow("order", sla_seconds=100)
    plain = submitted("plain", age=1000)
    settled = submitted("order", age=1000)
    Job.objects.filter(pk=settled.pk).update(status="cancelled", finished_at=timezone.now())
    supervise()
    assert not Job.objects.filter(at_risk=True).exists()
    assert not at_risk_events(plain) and not at_risk_events(settled)


def measured_history(workflow: str, seconds: dict[str, float], samples: int = 5) -> None:
    """A past job of `workflow` whose steps each succeeded `samples` times in `seconds[step]`."""
    past = job_submit(workflow=workflow, input={}).job
    now = timezone.now()
    for each in Step.objects.filter(job=past):
        for number in range(10, 10 + samples):
            Attempt.objects.create(
                step=each,
                number=number,
                pool_id=each.pool_id or make_pool().pk,
                policy_version=1,
                dispatched_at=now - dt.timedelta(seconds=seconds[each.name]),
                deadline=now,
                finished_at=now,
                outcome=Outcome.SUCCEEDED,
            )


@pytest.mark.django_db
@pytest.mark.sqlite
def test_the_projection_flags_a_job_before_its_clock_fraction_from_measured_step_durations(
    supervise: Callable[..., ScanReport],
) -> None:
    # Version 1 (no SLA) ran before: its steps took 150 s each. Version 2 has an SLA of 300 s.
    make_workflow("order", step("reserve"), step("charge", "reserve"))
    measured_history("order", {"reserve": 150, "charge": 150})
    make_workflow("order", step("reserve"), step("charge", "reserve"), sla_seconds=300)
    slow = submitted("order", age=60)
    supervise()
    assert Job.objects.get(pk=slow.pk).at_risk
    (event,) = at_risk_events(slow)
    assert event.data["rule"] == "projection"
    due = dt.datetime.fromisoformat(event.data["due_at"])
    assert dt.datetime.fromisoformat(event.data["projected_finish"]) > due
    assert dt.datetime.fromisoformat(event.data["warn_at"]) > timezone.now()


@pytest.mark.django_db
def test_the_projection_leaves_a_job_whose_remaining_steps_end_in_time(
    supervise: Callable[..., ScanReport],
) -> None:
    make_workflow("order", step("reserve"), step("charge", "reserve"))
    measured_history("order", {"reserve": 20, "charge": 20})
    make_workflow("order", step("reserve"), step("charge", "reserve"), sla_seconds=300)
    quick = submitted("order", age=60)
    supervise()
    assert not Job.objects.get(pk=quick.pk).at_risk


@pytest.mark.django_db
@pytest.mark.sqlite
def test_a_job_whose_check_raises_is_quarantined_and_the_others_are_still_flagged(
    supervise: Callable[..., ScanReport],
) -> None:
    waiting_workflow("order", sla_seconds=100)
    waiting_workflow("broken", sla_seconds=100)
    first = submitted("order", age=500)
    bad = submitted("broken", age=400)
    last = submitted("order", age=300)
    # Bad data under one job: its definition's dependencies are not a list.
    StepDefinition.objects.filter(workflow__name="broken", name="ship").update(depends_on=5)
    report = supervise()
    assert Job.objects.get(pk=first.pk).at_risk and Job.objects.get(pk=last.pk).at_risk
    assert not Job.objects.get(pk=bad.pk).at_risk and not at_risk_events(bad)
    (row,) = Quarantine.objects.filter(loop=QuarantineLoop.AT_RISK)
    assert row.job_id == bad.pk and row.action == "skipped" and "TypeError" in row.error
    assert report.quarantined == 1
    # Its work goes on untouched, and the next pass leaves it alone.
    assert Job.objects.get(pk=bad.pk).status == "running"
    supervise()
    assert Quarantine.objects.filter(loop=QuarantineLoop.AT_RISK).count() == 1


# --- reading -------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.sqlite
def test_the_jobs_list_filters_on_at_risk(supervise: Callable[..., ScanReport]) -> None:
    waiting_workflow("order", sla_seconds=100)
    late, early = submitted("order", age=90), submitted("order", age=1)
    supervise()
    olga = client_for(make_user("olga", "operators"))
    flagged = olga.get(f"{V1}/jobs/", {"at_risk": "true"}).json()["results"]
    assert [j["id"] for j in flagged] == [str(late.pk)] and flagged[0]["at_risk"] is True
    others = olga.get(f"{V1}/jobs/", {"at_risk": "false"}).json()["results"]
    assert [j["id"] for j in others] == [str(early.pk)]
    assert len(olga.get(f"{V1}/jobs/").json()["results"]) == 2
    refused = olga.get(f"{V1}/jobs/", {"at_risk": "perhaps"})
    assert refused.status_code == 400 and refused.json()["field"] == "at_risk"


@pytest.mark.django_db
@pytest.mark.sqlite
def test_the_job_document_shows_at_risk_alike_from_every_read(supervise: Callable[..., ScanReport]) -> None:
    waiting_workflow("order", sla_seconds=100)
    late = submitted("order", age=90)
    supervise()
    olga = make_user("olga", "operators")
    full = JobSerializer(selectors.job_detail(user=olga, job_id=late.pk)).data
    light = JobSerializer(selectors.job_for_reading(user=olga, job_id=late.pk)).data
    assert full["at_risk"] is True and light == full
    text = selectors.job_json(user=olga, job_id=late.pk)
    if text is not None:  # PostgreSQL builds the document itself
        assert json.loads(text)["at_risk"] is True
    assert client_for(olga).get(f"{V1}/jobs/{late.pk}/").json()["at_risk"] is True


@pytest.mark.django_db
@pytest.mark.sqlite
def test_the_at_risk_page_lists_flagged_live_jobs_with_how_late_each_is(
    client: Any, supervise: Callable[..., ScanReport]
) -> None:
    waiting_workflow("order", sla_seconds=100)
    late, close = submitted("order", age=130), submitted("order", age=85)
    fine = submitted("order", age=5)
    supervise()
    client.force_login(make_user("vera", "viewers"))
    page = client.get("/ops/at-risk/")
    assert page.status_code == 200
    text = page.content.decode()
    assert f'data-job="{late.pk}"' in text and f'data-job="{close.pk}"' in text
    assert f'data-job="{fine.pk}"' not in text
    assert re.search(rf'data-job="{late.pk}".*?late by 3\ds', text, re.DOTALL)
    assert re.search(rf'data-job="{close.pk}".*?due in 1\ds', text, re.DOTALL)
    assert 'href="/ops/at-risk/"' in text  # the nav's link


# --- metrics -------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.sqlite
def test_metrics_expose_settled_job_durations_by_workflow_and_status_and_queue_waits_by_pool(
    drain: Callable[[], int], fake_remote: FakeRemote, settings: Any
) -> None:
    settings.SAS_METRICS_SETTLE_SECONDS = 0
    make_workflow("order", step("reserve"), step("charge", "reserve"))
    client = Client()
    metrics(client)  # starts the counters at the history's end
    jobs = [job_submit(workflow="order", input={}).job for _ in range(2)]
    drain()
    # Both took 90 s from submission to settling; each call waited 2 s in the queue.
    for job in jobs:
        settled = Event.objects.get(job_id=job.pk, kind=EventKind.JOB_SUCCEEDED).created_at
        Job.objects.filter(pk=job.pk).update(created_at=settled - dt.timedelta(seconds=90))
    for attempt in Attempt.objects.filter(step__job__in=jobs):
        Attempt.objects.filter(pk=attempt.pk).update(
            started_at=attempt.dispatched_at + dt.timedelta(seconds=2)
        )
    found = metrics(client)
    succeeded = {"workflow": "order", "status": "succeeded"}
    assert total(found, "sas_job_duration_seconds_count", **succeeded) == 2
    assert total(found, "sas_job_duration_seconds_bucket", le="60.0", **succeeded) == 0
    assert total(found, "sas_job_duration_seconds_bucket", le="120.0", **succeeded) == 2
    assert total(found, "sas_job_duration_seconds_sum", **succeeded) == pytest.approx(180)
    calls = Attempt.objects.filter(step__job__in=jobs).count()
    assert total(found, "sas_queue_wait_seconds_count", pool="local") == calls
    assert total(found, "sas_queue_wait_seconds_bucket", pool="local", le="1.0") == 0
    assert total(found, "sas_queue_wait_seconds_bucket", pool="local", le="2.5") == calls
    assert total(found, "sas_queue_wait_seconds_sum", pool="local") == pytest.approx(2 * calls)
    # Counted once: another scrape adds nothing.
    assert total(metrics(client), "sas_job_duration_seconds_count", **succeeded) == 2
