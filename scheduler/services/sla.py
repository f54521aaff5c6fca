"""What the supervisor's at-risk sweep (supervisor.sweeps.sweep_at_risk, deciding with
supervisor.sla) reads and writes: the live jobs of workflows with an SLA not flagged yet, their
forward steps, the measured durations of their workflows' steps, and the flag itself.

The flag is a guarded write: `at_risk` goes from false to true only on a live job, in one
statement for a batch, and each job it changed gets its `job_at_risk` event in the same
transaction, so a job is flagged, and its event written, once.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Q

from agents.outcome import AttemptKind, Outcome
from sas_project.database import is_postgresql
from scheduler.models import (
    CANARY_WORKFLOW,
    JOB_LIVE,
    Attempt,
    EventKind,
    Job,
    QuarantineLoop,
    Step,
    StepKind,
)
from scheduler.services.quarantine import not_quarantined
from scheduler.unit import Unit


@dataclass(frozen=True)
class SlaJob:
    """A live job of a workflow with an SLA, as the sweep reads it."""

    pk: Any
    workflow: str
    created_at: dt.datetime
    sla_seconds: float
    warn_fraction: float


def at_risk_candidates(
    now: dt.datetime, *, after: tuple[dt.datetime, Any] | None, limit: int
) -> list[SlaJob]:
    """Up to `limit` live jobs not flagged yet whose workflow has an SLA, oldest first after the
    (created_at, id) `after` (a pass pages through them all), leaving out the canary's and those
    the at-risk loop quarantined lately. Served by job_live_unflagged_idx."""
    jobs = (
        Job.objects.filter(status__in=sorted(JOB_LIVE), at_risk=False, workflow__sla_seconds__isnull=False)
        .exclude(workflow__name=CANARY_WORKFLOW)
        .filter(not_quarantined(QuarantineLoop.AT_RISK, now=now))
    )
    if after is not None:
        jobs = jobs.filter(Q(created_at__gt=after[0]) | Q(created_at=after[0], pk__gt=after[1]))
    rows = jobs.order_by("created_at", "pk").values_list(
        "pk", "workflow__name", "created_at", "workflow__sla_seconds", "workflow__warn_fraction"
    )[:limit]
    # The filter holds sla_seconds not null.
    return [SlaJob(pk, name, created, float(sla or 0), float(warn)) for pk, name, created, sla, warn in rows]


def forward_steps(job_ids: Iterable[Any]) -> dict[Any, list[dict[str, Any]]]:
    """The forward steps of each job (not items, not compensations): name, status, the names it
    depends on (as its definition stores them) and when its first call went out. One query."""
    steps: dict[Any, list[dict[str, Any]]] = {}
    rows = (
        Step.objects.filter(job_id__in=list(job_ids), kind=StepKind.ACTION, item_index__isnull=True)
        .order_by("id")
        .values("job_id", "name", "status", "definition__depends_on", "first_dispatched_at")
    )
    for row in rows:
        fields = dict(row)
        steps.setdefault(fields.pop("job_id"), []).append(fields)
    return steps


# The 90th percentile (or any) of each step's successful calls, dispatch to answer, over the
# window, for the named workflows: their jobs created in the window (job_created_idx), their
# steps (by job) and their attempts (by step), so the read costs the window's traffic of those
# workflows and never the history.
DURATIONS_SQL = """
SELECT w.name, s.name,
       percentile_cont(%(percentile)s) WITHIN GROUP (
           ORDER BY extract(epoch FROM a.finished_at - a.dispatched_at)),
       count(*)
FROM scheduler_job j
JOIN scheduler_workflow w ON w.id = j.workflow_id
JOIN scheduler_step s ON s.job_id = j.id AND s.kind = 'action'
JOIN scheduler_attempt a ON a.step_id = s.id
WHERE w.name = ANY(%(workflows)s) AND j.created_at >= %(since)s AND a.finished_at >= %(since)s
  AND a.kind = %(call)s AND a.outcome = %(succeeded)s
GROUP BY w.name, s.name
"""


def _percentile(values: list[float], fraction: float) -> float:
    """The `fraction` percentile with linear interpolation between ranks (percentile_cont's)."""
    ordered = sorted(values)
    rank = fraction * (len(ordered) - 1)
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def step_durations(
    workflows: Iterable[str], *, since: dt.datetime, percentile: float
) -> dict[str, dict[str, tuple[float, int]]]:
    """{workflow: {step: (seconds, samples)}}: the `percentile` of each step's successful calls
    (dispatched to finished) since `since`, and how many there were. One aggregate on PostgreSQL;
    the embedded database reads the durations and takes the percentile here."""
    names = sorted(set(workflows))
    found: dict[str, dict[str, tuple[float, int]]] = {name: {} for name in names}
    if not names:
        return found
    if is_postgresql():
        with connection.cursor() as cursor:
            cursor.execute(
                DURATIONS_SQL,
                {
                    "percentile": percentile,
                    "workflows": names,
                    "since": since,
                    "call": AttemptKind.CALL.value,
                    "succeeded": Outcome.SUCCEEDED.value,
                },
            )
            for workflow, step, seconds, samples in cursor.fetchall():
                found[workflow][step] = (float(seconds), int(samples))
        return found
    measured: dict[tuple[str, str], list[float]] = {}
    rows = Attempt.objects.filter(
        step__job__workflow__name__in=names,
        step__job__created_at__gte=since,
        step__kind=StepKind.ACTION,
        finished_at__gte=since,
        kind=AttemptKind.CALL,
        outcome=Outcome.SUCCEEDED,
    ).values_list("step__job__workflow__name", "step__name", "dispatched_at", "finished_at")
    for workflow, step, dispatched, finished in rows:
        if finished is not None:  # the filter holds it
            measured.setdefault((workflow, step), []).append((finished - dispatched).total_seconds())
    for (workflow, step), values in measured.items():
        found[workflow][step] = (_percentile(values, percentile), len(values))
    return found


#: The durations measured per workflow in this process, and when (time.monotonic()): the sweep
#: measures a workflow again only when its entry is older than SAS_SLA_STATS_SECONDS.
_measured: dict[str, tuple[float, dict[str, tuple[float, int]]]] = {}


def step_durations_cached(
    workflows: Iterable[str], *, now: dt.datetime, window_hours: float, max_age: float, percentile: float
) -> dict[str, dict[str, tuple[float, int]]]:
    """`step_durations` of the workflows, from this process's memory when measured less than
    `max_age` seconds ago; the others measured together in one read."""
    clock = time.monotonic()
    names = set(workflows)
    stale = {name for name in names if name not in _measured or clock - _measured[name][0] >= max_age}
    if stale:
        fresh = step_durations(stale, since=now - dt.timedelta(hours=window_hours), percentile=percentile)
        for name, durations in fresh.items():
            _measured[name] = (clock, durations)
    return {name: _measured[name][1] for name in names}


def forget_step_durations() -> None:
    """Measure every workflow again at the next read (tests; a process that wants fresh figures)."""
    _measured.clear()


def jobs_flag_at_risk(
    unit: Unit, *, flags: Mapping[Any, tuple[str, dict[str, Any]]], source: str
) -> list[Any]:
    """Flag the jobs of `flags` ({job id: (reason, event data)}) at risk: those still live and not
    flagged, skipping any another transaction holds (the next pass takes it), in one guarded
    statement; each flagged gets its `job_at_risk` event in this unit. Returns the ids flagged."""
    if not flags:
        return []
    guard = Q(pk__in=list(flags), at_risk=False, status__in=sorted(JOB_LIVE))
    locked = list(Job.objects.select_for_update(skip_locked=True).filter(guard).values_list("pk", flat=True))
    if not locked:
        return []
    flagged = Job.objects.filter(guard, pk__in=locked).update(at_risk=True)
    if flagged != len(locked):
        # Under the lock nothing else can have flagged or settled them: a mismatch is a bug.
        raise RuntimeError(f"flagged {flagged} of {len(locked)} locked jobs at risk")
    for job_id in locked:
        reason, data = flags[job_id]
        unit.event(job_id=job_id, kind=EventKind.JOB_AT_RISK, source=source, reason=reason, data=data)
    return locked
