"""Call latency per pool over time: p50, p90 and p99 of the calls that finished in each 5-minute
bucket of the last hour (the Pools page's charts, supervisor.charts).

A call's latency is its attempt's `latency_ms`: from the call going out to its answer as the
agent measured it, or, for a call that answers later, from its start to its result. A call the
supervisor cut off at its deadline has no answer and no latency: it is not in the percentiles.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, F, Func, IntegerField, Subquery

from sas_project.database import supports_percentiles
from scheduler.models import Attempt, AttemptKind
from scheduler.unit import db_now
from supervisor.selectors.calibration import PercentileCont, percentile

LATENCY_WINDOW = dt.timedelta(hours=1)
LATENCY_BUCKET = dt.timedelta(minutes=5)
#: The charts read the most recent attempts only: at most this many (a primary-key range).
LATENCY_ATTEMPTS = 50_000
#: The percentiles drawn, by name.
FRACTIONS = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
#: What the PostgreSQL query groups by: the pool and the bucket.
GROUP = ("pool_name", "slot")


@dataclass(frozen=True)
class LatencyBucket:
    start: dt.datetime
    #: Calls that finished in the bucket with a measured latency.
    calls: int = 0
    p50_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None


@dataclass(frozen=True)
class PoolLatency:
    """The buckets of the window, oldest first, and each pool's figures in them."""

    starts: list[dt.datetime]
    bucket: dt.timedelta
    #: pool name -> bucket index -> its figures (only the buckets with calls).
    figures: dict[str, dict[int, LatencyBucket]] = field(default_factory=dict)

    def of(self, pool: str) -> list[LatencyBucket]:
        """Every bucket of the window for `pool`, empty ones included."""
        found = self.figures.get(pool, {})
        return [found.get(i, LatencyBucket(start)) for i, start in enumerate(self.starts)]


class EpochSlot(Func):
    """The whole number of `size`-second periods since the Unix epoch (PostgreSQL)."""

    template = "floor(extract(epoch from %(expressions)s) / %(size)s)"
    output_field = IntegerField()


def window_starts(now: dt.datetime, *, window: dt.timedelta, bucket: dt.timedelta) -> list[dt.datetime]:
    """The buckets' starts: whole multiples of `bucket` since the epoch, the last one holding `now`."""
    size = int(bucket.total_seconds())
    epoch = int(now.timestamp())
    last = dt.datetime.fromtimestamp(epoch - epoch % size, tz=dt.UTC)
    count = max(1, int(window / bucket))
    return [last - bucket * (count - 1 - i) for i in range(count)]


def pool_latency(
    now: dt.datetime | None = None,
    *,
    window: dt.timedelta = LATENCY_WINDOW,
    bucket: dt.timedelta = LATENCY_BUCKET,
) -> PoolLatency:
    """p50, p90, p99 of the calls' latencies per pool and bucket (see the module's docstring).

    Bounded: of the last LATENCY_ATTEMPTS attempts (a primary-key range below the newest key, a
    subquery), those that finished in the window. On PostgreSQL one aggregate query groups them by
    pool and bucket and computes the percentiles with percentile_cont (at most pools x buckets
    rows); elsewhere the same query reads the (bounded) latencies and the same percentiles are
    computed here. One query either way.
    """
    now = now or db_now()
    starts = window_starts(now, window=window, bucket=bucket)
    size = int(bucket.total_seconds())
    newest = Subquery(Attempt.objects.order_by("-pk").values("pk")[:1])
    calls = Attempt.objects.filter(
        pk__gt=newest - LATENCY_ATTEMPTS,
        kind=AttemptKind.CALL,
        finished_at__gte=starts[0],
        latency_ms__isnull=False,
        pool__isnull=False,
    )
    first_slot = int(starts[0].timestamp()) // size
    figures: dict[str, dict[int, LatencyBucket]] = defaultdict(dict)
    if supports_percentiles():
        aggregates: dict[str, Any] = {
            "calls": Count("pk"),
            **{name: PercentileCont("latency_ms", fraction) for name, fraction in FRACTIONS.items()},
        }
        rows = (
            calls.annotate(pool_name=F("pool__name"), slot=EpochSlot("finished_at", size=size))
            .values(*GROUP)
            .annotate(**aggregates)
            .order_by()
        )
        for row in rows:
            index = int(row["slot"]) - first_slot
            if 0 <= index < len(starts):
                figures[row["pool_name"]][index] = LatencyBucket(
                    starts[index], row["calls"], row["p50"], row["p90"], row["p99"]
                )
        return PoolLatency(starts, bucket, dict(figures))
    values: dict[tuple[str, int], list[int]] = defaultdict(list)
    for pool_name, finished_at, latency in calls.values_list("pool__name", "finished_at", "latency_ms"):
        if finished_at is None or latency is None:  # excluded by the filter; for the types
            continue
        index = int(finished_at.timestamp()) // size - first_slot
        if 0 <= index < len(starts):
            values[(pool_name, index)].append(latency)
    for (pool_name, index), latencies in values.items():
        p50, p90, p99 = (percentile(latencies, f) for f in FRACTIONS.values())
        figures[pool_name][index] = LatencyBucket(starts[index], len(latencies), p50, p90, p99)
    return PoolLatency(starts, bucket, dict(figures))
