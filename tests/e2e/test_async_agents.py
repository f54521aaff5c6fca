"""End to end, with every agent kind at once: real `qcluster` processes, the web server (where the
remote's callbacks arrive), a real `redis-server`, and the sandbox remote answering HTTP at once,
answering 202 and calling back later, and consuming its queues.

The sandbox counts the effects per operation ID: whatever the faults (lost, repeated, late and
unknown replies, a broker restart), no operation may happen twice and every job must settle.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from scheduler.models import Attempt, Event, EventKind, Job, JobStatus, RemediationPolicy, Step
from scheduler.services import job_submit
from supervisor.policies import policy_update
from testbed.definitions import ensure_policy, ensure_pool, ensure_workflow
from testbed.processes import RedisProcess, WebProcess
from tests.processes import ARTIFACTS, Cluster, Sandbox, child_env, free_port, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TERMINAL = {JobStatus.SUCCEEDED, JobStatus.COMPENSATED, JobStatus.FAILED, JobStatus.CANCELLED}


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisProcess]:
    server = RedisProcess(port=free_port(), log=ARTIFACTS / "redis-e2e.log").start()
    yield server
    server.stop()


@pytest.fixture
def web() -> Iterator[WebProcess]:
    process = WebProcess(port=free_port(), env=child_env(), log=ARTIFACTS / "web-async.log").start()
    yield process
    process.stop()


def async_sandbox(tmp_path: Path, redis: RedisProcess, *extra: str) -> Sandbox:
    return Sandbox(port=free_port(), db=tmp_path / "sandbox.sqlite3").start("--broker", redis.url, *extra)


def start_clusters(web: WebProcess, *names: str, **env: Any) -> list[Cluster]:
    return [
        Cluster(name=n, env={"SAS_PUBLIC_URL": web.url, **{k: str(v) for k, v in env.items()}}).start()
        for n in names
    ]


def wait_settled(ids: list[Any], timeout: float) -> dict[Any, str]:
    def done() -> bool:
        return Job.objects.filter(pk__in=ids, status__in=TERMINAL).count() == len(ids)

    try:
        wait_until(done, timeout=timeout, interval=0.5, message="every job settled")
    except AssertionError:
        stuck = list(Job.objects.filter(pk__in=ids).exclude(status__in=TERMINAL).values_list("pk", "status"))
        raise AssertionError(f"jobs not settled: {stuck[:10]} ({len(stuck)})") from None
    return dict(Job.objects.filter(pk__in=ids).values_list("pk", "status"))


def most_calls_open_at_once(ids: list[Any]) -> int:
    """The most attempts of these jobs that were started (their call made) and not yet finished
    (its answer not yet recorded) at one moment."""
    changes: list[tuple[Any, int]] = []
    attempts = Attempt.objects.filter(step__job_id__in=ids).exclude(started_at=None)
    for started, finished in attempts.values_list("started_at", "finished_at"):
        changes.append((started, 1))
        if finished is not None:
            changes.append((finished, -1))
    open_now = most = 0
    for _, change in sorted(changes):  # at one instant an end (-1) sorts before a start
        open_now += change
        most = max(most, open_now)
    return most


def quicken(**changes: Any) -> None:
    for policy in RemediationPolicy.objects.all():
        policy_update(
            policy.pk,
            actor=None,
            changes={
                "backoff_initial_seconds": 0.2,
                "backoff_max_seconds": 1,
                "backoff_jitter": 0,
                **changes,
            },
        )


def test_a_job_mixing_every_agent_kind_succeeds_with_one_effect_per_operation(
    tmp_path: Path, redis: RedisProcess, web: WebProcess
) -> None:
    sandbox = async_sandbox(tmp_path, redis, "--async-delay-ms", "300")
    clusters = start_clusters(web, "c1")
    try:
        call_command("load_demo", sandbox_url=sandbox.url, backup_url=sandbox.url, broker=redis.url)
        quicken()
        jobs = [
            job_submit(
                workflow="order_fulfilment_mixed", input={"sku": "A1", "quantity": 1, "amount": 10}
            ).job
            for _ in range(10)
        ]
        statuses = wait_settled([j.pk for j in jobs], timeout=120)
        assert set(statuses.values()) == {JobStatus.SUCCEEDED}
        effects = sandbox.stats()["effects"]
        for step in Step.objects.filter(job__in=jobs, kind="action"):
            assert effects.get(step.operation_id) == 1, step.name
        accepted = Event.objects.filter(job__in=jobs, kind=EventKind.CALL_ACCEPTED)
        assert sorted({e.step.name for e in accepted}) == ["charge", "ship"]
        assert accepted.count() == 20
    finally:
        for cluster in clusters:
            cluster.stop()
        sandbox.stop()


@pytest.mark.timeout(600)  # waits up to 240 s for the jobs to settle
def test_lost_repeated_late_and_unknown_replies_and_a_broker_restart_lose_nothing_and_do_nothing_twice(
    tmp_path: Path, redis: RedisProcess, web: WebProcess
) -> None:
    sandbox = async_sandbox(tmp_path, redis, "--async-delay-ms", "200")
    clusters = start_clusters(web, "c1", "c2")
    try:
        call_command("load_demo", sandbox_url=sandbox.url, backup_url=sandbox.url, broker=redis.url)
        quicken(timeout_seconds=3, max_attempts=6)
        sandbox.config(
            reply_loss_rate=0.2,
            reply_duplicate_rate=0.3,
            reply_late_rate=0.2,
            reply_late_ms=4000,
            reply_unknown_rate=0.2,
            error_rate=0.05,
        )
        jobs = []
        for n in range(40):
            jobs.append(
                job_submit(
                    workflow="order_fulfilment_mixed",
                    input={"sku": "A1", "quantity": 1, "amount": 10 + n},
                ).job
            )
            if n == 20:
                redis.restart(down_seconds=1.0)  # everything queued on the broker is lost
            time.sleep(0.1)
        statuses = wait_settled([j.pk for j in jobs], timeout=240)
        assert set(statuses.values()) <= {JobStatus.SUCCEEDED, JobStatus.COMPENSATED}
        stats = sandbox.stats()
        assert stats["duplicates"] == 0, {k: v for k, v in stats["effects"].items() if v > 1}
        faults = stats["faults"]
        for fault in ("reply_lost", "reply_duplicate", "reply_late", "reply_unknown"):
            assert faults[fault] > 0, (fault, faults)
        # A succeeded step happened exactly once at the remote; a compensated one was undone.
        effects = stats["effects"]
        for step in Step.objects.filter(job__in=jobs, kind="action", status="succeeded"):
            assert effects.get(step.operation_id) == 1, (step.name, step.operation_id)
    finally:
        for cluster in clusters:
            cluster.stop()
        sandbox.stop()


@pytest.mark.timeout(600)  # waits up to 300 s for the jobs to settle
def test_calls_the_remote_answers_later_hold_no_worker(
    tmp_path: Path, redis: RedisProcess, web: WebProcess
) -> None:
    """200 steps whose remote takes 30 s each (100 on a queue, 100 answered 202 then called
    back) finish with 2 workers, more calls waiting on the remote at once than there are workers:
    held workers would wait on two at a time and need 50 minutes."""
    sandbox = async_sandbox(tmp_path, redis, "--async-delay-ms", "30000")
    ensure_pool("slow-queue", kind="queue", endpoints=[redis.url])
    ensure_pool("slow-http", kind="http", endpoints=[sandbox.url])
    ensure_policy(
        "patient", timeout_seconds=120, max_attempts=2, backoff_initial_seconds=1, backoff_max_seconds=1
    )
    ensure_workflow(
        "slow_queue",
        [{"name": "ship", "pool": "slow-queue", "path": "shipping.schedule", "policy": "patient"}],
    )
    ensure_workflow(
        "slow_http",
        [{"name": "charge", "pool": "slow-http", "path": "/async/payments/charge", "policy": "patient"}],
    )
    clusters = start_clusters(web, "c1", SAS_Q_WORKERS=2)
    try:
        started = time.monotonic()
        ids = [job_submit(workflow="slow_queue", input={"n": n}).job.pk for n in range(100)]
        ids += [job_submit(workflow="slow_http", input={"n": n}).job.pk for n in range(100)]
        statuses = wait_settled(ids, timeout=300)
        elapsed = time.monotonic() - started
        assert set(statuses.values()) == {JobStatus.SUCCEEDED}
        in_flight = most_calls_open_at_once(ids)
        (ARTIFACTS / "held-workers.txt").write_text(
            f"200 steps of 30 s (100 queue, 100 HTTP 202 + callback), 2 workers: {elapsed:.1f} s, "
            f"at most {in_flight} calls open at once\n"
        )
        # A worker held until the answer came would allow at most one open call per worker.
        assert in_flight > 2, f"at most {in_flight} calls open at once with 2 workers: workers were held"
    finally:
        for cluster in clusters:
            cluster.stop()
        sandbox.stop()
