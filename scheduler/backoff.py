"""The retry backoff: one rule for every retry under a remediation policy, a step's call
(supervisor.policies.decide), a cancel's next try (scheduler.services.cancels) and a failed
child's replacement (scheduler.services.children).

Capped exponential with jitter: after `tries` tries the base is `backoff_initial_seconds *
backoff_multiplier ** (tries - 1)`, at most `backoff_max_seconds`, and the delay is
`base * (1 - backoff_jitter * draw)` for a `draw` in [0, 1): jitter 0 gives exactly the base,
jitter 1 "full jitter" (anywhere in (0, base]). Pure: no ORM, no clock, no randomness of its own.
"""

from __future__ import annotations

from typing import Protocol


class Backoff(Protocol):
    """What the rule reads of a policy (a RemediationPolicy row, or the supervisor's snapshot)."""

    @property
    def backoff_initial_seconds(self) -> float: ...

    @property
    def backoff_multiplier(self) -> float: ...

    @property
    def backoff_max_seconds(self) -> float: ...

    @property
    def backoff_jitter(self) -> float: ...


def backoff_seconds(policy: Backoff, *, tries: int, draw: float) -> float:
    """Seconds before the next try, after `tries` tries (fewer than one count as one), with
    `draw` in [0, 1) for the jitter; never below zero, never above the cap."""
    exponent = max(tries - 1, 0)
    try:
        base = policy.backoff_initial_seconds * policy.backoff_multiplier**exponent
    except OverflowError:
        base = policy.backoff_max_seconds
    base = min(base, policy.backoff_max_seconds)
    return max(base * (1 - policy.backoff_jitter * draw), 0.0)
