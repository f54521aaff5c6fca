"""Schedules' overlap policies, jitter, pause after failures and backfill (scheduler.schedules,
scheduler.schedule_policies, scheduler.schedule_backfill): what a firing does while an earlier
firing's job is live, each buffered firing started once, a jitter that delays without changing the
fire time, a schedule that pauses itself after jobs that failed in a row, and a backfill that
starts each missed fire time once and refuses a bad range changing nothing."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry

from agents.fake import FakeRemote
from sas_project.errors import ActionNotAllowed, InvalidInput
from scheduler.models import Event, EventKind, FiringStatus, Job, JobStatus, Schedule, ScheduleFiring
from scheduler.schedule_backfill import schedule_backfill
from scheduler.schedule_policies import BUFFER, CANCEL, SKIP, START, jitter_delay, overlap_decide
from scheduler.schedules import fire_key, schedule_create, schedule_set_paused, schedules_fire
from supervisor.scan import ScanReport
from tests.api.support import make_user
from tests.factories import chain, make_policy

pytestmark = pytest.mark.django_db

MINUTE = dt.timedelta(minutes=1)


@pytest.mark.parametrize(
    ("overlap", "live", "waiting", "verdict"),
    [
        ("allow_all", True, 0, START),
        ("skip", False, 0, START),
        ("skip", True, 0, SKIP),
        ("cancel_other", False, 0, START),
        ("cancel_other", True, 0, CANCEL),
        ("buffer_one", False, 0, START),
        ("buffer_one", True, 0, BUFFER),
        ("buffer_one", True, 1, SKIP),
        ("buffer_one", False, 1, SKIP),
        ("buffer_all", True, 0, BUFFER),
        ("buffer_all", True, 3, BUFFER),
        ("buffer_all", False, 2, BUFFER),
    ],
)
def test_the_overlap_policy_decides_what_a_firing_does(
    overlap: str, live: bool, waiting: int, verdict: str
) -> None:
    assert overlap_decide(overlap, live=live, waiting=waiting) == verdict


def _every_minute(**fields: Any) -> tuple[Schedule, dt.datetime]:
    chain(n=1)
    schedule = schedule_create(
        name="every-minute",
        actor=make_user("sam", "submitters"),
        workflow="chain",
        cron="* * * * *",
        **fields,
    )
    assert schedule.next_fire_at is not None
    return schedule, schedule.next_fire_at


def _fire(first: dt.datetime, minutes: int) -> int:
    """Fire the loop a few seconds after the fire time `minutes` after `first`."""
    return schedules_fire(first + minutes * MINUTE + dt.timedelta(seconds=5))


def test_a_schedule_made_without_an_overlap_policy_starts_every_firing_as_before(
    fake_remote: FakeRemote,
) -> None:
    schedule, first = _every_minute()
    assert schedule.overlap == "allow_all"
    assert _fire(first, 0) == 1
    assert _fire(first, 1) == 1  # the first job is still live
    assert Job.objects.count() == 2


def test_a_skip_firing_starts_nothing_while_the_last_job_is_live_and_says_why(
    fake_remote: FakeRemote, drain: Callable[[], int]
) -> None:
    schedule, first = _every_minute(overlap="skip")
    assert _fire(first, 0) == 1
    live = Job.objects.get()
    assert _fire(first, 1) == 0
    skipped = ScheduleFiring.objects.get()
    assert skipped.status == FiringStatus.SKIPPED and skipped.fire_at == first + MINUTE
    assert str(live.pk) in skipped.reason and "skip" in skipped.reason
    schedule.refresh_from_db()
    assert schedule.next_fire_at == first + 2 * MINUTE and schedule.last_job_id == live.pk
    drain()
    assert Job.objects.get().status == JobStatus.SUCCEEDED
    assert _fire(first, 2) == 1  # settled: the next firing starts


def test_buffer_one_keeps_one_firing_and_starts_it_once_when_the_live_job_settles(
    fake_remote: FakeRemote, drain: Callable[[], int]
) -> None:
    schedule, first = _every_minute(overlap="buffer_one")
    assert _fire(first, 0) == 1
    assert _fire(first, 1) == 0
    assert _fire(first, 2) == 0
    firings = {f.fire_at: f for f in ScheduleFiring.objects.all()}
    assert firings[first + MINUTE].status == FiringStatus.WAITING
    assert firings[first + 2 * MINUTE].status == FiringStatus.SKIPPED
    assert "already wait in the buffer" in firings[first + 2 * MINUTE].reason
    assert schedules_fire(first + 2 * MINUTE + dt.timedelta(seconds=10)) == 0  # still live
    drain()
    later = first + 2 * MINUTE + dt.timedelta(seconds=20)
    assert schedules_fire(later) == 1
    assert schedules_fire(later) == 0
    buffered = ScheduleFiring.objects.get(fire_at=first + MINUTE)
    assert buffered.status == FiringStatus.STARTED and buffered.job is not None
    assert buffered.job.idempotency_key == fire_key(schedule, fire_at=first + MINUTE)
    schedule.refresh_from_db()
    assert schedule.last_job_id == buffered.job_id and Job.objects.count() == 2


def test_buffer_all_starts_every_buffered_firing_in_fire_time_order(
    fake_remote: FakeRemote, drain: Callable[[], int]
) -> None:
    schedule, first = _every_minute(overlap="buffer_all")
    for minute in range(3):
        _fire(first, minute)
    assert ScheduleFiring.objects.filter(status=FiringStatus.WAITING).count() == 2
    started = []
    for turn in range(4):
        drain()
        moment = first + 2 * MINUTE + dt.timedelta(seconds=10 + turn)
        schedules_fire(moment)
        schedules_fire(moment)  # a second loop in the same turn starts nothing more
        started = list(Job.objects.order_by("created_at").values_list("idempotency_key", flat=True))
    assert started == [fire_key(schedule, fire_at=first + m * MINUTE) for m in range(3)]
    assert not ScheduleFiring.objects.filter(status=FiringStatus.WAITING).exists()


def test_cancel_other_cancels_the_live_job_as_the_schedule_and_starts_the_new_one(
    fake_remote: FakeRemote,
) -> None:
    schedule, first = _every_minute(overlap="cancel_other")
    assert _fire(first, 0) == 1
    old = Job.objects.get()
    assert _fire(first, 1) == 1
    old.refresh_from_db()
    assert old.compensation_reason == "cancel" and old.status in {JobStatus.COMPENSATING, JobStatus.CANCELLED}
    stopped = Event.objects.get(job=old, kind=EventKind.JOB_COMPENSATING)
    assert stopped.source == "schedule:every-minute" and stopped.actor == schedule.created_by
    assert "cancel_other" in stopped.reason
    schedule.refresh_from_db()
    assert schedule.last_job_id != old.pk and Job.objects.count() == 2


def test_jitter_delays_a_firing_within_its_bound_the_same_way_every_time_and_keeps_its_fire_time(
    fake_remote: FakeRemote,
) -> None:
    schedule, first = _every_minute(jitter_seconds=40)
    delays = {jitter_delay(schedule, fire_at=first + m * MINUTE) for m in range(200)}
    assert all(dt.timedelta(0) <= d <= dt.timedelta(seconds=40) for d in delays) and len(delays) > 10
    assert jitter_delay(schedule, fire_at=first) == jitter_delay(schedule, fire_at=first)
    delay = jitter_delay(schedule, fire_at=first)
    assert schedule.next_due_at == first + delay
    assert schedules_fire(first + delay - dt.timedelta(microseconds=1)) == 0
    assert schedules_fire(first + delay) == 1
    assert Job.objects.get().idempotency_key == fire_key(schedule, fire_at=first)
    schedule.refresh_from_db()
    assert schedule.next_fire_at == first + MINUTE  # a delay never skips the next fire time


def test_a_bad_jitter_or_failure_limit_is_refused_naming_the_field() -> None:
    chain(n=1)
    sam = make_user("sam", "submitters")
    for field, value in [("jitter_seconds", 3601), ("jitter_seconds", -1), ("pause_after_failures", 0)]:
        with pytest.raises(InvalidInput) as refused:
            schedule_create(name="s", actor=sam, workflow="chain", cron="* * * * *", **{field: value})
        assert refused.value.detail == {"field": field}
    assert not Schedule.objects.exists()


def _settle(drain: Callable[[], int], supervise: Callable[..., ScanReport]) -> None:
    """Run the jobs' calls, and the supervisor's decision on a refused one (the job fails)."""
    drain()
    supervise()
    drain()


def test_a_schedule_pauses_itself_after_its_jobs_failed_so_many_times_in_a_row(
    fake_remote: FakeRemote, drain: Callable[[], int], supervise: Callable[..., ScanReport]
) -> None:
    make_policy(max_attempts=1, on_exhausted="fail")
    schedule, first = _every_minute(pause_after_failures=2)
    fake_remote.script("s1", "business_failure", "business_failure")
    assert _fire(first, 0) == 1
    _settle(drain, supervise)
    assert _fire(first, 1) == 1  # one failure counted
    _settle(drain, supervise)
    assert set(Job.objects.values_list("status", flat=True)) <= {JobStatus.FAILED, JobStatus.COMPENSATED}
    assert _fire(first, 2) == 0
    schedule.refresh_from_db()
    assert schedule.paused_at is not None and schedule.job_failures == 2
    assert "paused after 2 jobs in a row ended failed or compensated" in schedule.last_error
    paused = ScheduleFiring.objects.get(fire_at=first + 2 * MINUTE)
    assert paused.status == FiringStatus.SKIPPED and paused.reason == schedule.last_error
    schedule_set_paused("every-minute", actor=schedule.created_by, paused=False)
    schedule.refresh_from_db()
    assert schedule.job_failures == 0
    assert schedules_fire(schedule.next_due_at) == 1  # its last job is not counted twice


def test_a_job_that_succeeded_starts_the_count_of_failed_jobs_again(
    fake_remote: FakeRemote, drain: Callable[[], int], supervise: Callable[..., ScanReport]
) -> None:
    make_policy(max_attempts=1, on_exhausted="fail")
    schedule, first = _every_minute(pause_after_failures=2)
    fake_remote.script("s1", "business_failure", "succeeded", "business_failure")
    for minute in range(4):
        assert _fire(first, minute) == 1
        _settle(drain, supervise)
    schedule.refresh_from_db()
    assert schedule.paused_at is None and schedule.job_failures == 1  # the success between reset it


def _hourly() -> tuple[Schedule, Any]:
    chain(n=1)
    sam = make_user("sam", "submitters")
    schedule = schedule_create(name="hourly", actor=sam, workflow="chain", cron="0 * * * *")
    return schedule, sam


def test_a_backfill_starts_each_fire_time_of_its_range_once(fake_remote: FakeRemote) -> None:
    schedule, sam = _hourly()
    end = dt.datetime(2026, 3, 1, 12, 30, tzinfo=dt.UTC)
    start = end - dt.timedelta(hours=3)
    done = schedule_backfill("hourly", actor=sam, start=start, end=end)
    assert [f.fire_at.hour for f in done] == [10, 11, 12] and all(f.started for f in done)
    assert {j.idempotency_key for j in Job.objects.all()} == {
        fire_key(schedule, fire_at=f.fire_at) for f in done
    }
    scheduled = Event.objects.filter(kind=EventKind.JOB_SCHEDULED)
    assert scheduled.count() == 3 and {e.actor for e in scheduled} == {sam}
    again = schedule_backfill("hourly", actor=sam, start=start, end=end)
    assert [f.job_id for f in again] == [f.job_id for f in done] and not any(f.started for f in again)
    assert Job.objects.count() == 3
    wider = schedule_backfill("hourly", actor=sam, start=start - dt.timedelta(hours=1), end=end)
    assert [f.started for f in wider] == [True, False, False, False]


def test_a_backfill_starts_a_fire_time_the_overlap_policy_skipped(
    fake_remote: FakeRemote,
) -> None:
    schedule, first = _every_minute(overlap="skip")
    _fire(first, 0)
    _fire(first, 1)
    assert ScheduleFiring.objects.get().status == FiringStatus.SKIPPED
    done = schedule_backfill(
        "every-minute", actor=schedule.created_by, start=first, end=first + MINUTE, now=first + 2 * MINUTE
    )
    assert [f.started for f in done] == [False, True]
    firing = ScheduleFiring.objects.get()
    assert firing.status == FiringStatus.STARTED and firing.job_id == done[1].job_id


@pytest.mark.parametrize(
    ("start", "end", "field"),
    [
        ("2026-03-01T12:00:00Z", "2026-03-01T11:00:00Z", "end"),
        ("2026-03-01T12:00:00Z", "2999-01-01T00:00:00Z", "end"),
        ("2026-01-01T00:00:00Z", "2026-03-01T00:00:00Z", "end"),
        ("yesterday", "2026-03-01T00:00:00Z", "start"),
    ],
)
def test_a_bad_backfill_is_refused_naming_the_field_and_starts_nothing(
    settings: Any, fake_remote: FakeRemote, start: str, end: str, field: str
) -> None:
    settings.SAS_SCHEDULE_BACKFILL_MAX = 100
    _, sam = _hourly()
    logged = LogEntry.objects.count()

    def instant(text: str) -> Any:
        try:
            return dt.datetime.fromisoformat(text)
        except ValueError:
            return text

    with pytest.raises(InvalidInput) as refused:
        schedule_backfill("hourly", actor=sam, start=instant(start), end=instant(end))
    assert refused.value.detail == {"field": field}
    assert not Job.objects.exists() and not ScheduleFiring.objects.exists()
    assert LogEntry.objects.count() == logged


def test_a_backfill_of_a_schedule_whose_owner_may_not_submit_is_refused(fake_remote: FakeRemote) -> None:
    _, sam = _hourly()
    sam.is_active = False
    sam.save(update_fields=["is_active"])
    end = dt.datetime(2026, 3, 1, 12, 30, tzinfo=dt.UTC)
    with pytest.raises(ActionNotAllowed):
        schedule_backfill("hourly", actor=make_user("olga", "operators"), start=end - MINUTE * 90, end=end)
    assert not Job.objects.exists()
