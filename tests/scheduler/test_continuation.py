"""After a success, the worker takes the job's next attempt from the queue and delivers it itself
(scheduler.tasks.run_attempt, scheduler.services.hotpath.take_next): exactly one of it and the
pushers delivers each attempt, within the task's time, at most SAS_Q_CONTINUE a task."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from django_q.models import OrmQ

from agents.fake import FakeRemote
from agents.outcome import Outcome
from scheduler.models import Attempt, Event, EventKind, JobStatus, Step, StepStatus
from scheduler.services import hotpath, job_submit
from scheduler.tasks import run_attempt
from tests.factories import chain, diamond

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        not os.environ.get("DATABASE_URL", "").startswith("postgres"),
        reason="the PostgreSQL fast path and the project's broker",
    ),
]


def steps_of(job: Any) -> dict[str, Step]:
    return {s.name: s for s in Step.objects.filter(job=job)}


def test_one_task_delivers_a_chain_step_after_step_with_the_same_calls_and_records(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    chain(n=3)
    job = job_submit(workflow="chain", input={}).job
    assert drain() == 1  # the first step's task delivered the two after it
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert [c.payload["step"] for c in fake_remote.calls] == ["s1", "s2", "s3"]
    assert fake_remote.calls[2].payload["results"] == {"s1": {"ok": "s1"}, "s2": {"ok": "s2"}}
    assert not OrmQ.objects.exists()
    assert all(a.started_at and a.outcome == Outcome.SUCCEEDED for a in Attempt.objects.filter(step__job=job))
    kinds = list(Event.objects.filter(job=job).values_list("kind", flat=True))
    assert kinds.count(EventKind.STEP_DISPATCHED) == kinds.count(EventKind.STEP_SUCCEEDED) == 3
    assert EventKind.DELIVERY_IGNORED not in kinds


def test_a_task_takes_at_most_sas_q_continue_attempts_after_its_own(
    drain: Callable[[], int], fake_remote: FakeRemote, settings: Any
) -> None:
    settings.SAS_Q_CONTINUE = 1
    chain(n=3)
    job = job_submit(workflow="chain", input={}).job
    assert drain() == 2
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED


def test_an_attempt_is_taken_once_and_not_after_a_pusher_took_it(
    fake_remote: FakeRemote, settings: Any
) -> None:
    settings.SAS_Q_CONTINUE = 0
    chain(n=3)
    job = job_submit(workflow="chain", input={}).job
    first = steps_of(job)["s1"]
    OrmQ.objects.all().delete()  # s1's task, as a pusher takes it
    run_attempt(first.pk, 1)
    s2 = steps_of(job)["s2"]
    assert s2.status == StepStatus.DISPATCHED
    assert hotpath.take_next(str(job.pk), budget=100) == (s2.pk, 1)
    assert not OrmQ.objects.exists()  # its queue row is gone: no pusher delivers it as well
    assert hotpath.take_next(str(job.pk), budget=100) is None
    run_attempt(s2.pk, 1)
    OrmQ.objects.all().delete()  # s3's task, taken by a pusher first
    assert hotpath.take_next(str(job.pk), budget=100) is None


def test_an_attempt_whose_deadline_is_past_the_tasks_time_is_left_to_the_queue(
    fake_remote: FakeRemote, settings: Any
) -> None:
    settings.SAS_Q_CONTINUE = 0
    chain(n=2)  # the factories' policy: a 5-second timeout, so s2's deadline is 5 s after dispatch
    job = job_submit(workflow="chain", input={}).job
    OrmQ.objects.all().delete()
    run_attempt(steps_of(job)["s1"].pk, 1)
    assert hotpath.take_next(str(job.pk), budget=2) is None
    assert hotpath.take_next(str(job.pk), budget=0) is None
    assert OrmQ.objects.count() == 1  # still there for a pusher
    assert hotpath.take_next(str(job.pk), budget=60) == (steps_of(job)["s2"].pk, 1)


def test_a_failure_is_not_followed_and_a_fan_out_leaves_its_other_branch_to_the_queue(
    drain: Callable[[], int], fake_remote: FakeRemote, settings: Any
) -> None:
    chain(n=2)
    fake_remote.script("s1", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="chain", input={}).job
    OrmQ.objects.all().delete()
    assert run_attempt(steps_of(job)["s1"].pk, 1) == Outcome.BUSINESS_FAILURE
    assert steps_of(job)["s2"].status == StepStatus.PENDING
    assert not OrmQ.objects.exists()

    diamond()
    job = job_submit(workflow="diamond", input={}).job
    OrmQ.objects.all().delete()
    settings.SAS_Q_CONTINUE = 1
    run_attempt(steps_of(job)["a"].pk, 1)
    # One branch taken and delivered here, the other's task left in the queue, where an idle
    # worker takes it at once (here, no pusher runs: drain() plays it).
    steps = steps_of(job)
    assert sorted([steps["b"].status, steps["c"].status]) == [StepStatus.DISPATCHED, StepStatus.SUCCEEDED]
    assert OrmQ.objects.count() == 1
    assert drain() == 1
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
