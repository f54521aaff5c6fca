"""End to end, with a real `qcluster` (three workers, the ORM broker) and the sandbox remote: while
the remote holds two calls for a few seconds, the cluster's heartbeats say two of its workers are
busy and one idle, as the overview's Clusters card shows; once the calls are answered, none is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scheduler.models import Job, JobStatus
from scheduler.services import job_submit
from scheduler.unit import db_now
from supervisor.heartbeats import clusters as cluster_states
from testbed.definitions import ensure_policy, ensure_pool, ensure_workflow
from tests.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def busy_now() -> int | None:
    live = [c for c in cluster_states(db_now()) if c.state == "live"]
    return live[0].busy if len(live) == 1 else None


def test_a_cluster_s_heartbeat_counts_the_workers_holding_a_call_as_busy(
    sandbox: Any, clusters: Callable[..., Any]
) -> None:
    ensure_pool("remote", kind="http", endpoints=[sandbox.url])
    ensure_policy("patient", timeout_seconds=30, max_attempts=1)
    ensure_workflow(
        "charge", [{"name": "charge", "pool": "remote", "path": "/payments/charge", "policy": "patient"}]
    )
    clusters("c1", SAS_Q_WORKERS=3, SAS_CLUSTER_HEARTBEAT_SECONDS=0.3)
    wait_until(lambda: busy_now() == 0, timeout=60, interval=0.1, message="the cluster beat, nothing to do")
    sandbox.config(script={"/payments/charge": ["slow:6000", "slow:6000"]})
    jobs = [job_submit(workflow="charge", input={"n": n}).job_id for n in range(2)]
    wait_until(
        lambda: busy_now() == 2, timeout=60, interval=0.1, message="two workers busy with the held calls"
    )
    (state,) = [c for c in cluster_states(db_now()) if c.state == "live"]
    assert (state.workers, state.idle) == (3, 1)
    wait_until(
        lambda: all(Job.objects.get(pk=j).status == JobStatus.SUCCEEDED for j in jobs),
        timeout=90,
        interval=0.2,
        message="the held calls were answered",
    )
    wait_until(lambda: busy_now() == 0, timeout=30, interval=0.1, message="the workers idle again")
