"""End to end, with a real `qcluster`, the sandbox remote and PostgreSQL: a fan-out of 200 items
never has more than `max_parallel` calls in flight at the remote, and a join that fails undoes
exactly the items that had an effect, each once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scheduler.models import Event, EventKind, Job, JobStatus, Step, StepKind, StepStatus
from scheduler.services import job_submit
from testbed.definitions import ensure_policy, ensure_pool, ensure_workflow
from tests.processes import Cluster, Sandbox, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
S = StepStatus


def ship_lines(sandbox: Sandbox) -> None:
    ensure_pool("shipping", kind="http", endpoints=[sandbox.url])
    # Refusals are final (business failures are never retried); a lost answer is retried.
    ensure_policy("lines", timeout_seconds=10, max_attempts=3, backoff_initial_seconds=0.2, backoff_jitter=0)
    ensure_workflow(
        "ship_lines",
        [
            {
                "name": "ship",
                "pool": "shipping",
                "path": "/shipping/schedule",
                "compensation_path": "/shipping/cancel",
                "policy": "lines",
                "for_each": "input.lines",
                "max_parallel": 10,
                "input": {"order.$": "input.order", "line.$": "item"},
            }
        ],
    )


def settle(job: Job, timeout: float = 180) -> Job:
    def settled() -> bool:
        job.refresh_from_db()
        return job.status in (JobStatus.SUCCEEDED, JobStatus.COMPENSATED, JobStatus.FAILED)

    wait_until(settled, timeout=timeout, interval=0.5, message=f"job {job.pk} settled")
    return job


def test_a_fan_out_of_200_items_never_has_more_than_max_parallel_calls_in_flight(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    ship_lines(sandbox)
    sandbox.config(latency_ms=200)  # long enough for the bound to be reached
    clusters("c1", SAS_Q_WORKERS=16)
    job = job_submit(workflow="ship_lines", input={"order": "O-1", "lines": list(range(200))}).job
    assert settle(job).status == JobStatus.SUCCEEDED
    stats = sandbox.stats()
    # Never passed; nearly reached (an item's next call starts once an outcome is recorded).
    assert 5 <= stats["max_concurrent"]["/shipping/schedule"] <= 10
    items = list(Step.objects.filter(job=job, kind=StepKind.ITEM))
    assert len(items) == 200 and {i.status for i in items} == {S.SUCCEEDED}
    assert sorted(stats["effects"][i.operation_id] for i in items) == [1] * 200
    ship = Step.objects.get(job=job, name="ship")
    assert len(ship.output) == 200


def test_a_failed_join_undoes_exactly_the_items_that_had_an_effect_each_once(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    ship_lines(sandbox)
    # The 121st schedule request is refused: the join (all) can no longer be met.
    sandbox.config(latency_ms=20, script={"/shipping/schedule": ["ok"] * 120 + ["decline"]})
    clusters("c1", SAS_Q_WORKERS=16)
    job = job_submit(workflow="ship_lines", input={"order": "O-2", "lines": list(range(200))}).job
    assert settle(job).status == JobStatus.COMPENSATED
    stats = sandbox.stats()
    effects: dict[str, Any] = stats["effects"]
    assert stats["max_concurrent"]["/shipping/schedule"] <= 10
    items = list(Step.objects.filter(job=job, kind=StepKind.ITEM))
    shipped = [i for i in items if effects.get(i.operation_id)]
    assert len(shipped) >= 120
    # Every item that had an effect is undone once; nothing without an effect is undone.
    undone = {op for op in effects if op.endswith(":compensate")}
    assert undone == {f"{i.operation_id}:compensate" for i in shipped}
    assert all(effects[op] == 1 for op in undone) and stats["duplicates"] == 0
    assert {i.status for i in shipped} == {S.COMPENSATED}
    assert {i.status for i in items if i not in shipped} <= {S.FAILED, S.SKIPPED}
    ship = Step.objects.get(job=job, name="ship")
    assert ship.status == S.FAILED
    assert Event.objects.filter(step=ship, kind=EventKind.JOIN_FAILED).count() == 1


def test_the_demo_order_ships_each_line_skips_the_charge_when_prepaid_and_refunds_what_did_not_ship(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    from tests.e2e.test_qcluster import load_demo

    load_demo(sandbox)
    sandbox.config(script={"/shipping/schedule": ["ok", "decline"]})  # the second line cannot ship
    clusters("c1")
    lines = [{"sku": "A1", "quantity": 2}, {"sku": "B2", "quantity": 1}, {"sku": "C3", "quantity": 1}]
    paid = job_submit(workflow="order_lines", input={"order": "O-7", "amount": 30, "lines": lines}).job
    assert settle(paid, timeout=120).status == JobStatus.SUCCEEDED
    steps = {s.name: s for s in Step.objects.filter(job=paid, item_index__isnull=True)}
    assert steps["charge"].status == S.SUCCEEDED
    # Which line the remote refuses depends on which of the three calls reaches it second.
    assert sum(o is None for o in steps["ship"].output) == 1
    child = Job.objects.get(parent_job=paid, parent_step="refund_unshipped")
    assert child.workflow.name == "refund" and child.status == JobStatus.SUCCEEDED
    assert child.input == {"order": "O-7", "unshipped": 1}
    prepaid = job_submit(
        workflow="order_lines", input={"order": "O-8", "prepaid": True, "lines": lines[:1]}
    ).job
    assert settle(prepaid, timeout=120).status == JobStatus.SUCCEEDED
    steps = {s.name: s for s in Step.objects.filter(job=prepaid, item_index__isnull=True)}
    assert (steps["charge"].status, steps["refund_unshipped"].status) == (S.SKIPPED, S.SKIPPED)
    assert steps["ship"].status == S.SUCCEEDED
    assert not Job.objects.filter(parent_job=prepaid).exists()
