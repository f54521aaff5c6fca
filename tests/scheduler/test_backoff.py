"""The retry backoff (scheduler.backoff): capped exponential with jitter, one rule that a step's
call, a cancel's next try and a failed child's replacement all follow."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from scheduler.backoff import backoff_seconds


@dataclass(frozen=True)
class Policy:
    backoff_initial_seconds: float = 1.0
    backoff_multiplier: float = 2.0
    backoff_max_seconds: float = 5.0
    backoff_jitter: float = 0.0


@pytest.mark.parametrize(
    ("tries", "expected"), [(-1, 1.0), (0, 1.0), (1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (5000, 5.0)]
)
def test_the_backoff_grows_from_the_first_try_up_to_its_cap(tries: int, expected: float) -> None:
    assert backoff_seconds(Policy(), tries=tries, draw=0.0) == expected


def test_a_multiplier_too_large_for_a_float_takes_the_cap() -> None:
    assert backoff_seconds(Policy(backoff_multiplier=1e300), tries=3, draw=0.0) == 5.0


@pytest.mark.parametrize(("jitter", "draw", "expected"), [(0.5, 0.5, 3.0), (1.0, 0.75, 1.0), (0.0, 0.9, 4.0)])
def test_the_jitter_takes_its_share_of_the_draw_off_the_base(
    jitter: float, draw: float, expected: float
) -> None:
    assert backoff_seconds(Policy(backoff_jitter=jitter), tries=3, draw=draw) == expected


def test_the_delay_is_never_below_zero() -> None:
    assert backoff_seconds(Policy(backoff_jitter=2.0), tries=3, draw=0.9) == 0.0


def test_a_child_and_a_call_wait_the_same_after_as_many_tries() -> None:
    from agents.outcome import Outcome
    from scheduler.models import Job, JobStatus, RemediationPolicy
    from scheduler.services.children import child_retry_in
    from supervisor.policies import PolicySnapshot, backoff_delay

    policy = RemediationPolicy(
        name="p",
        max_attempts=9,
        backoff_initial_seconds=1.5,
        backoff_multiplier=3.0,
        backoff_max_seconds=100.0,
        backoff_jitter=0.5,
        retry_on=[Outcome.TRANSIENT_FAILURE, Outcome.BUSINESS_FAILURE],
    )
    failed = Job(status=JobStatus.FAILED)
    for tries in range(1, 6):
        expected = backoff_seconds(policy, tries=tries, draw=0.3)
        assert backoff_delay(PolicySnapshot.of(policy), tries, 0.3) == expected
        assert child_retry_in(policy, child=failed, attempt=tries - 1, draw=0.3) == expected
