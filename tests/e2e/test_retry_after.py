"""End to end, with a real `qcluster` and the sandbox remote: a remote answering 429 with
`Retry-After: 3` is called again no sooner than 3 s later, although the policy's backoff is 0.1 s."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scheduler.models import Attempt, Job, JobStatus
from scheduler.services import job_submit
from testbed.definitions import ensure_policy, ensure_pool, ensure_workflow
from tests.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_remote_that_asks_to_wait_three_seconds_is_not_called_again_sooner(
    sandbox: Any, clusters: Callable[..., Any]
) -> None:
    ensure_pool("remote", kind="http", endpoints=[sandbox.url])
    ensure_policy(
        "quick", timeout_seconds=30, max_attempts=3, backoff_initial_seconds=0.1, backoff_max_seconds=60
    )
    ensure_workflow(
        "reserve", [{"name": "reserve", "pool": "remote", "path": "/inventory/reserve", "policy": "quick"}]
    )
    sandbox.config(script={"/inventory/reserve": ["throttle:3"]})
    clusters("c1")
    job_id = job_submit(workflow="reserve", input={"sku": "A", "quantity": 1}).job_id
    wait_until(
        lambda: Job.objects.get(pk=job_id).status == JobStatus.SUCCEEDED,
        timeout=90,
        message="the job succeeded",
    )
    first, second = Attempt.objects.filter(step__job_id=job_id).order_by("number")
    assert first.status_code == 429 and first.retry_after_seconds == 3
    assert (second.started_at - first.finished_at).total_seconds() >= 3
    assert sandbox.stats()["faults"]["throttle"] == 1
