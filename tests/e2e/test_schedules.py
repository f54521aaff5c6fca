"""End to end, with a real `qcluster` (its supervisor loop fires the schedules), the sandbox remote
and PostgreSQL: a `skip` schedule whose job outlives the time to its next firing starts nothing
more, and a backfill run twice starts each fire time's job once."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from django.utils import timezone

from scheduler.definitions import workflow_create
from scheduler.models import Event, EventKind, FiringStatus, Job, JobStatus, Schedule, ScheduleFiring
from scheduler.schedule_backfill import schedule_backfill
from scheduler.schedules import schedule_create
from tests.api.support import make_user
from tests.e2e.test_qcluster import effects_of, load_demo, wait_terminal
from tests.processes import Cluster, Sandbox, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _pause_then_reserve(seconds: int) -> None:
    workflow_create(
        name="pause_then_reserve",
        steps=[
            {"name": "pause", "kind": "timer", "wait_seconds": seconds},
            {
                "name": "reserve",
                "pool": "inventory",
                "path": "/inventory/reserve",
                "policy": "standard",
                "depends_on": ["pause"],
            },
        ],
    )


def _due_now(schedule: Schedule) -> dt.datetime:
    """Make the schedule's next firing one at an instant just past (as its fire time arriving)."""
    when = timezone.now() - dt.timedelta(seconds=1)
    Schedule.objects.filter(pk=schedule.pk).update(next_fire_at=when, next_due_at=when)
    return when


def test_a_skip_schedule_whose_job_outlives_the_interval_fires_nothing_extra(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    load_demo(sandbox)
    _pause_then_reserve(8)
    schedule = schedule_create(
        name="every-minute",
        actor=make_user("sam", "submitters"),
        workflow="pause_then_reserve",
        input={"sku": "A1", "quantity": 1},
        cron="* * * * *",
        overlap="skip",
    )
    clusters("c1")
    first = _due_now(schedule)
    wait_until(lambda: Job.objects.exists(), timeout=30, interval=0.2, message="the first firing's job")
    job = Job.objects.get()
    second = _due_now(schedule)
    assert second != first

    def skipped() -> bool:
        return ScheduleFiring.objects.filter(fire_at=second, status=FiringStatus.SKIPPED).exists()

    wait_until(skipped, timeout=30, interval=0.2, message="the second firing skipped")
    assert Job.objects.count() == 1
    assert str(job.pk) in ScheduleFiring.objects.get(fire_at=second).reason
    schedule.refresh_from_db()
    assert schedule.next_fire_at is not None and schedule.next_fire_at > second
    (done,) = wait_terminal([job], timeout=90)
    assert done.status == JobStatus.SUCCEEDED and Job.objects.count() == 1
    assert effects_of(sandbox, done)["reserve"] == 1


def test_a_backfill_run_twice_starts_each_fire_times_job_once(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    load_demo(sandbox)
    _pause_then_reserve(1)
    owner = make_user("sam", "submitters")
    schedule = schedule_create(
        name="hourly",
        actor=owner,
        workflow="pause_then_reserve",
        input={"sku": "A1", "quantity": 1},
        cron="0 * * * *",
    )
    clusters("c1")
    clusters("c2")
    end = timezone.now().replace(minute=30, second=0, microsecond=0) - dt.timedelta(hours=1)
    start = end - dt.timedelta(hours=3)
    operator = make_user("olga", "operators")
    first = schedule_backfill("hourly", actor=operator, start=start, end=end)
    second = schedule_backfill("hourly", actor=operator, start=start, end=end)
    assert [f.started for f in first] == [True, True, True]
    assert [f.started for f in second] == [False, False, False]
    assert [f.job_id for f in second] == [f.job_id for f in first]
    jobs = wait_terminal(list(Job.objects.all()), timeout=90)
    assert len(jobs) == 3 and {j.status for j in jobs} == {JobStatus.SUCCEEDED}
    for job in jobs:
        assert Event.objects.filter(job=job, kind=EventKind.JOB_SCHEDULED).count() == 1
        assert effects_of(sandbox, job)["reserve"] == 1
    schedule.refresh_from_db()
    assert schedule.last_job_id is None  # a backfill leaves the regular firings' job alone
