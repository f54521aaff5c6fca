"""The scan's set-wise path and its per-step path decide and write the same.

Each scenario runs twice on jobs of the same shape, once with the set-wise path (SAS_FAST_PATH on)
and once per step, and the rows they leave are compared (tests/scheduler/test_hotpath.py's snapshot).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.db.models import F
from django_q.models import OrmQ

from scheduler.models import Attempt, Job, Step
from scheduler.services import job_submit
from supervisor import setwise
from supervisor.scan import ScanReport
from tests.factories import make_policy, make_pool, make_workflow, step
from tests.scheduler.test_hotpath import snapshot

pytestmark = pytest.mark.django_db

Supervise = Callable[..., ScanReport]


def overdue(job: Job, *, keep_task: bool = False) -> None:
    """Every dispatched call of the job is an hour past its deadline (its task lost, unless kept)."""
    steps = Step.objects.filter(job=job, status="dispatched")
    if not keep_task:
        OrmQ.objects.filter(pk__in=Attempt.objects.filter(step__in=steps).values("queue_row")).delete()
    Attempt.objects.filter(step__in=steps, finished_at__isnull=True).update(
        deadline=F("deadline") - dt.timedelta(hours=1)
    )
    steps.update(deadline=F("deadline") - dt.timedelta(hours=1))


def timeless(snap: dict[str, Any]) -> dict[str, Any]:
    """How late a call was depends on when the run happened: compare that it was late."""
    for event in snap["events"]:
        if "overdue_ms" in event["data"]:
            event["data"]["overdue_ms"] = event["data"]["overdue_ms"] > 3_500_000
        if isinstance(event["data"].get("deadline"), dt.timedelta):
            event["data"]["deadline"] = int(event["data"]["deadline"].total_seconds())
    # A deadline moved by the scan counts from the scan: whole seconds are what both runs share.
    for attempt in snap["attempts"]:
        attempt["timeout"] = int(attempt["timeout"].total_seconds())
    for row in snap["steps"]:
        if row["deadline_after_dispatch"] is not None:
            row["deadline_after_dispatch"] = int(row["deadline_after_dispatch"].total_seconds())
    return snap


def both(settings: Any, supervise: Supervise, scenario: Callable[[], list[Job]]) -> tuple[Any, Any, Any]:
    """Run the scenario and one scan set-wise, then again per step; return both snapshots and
    what the set-wise path took."""
    taken: list[tuple[int, int, int]] = []
    real = setwise.apply

    def counting(plan: setwise.Plan, now: Any, *, source: str) -> None:
        taken.append((len(plan.keep_waiting), len(plan.retry_later), len(plan.per_step)))
        real(plan, now, source=source)

    settings.SAS_FAST_PATH = True
    with pytest.MonkeyPatch.context() as patch:  # the set-wise run only
        patch.setattr(setwise, "apply", counting)
        jobs = scenario()
        supervise()
        fast = [timeless(snapshot(job)) for job in jobs]
    settings.SAS_FAST_PATH = False
    jobs = scenario()
    supervise()
    general = [timeless(snapshot(job)) for job in jobs]
    return fast, general, taken


def test_overdue_calls_retried_after_a_backoff_leave_the_same_rows(
    settings: Any, supervise: Supervise
) -> None:
    make_policy("patient", backoff_initial_seconds=30, backoff_max_seconds=60, max_attempts=4)
    make_workflow("w", step("a", policy="patient"), step("b", "a", policy="patient"))

    def scenario() -> list[Job]:
        jobs = [job_submit(workflow="w", input={"n": n}).job for n in range(3)]
        for job in jobs:
            overdue(job)
        return jobs

    fast, general, taken = both(settings, supervise, scenario)
    assert taken == [(0, 3, 0)]
    assert fast[0]["steps"][0]["status"] == "retry_wait"
    assert fast == general, _diff(fast, general)


def test_overdue_calls_still_queued_get_more_time_alike(settings: Any, supervise: Supervise) -> None:
    make_policy("patient", backoff_initial_seconds=30, backoff_max_seconds=60)
    make_workflow("w", step("a", policy="patient"))

    def scenario() -> list[Job]:
        jobs = [job_submit(workflow="w", input={"n": n}).job for n in range(2)]
        for job in jobs:
            overdue(job, keep_task=True)
        return jobs

    fast, general, taken = both(settings, supervise, scenario)
    assert taken == [(2, 0, 0)]
    assert fast[0]["events"][-1]["kind"] == "deadline_extended"
    assert fast == general, _diff(fast, general)


def test_a_reassignment_to_the_alternate_pool_is_written_alike(settings: Any, supervise: Supervise) -> None:
    make_pool("backup")
    make_pool("main", alternate="backup")
    make_policy("moving", backoff_initial_seconds=5, backoff_max_seconds=5, reassign_after_attempts=1)
    make_workflow("w", step("a", pool="main", policy="moving"))

    def scenario() -> list[Job]:
        job = job_submit(workflow="w", input={}).job
        overdue(job)
        return [job]

    fast, general, taken = both(settings, supervise, scenario)
    assert taken == [(0, 1, 0)]
    assert fast[0]["steps"][0]["pool"] == "backup"
    assert fast == general, _diff(fast, general)


def test_what_is_not_common_goes_step_by_step_with_its_whole_job(settings: Any, supervise: Supervise) -> None:
    """One call out of attempts (the policy gives up: per step) beside calls retried later."""
    make_policy("once", max_attempts=1, on_exhausted="hold")
    make_policy("patient", backoff_initial_seconds=30, backoff_max_seconds=60)
    make_workflow("w", step("a", policy="patient"), step("b", policy="once"))

    def scenario() -> list[Job]:
        jobs = [job_submit(workflow="w", input={"n": n}).job for n in range(2)]
        for job in jobs:
            overdue(job)
        return jobs

    fast, general, taken = both(settings, supervise, scenario)
    # Each job has a step the policy gives up on: both jobs, all their steps, go per step.
    assert taken == [(0, 0, 4)]
    assert {s["status"] for s in fast[0]["steps"]} == {"held", "retry_wait"}
    assert fast == general, _diff(fast, general)


def test_a_compensation_overdue_is_retried_alike(
    settings: Any, supervise: Supervise, fake_remote: Any, drain: Callable[[], int]
) -> None:
    from supervisor.services import job_compensate
    from tests.api.support import make_user

    make_policy("patient", backoff_initial_seconds=30, backoff_max_seconds=60)
    make_policy("strict", retry_on=["transient_failure"], on_exhausted="hold")
    make_workflow("w", step("a", policy="patient"), step("b", "a", policy="strict"))
    olga = make_user("olga-setwise", "operators")

    def scenario() -> list[Job]:
        job = job_submit(workflow="w", input={}).job
        fake_remote.script("b", "business_failure")
        drain()
        supervise()  # b is held: the job needs attention
        job_compensate(actor=olga, job_id=job.pk, reason="test")
        overdue(job)  # the compensation of a is overdue
        return [job]

    fast, general, taken = both(settings, supervise, scenario)
    assert taken[-1] == (0, 1, 0)  # the scan after the scenario's own
    assert fast[0]["steps"][2]["kind"] == "compensation"
    assert fast[0]["steps"][2]["status"] == "retry_wait"
    assert fast == general, _diff(fast, general)


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in _diff(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]
