"""Read queries for pools and their endpoints, with each endpoint's recent health (the API and the
console read through these)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db.models import Prefetch, QuerySet
from django.utils import timezone

from agents.health import pool_health
from agents.models import AgentEndpoint, AgentPool
from sas_project.errors import NotFound


@dataclass(frozen=True)
class EndpointState:
    """An endpoint and its recent health (agents.health.pool_health)."""

    endpoint: AgentEndpoint
    recent_calls: int
    recent_bad: int


@dataclass(frozen=True)
class PoolState:
    pool: AgentPool
    endpoints: list[EndpointState]


def _pools() -> QuerySet[AgentPool]:
    return AgentPool.objects.select_related("alternate").prefetch_related(
        Prefetch("endpoints", queryset=AgentEndpoint.objects.order_by("id"))
    )


def _pool_state(pool: AgentPool, now: dt.datetime) -> PoolState:
    # pool_health reads the prefetched endpoints, then one indexed, bounded query per endpoint
    # (attempt_endpoint_recent_idx): the cost follows the number of endpoints, not the history.
    health = {h.endpoint_id: h for h in pool_health(pool, now)}
    return PoolState(
        pool=pool,
        endpoints=[
            EndpointState(
                endpoint=endpoint,
                recent_calls=health[endpoint.pk].recent if endpoint.pk in health else 0,
                recent_bad=health[endpoint.pk].bad if endpoint.pk in health else 0,
            )
            for endpoint in pool.endpoints.all()
        ],
    )


def pool_states(pools: list[AgentPool]) -> list[PoolState]:
    now = timezone.now()
    return [_pool_state(pool, now) for pool in pools]


def pool_list() -> QuerySet[AgentPool]:
    return _pools().order_by("name")


def pool_get(name: str) -> AgentPool:
    pool = _pools().filter(name=name).first()
    if pool is None:
        raise NotFound(f"pool {name!r} does not exist")
    return pool


def pool_state(name: str) -> PoolState:
    return _pool_state(pool_get(name), timezone.now())
