"""End to end: real `qcluster` processes, the real sandbox remote, PostgreSQL.

These tests drive the demo workflow (reserve -> charge -> ship) through the whole system and
check the remote's own count of side effects per operation ID.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command

from agents.models import AgentEndpoint, AgentPool
from scheduler.models import Attempt, Event, Job, JobStatus, RemediationPolicy, Step, StepStatus
from scheduler.services import job_submit
from supervisor.models import SupervisorLease
from supervisor.policies import policy_update
from tests.processes import Cluster, Sandbox, free_port, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TERMINAL = {JobStatus.SUCCEEDED, JobStatus.COMPENSATED, JobStatus.FAILED, JobStatus.CANCELLED}


def load_demo(sandbox: Sandbox, **policy_changes: dict[str, Any]) -> None:
    call_command(
        "load_demo", sandbox_url=sandbox.url, backup_url=sandbox.url.replace("127.0.0.1", "localhost")
    )
    quick = {
        "timeout_seconds": 2,
        "backoff_initial_seconds": 0.2,
        "backoff_max_seconds": 1,
        "backoff_jitter": 0,
    }
    for policy in RemediationPolicy.objects.all():
        policy_update(policy.pk, actor=None, changes={**quick, **policy_changes.get(policy.name, {})})


def submit(n: int, **input_: Any) -> list[Job]:
    return [
        job_submit(
            workflow="order_fulfilment", input={"sku": "A1", "quantity": 1, "amount": 10, **input_}
        ).job
        for _ in range(n)
    ]


def wait_terminal(jobs: list[Job], timeout: float = 60) -> list[Job]:
    ids = [j.pk for j in jobs]

    def done() -> bool:
        return Job.objects.filter(pk__in=ids, status__in=TERMINAL).count() == len(ids)

    try:
        wait_until(done, timeout=timeout, interval=0.25, message="every job terminal")
    except AssertionError:
        stuck = list(Job.objects.filter(pk__in=ids).exclude(status__in=TERMINAL).values_list("pk", "status"))
        raise AssertionError(f"jobs not terminal: {stuck}") from None
    return list(Job.objects.filter(pk__in=ids))


def effects_of(sandbox: Sandbox, job: Job) -> dict[str, int]:
    effects = sandbox.stats()["effects"]
    return {s.name: effects.get(s.operation_id, 0) for s in Step.objects.filter(job=job)}


@pytest.mark.sqlite
def test_order_fulfilment_jobs_succeed_with_one_effect_per_operation_id(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    load_demo(sandbox)
    clusters("c1")
    jobs = wait_terminal(submit(10))
    assert {j.status for j in jobs} == {JobStatus.SUCCEEDED}
    stats = sandbox.stats()
    assert stats["duplicates"] == 0
    for job in jobs:
        assert effects_of(sandbox, job) == {"reserve": 1, "charge": 1, "ship": 1}
    assert sum(stats["effects"].values()) == 30


def test_commit_then_drop_is_retried_with_the_same_operation_id_and_happens_once(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    load_demo(sandbox)
    sandbox.config(script={"/inventory/reserve": ["drop"]}, drop_hold_ms=3000)
    clusters("c1")
    (job,) = wait_terminal(submit(1))
    assert job.status == JobStatus.SUCCEEDED
    reserve = Step.objects.get(job=job, name="reserve")
    attempts = list(Attempt.objects.filter(step=reserve).order_by("number"))
    assert [a.outcome for a in attempts] == ["no_answer", "succeeded"], [
        (a.outcome, a.error) for a in attempts
    ]
    assert effects_of(sandbox, job) == {"reserve": 1, "charge": 1, "ship": 1}
    stats = sandbox.stats()
    assert stats["deliveries"][reserve.operation_id] == 2
    assert stats["replays"] == 1
    assert Event.objects.get(step=reserve, kind="retry_scheduled").reason.startswith("no_answer: retry 2")


def test_commit_then_drop_with_reconcile_never_calls_the_action_twice(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    load_demo(sandbox)
    sandbox.config(script={"/payments/charge": ["drop"]}, drop_hold_ms=3000)
    clusters("c1")
    (job,) = wait_terminal(submit(1))
    assert job.status == JobStatus.SUCCEEDED
    charge = Step.objects.get(job=job, name="charge")
    stats = sandbox.stats()
    assert stats["deliveries"][charge.operation_id] == 1  # one POST: the reconcile asked, it did not call
    assert stats["status_queries"] >= 1
    assert effects_of(sandbox, job) == {"reserve": 1, "charge": 1, "ship": 1}
    kinds = [a.kind for a in Attempt.objects.filter(step=charge).order_by("number")]
    assert kinds == ["call", "reconcile"]
    assert Event.objects.filter(step=charge, kind="step_reconciled").exists()


def test_a_decline_on_the_last_step_compensates_the_earlier_ones_in_reverse_order_once_each(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    load_demo(sandbox, shipping={"on_exhausted": "compensate"})
    sandbox.config(script={"/shipping/schedule": ["decline"]})
    clusters("c1")
    (job,) = wait_terminal(submit(1))
    assert job.status == JobStatus.COMPENSATED
    effects = sandbox.stats()["effects_by_kind"]
    assert effects == {"reserve": 1, "charge": 1, "refund": 1, "release": 1}
    undone = list(
        Event.objects.filter(job=job, kind="step_succeeded", step__kind="compensation")
        .order_by("id")
        .values_list("step__name", flat=True)
    )
    assert undone == ["charge.compensate", "reserve.compensate"]
    steps = {s.name: s.status for s in Step.objects.filter(job=job)}
    assert steps["ship"] == StepStatus.FAILED
    assert steps["reserve"] == steps["charge"] == StepStatus.COMPENSATED


def test_an_endpoint_refusing_connections_is_replaced_by_the_alternate_pool(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    load_demo(sandbox, payments={"reassign_after_attempts": 2, "max_attempts": 4})
    AgentEndpoint.objects.filter(pool__name="payments").update(url=f"http://127.0.0.1:{free_port()}")
    clusters("c1")
    (job,) = wait_terminal(submit(1))
    assert job.status == JobStatus.SUCCEEDED
    charge = Step.objects.get(job=job, name="charge")
    pools = [a.pool.name for a in Attempt.objects.filter(step=charge).order_by("number")]
    assert pools == ["payments", "payments", "payments-backup"]
    assert charge.pool == AgentPool.objects.get(name="payments-backup")
    assert effects_of(sandbox, job)["charge"] == 1


def test_sigkill_of_the_cluster_mid_flight_loses_no_job_and_doubles_no_effect(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    load_demo(sandbox, **{name: {"timeout_seconds": 5} for name in ("standard", "payments", "shipping")})
    sandbox.config(latency_ms=800, latency_rate=1.0)
    first = clusters("victim")
    jobs = submit(8)
    wait_until(lambda: sandbox.stats()["requests"] >= 2, timeout=30, message="calls in flight")
    first.kill()  # SIGKILL of the whole process group, calls in flight
    unfinished = Job.objects.filter(pk__in=[j.pk for j in jobs]).exclude(status__in=TERMINAL).count()
    assert unfinished > 0
    sandbox.config(latency_ms=0)
    clusters("survivor")
    jobs = wait_terminal(jobs, timeout=90)
    assert {j.status for j in jobs} == {JobStatus.SUCCEEDED}
    stats = sandbox.stats()
    assert stats["duplicates"] == 0
    for job in jobs:
        assert effects_of(sandbox, job) == {"reserve": 1, "charge": 1, "ship": 1}


def test_two_clusters_have_one_acting_supervisor_and_remediate_each_step_once(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    load_demo(sandbox)
    sandbox.config(script={"/inventory/reserve": ["drop"] * 6}, drop_hold_ms=3000)
    clusters("a")
    clusters("b")
    jobs = wait_terminal(submit(6), timeout=90)
    assert {j.status for j in jobs} == {JobStatus.SUCCEEDED}
    sources = set(
        Event.objects.filter(job__in=jobs, source__startswith="supervisor:").values_list("source", flat=True)
    )
    lease = SupervisorLease.objects.get()
    assert sources == {f"supervisor:{lease.holder}"}
    # Each (step, attempt) was decided once: one retry per dropped answer, never two.
    for step in Step.objects.filter(job__in=jobs, name="reserve"):
        dispatches = Event.objects.filter(step=step, kind="step_dispatched").count()
        assert dispatches == step.attempt
        assert len(set(Attempt.objects.filter(step=step).values_list("number", flat=True))) == step.attempt
    assert sandbox.stats()["duplicates"] == 0


# --- a pool limit against a real remote, through a real cluster -----------------------------------


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_burst_never_has_more_calls_in_flight_than_the_pools_limit(
    sandbox: Any, clusters: Callable[..., Any]
) -> None:
    from testbed.definitions import ensure_policy, ensure_pool, ensure_workflow
    from tests.processes import wait_until

    ensure_pool("limited", kind="http", endpoints=[sandbox.url], max_in_flight=5)
    ensure_policy("plain", timeout_seconds=30, max_attempts=3)
    ensure_workflow(
        "burst", [{"name": "reserve", "pool": "limited", "path": "/inventory/reserve", "policy": "plain"}]
    )
    sandbox.config(latency_ms=50)
    clusters("c1", SAS_Q_WORKERS=8)
    ids = [job_submit(workflow="burst", input={"n": n}, priority=n % 2).job_id for n in range(200)]

    def done() -> bool:
        return Job.objects.filter(pk__in=ids, status=JobStatus.SUCCEEDED).count() == len(ids)

    wait_until(done, timeout=180, interval=0.5, message="every job of the burst succeeded")
    stats = sandbox.stats()
    assert stats["max_concurrent"]["/inventory/reserve"] == 5  # the limit was reached, never passed
    assert stats["duplicates"] == 0
