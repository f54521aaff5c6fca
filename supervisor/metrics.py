"""Prometheus metrics at GET /metrics (text exposition format, prometheus-client).

Every figure comes from the database, so the answer is the same whichever web process Prometheus
reaches and counts the work of every cluster process on every host:

- counters, and the histograms of call latency, job duration and queue wait, are carried forward
  from the event history (a histogram's buckets are counters: a settled job or a finished
  attempt is counted once, in the bucket of its value, when its event is taken, so rates and
  quantiles over any range work as for a histogram kept in memory, whichever process answers;
  the buckets are fixed, JOB_BUCKETS and WAIT_BUCKETS): each scrape adds the events recorded
  since the previous one to totals kept in one row (supervisor.models.MetricsCheckpoint), under
  that row's lock. Only events older than SAS_METRICS_SETTLE_SECONDS (15 s) are taken, so a transaction that
  commits a little after it started is not skipped: the counters trail by that much. They start
  at zero on the first scrape, and the history's retention never lowers them;
- the count of queue replies sent to a dead-letter queue is read from its own few rows
  (agents.models.ReplyDeadLetters): most of them name no job, so they have no event;
- gauges are read at scrape time through the indexes that serve the console (live steps, the
  queue, the lease), and the canary's from its one row (supervisor.canary).

The canary's jobs (supervisor.canary) are the service's own: the job and attempt counters leave
them out.

A scrape reads the new events by primary key (at most `BATCH` per scrape; a backlog is caught up
over the next scrapes) and a few index-served counts, so its cost follows the traffic since the
last scrape, not the size of the history.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from django.db import connection, transaction
from django.db.models import Count
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from agents.http import CANARY_POOL
from agents.models import ReplyDeadLetters
from sas_project import VERSION
from sas_project.conf import sas_settings
from sas_project.database import is_postgresql
from scheduler.models import CANARY_WORKFLOW, STEP_LIVE, EventKind, Quarantine, QuarantineLoop
from supervisor.canary import canary_metrics
from supervisor.debt import remediation_debt
from supervisor.models import SCAN_BUCKETS, MetricsCheckpoint, ScanHistogramBucket

BATCH = 20_000
#: Call latency buckets, seconds.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Job duration buckets (submission to settling), seconds: a second to a day.
JOB_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)
#: Queue wait buckets (an attempt's dispatch to its worker's start), seconds.
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

E = EventKind
SETTLED_KINDS: dict[str, str] = {
    E.JOB_SUCCEEDED: "succeeded",
    E.JOB_FAILED: "failed",
    E.JOB_COMPENSATED: "compensated",
    E.JOB_CANCELLED: "cancelled",
}
#: The events that close an attempt with its outcome (the attempt row has the pool and latency).
ATTEMPT_KINDS = (
    E.STEP_SUCCEEDED,
    E.STEP_RECONCILED,
    E.STEP_BUSINESS_FAILURE,
    E.STEP_TRANSIENT_FAILURE,
    E.STEP_NOT_HAPPENED,
    E.STEP_NO_ANSWER,
    E.STEP_RECONCILE_FAILED,
    E.STEP_TIMED_OUT,
)
LATE_KINDS = (E.LATE_SUCCESS, E.LATE_SUCCESS_NOTED)

COUNT_SQL = """
WITH win AS (
    SELECT id, kind, job_id, step_id, attempt, data, created_at FROM scheduler_event
    WHERE id > %(last)s ORDER BY id LIMIT %(batch)s
), cut AS (
    SELECT COALESCE(
        (SELECT min(id) - 1 FROM win
         WHERE created_at >= statement_timestamp() - %(settle)s * interval '1 second'),
        (SELECT max(id) FROM win),
        %(last)s) AS upto
), sel AS (
    SELECT * FROM win WHERE id <= (SELECT upto FROM cut)
), calls AS (
    SELECT p.name AS pool, a.outcome, a.latency_ms,
           extract(epoch FROM a.started_at - a.dispatched_at) AS waited
    FROM sel JOIN scheduler_attempt a ON a.step_id = sel.step_id AND a.number = sel.attempt
    JOIN agents_agentpool p ON p.id = a.pool_id
    WHERE sel.kind = ANY(%(attempt_kinds)s) AND p.name <> %(canary_pool)s
)
SELECT 'submitted', sel.data->>'workflow', '', count(*)::float FROM sel
    WHERE kind = 'job_submitted' AND sel.data->>'workflow' IS DISTINCT FROM %(canary_workflow)s GROUP BY 2
UNION ALL
SELECT 'settled', w.name, sel.kind, count(*)::float FROM sel
    JOIN scheduler_job j ON j.id = sel.job_id JOIN scheduler_workflow w ON w.id = j.workflow_id
    WHERE sel.kind = ANY(%(settled_kinds)s) AND w.name <> %(canary_workflow)s GROUP BY 2, 3
UNION ALL
SELECT 'job_duration_bucket', w.name, sel.kind || ':' || (%(job_bucket_count)s
        - width_bucket(-extract(epoch FROM sel.created_at - j.created_at), %(job_neg_bounds)s))::text,
    count(*)::float FROM sel
    JOIN scheduler_job j ON j.id = sel.job_id JOIN scheduler_workflow w ON w.id = j.workflow_id
    WHERE sel.kind = ANY(%(settled_kinds)s) AND w.name <> %(canary_workflow)s GROUP BY 2, 3
UNION ALL
SELECT 'job_duration_sum', w.name, sel.kind, sum(extract(epoch FROM sel.created_at - j.created_at))::float
    FROM sel JOIN scheduler_job j ON j.id = sel.job_id JOIN scheduler_workflow w ON w.id = j.workflow_id
    WHERE sel.kind = ANY(%(settled_kinds)s) AND w.name <> %(canary_workflow)s GROUP BY 2, 3
UNION ALL
SELECT 'attempts', pool, outcome, count(*)::float FROM calls GROUP BY 2, 3
UNION ALL
SELECT 'wait_bucket', pool, (%(wait_bucket_count)s - width_bucket(-waited, %(wait_neg_bounds)s))::text,
    count(*)::float FROM calls WHERE waited IS NOT NULL GROUP BY 2, 3
UNION ALL
SELECT 'wait_sum', pool, '', sum(waited)::float FROM calls WHERE waited IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'latency_bucket', pool,
    (%(bucket_count)s - width_bucket(-latency_ms / 1000.0, %(neg_bounds)s))::text, count(*)::float
    FROM calls WHERE latency_ms IS NOT NULL GROUP BY 2, 3
UNION ALL
SELECT 'latency_sum', pool, '', sum(latency_ms) / 1000.0 FROM calls WHERE latency_ms IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'late', p.name, '', count(*)::float FROM sel
    JOIN scheduler_step s ON s.id = sel.step_id JOIN agents_agentpool p ON p.id = s.pool_id
    WHERE sel.kind = ANY(%(late_kinds)s) AND p.name <> %(canary_pool)s GROUP BY 2
UNION ALL
SELECT 'operator', substr(kind, 10), '', count(*)::float FROM sel WHERE kind LIKE 'operator\\_%%' GROUP BY 2
UNION ALL
SELECT 'upto', '', '', (SELECT upto FROM cut)::float
"""


def _key(*parts: str) -> str:
    return "\x1f".join(parts)


def _count_rows(last: int) -> list[tuple[str, str, str, float]]:
    """(metric, label, label, value) rows for the events after `last`, and the new checkpoint
    (metric "upto"): one statement on PostgreSQL, the ORM elsewhere (the embedded demo)."""
    if is_postgresql():
        with connection.cursor() as cursor:
            cursor.execute(
                COUNT_SQL,
                {
                    "last": last,
                    "batch": BATCH,
                    "settle": sas_settings.metrics_settle_seconds,
                    "attempt_kinds": [str(k) for k in ATTEMPT_KINDS],
                    "settled_kinds": [str(k) for k in SETTLED_KINDS],
                    "late_kinds": [str(k) for k in LATE_KINDS],
                    "canary_workflow": CANARY_WORKFLOW,
                    "canary_pool": CANARY_POOL,
                    # Prometheus buckets hold values up to and including their bound: the index
                    # is the number of bounds below the value (width_bucket over the negated
                    # bounds counts those at or above it).
                    "bucket_count": len(BUCKETS),
                    "neg_bounds": [-b for b in reversed(BUCKETS)],
                    "job_bucket_count": len(JOB_BUCKETS),
                    "job_neg_bounds": [-b for b in reversed(JOB_BUCKETS)],
                    "wait_bucket_count": len(WAIT_BUCKETS),
                    "wait_neg_bounds": [-b for b in reversed(WAIT_BUCKETS)],
                },
            )
            return [(m, a or "", b or "", float(v)) for m, a, b, v in cursor.fetchall()]
    return _count_rows_python(last)


def _count_rows_python(last: int) -> list[tuple[str, str, str, float]]:
    import bisect
    import datetime as dt
    from collections import Counter

    from django.utils import timezone

    from scheduler.models import Attempt, Event

    cutoff = timezone.now() - dt.timedelta(seconds=sas_settings.metrics_settle_seconds)
    window = list(
        Event.objects.filter(id__gt=last)
        .order_by("id")
        .values(
            "id",
            "kind",
            "step_id",
            "attempt",
            "data",
            "created_at",
            "job__workflow__name",
            "job__created_at",
            "step__pool__name",
        )[:BATCH]
    )
    recent = [e["id"] for e in window if e["created_at"] >= cutoff]
    upto = (min(recent) - 1) if recent else (window[-1]["id"] if window else last)
    events = [e for e in window if e["id"] <= upto]
    counts: Counter[tuple[str, str, str]] = Counter()
    sums: dict[str, float] = {}
    waits: dict[str, float] = {}
    durations: dict[tuple[str, str], float] = {}
    attempt_events = [e for e in events if e["kind"] in ATTEMPT_KINDS]
    attempts = {
        (a.step_id, a.number): a
        for a in Attempt.objects.filter(step_id__in={e["step_id"] for e in attempt_events}).select_related(
            "pool"
        )
    }
    for e in events:
        kind = e["kind"]
        if e["job__workflow__name"] == CANARY_WORKFLOW:
            continue
        if kind == EventKind.JOB_SUBMITTED:
            counts["submitted", str(e["data"].get("workflow", "")), ""] += 1
        elif kind in SETTLED_KINDS:
            counts["settled", e["job__workflow__name"], kind] += 1
            took = (e["created_at"] - e["job__created_at"]).total_seconds()
            index = bisect.bisect_left(JOB_BUCKETS, took)
            counts["job_duration_bucket", e["job__workflow__name"], f"{kind}:{index}"] += 1
            durations[e["job__workflow__name"], kind] = (
                durations.get((e["job__workflow__name"], kind), 0.0) + took
            )
        elif kind in LATE_KINDS:
            counts["late", e["step__pool__name"] or "", ""] += 1
        elif kind.startswith("operator_"):
            counts["operator", kind.removeprefix("operator_"), ""] += 1
        if kind in ATTEMPT_KINDS and (a := attempts.get((e["step_id"], e["attempt"] or 0))) is not None:
            counts["attempts", a.pool.name, a.outcome] += 1
            if a.latency_ms is not None:
                seconds = a.latency_ms / 1000
                counts["latency_bucket", a.pool.name, str(bisect.bisect_left(BUCKETS, seconds))] += 1
                sums[a.pool.name] = sums.get(a.pool.name, 0.0) + seconds
            if a.started_at is not None:
                waited = (a.started_at - a.dispatched_at).total_seconds()
                counts["wait_bucket", a.pool.name, str(bisect.bisect_left(WAIT_BUCKETS, waited))] += 1
                waits[a.pool.name] = waits.get(a.pool.name, 0.0) + waited
    rows = [(m, a, b, float(v)) for (m, a, b), v in counts.items()]
    rows += [("latency_sum", pool, "", float(v)) for pool, v in sums.items()]
    rows += [("wait_sum", pool, "", float(v)) for pool, v in waits.items()]
    rows += [("job_duration_sum", w, kind, float(v)) for (w, kind), v in durations.items()]
    return [*rows, ("upto", "", "", float(upto))]


def advance() -> dict[str, dict[str, Any]]:
    """Add the events since the last scrape to the stored totals; returns the totals."""
    with transaction.atomic():
        checkpoint = MetricsCheckpoint.objects.select_for_update().filter(pk="metrics").first()
        if checkpoint is None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT COALESCE(max(id), 0) FROM scheduler_event")
                start = int(cursor.fetchone()[0])
            MetricsCheckpoint.objects.bulk_create(
                [MetricsCheckpoint(pk="metrics", event_id=start, totals={})], ignore_conflicts=True
            )
            checkpoint = MetricsCheckpoint.objects.select_for_update().get(pk="metrics")
        totals: dict[str, dict[str, Any]] = checkpoint.totals or {}
        rows = _count_rows(checkpoint.event_id)
        upto = checkpoint.event_id
        for metric, a, b, value in rows:
            if metric == "upto":
                upto = int(value)
                continue
            bucket = totals.setdefault(metric, {})
            key = _key(a or "", b or "")
            bucket[key] = bucket.get(key, 0) + value
        if upto != checkpoint.event_id:
            MetricsCheckpoint.objects.filter(pk="metrics").update(event_id=upto, totals=totals)
        return totals


def _pairs(totals: dict[str, dict[str, Any]], metric: str) -> Iterator[tuple[str, str, float]]:
    for key, value in sorted(totals.get(metric, {}).items()):
        a, _, b = key.partition("\x1f")
        yield a, b, float(value)


class ServiceCollector(Collector):
    def collect(self) -> Iterator[Any]:
        totals = advance()
        submitted = CounterMetricFamily("sas_jobs_submitted", "Jobs submitted.", labels=["workflow"])
        for workflow, _, value in _pairs(totals, "submitted"):
            submitted.add_metric([workflow], value)
        yield submitted
        settled = CounterMetricFamily(
            "sas_jobs_settled", "Jobs that settled, by final status.", labels=["workflow", "status"]
        )
        for workflow, kind, value in _pairs(totals, "settled"):
            settled.add_metric([workflow, SETTLED_KINDS.get(kind, kind)], value)
        yield settled
        attempts = CounterMetricFamily(
            "sas_attempts", "Attempts finished, by outcome.", labels=["pool", "outcome"]
        )
        for pool, outcome, value in _pairs(totals, "attempts"):
            attempts.add_metric([pool, outcome], value)
        yield attempts
        yield self._latency(totals)
        yield self._job_durations(totals)
        yield _by_pool(
            HistogramMetricFamily(
                "sas_queue_wait_seconds",
                "Time calls waited in the queue: an attempt's dispatch to its worker's start.",
                labels=["pool"],
            ),
            WAIT_BUCKETS,
            totals,
            "wait",
        )
        late = CounterMetricFamily(
            "sas_late_successes", "Successes that arrived after their deadline.", labels=["pool"]
        )
        for pool, _, value in _pairs(totals, "late"):
            late.add_metric([pool], value)
        yield late
        actions = CounterMetricFamily("sas_operator_actions", "Operator actions, by kind.", labels=["action"])
        for action, _, value in _pairs(totals, "operator"):
            actions.add_metric([action], value)
        yield actions
        dead = CounterMetricFamily(
            "sas_queue_replies_dead_lettered",
            "Queue replies sent to the broker's dead-letter queue, by reason.",
            labels=["reason"],
        )
        for reason, count in ReplyDeadLetters.objects.order_by("reason").values_list("reason", "count"):
            dead.add_metric([reason], float(count))
        yield dead
        quarantined = CounterMetricFamily(
            "sas_quarantined",
            "Items a supervision loop set aside because handling them raised, by loop.",
            labels=["loop"],
        )
        counts = dict(Quarantine.objects.values_list("loop").annotate(n=Count("pk")).values_list("loop", "n"))
        for loop in QuarantineLoop.values:
            quarantined.add_metric([loop], float(counts.get(loop, 0)))
        yield quarantined
        yield from _debt()
        yield _scan_histogram()
        build = GaugeMetricFamily("sas_build_info", "The service's version (always 1).", labels=["version"])
        build.add_metric([VERSION], 1.0)
        yield build
        yield from gauges()
        yield from canary_metrics()

    def _job_durations(self, totals: dict[str, dict[str, Any]]) -> HistogramMetricFamily:
        family = HistogramMetricFamily(
            "sas_job_duration_seconds",
            "Time jobs took from submission to settling, by final status.",
            labels=["workflow", "status"],
        )
        counts: dict[tuple[str, ...], list[tuple[int, float]]] = {}
        for workflow, kind_index, value in _pairs(totals, "job_duration_bucket"):
            kind, _, index = kind_index.rpartition(":")
            counts.setdefault((workflow, SETTLED_KINDS.get(kind, kind)), []).append((int(index), value))
        sums: dict[tuple[str, ...], float] = {
            (w, SETTLED_KINDS.get(kind, kind)): value for w, kind, value in _pairs(totals, "job_duration_sum")
        }
        return _histograms(family, JOB_BUCKETS, counts, sums)

    def _latency(self, totals: dict[str, dict[str, Any]]) -> HistogramMetricFamily:
        family = HistogramMetricFamily("sas_call_latency_seconds", "Latency of agent calls.", labels=["pool"])
        return _by_pool(family, BUCKETS, totals, "latency")


def _by_pool(
    family: HistogramMetricFamily, bounds: tuple[float, ...], totals: dict[str, dict[str, Any]], metric: str
) -> HistogramMetricFamily:
    """`family` by pool from the totals `<metric>_bucket` (pool, bucket index) and `<metric>_sum`."""
    counts: dict[tuple[str, ...], list[tuple[int, float]]] = {}
    for pool, index, value in _pairs(totals, f"{metric}_bucket"):
        counts.setdefault((pool,), []).append((int(index), value))
    sums: dict[tuple[str, ...], float] = {
        (pool,): value for pool, _, value in _pairs(totals, f"{metric}_sum")
    }
    return _histograms(family, bounds, counts, sums)


def _histograms(
    family: HistogramMetricFamily,
    bounds: tuple[float, ...],
    counts: dict[tuple[str, ...], list[tuple[int, float]]],
    sums: dict[tuple[str, ...], float],
) -> HistogramMetricFamily:
    """`family` with one series per labels: `counts` gives each bucket's count by index (the
    number of bounds below the value: 0 up to the first bound, len above the last), `sums` the
    sum of the values."""
    for labels, entries in sorted(counts.items()):
        per_bucket = [0.0] * (len(bounds) + 1)
        for index, value in entries:
            per_bucket[min(index, len(bounds))] += value
        cumulative = 0.0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip(bounds, per_bucket, strict=False):
            cumulative += count
            buckets.append((repr(bound), cumulative))
        buckets.append(("+Inf", cumulative + per_bucket[-1]))
        family.add_metric(list(labels), buckets, sum_value=sums.get(labels, 0.0))
    return family


#: The gauges read from the last scan's figures on the lease row (milliseconds there, seconds here).
LEASE_FIGURES = {
    "scan_lag": "lag_ms",
    "scan_duration": "duration_ms",
    "pass": "pass_ms",
    "longest_pass": "longest_pass_ms",
}

_LEASE_FIGURES_SQL = "".join(
    f"""UNION ALL
SELECT '{gauge}', '', COALESCE((last_scan->>'{figure}')::float / 1000.0, 0)
    FROM supervisor_supervisorlease WHERE name = 'supervisor'
"""  # noqa: S608 - constants of the code
    for gauge, figure in LEASE_FIGURES.items()
)

GAUGES_SQL = f"""
SELECT 'live', status, count(*)::float FROM scheduler_step
    WHERE status IN ({", ".join(f"'{s}'" for s in sorted(STEP_LIVE))}) GROUP BY status
UNION ALL
SELECT 'attention', '', count(*)::float FROM scheduler_step
    WHERE status IN ('held', 'unknown', 'attempt_failed')
       OR (status = 'dispatched' AND (deadline IS NULL OR deadline < statement_timestamp()))
UNION ALL
SELECT 'queue', '', count(*)::float FROM django_q_ormq
UNION ALL
SELECT 'queue_oldest', '', COALESCE(extract(epoch FROM statement_timestamp() - min(lock)), 0)
    FROM django_q_ormq
UNION ALL
SELECT 'deliveries', kind || ':' || status, count(*)::float FROM scheduler_delivery
    WHERE NOT (status = 'delivered') GROUP BY kind, status
UNION ALL
SELECT 'outbox_due', lane, count(*)::float FROM (
    SELECT CASE WHEN kind = 'callback' THEN 'callbacks' ELSE 'alerts' END AS lane FROM scheduler_delivery
    WHERE status = 'pending' AND next_try_at <= statement_timestamp()) AS due GROUP BY lane
UNION ALL
SELECT 'outbox_oldest', lane, extract(epoch FROM statement_timestamp() - min(next_try_at)) FROM (
    SELECT CASE WHEN kind = 'callback' THEN 'callbacks' ELSE 'alerts' END AS lane, next_try_at
    FROM scheduler_delivery WHERE status = 'pending' AND next_try_at <= statement_timestamp()) AS due
    GROUP BY lane
UNION ALL
SELECT 'jobs_waiting_for_key', '', count(*)::float FROM scheduler_job WHERE status = 'waiting'
UNION ALL
SELECT 'calls_waiting', CASE WHEN s.not_before IS NOT NULL AND s.rate_key = '' THEN 'backoff'
                             WHEN s.concurrency_key <> '' THEN 'concurrency'
                             WHEN s.rate_key <> '' THEN 'rate' ELSE 'capacity' END, count(*)::float
    FROM scheduler_step s JOIN scheduler_stepdefinition d ON d.id = s.definition_id
    WHERE s.status = 'waiting' AND d.kind = 'call' AND NOT (d.for_each <> '' AND s.kind = 'action')
    GROUP BY 2
UNION ALL
SELECT 'endpoints_asked_to_wait', '', count(*)::float FROM agents_agentendpoint
    WHERE wait_asked_until > statement_timestamp()
UNION ALL
SELECT 'breakers_open', '', count(*)::float FROM supervisor_receiverbreaker
    WHERE open_until > statement_timestamp()
UNION ALL
SELECT 'scan_age', '', GREATEST(extract(epoch FROM statement_timestamp() - last_scan_at), 0)
    FROM supervisor_supervisorlease WHERE name = 'supervisor' AND last_scan_at IS NOT NULL
UNION ALL
SELECT 'lease_token', '', token::float FROM supervisor_supervisorlease WHERE name = 'supervisor'
{_LEASE_FIGURES_SQL}"""  # noqa: S608 - the statuses and figures are constants of the code


#: What holds a waiting call (scheduler.services.capacity): a bounded label, never a key.
CALL_WAIT_REASONS = ("backoff", "capacity", "concurrency", "rate")


def _gauge_rows() -> list[tuple[str, str, float]]:
    if is_postgresql():
        with connection.cursor() as cursor:
            cursor.execute(GAUGES_SQL)
            return [(m, label, float(v)) for m, label, v in cursor.fetchall()]
    return _gauge_rows_python()


def _gauge_rows_python() -> list[tuple[str, str, float]]:
    from django.db.models import Count, Min, Q
    from django.utils import timezone
    from django_q.models import OrmQ

    from agents.models import AgentEndpoint
    from scheduler.models import Delivery, Job, Step
    from supervisor.models import ReceiverBreaker, SupervisorLease

    now = timezone.now()
    rows: list[tuple[str, str, float]] = [
        ("live", r["status"], float(r["n"]))
        for r in Step.objects.filter(status__in=sorted(STEP_LIVE)).values("status").annotate(n=Count("pk"))
    ]
    attention = Step.objects.filter(
        Q(status__in=["held", "unknown", "attempt_failed"])
        | (Q(status="dispatched") & (Q(deadline__isnull=True) | Q(deadline__lt=now)))
    ).count()
    rows.append(("attention", "", float(attention)))
    queue = OrmQ.objects.aggregate(n=Count("pk"), oldest=Min("lock"))
    rows.append(("queue", "", float(queue["n"])))
    rows.append(("queue_oldest", "", (now - queue["oldest"]).total_seconds() if queue["oldest"] else 0.0))
    for r in Delivery.objects.exclude(status="delivered").values("kind", "status").annotate(n=Count("pk")):
        rows.append(("deliveries", f"{r['kind']}:{r['status']}", float(r["n"])))
    lanes: dict[str, tuple[float, Any]] = {}
    for due in (
        Delivery.objects.filter(status="pending", next_try_at__lte=now)
        .values("kind")
        .annotate(n=Count("pk"), oldest=Min("next_try_at"))
    ):
        lane = "callbacks" if due["kind"] == "callback" else "alerts"
        n, oldest = lanes.get(lane, (0.0, due["oldest"]))
        lanes[lane] = (n + due["n"], min(oldest, due["oldest"]))
    for lane, (n, oldest) in sorted(lanes.items()):
        rows.append(("outbox_due", lane, n))
        rows.append(("outbox_oldest", lane, (now - oldest).total_seconds()))
    rows.append(("jobs_waiting_for_key", "", float(Job.objects.filter(status="waiting").count())))
    calls = Step.objects.filter(status="waiting", definition__kind="call").exclude(
        ~Q(definition__for_each=""), kind="action"
    )
    for reason, query in (
        ("backoff", calls.filter(not_before__isnull=False, rate_key="")),
        ("concurrency", calls.exclude(not_before__isnull=False, rate_key="").exclude(concurrency_key="")),
        ("rate", calls.filter(concurrency_key="").exclude(rate_key="")),
        ("capacity", calls.filter(not_before__isnull=True, concurrency_key="", rate_key="")),
    ):
        if count := query.count():
            rows.append(("calls_waiting", reason, float(count)))
    asked = AgentEndpoint.objects.filter(wait_asked_until__gt=now).count()
    rows.append(("endpoints_asked_to_wait", "", float(asked)))
    rows.append(("breakers_open", "", float(ReceiverBreaker.objects.filter(open_until__gt=now).count())))
    lease = SupervisorLease.objects.filter(pk="supervisor").first()
    if lease is not None:
        if lease.last_scan_at is not None:
            # A scan that committed after this read began is 0 s old, not a little less.
            rows.append(("scan_age", "", max((now - lease.last_scan_at).total_seconds(), 0.0)))
        rows.append(("lease_token", "", float(lease.token)))
        figures = lease.last_scan or {}
        rows += [(gauge, "", float(figures.get(figure, 0)) / 1000) for gauge, figure in LEASE_FIGURES.items()]
    return rows


def gauges() -> Iterator[GaugeMetricFamily]:
    rows = _gauge_rows()
    values: dict[str, list[tuple[str, float]]] = {}
    for metric, label, value in rows:
        values.setdefault(metric, []).append((label, float(value)))
    live = GaugeMetricFamily("sas_steps_live", "Steps not yet settled, by status.", labels=["status"])
    found = dict(values.get("live", []))
    for status in sorted(str(s) for s in STEP_LIVE):
        live.add_metric([status], found.get(status, 0.0))
    yield live
    yield _one(
        "sas_steps_needing_attention", "Steps a person or the supervisor must look at.", values, "attention"
    )
    yield _one("sas_queue_depth", "Agent tasks waiting in the queue.", values, "queue")
    yield _one(
        "sas_jobs_waiting_for_key",
        "Jobs waiting for their workflow's concurrency key (docs/flow-control.md).",
        values,
        "jobs_waiting_for_key",
    )
    waiting = GaugeMetricFamily(
        "sas_calls_waiting",
        "Calls waiting for the capacity pump, by what holds them: capacity (a pool's limits), "
        "concurrency (their step's key), rate (a keyed rate), backoff (their remote asked to wait).",
        labels=["reason"],
    )
    found = dict(values.get("calls_waiting", []))
    for reason in CALL_WAIT_REASONS:
        waiting.add_metric([reason], found.get(reason, 0.0))
    yield waiting
    yield _one(
        "sas_endpoints_asked_to_wait",
        "Endpoints whose remote asked for no calls for now (a 429 or 503 with Retry-After).",
        values,
        "endpoints_asked_to_wait",
    )
    yield _one(
        "sas_queue_oldest_task_age_seconds", "Age of the oldest task in the queue.", values, "queue_oldest"
    )
    deliveries = GaugeMetricFamily(
        "sas_deliveries_undelivered", "Outbox messages not delivered yet.", labels=["kind", "status"]
    )
    for label, value in values.get("deliveries", []):
        kind, _, status = label.partition(":")
        deliveries.add_metric([kind, status], value)
    yield deliveries
    due = dict(values.get("outbox_due", []))
    oldest = dict(values.get("outbox_oldest", []))
    depth = GaugeMetricFamily(
        "sas_outbox_due", "Outbox messages whose try is due and not yet taken, by lane.", labels=["lane"]
    )
    age = GaugeMetricFamily(
        "sas_outbox_oldest_due_seconds",
        "How long the oldest due outbox message of each lane has waited for its try.",
        labels=["lane"],
    )
    for lane in ("alerts", "callbacks"):
        depth.add_metric([lane], due.get(lane, 0.0))
        age.add_metric([lane], oldest.get(lane, 0.0))
    yield depth
    yield age
    yield _one(
        "sas_outbox_breakers_open",
        "Outbox receivers whose circuit breaker is open (or probing).",
        values,
        "breakers_open",
    )
    yield _one(
        "sas_supervisor_last_scan_age_seconds",
        "Seconds since the supervisor's last scan (+Inf when none was ever recorded).",
        values,
        "scan_age",
        missing=math.inf,
    )
    yield _one(
        "sas_supervisor_scan_lag_seconds", "How late the last scan found an overdue step.", values, "scan_lag"
    )
    yield _one(
        "sas_supervisor_scan_duration_seconds", "How long the last scan took.", values, "scan_duration"
    )
    yield _one(
        "sas_supervisor_pass_seconds",
        "How long the lease holder's last loop pass took, all its work included.",
        values,
        "pass",
    )
    yield _one(
        "sas_supervisor_longest_pass_seconds",
        "The lease holder's longest loop pass since its loop started.",
        values,
        "longest_pass",
    )
    yield _one(
        "sas_supervisor_lease_token",
        "The lease's fencing token (grows at each hand-over).",
        values,
        "lease_token",
    )


def _one(
    name: str, doc: str, values: dict[str, list[tuple[str, float]]], metric: str, missing: float = 0.0
) -> GaugeMetricFamily:
    """One gauge; `missing` when the database has nothing for it (never NaN: a rule comparing
    NaN is never true, so an alert on it could not fire)."""
    found = values.get(metric, [])
    return GaugeMetricFamily(name, doc, value=found[0][1] if found else missing)


def _debt() -> Iterator[GaugeMetricFamily]:
    """Remediation debt, read from the step rows (supervisor.debt)."""
    debt = remediation_debt()
    yield GaugeMetricFamily(
        "sas_remediation_debt_steps",
        "Remediable steps more than two scan intervals past due with nothing done since.",
        value=float(debt.steps),
    )
    yield GaugeMetricFamily(
        "sas_remediation_debt_oldest_seconds",
        "Seconds since the oldest step of the remediation debt became due (0 with none).",
        value=debt.oldest_seconds,
    )


def _scan_histogram() -> HistogramMetricFamily:
    """`sas_supervisor_scan_seconds`: every scan the acting supervisors recorded
    (supervisor.models.ScanHistogramBucket, cumulative already)."""
    rows = {
        le: (float(count), float(total))
        for le, count, total in ScanHistogramBucket.objects.values_list("le", "count", "total")
    }
    # Every bucket, at 0 where its row is missing (none recorded yet in this database).
    names = [str(bound) for bound in SCAN_BUCKETS] + ["+Inf"]
    buckets = [(le, rows.get(le, (0.0, 0.0))[0]) for le in names]
    total = rows.get("+Inf", (0.0, 0.0))[1]
    return HistogramMetricFamily(
        "sas_supervisor_scan_seconds",
        "How long the supervisor's scans took.",
        buckets=buckets,
        sum_value=total,
    )


def exposition() -> bytes:
    """The metrics in Prometheus's text format (one registry per scrape: nothing cached)."""
    from prometheus_client import generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector())
    return generate_latest(registry)
