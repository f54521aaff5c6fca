"""Deadlines that warn before they pass: whether a live job is at risk of missing its workflow's
service-level target (`sla_seconds`, counted from submission).

Two rules, decided here without the ORM or the clock (the scan's sweep, supervisor.sweeps.
sweep_at_risk, reads the facts and applies the decision through scheduler.services.sla):

- **clock**: the job is not finished at `created_at + warn_fraction * sla_seconds`;
- **projection**: the job's remaining steps, each taking its measured duration (the 90th
  percentile of its recent successful calls, scheduler.services.sla.step_durations) less what
  its call in flight has run already, end after `created_at + sla_seconds` along the longest
  chain of dependencies still to run. A step measured fewer than MIN_SAMPLES times counts as
  taking no time, so a new workflow is judged by the clock alone until it has a history.

The clock wins when both hold (it needs no estimate). Either way the decision carries the
projected finish, which the event, the alert and the console show.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from scheduler.models import StepStatus

#: Fewer measured calls than this say nothing about a step's duration.
MIN_SAMPLES = 5
#: The percentile of a step's recent durations the projection takes.
PERCENTILE = 0.9

#: Steps with nothing left to run: they add nothing to the projection.
DONE = frozenset({StepStatus.SUCCEEDED, StepStatus.SKIPPED, StepStatus.FAILED, StepStatus.COMPENSATED})

Rule = Literal["clock", "projection"]


@dataclass(frozen=True)
class StepFacts:
    """One forward step of the job, as the projection reads it."""

    name: str
    status: str
    depends_on: tuple[str, ...]
    #: When its first call went out (None: not dispatched yet).
    started_at: dt.datetime | None


@dataclass(frozen=True)
class JobFacts:
    """A live job of a workflow with an SLA, and its forward steps."""

    created_at: dt.datetime
    sla_seconds: float
    warn_fraction: float
    steps: Sequence[StepFacts]


@dataclass(frozen=True)
class Duration:
    """A step's measured duration: the percentile's seconds and how many calls it was read from."""

    seconds: float
    samples: int


@dataclass(frozen=True)
class AtRisk:
    """The decision that a job is at risk: by which rule, and when it was due and is projected to
    finish."""

    rule: Rule
    due_at: dt.datetime
    warn_at: dt.datetime
    projected_finish: dt.datetime


def due_at(facts: JobFacts) -> dt.datetime:
    return facts.created_at + dt.timedelta(seconds=facts.sla_seconds)


def warn_at(facts: JobFacts) -> dt.datetime:
    return facts.created_at + dt.timedelta(seconds=facts.sla_seconds * facts.warn_fraction)


def remaining_seconds(
    steps: Sequence[StepFacts], durations: Mapping[str, Duration], now: dt.datetime
) -> float:
    """The longest chain of dependencies still to run, in seconds: each step not done takes its
    measured duration, less what its call has run already (never below zero); a step measured too
    few times, or done, takes none. A dependency that names no forward step (a definition edited
    since) adds nothing."""
    by_name = {step.name: step for step in steps}
    finish: dict[str, float] = {}

    def own(step: StepFacts) -> float:
        if step.status in DONE:
            return 0.0
        measured = durations.get(step.name)
        if measured is None or measured.samples < MIN_SAMPLES:
            return 0.0
        ran = (now - step.started_at).total_seconds() if step.started_at is not None else 0.0
        return max(measured.seconds - max(ran, 0.0), 0.0)

    def chain(name: str, seen: frozenset[str]) -> float:
        if name in finish:
            return finish[name]
        step = by_name.get(name)
        if step is None or name in seen:
            # A definition is acyclic (scheduler.definitions); a loop here is bad data, and counts
            # as nothing rather than recursing for ever.
            return 0.0
        before = max((chain(d, seen | {name}) for d in step.depends_on), default=0.0)
        finish[name] = before + own(step)
        return finish[name]

    return max((chain(step.name, frozenset()) for step in steps), default=0.0)


def at_risk_decide(facts: JobFacts, durations: Mapping[str, Duration], now: dt.datetime) -> AtRisk | None:
    """Whether the live job `facts` is at risk at `now`, and by which rule; None when it is not."""
    projected = now + dt.timedelta(seconds=remaining_seconds(facts.steps, durations, now))
    due, warn = due_at(facts), warn_at(facts)
    if now >= warn:
        return AtRisk("clock", due_at=due, warn_at=warn, projected_finish=max(projected, now))
    if projected > due:
        return AtRisk("projection", due_at=due, warn_at=warn, projected_finish=projected)
    return None
