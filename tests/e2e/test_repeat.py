"""End to end, with real `qcluster` processes, the sandbox remote and PostgreSQL: a poll-until
loop (a `repeat` step) succeeds on its fourth iteration, each iteration one call under its own
operation ID at the remote, and no worker held between them (the wait is a timer the
supervisor's sweep reads)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from scheduler.models import Attempt, Event, EventKind, Job, JobStatus, Step, StepKind, StepStatus
from scheduler.services import job_submit
from testbed.definitions import ensure_policy, ensure_pool, ensure_workflow
from tests.processes import Cluster, Sandbox, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_poll_until_loop_succeeds_on_its_fourth_iteration_holding_no_worker_between(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    ensure_pool("inventory", kind="http", endpoints=[sandbox.url])
    ensure_policy(
        "polling", timeout_seconds=10, max_attempts=3, backoff_initial_seconds=0.2, backoff_jitter=0
    )
    ensure_workflow(
        "poll_until",
        [
            {
                "name": "poll",
                "kind": "repeat",
                "call": {
                    "pool": "inventory",
                    "path": "/inventory/reserve",
                    "compensation_path": "/inventory/release",
                    "policy": "polling",
                },
                # The remote's answer has no state to read here: the loop ends on its fourth
                # answer, as a status that says "done" on the fourth poll would end it.
                "until": "iteration == `4`",
                "interval_seconds": 2,
                "max_iterations": 6,
            }
        ],
    )
    clusters("c1", SAS_SUPERVISOR_INTERVAL="0.5")
    job = job_submit(workflow="poll_until", input={"sku": "P1", "quantity": 1}).job
    poll = Step.objects.get(job=job, name="poll", kind=StepKind.ACTION)

    def between_iterations() -> bool:
        done = Step.objects.filter(parent_id=poll.pk, status=StepStatus.SUCCEEDED).count()
        waiting = Step.objects.get(pk=poll.pk)
        return done == 1 and waiting.status == StepStatus.WAITING and waiting.deadline is not None

    wait_until(between_iterations, timeout=60, interval=0.05, message="the first iteration answered")
    # Between two iterations no call of the loop is queued or in flight: no worker waits for
    # it, only the step's deadline, which the supervisor's sweep reads.
    assert not Attempt.objects.filter(step__parent_id=poll.pk, finished_at__isnull=True).exists()

    def succeeded() -> bool:
        return Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED

    wait_until(succeeded, timeout=90, interval=0.25, message="the loop ended on its fourth iteration")
    items = list(Step.objects.filter(parent_id=poll.pk, kind=StepKind.ITEM).order_by("item_index"))
    operation_ids = [i.operation_id for i in items]
    assert operation_ids == [f"{poll.operation_id}/iter-{n}" for n in (1, 2, 3, 4)]
    effects = sandbox.stats()["effects"]
    assert [effects.get(op) for op in operation_ids] == [1, 1, 1, 1]
    # The iterations went out at least the interval apart.
    started = [
        Attempt.objects.filter(step=i, number=1).values_list("dispatched_at", flat=True).get() for i in items
    ]
    assert all((b - a).total_seconds() >= 1.9 for a, b in itertools.pairwise(started))
    assert Event.objects.filter(job=job, kind=EventKind.JOB_SUCCEEDED).count() == 1
