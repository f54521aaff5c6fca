"""End to end, with a real `qcluster`, the sandbox remote and PostgreSQL: a debounced burst on one
key runs one job, the last one's input; a throttled burst starts at the limited rate, each job
about when its place in the window comes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scheduler.definitions import workflow_create
from scheduler.models import Attempt, Event, EventKind, Job, JobStatus
from scheduler.services import job_submit
from testbed.definitions import ensure_policy, ensure_pool
from tests.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def gated_workflow(sandbox: Any, name: str, **gates: Any) -> None:
    ensure_pool("remote", kind="http", endpoints=[sandbox.url])
    ensure_policy("plain", timeout_seconds=30, max_attempts=3)
    workflow_create(
        name=name,
        steps=[{"name": "reserve", "pool": "remote", "path": "/inventory/reserve", "policy": "plain"}],
        **gates,
    )


def settled(ids: list[Any]) -> Callable[[], bool]:
    live = (JobStatus.WAITING, JobStatus.RUNNING, JobStatus.PENDING)
    return lambda: not Job.objects.filter(pk__in=ids, status__in=live).exists()


def test_a_debounced_burst_runs_one_job_with_the_last_input(
    sandbox: Any, clusters: Callable[..., Any]
) -> None:
    gated_workflow(sandbox, "reindex", debounce={"key": "input.account", "seconds": 1})
    clusters("a")
    ids = [job_submit(workflow="reindex", input={"account": "A", "n": n}).job_id for n in range(5)]
    wait_until(settled(ids), timeout=60, interval=0.2, message="the burst settled")
    statuses = dict(Job.objects.filter(pk__in=ids).values_list("pk", "status"))
    assert [statuses[i] for i in ids] == [JobStatus.CANCELLED] * 4 + [JobStatus.SUCCEEDED]
    called = list(Attempt.objects.filter(step__job_id__in=ids).values_list("step__job_id", flat=True))
    assert called == [ids[-1]]
    assert Job.objects.get(pk=ids[-1]).input == {"account": "A", "n": 4}
    last = Job.objects.get(pk=ids[-1])
    started = Event.objects.get(job_id=last.pk, kind=EventKind.JOB_RUNNING).created_at
    assert last.start_at is None  # cleared when it started
    late = (started - last.created_at).total_seconds() - 1
    # Soon after its second of quiet: by the loop's tick (0.2 s) or its next pass (0.5 s here),
    # with a loaded machine allowed.
    assert 0 <= late < 3, late


def test_a_throttled_burst_starts_at_the_limited_rate(sandbox: Any, clusters: Callable[..., Any]) -> None:
    gated_workflow(sandbox, "notify", throttle={"key": "input.account", "per_seconds": 1, "limit": 2})
    clusters("a")
    ids = [job_submit(workflow="notify", input={"account": "A"}).job_id for _ in range(6)]
    wait_until(settled(ids), timeout=60, interval=0.2, message="the burst settled")
    jobs = {j.pk: j for j in Job.objects.filter(pk__in=ids)}
    assert {j.status for j in jobs.values()} == {JobStatus.SUCCEEDED}
    slots = [jobs[i].throttle_slot for i in ids]
    assert all(s is not None for s in slots)
    starts = []
    for job_id in ids:
        events = Event.objects.filter(job_id=job_id).order_by("id")
        event = next(e for e in events if e.to_status == JobStatus.RUNNING)
        starts.append(event.created_at)
    # The start counted is the start made (its job_running event, or its submission's).
    assert starts == slots
    # In arrival order; never more than two in any second; each soon after the window allowed
    # (the loop's tick and a start's transaction, with a loaded machine allowed).
    assert starts == sorted(starts)
    for earlier, later in zip(starts, starts[2:], strict=False):
        waited = (later - earlier).total_seconds()
        assert 1 <= waited < 3, starts
