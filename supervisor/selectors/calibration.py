"""Timeout calibration: call latencies per action against the policy's timeout, and late
successes, over the most recent attempts only."""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Aggregate, Count, F, FloatField, Max, Q

from sas_project.database import supports_percentiles
from scheduler.models import (
    Attempt,
    AttemptKind,
    Outcome,
    StepKind,
)
from scheduler.unit import db_now

#: Calibration looks at the most recent attempts only: at most this many, and this old.
CALIBRATION_ATTEMPTS = 50_000
CALIBRATION_WINDOW = dt.timedelta(hours=24)


# --- timeout calibration --------------------------------------------------------------------------


class PercentileCont(Aggregate):
    """PostgreSQL's ordered-set aggregate percentile_cont(fraction) WITHIN GROUP (ORDER BY x)."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: Any, fraction: float, **extra: Any) -> None:
        if not 0 <= fraction <= 1:
            raise ValueError("fraction must be between 0 and 1")
        super().__init__(expression, fraction=repr(float(fraction)), **extra)


@dataclass(frozen=True)
class CalibrationRow:
    workflow: str
    step: str
    kind: str
    path: str
    pool: str
    policy: str
    timeout_seconds: float
    calls: int
    successes: int
    late_successes: int
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    #: Calls that got no answer: cut off at their deadline, or the remote never answered.
    timeouts: int = 0

    @property
    def timeout_ms(self) -> float:
        return self.timeout_seconds * 1000

    @property
    def timeout_below_p99(self) -> bool:
        return self.p99_ms is not None and self.p99_ms > self.timeout_ms

    @property
    def timing_out_without_success(self) -> bool:
        """Calls time out and none succeeded: there is no latency to judge the timeout by (the
        percentiles are over successes), and nothing gets done."""
        return self.timeouts > 0 and self.successes == 0

    @property
    def flagged(self) -> bool:
        return self.timeout_below_p99 or self.late_successes > 0 or self.timing_out_without_success

    @property
    def suggested_timeout_seconds(self) -> float | None:
        """p99 with half again as margin, rounded up to a whole second."""
        if self.p99_ms is None:
            return None
        return float(math.ceil(self.p99_ms * 1.5 / 1000))


@dataclass(frozen=True)
class Calibration:
    rows: list[CalibrationRow]
    since: dt.datetime
    max_attempts: int


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Linear interpolation between closest ranks, as percentile_cont does (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def calibration(now: dt.datetime | None = None) -> Calibration:
    """Per action (workflow step, action or compensation, pool): latency percentiles of the
    successful calls against the policy's timeout, the late successes, and the calls that got
    no answer (timed out).

    Bounded: the last CALIBRATION_ATTEMPTS attempts (a primary-key range) dispatched in the
    last 24 hours. On PostgreSQL the percentiles are computed by percentile_cont in the same
    query; elsewhere from the (bounded) latencies in Python.
    """
    now = now or db_now()
    since = now - CALIBRATION_WINDOW
    newest = Attempt.objects.aggregate(newest=Max("pk"))["newest"] or 0
    window = Attempt.objects.filter(
        pk__gt=newest - CALIBRATION_ATTEMPTS,
        kind=AttemptKind.CALL,
        dispatched_at__gte=since,
        finished_at__isnull=False,
    )
    key = {
        "workflow": F("step__definition__workflow__name"),
        "step_name": F("step__definition__name"),
        "step_kind": F("step__kind"),
        "path": F("step__definition__path"),
        "compensation_path": F("step__definition__compensation_path"),
        "pool_name": F("pool__name"),
        "policy": F("step__definition__policy__name"),
        "timeout": F("step__definition__policy__timeout_seconds"),
    }
    succeeded = Q(outcome=Outcome.SUCCEEDED, latency_ms__isnull=False)
    aggregates: dict[str, Any] = {
        "calls": Count("pk"),
        "successes": Count("pk", filter=succeeded),
        "late": Count("pk", filter=Q(late_outcome=Outcome.SUCCEEDED)),
        "timeouts": Count("pk", filter=Q(outcome=Outcome.NO_ANSWER)),
    }
    in_database = supports_percentiles()
    if in_database:
        for name, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            aggregates[name] = PercentileCont("latency_ms", fraction, filter=succeeded)
    rows = list(
        window.annotate(**key)
        .values(*key)
        .annotate(**aggregates)
        .order_by("workflow", "step_name", "step_kind", "pool_name")
    )
    latencies: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    if not in_database:
        for values in window.filter(succeeded).annotate(**key).values_list(*key, "latency_ms"):
            latencies[tuple(values[:-1])].append(values[-1])
    result = []
    for r in rows:
        group = tuple(r[k] for k in key)
        percentiles = (
            (r["p50"], r["p90"], r["p99"])
            if in_database
            else tuple(percentile(latencies[group], f) for f in (0.5, 0.9, 0.99))
        )
        result.append(
            CalibrationRow(
                workflow=r["workflow"],
                step=r["step_name"],
                kind=r["step_kind"],
                path=r["compensation_path"] if r["step_kind"] == StepKind.COMPENSATION else r["path"],
                pool=r["pool_name"],
                policy=r["policy"],
                timeout_seconds=r["timeout"],
                calls=r["calls"],
                successes=r["successes"],
                late_successes=r["late"],
                p50_ms=percentiles[0],
                p90_ms=percentiles[1],
                p99_ms=percentiles[2],
                timeouts=r["timeouts"],
            )
        )
    return Calibration(rows=result, since=since, max_attempts=CALIBRATION_ATTEMPTS)
