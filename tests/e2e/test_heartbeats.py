"""End to end: heartbeats of calls that answer later, with a real `qcluster` (its supervisor loop
scanning every half second), the web server where the remote's heartbeats and results arrive, and
the sandbox remote running slow jobs (`input.slow`: 202, heartbeats, then the result).

Under a policy of `timeout_seconds=4` and `heartbeat_seconds=2`, a job that heartbeats runs well
past its nominal deadline untouched, while one whose worker dies mid-job is given up on as soon as
a heartbeat is missed, retried with the same operation ID, and its retry resumes from the details
the first attempt reported.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.outcome import Outcome
from scheduler.models import Attempt, Event, EventKind, JobStatus, Step
from scheduler.services import job_submit
from testbed.definitions import ensure_policy, ensure_pool, ensure_workflow
from testbed.processes import WebProcess
from tests.e2e.test_async_agents import start_clusters, wait_settled
from tests.processes import ARTIFACTS, Sandbox, child_env, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TIMEOUT = 4
HEARTBEAT = 2


@pytest.fixture
def web() -> Iterator[WebProcess]:
    process = WebProcess(port=free_port(), env=child_env(), log=ARTIFACTS / "web-heartbeats.log").start()
    yield process
    process.stop()


def test_a_heartbeating_job_outlives_its_timeout_and_a_silent_one_is_retried_where_it_stopped(
    tmp_path: Path, web: WebProcess
) -> None:
    sandbox = Sandbox(port=free_port(), db=tmp_path / "sandbox.sqlite3").start()
    ensure_pool("slow-http", kind="http", endpoints=[sandbox.url])
    ensure_policy(
        "beating",
        timeout_seconds=TIMEOUT,
        heartbeat_seconds=HEARTBEAT,
        max_attempts=3,
        backoff_initial_seconds=0.2,
        backoff_max_seconds=0.2,
        backoff_jitter=0,
    )
    ensure_workflow(
        "long_charge",
        [{"name": "charge", "pool": "slow-http", "path": "/async/payments/charge", "policy": "beating"}],
    )
    clusters = start_clusters(web, "c1")
    try:
        # Twice its timeout, reporting progress every half second.
        steady = job_submit(
            workflow="long_charge",
            input={"amount": 1, "slow": {"duration_ms": 2 * TIMEOUT * 1000, "heartbeat_ms": 500}},
        ).job
        # Its first attempt's worker dies after 0.8 s; a retry finishes what is left.
        dying = job_submit(
            workflow="long_charge",
            input={
                "amount": 2,
                "slow": {"duration_ms": 3000, "heartbeat_ms": 250, "die_after_ms": 800, "on_attempts": [1]},
            },
        ).job
        statuses = wait_settled([steady.pk, dying.pk], timeout=120)
        assert statuses == {steady.pk: JobStatus.SUCCEEDED, dying.pk: JobStatus.SUCCEEDED}

        # The heartbeating job: one attempt, past its nominal deadline, never timed out.
        step = Step.objects.get(job=steady, kind="action")
        (attempt,) = Attempt.objects.filter(step=step)
        assert attempt.outcome == Outcome.SUCCEEDED and not attempt.late_outcome
        assert attempt.started_at is not None and attempt.heartbeat_at is not None
        assert attempt.finished_at is not None
        assert attempt.finished_at > attempt.started_at + dt.timedelta(seconds=TIMEOUT)
        assert not Event.objects.filter(step=step, kind=EventKind.STEP_TIMED_OUT).exists()
        extended = Event.objects.filter(step=step, kind=EventKind.DEADLINE_EXTENDED, data__heartbeat=True)
        reasons = [e.reason for e in extended]
        assert any("past its timeout of 4 s" in r for r in reasons), reasons
        assert len(reasons) <= 2  # not one event per heartbeat

        # The dying job: given up on at its missed heartbeat (before its nominal deadline), then
        # retried with the same operation ID, and the retry resumed from the last details.
        step = Step.objects.get(job=dying, kind="action")
        first, second = Attempt.objects.filter(step=step).order_by("number")
        assert first.outcome == Outcome.NO_ANSWER and second.outcome == Outcome.SUCCEEDED
        assert first.heartbeat_at is not None and first.heartbeat_details is not None
        assert first.deadline == first.heartbeat_at + dt.timedelta(seconds=HEARTBEAT)
        assert first.started_at is not None
        assert first.deadline < first.started_at + dt.timedelta(seconds=TIMEOUT)
        timed_out = Event.objects.get(step=step, kind=EventKind.STEP_TIMED_OUT)
        assert timed_out.reason == "no heartbeat within 2 s"
        assert step.output["resumed_from"] == first.heartbeat_details
        assert sandbox.stats()["effects"] == {
            s.operation_id: 1 for s in Step.objects.filter(job__in=[steady, dying], kind="action")
        }
    finally:
        for cluster in clusters:
            cluster.stop()
        sandbox.stop()
