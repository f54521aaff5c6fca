"""End to end: a supervisor that is alive but not remediating is found from outside and replaced.

Two real `qcluster`s against PostgreSQL and the sandbox remote. One of them renews its lease at
every pass but every remediation batch it runs fails (SAS_FAULT_REMEDIATION_FAILS): its heartbeat
says all is well. The other reads the remediation debt from the step rows, takes the lease over
and the overdue step is retried, once.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.models import Attempt, Delivery, Event, JobStatus, Step
from supervisor.models import LeaseTerm, SupervisorLease
from supervisor.subscriptions import subscription_create
from tests.e2e.test_qcluster import effects_of, load_demo, submit, wait_terminal
from tests.processes import Cluster, Sandbox, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

#: tests.processes.child_env's scan interval.
INTERVAL = 0.5


def test_a_supervisor_that_renews_but_does_not_remediate_is_taken_over_and_the_step_retried_once(
    sandbox: Sandbox, clusters: Callable[..., Cluster]
) -> None:
    load_demo(sandbox)
    subscription_create(
        name="ops",
        actor=None,
        webhook_url="https://hooks.example.com/x",
        kinds=["supervisor_not_remediating"],
    )
    sandbox.config(script={"/inventory/reserve": ["drop"]}, drop_hold_ms=3000)
    clusters("stuck", SAS_FAULT_REMEDIATION_FAILS=1)
    wait_until(
        lambda: bool(SupervisorLease.objects.filter(holder__gt="").exists()),
        timeout=30,
        message="the first cluster holds the lease",
    )
    stuck = SupervisorLease.objects.get().holder
    clusters("peer")
    (job,) = wait_terminal(submit(1), timeout=60)
    assert job.status == JobStatus.SUCCEEDED
    reserve = Step.objects.get(job=job, name="reserve")
    first, second = Attempt.objects.filter(step=reserve).order_by("number")
    assert (first.outcome, second.outcome) == ("no_answer", "succeeded")
    # Retried exactly once, by the new holder; the stuck one decided nothing.
    (retry,) = Event.objects.filter(step=reserve, kind="retry_scheduled")
    lease = SupervisorLease.objects.get()
    assert lease.holder != stuck and retry.source == f"supervisor:{lease.holder}"
    assert not Event.objects.filter(source=f"supervisor:{stuck}").exclude(kind="job_needs_attention").exists()
    assert effects_of(sandbox, job) == {"reserve": 1, "charge": 1, "ship": 1}
    # Taken over, not expired: the stuck holder kept renewing, and its term ended early. The
    # debt starts two intervals past the deadline and the takeover comes once it is three old:
    # allow a pass of each cluster and a loaded machine.
    term = LeaseTerm.objects.get(holder=stuck)
    assert term.ended_by == lease.holder
    assert first.deadline is not None and term.ended_at is not None
    took = (term.ended_at - first.deadline).total_seconds()
    assert 3 * INTERVAL <= took <= 3 * INTERVAL + 4, took
    alert = Delivery.objects.get(payload__alert="supervisor_not_remediating")
    assert alert.payload["holder"] == stuck and alert.payload["taken_over_by"] == lease.holder
