"""What an agent is asked to do (CallSpec) and what it reports back (CallResult).

These are plain values: they cross the boundary between the durable state (scheduler) and the
remote call (agents), and they are what the fake remote in the unit tests produces.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from scheduler.models import AttemptKind, Outcome


class BusinessFailure(Exception):
    """Raised by a python action to say no (the equivalent of an HTTP 4xx)."""


class NotHappened(Exception):
    """Raised by a python status callable: the operation never happened."""


@dataclass(frozen=True)
class CallSpec:
    """Everything one attempt needs. Built in memory by the scheduler; never stored or queued,
    because `headers` may hold a secret."""

    job_id: str
    step_id: int
    attempt: int
    operation_id: str
    kind: str  # AttemptKind
    agent_kind: str  # AgentKind
    base_url: str
    path: str
    payload: dict[str, Any]
    timeout: float
    headers: dict[str, str] = field(default_factory=dict)
    #: The attempt's deadline (database clock), to tell a late outcome.
    deadline: dt.datetime | None = None

    @property
    def is_reconcile(self) -> bool:
        return self.kind == AttemptKind.RECONCILE


@dataclass(frozen=True)
class CallResult:
    outcome: str  # Outcome
    output: Any = None
    status_code: int | None = None
    latency_ms: int | None = None
    excerpt: str = ""
    error: str = ""

    @property
    def succeeded(self) -> bool:
        return self.outcome == Outcome.SUCCEEDED
