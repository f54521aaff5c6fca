"""End to end, with a real `qcluster`, the sandbox remote and PostgreSQL: one event posted by two
clients at once starts one job, and a step waiting for an event with a match takes its own
order's event and ignores another order's."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection

from scheduler.definitions import workflow_create
from scheduler.models import InboundEvent, Job, JobStatus, Step, StepStatus
from testbed.definitions import ensure_policy, ensure_pool
from tests.api.support import V1, client_for, make_user
from tests.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_an_event_posted_twice_at_once_starts_one_job_whose_wait_takes_only_its_orders_event(
    sandbox: Any, clusters: Callable[..., Any]
) -> None:
    ensure_pool("remote", kind="http", endpoints=[sandbox.url])
    ensure_policy("plain", timeout_seconds=30, max_attempts=3)
    workflow_create(
        name="orders",
        steps=[
            {"name": "reserve", "pool": "remote", "path": "/inventory/reserve", "policy": "plain"},
            {
                "name": "paid",
                "kind": "signal",
                "event": "order.paid",
                "match": "event.data.order_id == input.order_id",
                "depends_on": ["reserve"],
            },
            {
                "name": "ship",
                "pool": "remote",
                "path": "/shipping/schedule",
                "policy": "plain",
                "depends_on": ["paid"],
            },
        ],
        triggers=[
            {
                "event": "order.placed",
                "input": {"order_id.$": "event.data.order_id"},
                "business_key": "event.data.order_id",
            }
        ],
    )
    sandbox.config(latency_ms=200)
    clusters("a", SAS_Q_WORKERS=2)
    shop, pos = client_for(make_user("olga", "operators")), client_for(make_user("otto", "operators"))

    placed = {"type": "order.placed", "id": "placed-A-1", "source": "shop", "data": {"order_id": "A-1"}}
    barrier = threading.Barrier(2)

    def send(client: Any) -> Any:
        try:
            barrier.wait(timeout=10)
            return client.post(f"{V1}/events/", placed, format="json")
        finally:
            connection.close()

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(send, [shop, pos]))
    assert sorted(a.status_code for a in answers) == [200, 202], [a.content for a in answers]
    first, duplicate = sorted((a.json() for a in answers), key=lambda body: body["duplicate"])
    assert duplicate == {**first, "duplicate": True}
    (a1,) = first["started"]
    assert Job.objects.count() == 1 and InboundEvent.objects.count() == 1
    other = {"type": "order.placed", "id": "placed-B-2", "source": "shop", "data": {"order_id": "B-2"}}
    (b2,) = shop.post(f"{V1}/events/", other, format="json").json()["started"]
    assert Job.objects.get(pk=b2).business_key == "B-2"

    def waiting(job: str) -> bool:
        return Step.objects.get(job_id=job, name="paid").status == StepStatus.WAITING

    wait_until(lambda: waiting(a1) and waiting(b2), timeout=60, interval=0.3, message="both jobs wait")
    paid = {
        "type": "order.paid",
        "id": "pay-B-2",
        "source": "payments",
        "data": {"order_id": "B-2", "amount": 9},
    }
    answer = pos.post(f"{V1}/events/", paid, format="json")
    assert answer.status_code == 202 and answer.json()["signalled"] == [b2], answer.content
    wait_until(
        lambda: Job.objects.get(pk=b2).status == JobStatus.SUCCEEDED,
        timeout=120,
        interval=0.3,
        message="the job of order B-2 took its payment and succeeded",
    )
    assert Step.objects.get(job_id=b2, name="paid").output == {"order_id": "B-2", "amount": 9}
    # Order A-1's job ignored B-2's payment: it still waits for its own.
    assert waiting(a1) and Job.objects.get(pk=a1).status == JobStatus.RUNNING
    own = {**paid, "id": "pay-A-1", "data": {"order_id": "A-1", "amount": 5}}
    assert shop.post(f"{V1}/events/", own, format="json").json()["signalled"] == [a1]
    wait_until(
        lambda: Job.objects.get(pk=a1).status == JobStatus.SUCCEEDED,
        timeout=120,
        interval=0.3,
        message="the job of order A-1 took its own payment and succeeded",
    )
