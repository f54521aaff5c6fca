"""Endpoint health: a simple circuit breaker over each endpoint's most recent calls.

Health is assessed by the supervisor when it decides about a failed step, never on the hot
dispatch path: dispatch only reads `circuit_open_until`, which this module sets.

The calls made through an endpoint are the scheduler's attempts, a layer above: the scheduler
hands this module the reader of an endpoint's recent outcomes when it is ready
(`register_outcome_reader`, scheduler.apps), and this module never names its models.

Restated in SQL (keep both in step; the equivalence tests compare them): choose_endpoint's
first dispatch as `agents/sql/postgresql/sas_endpoint_choice.sql`, which the scheduler's database
code calls.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from django.db.models import Value
from django.db.models.functions import Coalesce, Greatest

from agents.models import AgentEndpoint, AgentPool
from agents.outcome import Outcome
from sas_project.conf import sas_settings

#: Outcomes that count against an endpoint. A business failure is the remote answering "no",
#: which says nothing bad about the endpoint.
BAD_OUTCOMES = frozenset({Outcome.TRANSIENT_FAILURE, Outcome.NO_ANSWER})
MIN_SAMPLES = 3
BAD_RATIO = 0.5


@dataclass(frozen=True)
class EndpointHealth:
    endpoint_id: int
    url: str
    recent: int
    bad: int
    circuit_open_until: dt.datetime | None
    #: Until when the remote asked to be left alone (Retry-After), if it did.
    wait_asked_until: dt.datetime | None = None

    def healthy_at(self, now: dt.datetime) -> bool:
        return self.circuit_open_until is None or self.circuit_open_until <= now


def is_open(endpoint: AgentEndpoint, now: dt.datetime) -> bool:
    return endpoint.circuit_open_until is not None and endpoint.circuit_open_until > now


#: The outcomes of an endpoint's most recent finished calls, newest first, at most `limit`:
#: `reader(endpoint_id, limit)`.
OutcomeReader = Callable[[int, int], list[str]]
_outcome_reader: OutcomeReader | None = None


def register_outcome_reader(reader: OutcomeReader) -> None:
    """Read an endpoint's recent calls with `reader` (the scheduler's, which owns the attempts)."""
    global _outcome_reader
    _outcome_reader = reader


def recent_outcomes(endpoint_id: int) -> list[str]:
    if _outcome_reader is None:
        raise RuntimeError("no reader of endpoints' calls is registered (the scheduler app registers it)")
    return _outcome_reader(endpoint_id, sas_settings.health_window)


def endpoint_assess(endpoint_id: int, now: dt.datetime) -> bool:
    """Open the circuit of an endpoint whose recent calls mostly failed. True if it opened now."""
    outcomes = recent_outcomes(endpoint_id)
    bad = sum(1 for o in outcomes if o in BAD_OUTCOMES)
    if len(outcomes) < MIN_SAMPLES or bad / len(outcomes) < BAD_RATIO:
        return False
    until = now + dt.timedelta(seconds=sas_settings.health_cooldown_seconds)
    opened = (
        AgentEndpoint.objects.filter(pk=endpoint_id)
        .exclude(circuit_open_until__gt=now)
        .update(circuit_open_until=until)
    )
    return opened == 1


def endpoint_asked_to_wait(endpoint_id: int, *, until: dt.datetime) -> None:
    """The remote behind this endpoint asked for no calls before `until` (Retry-After): its
    circuit is held open till then (dispatch skips it while another endpoint is healthy), and
    `wait_asked_until` says why. A later ask only ever extends them."""
    AgentEndpoint.objects.filter(pk=endpoint_id).update(
        wait_asked_until=Greatest(Coalesce("wait_asked_until", Value(until)), Value(until)),
        circuit_open_until=Greatest(Coalesce("circuit_open_until", Value(until)), Value(until)),
    )


def pool_asked_until(pool: AgentPool, *, now: dt.datetime) -> dt.datetime | None:
    """When every enabled endpoint of an HTTP or queue pool asked for no calls till some time
    after `now` (Retry-After), the soonest of those times: no call goes to the pool before it
    (scheduler.services.capacity parks its calls). None when one of them may be called now (or
    the pool has none: the call then fails as it would)."""
    if pool.kind == "python":
        return None
    asks = list(pool.endpoints.filter(enabled=True).values_list("wait_asked_until", flat=True))
    if not asks or any(until is None or until <= now for until in asks):
        return None
    return min(until for until in asks if until is not None)


def pool_has_healthy_endpoint(pool: AgentPool, now: dt.datetime) -> bool:
    """A python pool has no endpoints and is always healthy; HTTP and queue pools need one."""
    if pool.kind == "python":
        return True
    return any(not is_open(e, now) for e in pool.endpoints.filter(enabled=True))


def pool_health(pool: AgentPool, now: dt.datetime) -> list[EndpointHealth]:
    """Per-endpoint figures for the console."""
    result = []
    for endpoint in pool.endpoints.all():
        outcomes = recent_outcomes(endpoint.pk)
        result.append(
            EndpointHealth(
                endpoint_id=endpoint.pk,
                url=endpoint.url,
                recent=len(outcomes),
                bad=sum(1 for o in outcomes if o in BAD_OUTCOMES),
                circuit_open_until=endpoint.circuit_open_until,
                wait_asked_until=endpoint.wait_asked_until,
            )
        )
    return result


def choose_endpoint(
    pool: AgentPool, *, now: dt.datetime, avoid_id: int | None = None, spread: int = 0
) -> AgentEndpoint | None:
    """Pick the endpoint for a dispatch: a healthy one, not `avoid_id` when another is healthy.

    `spread` (the step's id) spreads first dispatches evenly over the healthy endpoints.
    Returns None for python pools and for HTTP or queue pools with no enabled endpoint.
    """
    if pool.kind == "python":
        return None
    endpoints = list(pool.endpoints.filter(enabled=True).order_by("id"))
    if not endpoints:
        return None
    healthy = [e for e in endpoints if not is_open(e, now)]
    preferred = [e for e in healthy if e.pk != avoid_id] or healthy
    if not preferred:
        # Every endpoint is cooling down: take the one whose cool-down ends first.
        return min(endpoints, key=lambda e: e.circuit_open_until or now)
    return preferred[spread % len(preferred)]
