"""End to end, with a real `qcluster`, the sandbox remote and PostgreSQL: a signal sent by
business key before its job exists is consumed once, when the job reaches its step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scheduler.definitions import workflow_create
from scheduler.models import Job, JobStatus, KeyedSignal, Signal, Step, StepStatus
from testbed.definitions import ensure_policy, ensure_pool
from tests.api.support import V1, client_for, make_user
from tests.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_signal_by_key_sent_before_its_job_is_consumed_once_when_the_job_reaches_its_step(
    sandbox: Any, clusters: Callable[..., Any]
) -> None:
    ensure_pool("remote", kind="http", endpoints=[sandbox.url])
    ensure_policy("plain", timeout_seconds=30, max_attempts=3)
    workflow_create(
        name="orders",
        steps=[
            {"name": "reserve", "pool": "remote", "path": "/inventory/reserve", "policy": "plain"},
            {"name": "paid", "kind": "signal", "signal": "payment", "depends_on": ["reserve"]},
            {
                "name": "ship",
                "pool": "remote",
                "path": "/shipping/schedule",
                "policy": "plain",
                "depends_on": ["paid"],
            },
        ],
    )
    sandbox.config(latency_ms=200)
    clusters("a", SAS_Q_WORKERS=2)
    api = client_for(make_user("olga", "operators"))
    early = api.post(
        f"{V1}/signals/",
        {"business_key": "order-42", "name": "payment", "payload": {"amount": 42}},
        format="json",
    )
    assert early.status_code == 202 and early.json()["buffered"] is True
    body = {"workflow": "orders", "input": {}, "business_key": "order-42"}
    job = api.post(f"{V1}/jobs/", body, format="json").json()["id"]
    wait_until(
        lambda: Job.objects.get(pk=job).status == JobStatus.SUCCEEDED,
        timeout=120,
        interval=0.3,
        message="the job that took the early signal succeeded",
    )
    assert Step.objects.get(job_id=job, name="paid").output == {"amount": 42}
    assert str(KeyedSignal.objects.get().consumed_job_id) == job
    # A second job of the key waits for a signal of its own: the first was consumed once.
    second = api.post(f"{V1}/jobs/", body, format="json").json()["id"]
    wait_until(
        lambda: Step.objects.get(job_id=second, name="paid").status == StepStatus.WAITING,
        timeout=60,
        interval=0.3,
        message="the second job reached its signal step",
    )
    assert Job.objects.get(pk=second).status == JobStatus.RUNNING


def test_a_sender_waiting_for_its_signal_is_answered_when_the_job_reaches_its_step(
    sandbox: Any, clusters: Callable[..., Any]
) -> None:
    ensure_pool("remote", kind="http", endpoints=[sandbox.url])
    ensure_policy("plain", timeout_seconds=30, max_attempts=3)
    workflow_create(
        name="orders",
        steps=[
            {"name": "reserve", "pool": "remote", "path": "/inventory/reserve", "policy": "plain"},
            {"name": "paid", "kind": "signal", "signal": "payment", "depends_on": ["reserve"]},
        ],
    )
    sandbox.config(latency_ms=1500)  # the signal comes while `reserve` is still at the remote
    clusters("a", SAS_Q_WORKERS=2)
    api = client_for(make_user("olga", "operators"))
    job = api.post(f"{V1}/jobs/", {"workflow": "orders", "input": {}}, format="json").json()["id"]
    answer = api.post(
        f"{V1}/jobs/{job}/signals/?wait=20", {"name": "payment", "payload": {"ok": 1}}, format="json"
    )
    assert answer.status_code == 200, answer.content
    assert answer.json()["consumed_by"] == "paid" and answer.json()["output"] == {"ok": 1}
    assert Step.objects.get(job_id=job, name="reserve").status == StepStatus.SUCCEEDED
    # It was sent while `reserve` ran: kept, then consumed when `paid` began to wait.
    signal = Signal.objects.get(job_id=job)
    assert signal.consumed_at is not None and (signal.consumed_at - signal.created_at).total_seconds() > 0.2
