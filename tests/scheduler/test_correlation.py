"""Correlation by business key (scheduler.services.correlation): signals sent to the jobs of a
business key (`POST /api/v1/signals/`), kept for a job that starts within the lookback, and
signal-with-start (`POST /api/v1/jobs/` with `signal`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone

from agents.fake import FakeRemote
from scheduler.models import AlertKind, Delivery, Job, JobStatus, KeyedSignal, Signal, Step, StepStatus
from supervisor.alerts import keyed_signals_expire_and_alert
from supervisor.subscriptions import subscription_create
from tests.api.support import V1, client_for, make_user
from tests.factories import make_workflow, step

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]
S = StepStatus


def order_workflow(name: str = "order") -> None:
    """[paid: a signal wait for "payment"] -> ship."""
    make_workflow(name, {"name": "paid", "kind": "signal", "signal": "payment"}, step("ship", "paid"))


def submit(client: Any, business_key: str, workflow: str = "order", **body: Any) -> Any:
    return client.post(
        f"{V1}/jobs/",
        {"workflow": workflow, "input": {}, "business_key": business_key, **body},
        format="json",
    )


def by_key(client: Any, business_key: str, payload: Any = None, *, key: str | None = None) -> Any:
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return client.post(
        f"{V1}/signals/",
        {"business_key": business_key, "name": "payment", "payload": payload},
        format="json",
        **headers,
    )


def paid(job_id: Any) -> Step:
    return Step.objects.get(job_id=job_id, name="paid")


def test_a_signal_by_business_key_reaches_every_live_job_of_the_key(
    fake_remote: FakeRemote, drain: Callable[[], int]
) -> None:
    order_workflow()
    olga = client_for(make_user("olga", "operators"))
    first, second = (submit(olga, "order-1001").json()["id"] for _ in range(2))
    other = submit(olga, "order-2002").json()["id"]
    answer = by_key(olga, "order-1001", {"amount": 5})
    assert answer.status_code == 202, answer.content
    assert sorted(answer.json()["jobs"]) == sorted([first, second]) and answer.json()["buffered"] is False
    drain()
    assert paid(first).status == paid(second).status == S.SUCCEEDED
    assert paid(first).output == {"amount": 5}
    assert paid(other).status == S.WAITING


def test_a_signal_sent_before_its_job_exists_is_consumed_once_by_the_job_that_starts(
    fake_remote: FakeRemote, drain: Callable[[], int]
) -> None:
    order_workflow()
    olga = client_for(make_user("olga", "operators"))
    early = by_key(olga, "order-7", {"amount": 9})
    assert early.status_code == 202 and early.json()["jobs"] == [] and early.json()["buffered"] is True
    assert early.json()["expires_at"]
    job = submit(olga, "order-7").json()["id"]
    drain()
    assert paid(job).status == S.SUCCEEDED and paid(job).output == {"amount": 9}
    keyed = KeyedSignal.objects.get()
    assert str(keyed.consumed_job_id) == job and keyed.consumed_at is not None
    # Consumed once: the next job of the key waits for a signal of its own.
    again = submit(olga, "order-7").json()["id"]
    assert paid(again).status == S.WAITING
    assert Signal.objects.filter(job_id=again).count() == 0


def test_a_kept_signal_past_its_lookback_expires_with_its_alert_and_no_job_takes_it(
    fake_remote: FakeRemote,
) -> None:
    subscription_create(
        name="oncall", actor=None, webhook_url="https://hooks.example.com/a", kinds=["signal_expired"]
    )
    order_workflow()
    olga = client_for(make_user("olga", "operators"))
    by_key(olga, "order-8")
    by_key(olga, "order-9")  # still within its lookback
    KeyedSignal.objects.filter(business_key="order-8").update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    job = submit(olga, "order-8").json()["id"]
    assert paid(job).status == S.WAITING
    assert keyed_signals_expire_and_alert() == 1
    expired = KeyedSignal.objects.get(business_key="order-8")
    assert expired.expired_at is not None
    assert KeyedSignal.objects.get(business_key="order-9").expired_at is None
    (alert,) = Delivery.objects.filter(payload__alert=AlertKind.SIGNAL_EXPIRED)
    assert alert.target == "https://hooks.example.com/a"
    assert alert.payload["keyed_signal"] == expired.pk and alert.payload["business_key"] == "order-8"
    assert alert.payload["name"] == "payment" and alert.payload["sender"] == "olga"
    # Once: expired already, nothing more, and no second alert.
    assert keyed_signals_expire_and_alert() == 0
    assert Delivery.objects.filter(payload__alert=AlertKind.SIGNAL_EXPIRED).count() == 1


def test_a_submitters_signal_by_key_reaches_only_its_own_jobs(fake_remote: FakeRemote) -> None:
    order_workflow()
    sam, sue = make_user("sam", "submitters"), make_user("sue", "submitters")
    sams = submit(client_for(sam), "order-1").json()["id"]
    submit(client_for(sue), "order-1")
    answer = by_key(client_for(sam), "order-1")
    assert answer.json()["jobs"] == [sams]


def test_a_signal_by_key_no_workflow_takes_is_a_400_and_changes_nothing(fake_remote: FakeRemote) -> None:
    order_workflow()
    olga = client_for(make_user("olga", "operators"))
    refused = olga.post(f"{V1}/signals/", {"business_key": "k", "name": "nobody-takes"}, format="json")
    assert refused.status_code == 400 and refused.json()["code"] == "invalid"
    named = olga.post(
        f"{V1}/signals/", {"business_key": "k", "name": "payment", "workflow": "other"}, format="json"
    )
    assert named.status_code == 400
    assert olga.post(f"{V1}/signals/", {"name": "payment"}, format="json").status_code == 400
    assert not KeyedSignal.objects.exists()


def test_a_signal_by_key_sent_again_with_its_idempotency_key_is_the_same_signal(
    fake_remote: FakeRemote,
) -> None:
    order_workflow()
    olga = client_for(make_user("olga", "operators"))
    job = submit(olga, "order-3").json()["id"]
    first = by_key(olga, "order-3", {"n": 1}, key="pay-3")
    again = by_key(olga, "order-3", {"n": 1}, key="pay-3")
    assert first.status_code == 202 and again.status_code == 200
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert Signal.objects.filter(job_id=job).count() == 1
    conflict = by_key(olga, "order-3", {"n": 2}, key="pay-3")
    assert conflict.status_code == 422


def test_signal_with_start_starts_the_job_with_the_signal_then_signals_it(
    fake_remote: FakeRemote, drain: Callable[[], int]
) -> None:
    make_workflow(
        "order",
        {"name": "paid", "kind": "signal", "signal": "payment"},
        {"name": "refunded", "kind": "signal", "signal": "refund"},
        step("ship", "paid"),
    )
    olga = client_for(make_user("olga", "operators"))
    made = submit(olga, "order-5", signal={"name": "payment", "payload": {"amount": 3}})
    assert made.status_code == 201, made.content
    job = made.json()["id"]
    assert paid(job).status == S.SUCCEEDED and paid(job).output == {"amount": 3}
    # The same business key again: the live job takes the signal; no second job.
    found = submit(olga, "order-5", signal={"name": "refund", "payload": {"why": "late"}})
    assert found.status_code == 200 and found.json()["id"] == job
    assert found["Content-Location"].endswith(f"/jobs/{job}/")
    assert Job.objects.count() == 1
    assert Step.objects.get(job_id=job, name="refunded").output == {"why": "late"}
    drain()
    assert Job.objects.get(pk=job).status == JobStatus.SUCCEEDED


def test_signal_with_start_sent_again_after_its_job_ended_is_the_same_signal_not_a_new_job(
    fake_remote: FakeRemote, drain: Callable[[], int]
) -> None:
    make_workflow(
        "pair",
        {"name": "first", "kind": "signal", "signal": "go"},
        {"name": "second", "kind": "signal", "signal": "go", "depends_on": ["first"]},
    )
    sam = client_for(make_user("sam", "submitters"))

    def with_start(key: str, payload: Any = None) -> Any:
        return sam.post(
            f"{V1}/jobs/",
            {
                "workflow": "pair",
                "input": {},
                "business_key": "order-1",
                "signal": {"name": "go", "payload": payload},
            },
            format="json",
            HTTP_IDEMPOTENCY_KEY=key,
        )

    made = with_start("A")
    assert made.status_code == 201
    job = made.json()["id"]
    signalled = with_start("B")
    assert signalled.status_code == 200 and signalled.json()["id"] == job
    drain()
    assert Job.objects.get(pk=job).status == JobStatus.SUCCEEDED
    # B again, its job ended: the same signal, no second job.
    again = with_start("B")
    assert again.status_code == 200 and again.json()["id"] == job
    assert Job.objects.count() == 1 and Signal.objects.filter(idempotency_key="with-start:B").count() == 1
    # B with another signal: a conflict, nothing made.
    assert with_start("B", {"other": 1}).status_code == 422
    assert Job.objects.count() == 1


def test_signal_with_start_needs_a_business_key_and_a_signal_the_workflow_takes(
    fake_remote: FakeRemote,
) -> None:
    order_workflow()
    olga = client_for(make_user("olga", "operators"))
    no_key = olga.post(
        f"{V1}/jobs/", {"workflow": "order", "input": {}, "signal": {"name": "payment"}}, format="json"
    )
    assert no_key.status_code == 400 and no_key.json()["field"] == "business_key"
    unknown = submit(olga, "order-9", signal={"name": "nobody-takes"})
    assert unknown.status_code == 400
    assert not Job.objects.exists()
    batch = olga.post(
        f"{V1}/jobs/batch/",
        {"jobs": [{"workflow": "order", "input": {}, "business_key": "b", "signal": {"name": "payment"}}]},
        format="json",
    )
    assert batch.status_code == 400 and not Job.objects.exists()


def test_a_sender_may_wait_for_its_signals_consumption(fake_remote: FakeRemote) -> None:
    order_workflow()
    olga = client_for(make_user("olga", "operators"))
    job = submit(olga, "order-11").json()["id"]  # `paid` waits at once: the signal is taken at once
    taken = olga.post(
        f"{V1}/jobs/{job}/signals/?wait=5", {"name": "payment", "payload": {"n": 1}}, format="json"
    )
    assert taken.status_code == 200, taken.content
    assert taken.json()["consumed_by"] == "paid" and taken.json()["output"] == {"n": 1}
    # Without a waiting step in time: 202, as without `wait`.
    make_workflow(
        "later",
        step("first"),
        {"name": "paid", "kind": "signal", "signal": "payment", "depends_on": ["first"]},
    )
    other = submit(olga, "order-12", workflow="later").json()["id"]
    kept = olga.post(f"{V1}/jobs/{other}/signals/?wait=0.3", {"name": "payment"}, format="json")
    assert kept.status_code == 202 and kept.json()["consumed_by"] is None and kept.json()["output"] is None
    too_long = olga.post(f"{V1}/jobs/{other}/signals/?wait=3600", {"name": "payment"}, format="json")
    assert too_long.status_code == 400 and Signal.objects.filter(job_id=other).count() == 1
