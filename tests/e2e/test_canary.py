"""End to end: the canary (supervisor.canary) under a real `qcluster` and `runserver`.

The cluster's loop fires the canary job; its call goes to the web server's `/canaryz`, which
drops the first call; the job succeeds only through the supervisor's retry, and /metrics shows
its submit-to-success time. No outbound list names loopback: the canary reaches its own URL only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from scheduler.models import CANARY_WORKFLOW, Event, EventKind, Job, JobStatus, Step
from testbed.processes import WebProcess
from tests.processes import ARTIFACTS, Cluster, child_env, free_port, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.sqlite, pytest.mark.django_db(transaction=True)]


def _gauges(url: str) -> dict[str, float]:
    answer = httpx.get(
        f"{url}/metrics", headers={"Authorization": "Bearer canary-scrape"}, trust_env=False, timeout=10
    )
    assert answer.status_code == 200, answer.text
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
        if sample.name.startswith("sas_canary")
    }


def test_a_canary_job_succeeds_through_the_supervisor_s_retry_and_metrics_show_it(
    clusters: Callable[..., Cluster],
) -> None:
    port = free_port()
    canary: dict[str, Any] = {
        "SAS_CANARY_SECONDS": 60,
        "SAS_PUBLIC_URL": f"http://127.0.0.1:{port}",
        # Loopback is in no list: only the canary's own URL may be reached there.
        "SAS_OUTBOUND_INTERNAL_HOSTS": "",
        "SAS_AGENT_ALLOWED_HOSTS": "",
        "SAS_METRICS_TOKEN": "canary-scrape",
    }
    web = WebProcess(port=port, env=child_env(**canary), log=ARTIFACTS / "web-canary.log").start()
    try:
        clusters("canary", **canary)
        job = wait_until(
            lambda: Job.objects.filter(workflow__name=CANARY_WORKFLOW, status=JobStatus.SUCCEEDED).first(),
            timeout=90,
            message="a canary job that succeeded",
        )
        step = Step.objects.get(job=job)
        outcomes = list(step.attempts.order_by("number").values_list("outcome", flat=True))
        assert outcomes[0] == "no_answer" and outcomes[-1] == "succeeded", outcomes
        kinds = list(Event.objects.filter(job=job).order_by("id").values_list("kind", flat=True))
        timed_out = [k for k in kinds if k in (EventKind.STEP_NO_ANSWER, EventKind.STEP_TIMED_OUT)]
        assert timed_out, kinds
        # The retry is the supervisor's: a dispatch after the timeout, decided by the supervisor.
        retried = Event.objects.filter(job=job, attempt=2, source__startswith="supervisor").exists()
        assert retried, list(Event.objects.filter(job=job).values_list("kind", "source", "attempt"))
        assert job.finished_at is not None
        recovery = (job.finished_at - job.created_at).total_seconds()
        gauges = wait_until(
            lambda: (found := _gauges(web.url)).get("sas_canary_recovery_seconds") and found,
            timeout=30,
            message="the canary's figures in /metrics",
        )
        assert gauges["sas_canary_recovery_seconds"] == pytest.approx(recovery)
        assert math.isfinite(gauges["sas_canary_last_success_age_seconds"])
        assert gauges["sas_canary_last_success_age_seconds"] >= 0
    finally:
        web.stop()
