"""The job page's timeline (supervisor.timeline): each call a bar from when it went out to its
answer coloured by its outcome, the backoff between two calls, a wait's length, on one axis with
its unit and its start's UTC time."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone

from agents.fake import FakeRemote
from agents.outcome import Outcome
from scheduler.models import Attempt, Job, Step
from scheduler.services import job_submit
from supervisor import selectors
from supervisor.scan import ScanReport
from supervisor.timeline import _ticks, _unit, job_timeline
from tests.api.support import make_user
from tests.factories import make_policy, make_workflow, step

pytestmark = pytest.mark.django_db


def page_of(client: Any, job: Job) -> str:
    client.force_login(make_user("vic", "viewers"))
    return str(client.get(f"/ops/jobs/{job.pk}/").content.decode())


def test_a_retried_call_shows_both_calls_and_the_backoff_between_them(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., ScanReport], client: Any
) -> None:
    make_policy("quick", backoff_initial_seconds=0.01, backoff_max_seconds=0.01, max_attempts=3)
    make_workflow(
        "order",
        step("charge", policy="quick"),
        {"name": "paid", "kind": "signal", "signal": "paid", "depends_on": ["charge"]},
    )
    fake_remote.script("charge", Outcome.TRANSIENT_FAILURE, Outcome.SUCCEEDED)
    job = job_submit(workflow="order", input={}).job
    for _ in range(3):
        drain()
        supervise()
    charge = Step.objects.get(job=job, name="charge")
    assert charge.attempt == 2
    # Spread the calls in time as a slow remote would: the first at +1 s, the second at +5 s.
    start = job.created_at
    for number, (sent, answered) in {1: (1, 2), 2: (5, 6)}.items():
        Attempt.objects.filter(step=charge, number=number).update(
            dispatched_at=start + dt.timedelta(seconds=sent),
            started_at=start + dt.timedelta(seconds=sent),
            finished_at=start + dt.timedelta(seconds=answered),
        )
    page = page_of(client, job)
    svg = page[page.index('id="job-calls"') :]
    assert 'data-attempt="1"' in svg and 'data-attempt="2"' in svg
    assert re.search(r'class="call" data-attempt="1"[^>]*fill="#ea580c"', svg)  # failed, retryable
    assert re.search(r'class="call" data-attempt="2"[^>]*fill="#16a34a"', svg)  # succeeded
    assert "backoff 3.0 s" in svg
    assert 'class="wait"' in svg and "paid: waiting (waiting)" in svg
    assert "time since submission" in svg and " s</text>" in svg


def test_a_job_with_nothing_run_says_so_and_names_are_escaped() -> None:
    job = Job(created_at=timezone.now())
    assert "Nothing has run yet" in job_timeline(job, [], [], now=timezone.now())


def test_the_axis_picks_a_unit_and_at_most_nine_ticks() -> None:
    assert _unit(30) == ("s", 1.0) and _unit(600) == ("min", 60.0) and _unit(5 * 3600) == ("h", 3600.0)
    for span in (1.0, 7.5, 59.0, 600.0, 7200.0, 86400.0 * 2):
        ticks = _ticks(span)
        assert ticks[0] == 0 and len(ticks) <= 9 and ticks[-1] <= span


def test_the_timeline_reads_the_job_detail_the_page_uses(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    make_workflow("one", step("a"))
    job = job_submit(workflow="one", input={}).job
    drain()
    detail = selectors.job_detail(job.pk)
    assert detail is not None
    svg = job_timeline(detail.job, detail.actions, detail.compensations, now=timezone.now())
    assert svg.count('class="call"') == 1 and "a: call 1, succeeded" in svg
