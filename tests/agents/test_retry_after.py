"""Backpressure from remotes: a 429 or 503 with Retry-After sets the next attempt's earliest time
(within the policy's longest backoff, a longer ask capped and said), the attempt keeps what was
asked, and the endpoint's circuit is held open that long, shown as the remote's ask."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from django.utils import timezone

from agents.fake import FakeRemote
from agents.health import choose_endpoint
from agents.http import MAX_RETRY_AFTER, retry_after
from agents.models import AgentEndpoint, AgentPool
from agents.outcome import CallResult, Outcome
from scheduler.models import Attempt, Event, EventKind, Step, StepStatus
from scheduler.services import job_submit
from supervisor.policies import Retry, decide
from supervisor.selectors.overview import endpoint_health
from tests.factories import make_policy, make_pool, make_workflow, step
from tests.supervisor.test_policies import FACTS, NOW, POLICY

NOW_HTTP = "Thu, 01 Jan 2026 12:00:10 GMT"  # NOW + 10 s


@pytest.mark.sqlite
@pytest.mark.parametrize(
    ("status", "value", "expected"),
    [
        (429, "3", 3.0),
        (503, "0", 0.0),
        (429, NOW_HTTP, 10.0),
        (503, "Thu, 01 Jan 2026 11:00:00 GMT", 0.0),  # a time past: no wait
        (429, "999999999", MAX_RETRY_AFTER),  # capped at a day
        (429, "soon", None),
        (429, "-5", None),
        (429, "1.5", None),  # delay-seconds are whole seconds (RFC 9110)
        (500, "3", None),  # only 429 and 503 carry it
        (200, "3", None),
        (429, "", None),
    ],
)
def test_retry_after_is_read_as_seconds_or_an_http_date(
    status: int, value: str, expected: float | None
) -> None:
    assert retry_after(status, value, now=NOW) == expected


@pytest.mark.sqlite
def test_the_remotes_ask_sets_the_retry_when_it_is_longer_than_the_backoff() -> None:
    asked = replace(FACTS, asked_until=NOW + dt.timedelta(seconds=4))
    decision = decide(asked, POLICY, NOW, 0.0)
    assert isinstance(decision, Retry) and decision.delay == 4.0
    assert "the remote asked to wait 4.0s" in decision.reason
    # Shorter than the backoff (1 s after one call): the backoff stands.
    short = decide(replace(FACTS, asked_until=NOW + dt.timedelta(seconds=0.5)), POLICY, NOW, 0.0)
    assert isinstance(short, Retry) and short.delay == 1.0 and "asked" not in short.reason
    # Longer than the policy's longest backoff (5 s): capped, and said.
    long = decide(replace(FACTS, asked_until=NOW + dt.timedelta(seconds=60)), POLICY, NOW, 0.0)
    assert isinstance(long, Retry) and long.delay == 5.0
    assert "asked to wait 60.0s (capped at backoff_max_seconds, 5s)" in long.reason


@pytest.mark.sqlite
@pytest.mark.django_db
def test_a_throttled_call_keeps_the_ask_and_its_retry_and_endpoint_wait_for_it(
    fake_remote: FakeRemote, drain: Callable[[], int], supervise: Callable[..., Any]
) -> None:
    make_pool("throttled", kind="http", endpoints=["http://remote.example:1", "http://spare.example:1"])
    make_policy("patient", backoff_initial_seconds=1, backoff_max_seconds=120, max_attempts=3)
    make_workflow(
        "charge", step("pay", pool="throttled", policy="patient", path="/pay", compensation="/refund")
    )
    throttled = CallResult(Outcome.TRANSIENT_FAILURE, status_code=429, error="HTTP 429", retry_after=30)
    fake_remote.script("pay", throttled)
    job = job_submit(workflow="charge", input={}).job
    drain()
    pay = Step.objects.get(job=job, name="pay")
    attempt = Attempt.objects.get(step=pay, number=1)
    assert pay.status == StepStatus.ATTEMPT_FAILED and attempt.retry_after_seconds == 30
    assert pay.not_before is not None
    asked_until = pay.not_before
    assert 29 <= (asked_until - attempt.finished_at).total_seconds() <= 31
    event = Event.objects.get(step=pay, kind=EventKind.STEP_TRANSIENT_FAILURE)
    assert event.data["retry_after_seconds"] == 30
    endpoint = AgentEndpoint.objects.get(pk=attempt.endpoint_id)
    assert endpoint.wait_asked_until == asked_until and endpoint.circuit_open_until == asked_until
    # Dispatch prefers the other endpoint while the ask holds.
    pool = AgentPool.objects.get(name="throttled")
    assert choose_endpoint(pool, now=timezone.now(), spread=endpoint.pk).pk != endpoint.pk
    # The console's pool health says why the endpoint is skipped.
    [row] = [e for p in endpoint_health(timezone.now()) for e in p.endpoints if e.endpoint_id == endpoint.pk]
    assert row.wait_asked_until == asked_until
    supervise()
    pay.refresh_from_db()
    assert pay.status == StepStatus.RETRY_WAIT and pay.not_before >= asked_until
    decided = Event.objects.get(step=pay, kind=EventKind.RETRY_SCHEDULED)
    assert "the remote asked to wait" in decided.reason


@pytest.mark.sqlite
@pytest.mark.django_db
def test_an_ask_on_a_status_the_policy_does_not_retry_changes_nothing(
    fake_remote: FakeRemote, drain: Callable[[], int]
) -> None:
    make_pool("remote", kind="http", endpoints=["http://remote.example:1"])
    make_workflow("refuse", step("pay", pool="remote", path="/pay", compensation="/refund"))
    fake_remote.script("pay", CallResult(Outcome.BUSINESS_FAILURE, status_code=409, error="HTTP 409"))
    job = job_submit(workflow="refuse", input={}).job
    drain()
    pay = Step.objects.get(job=job, name="pay")
    assert pay.not_before is None
    assert Attempt.objects.get(step=pay).retry_after_seconds is None
    assert AgentEndpoint.objects.get(url="http://remote.example:1").wait_asked_until is None
