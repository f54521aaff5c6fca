"""The fault campaign's checks of events and correlation (testbed.campaign_events_checks) find
nothing wrong in what the service does as documented, and name what would be wrong: a payment
taken by another order's job, one request's signal on two jobs, a late signal taken."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone

from agents.fake import FakeRemote
from scheduler.models import Job, KeyedSignal, Signal
from scheduler.services import job_submit
from testbed.campaign_events import (
    PAID,
    PAYMENTS,
    PLACED,
    SHOP,
    WORKFLOW_ORDER,
    WORKFLOW_WITH_START,
    EventLog,
    Keyed,
    Order,
    Race,
    ensure_events_definitions,
)
from testbed.campaign_events_checks import MUST_BE_ZERO, check_events
from testbed.definitions import ensure_policy, ensure_pool
from tests.api.support import V1, client_for, make_user

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

RUN = "run1"


@pytest.fixture
def client(fake_remote: FakeRemote) -> Any:
    ensure_pool("campaign-inventory", kind="http", endpoints=["http://remote.test"])
    ensure_policy("campaign", timeout_seconds=5, max_attempts=3)
    ensure_events_definitions()
    return client_for(make_user("campaign-client", "submitters"))


def post_event(
    client: Any, log: EventLog, kind: str, source: str, event_id: str, data: Any
) -> dict[str, Any]:
    """Post an event as the driver does, keeping its answer in the log."""
    answer = client.post(
        f"{V1}/events/", {"type": kind, "id": event_id, "source": source, "data": data}, format="json"
    )
    body: dict[str, Any] = {**answer.json(), "status": answer.status_code}
    log.answers[f"{source}/{event_id}"].append(body)
    return body


def with_start(client: Any, key: str) -> Any:
    return client.post(
        f"{V1}/jobs/",
        {
            "workflow": WORKFLOW_WITH_START,
            "input": {},
            "business_key": f"{RUN}-race-0",
            "signal": {"name": "go", "payload": key},
        },
        format="json",
        HTTP_IDEMPOTENCY_KEY=key,
    )


def wrong(report: dict[str, Any]) -> dict[str, Any]:
    return {name: report["figures"][name] for name in MUST_BE_ZERO if report["figures"][name]}


def placed_order(client: Any, log: EventLog, drain: Callable[[], int]) -> Order:
    """An order placed twice over (a duplicate), its job waiting for its payment."""
    order = Order(
        order_id=f"{RUN}-order-0", mode="after_wait", placed_id=f"{RUN}-placed-0", paid_id=f"{RUN}-paid-0"
    )
    data = {"order_id": order.order_id, "sku": "E1"}
    for _ in range(2):
        (order.job_id,) = post_event(client, log, PLACED, SHOP, order.placed_id, data)["started"]
    log.orders.append(order)
    drain()
    return order


def test_an_order_paid_once_it_waits_beside_another_orders_payment_breaks_no_figure(
    client: Any, drain: Callable[[], int]
) -> None:
    since, log = timezone.now(), EventLog(rounds=1)
    order = placed_order(client, log, drain)
    paid = post_event(client, log, PAID, PAYMENTS, order.paid_id, {"order_id": order.order_id, "amount": 5})
    assert paid["signalled"] == [order.job_id]
    log.ghosts.append(f"{order.paid_id}-ghost")
    post_event(client, log, PAID, PAYMENTS, log.ghosts[0], {"order_id": "no-such-order", "amount": 1})
    drain()

    report = check_events(log, run_id=RUN, since=since)
    assert wrong(report) == {}
    figures = report["figures"]
    assert figures["events_posted"] == 3 and figures["duplicates_answered"] == 1
    assert figures["payments_by_mode"] == {"after_wait reached": 1}
    assert figures["ghost_payments"] == 1 and figures["ghost_payments_reaching_a_job"] == 0
    assert report["job_ids"] == [order.job_id]


def test_a_payment_for_another_order_held_by_a_job_is_named(client: Any, drain: Callable[[], int]) -> None:
    since, log = timezone.now(), EventLog(rounds=1)
    order = placed_order(client, log, drain)
    stranger = {"type": PAID, "id": "x", "source": PAYMENTS, "data": {"order_id": "another"}}
    Signal.objects.create(job_id=order.job_id, name=f"event:{PAID}", payload=stranger)

    report = check_events(log, run_id=RUN, since=since)
    assert report["violations"]["events_taken_by_another_orders_job"] == 1


def test_a_race_makes_one_job_taking_both_signals(client: Any, drain: Callable[[], int]) -> None:
    since, log = timezone.now(), EventLog(rounds=1)
    first, second = with_start(client, f"{RUN}-race-0-a"), with_start(client, f"{RUN}-race-0-b")
    assert (first.status_code, second.status_code) == (201, 200)
    race = Race(business_key=f"{RUN}-race-0", keys=(f"{RUN}-race-0-a", f"{RUN}-race-0-b"))
    race.answers = [(201, first.json()["id"]), (200, second.json()["id"])]
    log.races.append(race)
    drain()

    report = check_events(log, run_id=RUN, since=since)
    assert wrong(report) == {}
    assert report["figures"]["race_pairs_with_one_job"] == 1
    assert report["figures"]["signals_consumed"] == 2


def test_one_requests_signal_on_two_jobs_is_named(client: Any, drain: Callable[[], int]) -> None:
    since, log = timezone.now(), EventLog(rounds=1)
    first = with_start(client, f"{RUN}-race-0-a")
    log.races.append(
        Race(
            business_key=f"{RUN}-race-0",
            keys=(f"{RUN}-race-0-a", f"{RUN}-race-0-b"),
            answers=[(201, first.json()["id"]), (0, None)],
        )
    )
    drain()
    other = job_submit(workflow=WORKFLOW_WITH_START, input={}, business_key=f"{RUN}-race-1").job_id
    Signal.objects.create(job_id=other, name="go", idempotency_key=f"with-start:{RUN}-race-0-a")

    report = check_events(log, run_id=RUN, since=since)
    assert report["violations"]["with_start_keys_on_two_jobs"] == 1


def test_a_late_signal_a_job_claimed_is_named(client: Any, drain: Callable[[], int]) -> None:
    since, log = timezone.now(), EventLog(rounds=1)
    order = placed_order(client, log, drain)
    job = Job.objects.get(pk=order.job_id)
    assert job.workflow.name == WORKFLOW_ORDER
    keyed = Keyed(business_key=f"{RUN}-keyed-0", mode="on_time", keys={"late": f"{RUN}-keyed-0-late"})
    log.keyed.append(keyed)
    KeyedSignal.objects.create(
        business_key=keyed.business_key,
        name="go",
        idempotency_key=keyed.keys["late"],
        buffered=True,
        consumed_job=job,
        consumed_at=timezone.now(),
    )

    report = check_events(log, run_id=RUN, since=since)
    assert report["violations"]["late_signals_taken"] == 1
