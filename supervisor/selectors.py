"""Read queries for the operator console (/ops/).

Every selector here runs a small, fixed number of queries whatever the size of the history, and
reads hot tables only through the indexes designed for them (docs/architecture.md, "Indexes"):

- live steps through the partial index `step_live_idx` (a `status IN (...)` filter on live
  statuses), so the overview and the Needs-attention list cost the live work, not the table;
- jobs by status through `job_status_created_idx` / `job_created_idx`: live jobs (all of them)
  and the jobs created in the last 24 hours;
- throughput through `event_kind_created_idx` (kind, created_at), bounded to the last hour;
- timeout calibration over the most recent attempts only (a primary-key range), never all history.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.db.models import Aggregate, Count, F, FloatField, Max, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import TruncMinute

from agents.health import BAD_OUTCOMES
from agents.models import AgentEndpoint, AgentPool
from sas_project.conf import sas_settings
from sas_project.errors import NotFound
from scheduler.models import (
    JOB_LIVE,
    STEP_LIVE,
    STEP_SETTLED,
    STEP_SUCCESS_KINDS,
    Attempt,
    AttemptKind,
    Event,
    EventKind,
    Job,
    JobStatus,
    Outcome,
    Step,
    StepKind,
    StepStatus,
    Workflow,
)
from scheduler.unit import db_now
from supervisor.lease import LEASE_NAME
from supervisor.models import PolicyRevision, RemediationPolicy, SupervisorLease
from supervisor.services import BULK_LIMIT, RESOLVABLE_BY_OPERATOR, RETRYABLE_BY_OPERATOR

S = StepStatus
J = JobStatus

#: Finished jobs are counted over this window; live jobs are counted whatever their age.
RECENT_JOBS = dt.timedelta(hours=24)
THROUGHPUT_WINDOW = dt.timedelta(hours=1)
THROUGHPUT_BUCKET = dt.timedelta(minutes=5)
#: Event kinds that settle a job, and how the throughput chart counts them.
JOB_FINISHED_KINDS: dict[str, str] = {
    EventKind.JOB_SUCCEEDED: "succeeded",
    EventKind.JOB_COMPENSATED: "other",
    EventKind.JOB_FAILED: "other",
    EventKind.JOB_CANCELLED: "other",
}
#: The supervisor is called stale when its last scan is older than this many intervals.
STALE_INTERVALS = 3
#: Rows shown at once on the Needs-attention list (oldest first); bulk actions reach further.
ATTENTION_ROWS = 50
#: Events shown on a job page (the most recent ones).
TIMELINE_EVENTS = 500
#: Calibration looks at the most recent attempts only: at most this many, and this old.
CALIBRATION_ATTEMPTS = 50_000
CALIBRATION_WINDOW = dt.timedelta(hours=24)


# --- overview -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StatusCount:
    status: str
    label: str
    count: int
    #: True when the count covers every row in that status; False when only the recent window.
    all_time: bool


@dataclass(frozen=True)
class ThroughputBucket:
    start: dt.datetime
    jobs_succeeded: int = 0
    jobs_other: int = 0
    steps_succeeded: int = 0

    @property
    def jobs_finished(self) -> int:
        return self.jobs_succeeded + self.jobs_other


@dataclass(frozen=True)
class SupervisorHealth:
    holder: str
    token: int | None
    expires_at: dt.datetime | None
    last_scan_at: dt.datetime | None
    figures: dict[str, Any]
    handovers: int
    interval: float
    #: Seconds since the last scan; None when no scan was ever recorded.
    scan_age: float | None
    stale: bool
    lease_valid: bool


@dataclass(frozen=True)
class EndpointHealthRow:
    endpoint_id: int
    url: str
    enabled: bool
    recent: int
    bad: int
    circuit_open_until: dt.datetime | None
    circuit_open: bool


@dataclass(frozen=True)
class PoolHealthRow:
    name: str
    kind: str
    alternate: str
    endpoints: list[EndpointHealthRow] = field(default_factory=list)


@dataclass(frozen=True)
class Overview:
    now: dt.datetime
    jobs: list[StatusCount]
    steps: list[StatusCount]
    throughput: list[ThroughputBucket]
    throughput_max: int
    supervisor: SupervisorHealth
    pools: list[PoolHealthRow]

    @property
    def jobs_live(self) -> int:
        return sum(c.count for c in self.jobs if c.all_time)

    @property
    def steps_live(self) -> int:
        return sum(c.count for c in self.steps)

    @property
    def needs_attention(self) -> int:
        return sum(c.count for c in self.jobs if c.status == J.NEEDS_ATTENTION)

    @property
    def jobs_finished_last_hour(self) -> int:
        return sum(b.jobs_finished for b in self.throughput)

    @property
    def steps_succeeded_last_hour(self) -> int:
        return sum(b.steps_succeeded for b in self.throughput)


def signature(*parts: Any) -> str:
    """A short digest of what a live fragment shows."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def overview(now: dt.datetime | None = None) -> Overview:
    """Everything the overview shows, in six queries (the clock, jobs, steps, events, lease,
    endpoints)."""
    now = now or db_now()
    buckets, peak = throughput(now)
    return Overview(
        now=now,
        jobs=job_counts(now),
        steps=live_step_counts(),
        throughput=buckets,
        throughput_max=peak,
        supervisor=supervisor_health(now),
        pools=endpoint_health(now),
    )


def job_counts(now: dt.datetime) -> list[StatusCount]:
    """Live jobs whatever their age, finished jobs created in the last 24 hours: one query whose
    two halves are index scans (job_status_created_idx, job_created_idx)."""
    since = now - RECENT_JOBS
    rows = (
        Job.objects.filter(Q(status__in=sorted(JOB_LIVE)) | Q(created_at__gte=since))
        .values("status")
        .annotate(n=Count("pk"))
        .order_by()
    )
    counts = {row["status"]: row["n"] for row in rows}
    return [
        StatusCount(status, label, counts.get(status, 0), all_time=status in JOB_LIVE)
        for status, label in JobStatus.choices
    ]


def live_step_counts() -> list[StatusCount]:
    """Live steps by status, read from the partial index step_live_idx."""
    rows = (
        Step.objects.filter(status__in=sorted(STEP_LIVE)).values("status").annotate(n=Count("pk")).order_by()
    )
    counts = {row["status"]: row["n"] for row in rows}
    return [
        StatusCount(status, label, counts.get(status, 0), all_time=True)
        for status, label in StepStatus.choices
        if status in STEP_LIVE
    ]


def _bucket_floor(moment: dt.datetime) -> dt.datetime:
    size = int(THROUGHPUT_BUCKET.total_seconds())
    epoch = int(moment.timestamp())
    return dt.datetime.fromtimestamp(epoch - epoch % size, tz=dt.UTC)


def throughput(now: dt.datetime) -> tuple[list[ThroughputBucket], int]:
    """Jobs finished and steps succeeded per 5-minute bucket over the last hour.

    One query on the (kind, created_at) index, grouped by minute in the database (at most 60
    rows per kind), folded into buckets here.
    """
    count = int(THROUGHPUT_WINDOW / THROUGHPUT_BUCKET)
    first = _bucket_floor(now) - THROUGHPUT_BUCKET * (count - 1)
    rows = (
        Event.objects.filter(kind__in=[*JOB_FINISHED_KINDS, *STEP_SUCCESS_KINDS], created_at__gte=first)
        .annotate(minute=TruncMinute("created_at"))
        .values("kind", "minute")
        .annotate(n=Count("pk"))
        .order_by()
    )
    totals: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in rows:
        index = int((row["minute"] - first) / THROUGHPUT_BUCKET)
        if not 0 <= index < count:
            continue
        what = JOB_FINISHED_KINDS.get(row["kind"], "steps")
        totals[index][what] += row["n"]
    buckets = [
        ThroughputBucket(
            start=first + THROUGHPUT_BUCKET * i,
            jobs_succeeded=totals[i]["succeeded"],
            jobs_other=totals[i]["other"],
            steps_succeeded=totals[i]["steps"],
        )
        for i in range(count)
    ]
    peak = max([1, *(b.steps_succeeded for b in buckets), *(b.jobs_finished for b in buckets)])
    return buckets, peak


def supervisor_health(now: dt.datetime) -> SupervisorHealth:
    """The lease row: who holds it and how recent the last scan is (stale after three intervals,
    or when no scan was ever recorded)."""
    lease = SupervisorLease.objects.filter(pk=LEASE_NAME).first()
    interval = sas_settings.supervisor_interval
    if lease is None:
        return SupervisorHealth("", None, None, None, {}, 0, interval, None, stale=True, lease_valid=False)
    age = (now - lease.last_scan_at).total_seconds() if lease.last_scan_at else None
    return SupervisorHealth(
        holder=lease.holder,
        token=lease.token,
        expires_at=lease.expires_at,
        last_scan_at=lease.last_scan_at,
        figures=lease.last_scan or {},
        handovers=lease.handovers,
        interval=interval,
        scan_age=age,
        stale=age is None or age > STALE_INTERVALS * interval,
        lease_valid=bool(lease.holder) and lease.expires_at is not None and lease.expires_at > now,
    )


def endpoint_health(now: dt.datetime) -> list[PoolHealthRow]:
    """Per pool and endpoint: the last `SAS_HEALTH_WINDOW` finished calls and how many went bad
    (the circuit breaker's view, agents.health), in one query.

    Each endpoint's recent calls are a top-N read of attempt_endpoint_recent_idx in a correlated
    subquery, so the cost follows the number of endpoints, never the number of attempts.
    """
    window = sas_settings.health_window
    # Only table names (from the models' metadata) are formatted in; every value is a parameter.
    attempt = Attempt._meta.db_table
    recent = (
        f"SELECT a.outcome FROM {attempt} a WHERE a.endpoint_id = e.id AND a.kind = %s "  # noqa: S608
        "AND a.finished_at IS NOT NULL ORDER BY a.finished_at DESC LIMIT %s"
    )
    bad = sorted(BAD_OUTCOMES)
    sql = (
        "SELECT p.name, p.kind, alt.name, e.id, e.url, e.enabled, e.circuit_open_until, "  # noqa: S608
        f"(SELECT count(*) FROM ({recent}) r), "
        f"(SELECT count(*) FROM ({recent}) r WHERE r.outcome IN ({', '.join(['%s'] * len(bad))})) "
        f"FROM {AgentPool._meta.db_table} p "
        f"LEFT JOIN {AgentPool._meta.db_table} alt ON alt.id = p.alternate_id "
        f"LEFT JOIN {AgentEndpoint._meta.db_table} e ON e.pool_id = p.id "
        "ORDER BY p.name, e.id"
    )
    params: list[Any] = [AttemptKind.CALL, window, AttemptKind.CALL, window, *bad]
    pools: dict[str, PoolHealthRow] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for (
            name,
            kind,
            alternate,
            endpoint_id,
            url,
            enabled,
            open_until,
            n_recent,
            n_bad,
        ) in cursor.fetchall():
            pool = pools.setdefault(name, PoolHealthRow(name=name, kind=kind, alternate=alternate or ""))
            if endpoint_id is None:
                continue
            if isinstance(open_until, str):  # SQLite returns text from a raw query
                open_until = dt.datetime.fromisoformat(open_until)
            if open_until is not None and open_until.tzinfo is None:
                open_until = open_until.replace(tzinfo=dt.UTC)
            pool.endpoints.append(
                EndpointHealthRow(
                    endpoint_id=endpoint_id,
                    url=url,
                    enabled=bool(enabled),
                    recent=n_recent,
                    bad=n_bad,
                    circuit_open_until=open_until,
                    circuit_open=open_until is not None and open_until > now,
                )
            )
    return list(pools.values())


# --- needs attention ----------------------------------------------------------------------------

#: The statuses the Needs-attention list reads (all live: step_live_idx serves the query).
ATTENTION_STATUSES = (S.DISPATCHED, S.UNKNOWN, S.ATTEMPT_FAILED, S.HELD, S.RETRY_WAIT)


def attention_condition(now: dt.datetime) -> Q:
    """Steps an operator may need to act on.

    - dispatched past its deadline, or with no deadline (NULL-safe, like the scan);
    - an unknown outcome or a failed attempt awaiting the supervisor's decision;
    - held for an operator;
    - a compensation that keeps failing (dispatched again, or waiting to retry, after its first
      attempt).
    """
    overdue = Q(status=S.DISPATCHED) & (Q(deadline__lt=now) | Q(deadline__isnull=True))
    deciding = Q(status__in=[S.UNKNOWN, S.ATTEMPT_FAILED, S.HELD])
    failing_compensation = (
        Q(kind=StepKind.COMPENSATION) & Q(status__in=[S.DISPATCHED, S.RETRY_WAIT]) & Q(attempt__gt=1)
    )
    return overdue | deciding | failing_compensation


class _StepActions:
    """Which operator actions a row's step allows now (the services decide for real)."""

    step: Step

    @property
    def can_retry(self) -> bool:
        return self.step.status in RETRYABLE_BY_OPERATOR

    @property
    def can_resolve(self) -> bool:
        return self.step.status in RESOLVABLE_BY_OPERATOR


@dataclass(frozen=True)
class AttentionFilters:
    workflow: str = ""
    step: str = ""
    pool: str = ""
    older_than_minutes: int | None = None

    @property
    def active(self) -> bool:
        return bool(self.workflow or self.step or self.pool or self.older_than_minutes)


@dataclass(frozen=True)
class AttentionItem(_StepActions):
    step: Step
    #: Why it is on the list, in words.
    why: str
    #: The step's last event: what last happened to it, and who or what did it.
    last_event: Event | None
    age: dt.timedelta
    #: Other pools of the same kind, for "retry on another pool".
    other_pools: list[str]

    @property
    def age_text(self) -> str:
        """Minutes at most: the list re-renders once a minute when nothing else changes."""
        minutes = max(int(self.age.total_seconds()), 0) // 60
        if minutes < 1:
            return "< 1m"
        if minutes < 60:
            return f"{minutes}m"
        if minutes < 1440:
            return f"{minutes // 60}h {minutes % 60:02d}m"
        return f"{minutes // 1440}d {minutes % 1440 // 60:02d}h"

    @property
    def is_compensation(self) -> bool:
        return self.step.kind == StepKind.COMPENSATION

    @property
    def short_job(self) -> str:
        return str(self.step.job_id)[:8]

    @property
    def error_not_in_event(self) -> bool:
        """The step's error, when its last event does not already say it."""
        return bool(self.step.error) and (
            self.last_event is None or self.step.error != self.last_event.reason
        )


@dataclass(frozen=True)
class AttentionList:
    now: dt.datetime
    items: list[AttentionItem]
    total: int
    filters: AttentionFilters
    workflows: list[str]
    pools: list[str]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.items)

    @property
    def signature(self) -> str:
        """Changes whenever what the list shows changes (and at least once a minute, for the
        ages): a poll that brings the same signature back needs no new rendering."""
        return signature(
            self.total,
            self.pools,
            self.now.replace(second=0, microsecond=0),
            [
                (
                    i.step.pk,
                    i.step.status,
                    i.step.attempt,
                    i.step.updated_at,
                    i.last_event.pk if i.last_event else None,
                    i.step.job.status,
                    i.step.job.paused_at,
                )
                for i in self.items
            ],
        )


def _attention_queryset(now: dt.datetime, filters: AttentionFilters) -> QuerySet[Step]:
    query = Step.objects.filter(status__in=ATTENTION_STATUSES).filter(attention_condition(now))
    if filters.workflow:
        query = query.filter(job__workflow__name=filters.workflow)
    if filters.step:
        query = query.filter(name=filters.step)
    if filters.pool:
        query = query.filter(pool__name=filters.pool)
    if filters.older_than_minutes:
        query = query.filter(updated_at__lte=now - dt.timedelta(minutes=filters.older_than_minutes))
    return query


def _why(step: Step, now: dt.datetime) -> str:
    if step.kind == StepKind.COMPENSATION and step.status != S.HELD and step.attempt > 1:
        return f"compensation failing: attempt {step.attempt} is {step.get_status_display().lower()}"
    if step.status == S.DISPATCHED:
        if step.deadline is None:
            return "dispatched with no deadline"
        return f"overdue: no outcome by its deadline, {step.deadline:%H:%M:%S} UTC"
    if step.status == S.UNKNOWN:
        return "outcome unknown: it may or may not have happened"
    if step.status == S.ATTEMPT_FAILED:
        return f"attempt {step.attempt} failed ({step.last_outcome or 'no outcome'}): awaiting a decision"
    if step.status == S.HELD:
        what = "compensation held" if step.kind == StepKind.COMPENSATION else "held"
        return f"{what} for an operator"
    return step.get_status_display()


def _attention_items(now: dt.datetime, steps: list[Step], pools: list[AgentPool]) -> list[AttentionItem]:
    events = Event.objects.in_bulk([s.last_event_id for s in steps if s.last_event_id])  # type: ignore[attr-defined]
    by_kind: dict[str, list[str]] = defaultdict(list)
    for pool in pools:
        by_kind[pool.kind].append(pool.name)
    return [
        AttentionItem(
            step=s,
            why=_why(s, now),
            last_event=events.get(s.last_event_id),  # type: ignore[attr-defined]
            age=now - s.updated_at,
            other_pools=[p for p in by_kind[s.pool.kind] if p != s.pool.name],
        )
        for s in steps
    ]


def _with_last_event(query: QuerySet[Step]) -> QuerySet[Step]:
    last = Event.objects.filter(step_id=OuterRef("pk")).order_by("-id").values("id")[:1]
    return query.select_related("job__workflow", "pool", "endpoint").annotate(last_event_id=Subquery(last))


def needs_attention(
    filters: AttentionFilters | None = None, *, now: dt.datetime | None = None, limit: int = ATTENTION_ROWS
) -> AttentionList:
    """The steps an operator may need to act on, oldest first (in their current state longest),
    with why each is there. Six queries whatever the number of rows."""
    now = now or db_now()
    filters = filters or AttentionFilters()
    query = _attention_queryset(now, filters)
    total = query.count()
    steps = list(_with_last_event(query).order_by("updated_at", "id")[:limit])
    pools = list(AgentPool.objects.order_by("name"))
    workflows = list(Workflow.objects.order_by("name").values_list("name", flat=True).distinct())
    return AttentionList(
        now=now,
        items=_attention_items(now, steps, pools),
        total=total,
        filters=filters,
        workflows=workflows,
        pools=[p.name for p in pools],
    )


def attention_item(step_id: int, *, now: dt.datetime | None = None) -> AttentionItem | None:
    """One row of the list, or None when the step no longer needs attention."""
    now = now or db_now()
    step = _with_last_event(_attention_queryset(now, AttentionFilters()).filter(pk=step_id)).first()
    if step is None:
        return None
    return _attention_items(now, [step], list(AgentPool.objects.filter(kind=step.pool.kind)))[0]


def attention_step_ids(filters: AttentionFilters, *, now: dt.datetime | None = None) -> list[int]:
    """The ids of every step matching the filters, oldest first, up to one bulk action's limit."""
    now = now or db_now()
    query = _attention_queryset(now, filters).order_by("updated_at", "id")
    return list(query.values_list("pk", flat=True)[:BULK_LIMIT])


def step_job_id(step_id: int) -> Any:
    """The job a step belongs to, or None."""
    return Step.objects.filter(pk=step_id).values_list("job_id", flat=True).first()


# --- a job ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepRow(_StepActions):
    step: Step
    attempts: list[Attempt]
    compensation: Step | None
    #: Other pools of the step's kind, for "retry on another pool".
    other_pools: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Progress:
    done: int
    succeeded: int
    total: int

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else 0


@dataclass(frozen=True)
class JobDetail:
    job: Job
    actions: list[StepRow]
    compensations: list[StepRow]
    events: list[Event]
    events_truncated: bool
    progress: Progress

    @property
    def live(self) -> bool:
        return self.job.status in JOB_LIVE or self.job.status == J.FAILED

    @property
    def signature(self) -> str:
        """Every change of a job writes an event in the same transaction, so the newest event
        (with the job's own row) tells whether the page changed."""
        newest = self.events[-1].pk if self.events else None
        return signature(self.job.status, self.job.paused_at, self.job.updated_at, newest)


def job_detail(job_id: Any) -> JobDetail | None:
    """A job with its steps, every attempt of every step and its latest events: five queries."""
    job = Job.objects.select_related("workflow", "submitter").filter(pk=job_id).first()
    if job is None:
        return None
    steps = list(
        Step.objects.filter(job_id=job.pk)
        .select_related("definition__policy", "pool", "endpoint")
        .order_by("id")
    )
    attempts: dict[int, list[Attempt]] = defaultdict(list)
    for attempt in (
        Attempt.objects.filter(step__job_id=job.pk).select_related("pool").order_by("step_id", "number")
    ):
        attempts[attempt.step_id].append(attempt)
    recent = list(
        Event.objects.filter(job_id=job.pk)
        .select_related("actor", "step")
        .order_by("-id")[: TIMELINE_EVENTS + 1]
    )
    compensation_of = {s.compensates_id: s for s in steps if s.compensates_id is not None}
    pools = list(AgentPool.objects.order_by("name").values_list("name", "kind"))
    rows = [
        StepRow(
            s,
            attempts[s.pk],
            compensation_of.get(s.pk),
            [name for name, kind in pools if kind == s.pool.kind and name != s.pool.name],
        )
        for s in steps
    ]
    actions = [r for r in rows if r.step.kind == StepKind.ACTION]
    return JobDetail(
        job=job,
        actions=actions,
        compensations=[r for r in rows if r.step.kind == StepKind.COMPENSATION],
        events=list(reversed(recent[:TIMELINE_EVENTS])),
        events_truncated=len(recent) > TIMELINE_EVENTS,
        progress=Progress(
            done=sum(1 for r in actions if r.step.status in STEP_SETTLED),
            succeeded=sum(1 for r in actions if r.step.status == S.SUCCEEDED),
            total=len(actions),
        ),
    )


# --- the job list --------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobFilters:
    job_id: Any = None
    status: str = ""
    workflow: str = ""
    created_from: dt.datetime | None = None
    created_to: dt.datetime | None = None


def jobs_search(filters: JobFilters) -> QuerySet[Job]:
    """Jobs matching `filters`, newest first (job_created_idx / job_status_created_idx)."""
    query = Job.objects.select_related("workflow").order_by("-created_at", "-pk")
    if filters.job_id:
        query = query.filter(pk=filters.job_id)
    if filters.status:
        query = query.filter(status=filters.status)
    if filters.workflow:
        query = query.filter(workflow__name=filters.workflow)
    if filters.created_from:
        query = query.filter(created_at__gte=filters.created_from)
    if filters.created_to:
        query = query.filter(created_at__lt=filters.created_to)
    return query


def step_progress(job_ids: Iterable[Any]) -> dict[Any, Progress]:
    """Progress of each listed job from its action steps, in one query."""
    rows = (
        Step.objects.filter(job_id__in=list(job_ids), kind=StepKind.ACTION)
        .values("job_id")
        .annotate(
            total=Count("pk"),
            done=Count("pk", filter=Q(status__in=sorted(STEP_SETTLED))),
            succeeded=Count("pk", filter=Q(status=S.SUCCEEDED)),
        )
        .order_by()
    )
    return {r["job_id"]: Progress(done=r["done"], succeeded=r["succeeded"], total=r["total"]) for r in rows}


def workflow_names() -> list[str]:
    return list(Workflow.objects.order_by("name").values_list("name", flat=True).distinct())


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

    @property
    def timeout_ms(self) -> float:
        return self.timeout_seconds * 1000

    @property
    def timeout_below_p99(self) -> bool:
        return self.p99_ms is not None and self.p99_ms > self.timeout_ms

    @property
    def flagged(self) -> bool:
        return self.timeout_below_p99 or self.late_successes > 0

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


def _percentile(values: list[int], fraction: float) -> float | None:
    """Linear interpolation between closest ranks, as percentile_cont does."""
    if not values:
        return None
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def calibration(now: dt.datetime | None = None) -> Calibration:
    """Per action (workflow step, action or compensation, pool): latency percentiles of the
    successful calls against the policy's timeout, and the late successes.

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
    }
    postgres = connection.vendor == "postgresql"
    if postgres:
        for name, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            aggregates[name] = PercentileCont("latency_ms", fraction, filter=succeeded)
    rows = list(
        window.annotate(**key)
        .values(*key)
        .annotate(**aggregates)
        .order_by("workflow", "step_name", "step_kind", "pool_name")
    )
    latencies: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    if not postgres:
        for values in window.filter(succeeded).annotate(**key).values_list(*key, "latency_ms"):
            latencies[tuple(values[:-1])].append(values[-1])
    result = []
    for r in rows:
        group = tuple(r[k] for k in key)
        percentiles = (
            (r["p50"], r["p90"], r["p99"])
            if postgres
            else tuple(_percentile(latencies[group], f) for f in (0.5, 0.9, 0.99))
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
            )
        )
    return Calibration(rows=result, since=since, max_attempts=CALIBRATION_ATTEMPTS)


# --- policies ---------------------------------------------------------------------------------


def policy_list() -> QuerySet[RemediationPolicy]:
    return RemediationPolicy.objects.order_by("name")


def policy_get(name: str) -> RemediationPolicy:
    policy = RemediationPolicy.objects.filter(name=name).first()
    if policy is None:
        raise NotFound(f"policy {name!r} does not exist")
    return policy


def policy_revisions(name: str) -> QuerySet[PolicyRevision]:
    """A policy's versions, newest first, with who made each."""
    policy = policy_get(name)
    return PolicyRevision.objects.filter(policy=policy).select_related("changed_by").order_by("-version")
