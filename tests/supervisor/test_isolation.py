"""No item stops a loop (scheduler.services.quarantine): one job, step or schedule whose handling
raises is quarantined and every other item is still served in the same pass.

Two kinds of poison: the inputs found to stop every scan (an impossible time from a job's data, a
schedule whose first step has one), and a row the database refuses to write, made by a trigger
(`poisoned`), which reaches every path the same way whatever the loop writes with (the unit of
work, the set-wise scan's statements, a job's transition)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection
from django.db.models import F
from django.test import override_settings
from django.utils import timezone
from django_q.models import OrmQ

from agents.fake import FakeRemote
from agents.outcome import CallResult
from scheduler.models import (
    Attempt,
    Delivery,
    Event,
    EventKind,
    Job,
    JobStatus,
    Outcome,
    Quarantine,
    Schedule,
    Step,
    StepStatus,
)
from scheduler.outbox import CHILD_START_TASK
from scheduler.schedules import schedules_fire
from scheduler.services import job_submit
from scheduler.services.retention import history_prune
from supervisor.alerts import quarantines_alert
from supervisor.scan import ScanReport
from supervisor.services import step_retry
from supervisor.subscriptions import subscription_create
from tests.api.support import make_user
from tests.factories import chain, make_workflow, step
from tests.scheduler.test_children import run_all_but
from tests.scheduler.test_waits import operator

pytestmark = pytest.mark.django_db
Supervise = Callable[..., ScanReport]
S = StepStatus


def steps_of(job: Job) -> dict[str, Step]:
    return {s.name: s for s in Step.objects.filter(job=job)}


@contextmanager
def poisoned(table: str, condition: str, *, on: tuple[str, ...] = ("UPDATE",)) -> Iterator[None]:
    """The database refuses to write the rows of `table` that match `condition` (on NEW), as it
    refuses a value it cannot store. Dropped at the end (and with the test's transaction)."""
    pg = connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        if pg:
            cursor.execute(
                "CREATE FUNCTION test_poison() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'poisoned row' USING ERRCODE = '22023'; END $$"
            )
        for event in on:
            name = f"test_poison_{event.lower()}"
            if pg:
                cursor.execute(
                    f"CREATE TRIGGER {name} BEFORE {event} ON {table} FOR EACH ROW "
                    f"WHEN ({condition}) EXECUTE FUNCTION test_poison()"
                )
            else:
                cursor.execute(
                    f"CREATE TRIGGER {name} BEFORE {event} ON {table} FOR EACH ROW "
                    f"WHEN {condition} BEGIN SELECT RAISE(ABORT, 'poisoned row'); END"
                )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            for event in on:
                name = f"test_poison_{event.lower()}"
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}" + (f" ON {table}" if pg else ""))
            if pg:
                cursor.execute("DROP FUNCTION IF EXISTS test_poison()")


def lose_in_flight_calls(*jobs: Job) -> None:
    """The worker running these jobs' calls died: their tasks are gone and their deadlines pass."""
    OrmQ.objects.all().delete()
    Step.objects.filter(job__in=jobs, status=S.DISPATCHED).update(
        deadline=F("deadline") - dt.timedelta(hours=1, seconds=1)
    )


def healthy_overdue_jobs(n: int = 3) -> list[Job]:
    chain(n=2)
    return [job_submit(workflow="chain", input={}).job for _ in range(n)]


def assert_retried_once(jobs: list[Job]) -> None:
    for job in jobs:
        s1 = steps_of(job)["s1"]
        assert (s1.status, s1.attempt) == (S.DISPATCHED, 2), (job.pk, s1.status, s1.attempt)
        assert [a.outcome for a in Attempt.objects.filter(step=s1).order_by("number")] == [
            Outcome.NO_ANSWER,
            "",
        ]


def held_reason(job: Job) -> str:
    job.refresh_from_db()
    assert job.status == JobStatus.NEEDS_ATTENTION, job.status
    (held,) = [s for s in steps_of(job).values() if s.status == S.HELD]
    return Event.objects.filter(step=held, kind=EventKind.STEP_HELD).latest("id").reason


# --- the reproductions: a job's own data ----------------------------------------------------------


def timer_from_answer_workflow() -> None:
    """a (a call whose answer holds a time) -> first (a timer) -> second (a timer at a.at) -> b."""
    make_workflow(
        "poison",
        step("a"),
        {"name": "first", "kind": "timer", "wait_seconds": 3600, "depends_on": ["a"]},
        {"name": "second", "kind": "timer", "until": "a.at", "depends_on": ["first"]},
        step("b", "second"),
    )


@pytest.mark.sqlite
@pytest.mark.parametrize(
    "impossible", ["2024-02-30T00:00:00Z", "2024-13-01T00:00:00Z", "2024-01-01T00:00:00+20:00"]
)
def test_an_impossible_timer_time_is_held_and_the_same_scan_remediates_every_other_job(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise, impossible: str
) -> None:
    timer_from_answer_workflow()
    fake_remote.script("a", CallResult(Outcome.SUCCEEDED, output={"at": impossible}))
    poison = job_submit(workflow="poison", input={}).job
    drain()
    Step.objects.filter(job=poison, name="first").update(deadline=timezone.now() - dt.timedelta(seconds=1))
    healthy = healthy_overdue_jobs()
    lose_in_flight_calls(*healthy)
    report = supervise()
    assert not report.lost_lease
    assert_retried_once(healthy)
    assert held_reason(poison)
    assert supervise().decisions.get("quarantined") is None  # set aside, not tried at every pass
    drain()
    for job in healthy:
        job.refresh_from_db()
        assert job.status == JobStatus.SUCCEEDED


@pytest.mark.sqlite
def test_a_schedule_whose_job_cannot_start_moves_on_and_the_schedules_after_it_fire(
    fake_remote: FakeRemote,
) -> None:
    make_workflow("at", {"name": "wait", "kind": "timer", "until": "input.when"}, step("b", "wait"))
    chain(n=1)
    now = timezone.now()
    # Written straight to the table: as a schedule made before its workflow changed would be.
    owner = make_user("sam", "submitters")
    bad = Schedule.objects.create(
        name="bad",
        workflow="at",
        input={"when": "2024-02-30T00:00:00Z"},
        cron="* * * * *",
        next_fire_at=now,
        next_due_at=now,
        created_by=owner,
    )
    good = Schedule.objects.create(
        name="good",
        workflow="chain",
        cron="* * * * *",
        next_fire_at=now + dt.timedelta(seconds=1),
        next_due_at=now + dt.timedelta(seconds=1),
        created_by=owner,
    )
    assert schedules_fire(now + dt.timedelta(seconds=2)) == 1
    bad.refresh_from_db()
    good.refresh_from_db()
    assert good.last_job_id is not None and good.last_error == ""
    assert bad.last_job_id is None
    assert "2024-02-30" in bad.last_error or "day is out of range" in bad.last_error
    assert bad.next_fire_at is not None and bad.next_fire_at > now


# --- quarantine, in every loop --------------------------------------------------------------------


@pytest.mark.sqlite
def test_a_step_the_database_refuses_to_move_is_quarantined_and_the_rest_of_its_batch_is_remediated(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise
) -> None:
    jobs = healthy_overdue_jobs(5)
    lose_in_flight_calls(*jobs)
    victim = steps_of(jobs[2])["s1"]
    with poisoned("scheduler_step", f"NEW.id = {victim.pk} AND NEW.status <> 'held'"):
        report = supervise()
    assert report.quarantined == 1 and report.decisions["quarantined"] == 1
    assert_retried_once([j for j in jobs if j.pk != jobs[2].pk])
    victim.refresh_from_db()
    assert victim.status == S.HELD and "quarantined by the remediation loop" in victim.status_reason
    # Its call was closed as unanswered: nothing stays in flight behind a held step.
    assert Attempt.objects.get(step=victim).outcome == Outcome.NO_ANSWER
    held = Event.objects.get(step=victim, kind=EventKind.STEP_HELD)
    assert (
        held.data["quarantine"]["loop"] == "remediation"
        and "poisoned row" in held.data["quarantine"]["error"]
    )
    jobs[2].refresh_from_db()
    assert jobs[2].status == JobStatus.NEEDS_ATTENTION
    (row,) = Quarantine.objects.all()
    assert (row.loop, row.step_id, row.action) == ("remediation", victim.pk, "held")


@pytest.mark.sqlite
def test_a_wait_whose_ending_is_refused_is_quarantined_and_the_other_waits_end(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_workflow(
        "later",
        step("a"),
        {"name": "wait", "kind": "timer", "wait_seconds": 3600, "depends_on": ["a"]},
        step("b", "wait"),
    )
    jobs = [job_submit(workflow="later", input={}).job for _ in range(3)]
    drain()
    Step.objects.filter(name="wait").update(deadline=timezone.now() - dt.timedelta(seconds=1))
    victim = steps_of(jobs[0])["wait"]
    with poisoned("scheduler_step", f"NEW.id = {victim.pk} AND NEW.status <> 'held'"):
        report = supervise()
    assert report.decisions["timer_fired"] == 2 and report.quarantined == 1, report
    victim.refresh_from_db()
    assert victim.status == S.HELD and "quarantined by the waits loop" in victim.status_reason
    assert all(steps_of(job)["wait"].status == S.SUCCEEDED for job in jobs[1:])
    # Once the operator retries it, the next pass takes it (the quarantine does not outlive a change).
    step_retry(step_id=victim.pk, actor=operator())
    Step.objects.filter(pk=victim.pk).update(deadline=timezone.now() - dt.timedelta(seconds=1))
    assert supervise().decisions["timer_fired"] == 1


@pytest.mark.sqlite
def test_a_job_whose_deadline_compensation_is_refused_needs_attention_and_the_other_jobs_compensate(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_workflow("slow", step("s1"), step("s2", "s1"), deadline_seconds=60)
    jobs = [job_submit(workflow="slow", input={}).job for _ in range(3)]
    Job.objects.update(deadline=F("deadline") - dt.timedelta(hours=1))
    victim = jobs[1]
    victim_id = victim.pk.hex if connection.vendor == "sqlite" else victim.pk
    with poisoned("scheduler_job", f"NEW.id = '{victim_id}' AND NEW.status = 'compensating'"):
        report = supervise()
    assert report.decisions["job_deadline"] == 2 and report.quarantined == 1
    victim.refresh_from_db()
    assert victim.status == JobStatus.NEEDS_ATTENTION
    event = Event.objects.filter(job=victim, kind=EventKind.JOB_NEEDS_ATTENTION).latest("id")
    assert event.data["quarantine"]["loop"] == "job_deadlines"
    for job in (jobs[0], jobs[2]):
        job.refresh_from_db()
        assert job.status == JobStatus.COMPENSATING and job.compensation_reason == "deadline"
    # Left alone for SAS_QUARANTINE_RETRY_SECONDS: the next pass does not stumble on it again.
    assert supervise().decisions.get("quarantined") is None


@pytest.mark.sqlite
def test_a_schedule_that_keeps_raising_pauses_itself_and_the_others_keep_firing(
    fake_remote: FakeRemote, settings: Any
) -> None:
    settings.SAS_SCHEDULE_MAX_FAILURES = 2
    chain(n=1)
    doomed = make_workflow("doomed", step("x"))
    now = timezone.now()
    owner = make_user("sam", "submitters")
    bad = Schedule.objects.create(
        name="bad", workflow="doomed", cron="* * * * *", next_fire_at=now, next_due_at=now, created_by=owner
    )
    good = Schedule.objects.create(
        name="good", workflow="chain", cron="* * * * *", next_fire_at=now, next_due_at=now, created_by=owner
    )
    # Every job the bad schedule makes is refused by the database when its step is written.
    condition = f"NEW.definition_id = {doomed.steps.get().pk}"
    with poisoned("scheduler_step", condition, on=("INSERT", "UPDATE")):
        assert schedules_fire(now + dt.timedelta(seconds=1)) == 1
        bad.refresh_from_db()
        assert bad.failures == 1 and bad.paused_at is None and bad.next_fire_at > now
        assert bad.last_error.startswith("could not submit: ")
        assert schedules_fire(bad.next_fire_at + dt.timedelta(seconds=1)) == 1
    bad.refresh_from_db()
    good.refresh_from_db()
    assert bad.failures == 2 and bad.paused_at is not None and "paused after 2 failures" in bad.last_error
    assert Job.objects.filter(idempotency_key__startswith=f"schedule:{good.pk}:").count() == 2
    assert list(Quarantine.objects.order_by("id").values_list("loop", "action")) == [
        ("schedules", "moved_on"),
        ("schedules", "schedule_paused"),
    ]


@pytest.mark.sqlite
def test_a_quarantine_is_alerted_once_to_the_subscriptions_that_want_it(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise
) -> None:
    subscription_create(
        name="ops", actor=None, webhook_url="https://hooks.example.com/x", kinds=["quarantined"]
    )
    jobs = healthy_overdue_jobs(2)
    lose_in_flight_calls(*jobs)
    victim = steps_of(jobs[0])["s1"]
    with poisoned("scheduler_step", f"NEW.id = {victim.pk} AND NEW.status <> 'held'"):
        supervise()
    assert quarantines_alert() == 1
    assert quarantines_alert() == 0
    (alert,) = Delivery.objects.filter(payload__alert="quarantined")
    assert alert.payload["loop"] == "remediation" and alert.payload["step_id"] == victim.pk


def test_a_fault_of_the_service_quarantines_nothing(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database error that is not the item's (here: every batch refused as by a lost
    connection) ends the pass as before, to be tried again: nobody's step is held for it."""
    jobs = healthy_overdue_jobs(2)
    lose_in_flight_calls(*jobs)
    monkeypatch.setenv("SAS_FAULT_REMEDIATION_FAILS", "1")
    with pytest.raises(Exception, match="injected fault"):
        supervise()
    assert not Quarantine.objects.exists()
    assert not Step.objects.filter(status=S.HELD).exists()
    monkeypatch.delenv("SAS_FAULT_REMEDIATION_FAILS")
    supervise()
    assert_retried_once(jobs)


def test_the_sweeps_runner_quarantines_the_item_that_raises_undoes_its_counts_and_goes_on() -> None:
    from django.db import OperationalError

    from supervisor.sweeps import each_alone

    report = ScanReport(acted=True, holder="h")
    seen: list[str] = []
    set_aside: list[tuple[int, str]] = []

    def handle(item: int) -> int:
        seen.append(f"handle {item}")
        report.remediated += 1
        if item == 2:
            raise ValueError("bad data")
        return item * 10

    def quarantine(item: int, exc: Exception) -> None:
        set_aside.append((item, str(exc)))

    for item, result in each_alone([1, 2, 3], handle=handle, report=report, quarantine=quarantine):
        seen.append(f"got {item}: {result}")
    assert seen == ["handle 1", "got 1: 10", "handle 2", "handle 3", "got 3: 30"]
    assert set_aside == [(2, "bad data")]
    assert report.remediated == 2 and report.quarantined == 1 and report.decisions == {"quarantined": 1}

    def lost(item: int) -> int:
        raise OperationalError("connection lost")

    with pytest.raises(OperationalError):
        list(each_alone([1, 2], handle=lost, report=report, quarantine=quarantine))
    assert set_aside == [(2, "bad data")]  # a fault of the service's sets nothing aside


@pytest.mark.sqlite
def test_a_job_that_cannot_be_archived_is_quarantined_and_the_rest_of_its_batch_is_archived_and_deleted(
    drain: Callable[[], int], fake_remote: FakeRemote, settings: Any, tmp_path: Any
) -> None:
    settings.SAS_ARCHIVE_DIR = tmp_path / "archive"
    settings.SAS_HISTORY_DAYS = 30
    chain(n=1)
    jobs = [job_submit(workflow="chain", input={"n": i}).job for i in range(4)]
    drain()
    Job.objects.update(finished_at=timezone.now() - dt.timedelta(days=31))
    victim = jobs[1]
    victim_id = victim.pk.hex if connection.vendor == "sqlite" else victim.pk
    with poisoned("scheduler_job", f"NEW.id = '{victim_id}' AND NEW.archived_at IS NOT NULL"):
        report = history_prune(source="test")
    assert report.archived == 3 and report.jobs == 3
    assert list(Job.objects.values_list("pk", flat=True)) == [victim.pk]
    (row,) = Quarantine.objects.all()
    assert (row.loop, row.job_id, row.action) == ("retention", victim.pk, "not_archived")
    # Left alone by the next runs for a while, then tried again (and archived once it can be).
    assert history_prune(source="test").archived == 0
    Quarantine.objects.update(created_at=timezone.now() - dt.timedelta(hours=1))
    assert history_prune(source="test").jobs == 1


def test_past_its_budget_a_pass_takes_failures_for_the_services_and_holds_no_more(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad deploy fails every item alike: past PASS_BUDGET quarantines in a pass, the rest of
    the failing items are skipped and logged, not held for an operator."""
    monkeypatch.setattr("scheduler.services.quarantine.PASS_BUDGET", 2)
    jobs = healthy_overdue_jobs(5)
    lose_in_flight_calls(*jobs)
    definition = Step.objects.filter(job=jobs[0], name="s1").values_list("definition_id", flat=True).get()
    with poisoned("scheduler_step", f"NEW.definition_id = {definition} AND NEW.status <> 'held'"):
        report = supervise()
    assert report.quarantined == 5
    assert Step.objects.filter(status=S.HELD).count() == 2
    assert Quarantine.objects.count() == 2


@pytest.mark.sqlite
def test_a_child_whose_input_mapping_makes_nan_is_held_and_the_same_scan_starts_the_other_children(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_workflow("refund", step("credit"))
    make_workflow(
        "order",
        step("charge"),
        {
            "name": "refund",
            "kind": "workflow",
            "workflow": "refund",
            "depends_on": ["charge"],
            "input": {"amount.$": "to_number(input.s)"},
        },
    )
    poison = job_submit(workflow="order", input={"s": "NaN"}).job
    healthy = [job_submit(workflow="order", input={"s": "12"}).job for _ in range(2)]
    run_all_but(CHILD_START_TASK)  # the start tasks are lost with the worker that took them
    with override_settings(SAS_SUPERVISOR_INTERVAL=0):
        report = supervise()
    assert report.decisions.get("child_started") == 2
    for job in healthy:
        assert Job.objects.get(parent_job=job).input == {"amount": 12}
    assert not Job.objects.filter(parent_job=poison).exists()
    refund = steps_of(poison)["refund"]
    assert refund.status == S.HELD, refund.status
    poison.refresh_from_db()
    assert poison.status == JobStatus.NEEDS_ATTENTION
