"""The console's overview: jobs by status, live steps, throughput, the supervisor's and the
endpoints' health (each a fixed number of queries through the indexes named in the package doc)."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.db.models import Count, Q
from django.db.models.functions import TruncMinute

from agents.broker import queue_depth
from agents.health import BAD_OUTCOMES
from agents.models import AgentEndpoint, AgentPool
from sas_project.conf import sas_settings
from scheduler.models import (
    CANARY_WORKFLOW,
    JOB_LIVE,
    STEP_LIVE,
    STEP_SUCCESS_KINDS,
    Attempt,
    AttemptKind,
    Event,
    EventKind,
    Job,
    JobStatus,
    Step,
    StepStatus,
)
from scheduler.unit import db_now
from supervisor.debt import remediation_debt
from supervisor.heartbeats import ClusterState, clusters
from supervisor.lease import LEASE_NAME, scan_age, scan_is_stale
from supervisor.models import SupervisorLease

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
    #: Remediation debt (supervisor.debt): read from the step rows, not from the holder's word.
    debt_steps: int = 0
    debt_oldest_seconds: float = 0.0


@dataclass(frozen=True)
class EndpointHealthRow:
    endpoint_id: int
    url: str
    enabled: bool
    recent: int
    bad: int
    circuit_open_until: dt.datetime | None
    circuit_open: bool
    #: While the remote's own ask holds (Retry-After): until when (None otherwise).
    wait_asked_until: dt.datetime | None = None


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
    #: Live and lost clusters, and those stopped in the last day (supervisor.heartbeats).
    clusters: list[ClusterState] = field(default_factory=list)
    #: Tasks waiting in the broker's queue for a worker (one queue, shared by every cluster).
    queue_depth: int = 0

    @property
    def clusters_live(self) -> int:
        return sum(1 for c in self.clusters if c.state == "live")

    @property
    def workers_busy(self) -> int:
        return sum(c.busy or 0 for c in self.clusters if c.state == "live")

    @property
    def workers_live(self) -> int:
        return sum(c.workers for c in self.clusters if c.state == "live")

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
    """Everything the overview shows, in eight queries (the clock, jobs, steps, events, lease,
    endpoints, cluster heartbeats, the broker's queue)."""
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
        clusters=clusters(now),
        queue_depth=queue_depth(),
    )


def job_counts(now: dt.datetime) -> list[StatusCount]:
    """Live jobs whatever their age, finished jobs created in the last 24 hours: one query whose
    two halves are index scans (job_status_created_idx, job_created_idx)."""
    since = now - RECENT_JOBS
    rows = (
        Job.objects.filter(Q(status__in=sorted(JOB_LIVE)) | Q(created_at__gte=since))
        .exclude(workflow__name=CANARY_WORKFLOW)
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
    age = scan_age(lease.last_scan_at, now)
    debt = remediation_debt(now, interval)
    return SupervisorHealth(
        holder=lease.holder,
        token=lease.token,
        expires_at=lease.expires_at,
        last_scan_at=lease.last_scan_at,
        figures=lease.last_scan or {},
        handovers=lease.handovers,
        interval=interval,
        scan_age=age,
        stale=scan_is_stale(age, interval),
        lease_valid=bool(lease.holder) and lease.expires_at is not None and lease.expires_at > now,
        debt_steps=debt.steps,
        debt_oldest_seconds=debt.oldest_seconds,
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
        "SELECT p.name, p.kind, alt.name, e.id, e.url, e.enabled, e.circuit_open_until, e.wait_asked_until, "  # noqa: S608
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
            asked_until,
            n_recent,
            n_bad,
        ) in cursor.fetchall():
            pool = pools.setdefault(name, PoolHealthRow(name=name, kind=kind, alternate=alternate or ""))
            if endpoint_id is None:
                continue
            open_until, asked_until = _aware(open_until), _aware(asked_until)
            pool.endpoints.append(
                EndpointHealthRow(
                    endpoint_id=endpoint_id,
                    url=url,
                    enabled=bool(enabled),
                    recent=n_recent,
                    bad=n_bad,
                    circuit_open_until=open_until,
                    circuit_open=open_until is not None and open_until > now,
                    wait_asked_until=asked_until if asked_until is not None and asked_until > now else None,
                )
            )
    return list(pools.values())


def _aware(value: Any) -> dt.datetime | None:
    """A timestamp read by a raw query: SQLite returns text, without a zone."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if value is not None and value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value
