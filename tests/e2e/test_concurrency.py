"""End to end, with two real `qcluster` processes, the sandbox remote and PostgreSQL: a workflow's
concurrency key holds, seen from the remote, and one key's backlog does not hold back another key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scheduler.definitions import workflow_create
from scheduler.models import Attempt, Job, JobStatus
from scheduler.services import job_submit
from testbed.definitions import ensure_policy, ensure_pool
from tests.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def keyed_workflow(sandbox: Any, *, limit: int) -> None:
    ensure_pool("remote", kind="http", endpoints=[sandbox.url])
    ensure_policy("plain", timeout_seconds=30, max_attempts=3)
    workflow_create(
        name="accounts",
        steps=[
            {"name": "reserve", "pool": "remote", "path": "/inventory/reserve", "policy": "plain"},
            {
                "name": "charge",
                "pool": "remote",
                "path": "/payments/charge",
                "policy": "plain",
                "depends_on": ["reserve"],
            },
        ],
        concurrency={"key": "input.account", "limit": limit},
    )


def all_succeeded(ids: list[Any]) -> Callable[[], bool]:
    return lambda: Job.objects.filter(pk__in=ids, status=JobStatus.SUCCEEDED).count() == len(ids)


def test_two_clusters_never_run_more_calls_of_one_key_than_its_limit(
    sandbox: Any, clusters: Callable[..., Any]
) -> None:
    keyed_workflow(sandbox, limit=2)
    sandbox.config(latency_ms=100)
    clusters("a", SAS_Q_WORKERS=4)
    clusters("b", SAS_Q_WORKERS=4)
    ids = [job_submit(workflow="accounts", input={"account": f"acct-{n % 4}"}).job_id for n in range(40)]
    wait_until(all_succeeded(ids), timeout=240, interval=0.5, message="every keyed job succeeded")
    stats = sandbox.stats()
    by_account = stats["max_concurrent_by_account"]
    assert set(by_account) == {f"acct-{n}" for n in range(4)}
    # Eight workers could have run ten of a key at once: the key held them to two, and reached two.
    assert max(by_account.values()) == 2, by_account
    assert stats["duplicates"] == 0


def test_one_keys_backlog_does_not_hold_back_another_keys_first_call(
    sandbox: Any, clusters: Callable[..., Any]
) -> None:
    keyed_workflow(sandbox, limit=2)
    sandbox.config(latency_ms=20)
    # Submitted before any cluster runs: A's first two start (their calls queued), the rest wait
    # holding nothing; B's first call is queued right behind A's two.
    backlog = [job_submit(workflow="accounts", input={"account": "A"}).job_id for _ in range(60)]
    other = job_submit(workflow="accounts", input={"account": "B"}).job
    assert Job.objects.filter(pk__in=backlog, status=JobStatus.WAITING).count() == 58
    assert other.status == JobStatus.RUNNING
    clusters("a", SAS_Q_WORKERS=4)
    wait_until(all_succeeded([other.pk]), timeout=120, interval=0.2, message="B's job succeeded")
    first_of_b = Attempt.objects.get(step__job_id=other.pk, step__name="reserve", number=1).started_at
    a_before_b = Attempt.objects.filter(
        step__job_id__in=backlog, step__name="reserve", number=1, started_at__lt=first_of_b
    ).count()
    assert a_before_b <= 2, a_before_b  # behind A's first two at most, not behind 60
    wait_until(all_succeeded(backlog), timeout=240, interval=0.5, message="A's backlog drained")
    assert sandbox.stats()["max_concurrent_by_account"]["A"] <= 2


def keyed_step_workflow(sandbox: Any, *, limit: int) -> None:
    """One call step whose own calls are held to `limit` in flight per account (the pool has no
    limit: only the step's key holds them)."""
    ensure_pool("remote", kind="http", endpoints=[sandbox.url])
    ensure_policy("plain", timeout_seconds=30, max_attempts=3)
    workflow_create(
        name="charges",
        steps=[
            {
                "name": "charge",
                "pool": "remote",
                "path": "/payments/charge",
                "policy": "plain",
                "concurrency": {"key": "input.account", "limit": limit},
            }
        ],
    )


def test_two_clusters_never_send_more_calls_of_a_steps_key_than_its_limit(
    sandbox: Any, clusters: Callable[..., Any]
) -> None:
    keyed_step_workflow(sandbox, limit=2)
    # Each call held long enough (0.8 s) that a key's two calls overlap at the remote however
    # slowly a loaded machine's workers take them: the limit is reached, and held.
    sandbox.config(latency_ms=800)
    clusters("a", SAS_Q_WORKERS=4)
    clusters("b", SAS_Q_WORKERS=4)
    ids = [job_submit(workflow="charges", input={"account": f"acct-{n % 4}"}).job_id for n in range(40)]
    wait_until(all_succeeded(ids), timeout=240, interval=0.5, message="every keyed call succeeded")
    stats = sandbox.stats()
    by_account = stats["max_concurrent_by_account"]
    assert set(by_account) == {f"acct-{n}" for n in range(4)}
    # Eight workers and two pumps could have sent ten of a key at once: its limit held them to two.
    assert max(by_account.values()) == 2, by_account
    assert stats["duplicates"] == 0


def test_a_steps_key_backlog_does_not_hold_back_another_keys_first_call(
    sandbox: Any, clusters: Callable[..., Any]
) -> None:
    keyed_step_workflow(sandbox, limit=2)
    sandbox.config(latency_ms=20)
    # Submitted before any cluster runs: A's first two calls are queued, the rest wait holding
    # nothing; B's call is queued right behind them, however many of A's wait.
    backlog = [job_submit(workflow="charges", input={"account": "A"}).job_id for _ in range(250)]
    other = job_submit(workflow="charges", input={"account": "B"}).job
    clusters("a", SAS_Q_WORKERS=4)
    wait_until(all_succeeded([other.pk]), timeout=120, interval=0.2, message="B's job succeeded")
    first_of_b = Attempt.objects.get(step__job_id=other.pk, number=1).started_at
    a_before_b = Attempt.objects.filter(step__job_id__in=backlog, number=1, started_at__lt=first_of_b).count()
    assert a_before_b < 20, a_before_b  # within one dispatch round of A's, not behind 250
    wait_until(all_succeeded(backlog), timeout=300, interval=0.5, message="A's backlog drained")
    assert sandbox.stats()["max_concurrent_by_account"]["A"] <= 2
