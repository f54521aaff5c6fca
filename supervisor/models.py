"""The supervisor lease and its terms and the metrics checkpoint.

Remediation policies and alert subscriptions are data the scheduler reads (on every dispatch; for
every alert delivery in its outbox), so their models live below, in scheduler.models; the
supervisor decides with the policies (supervisor.policies) and writes the alerts
(supervisor.alerts)."""

from __future__ import annotations

from django.db import models


class SupervisorLease(models.Model):
    """One row per lease name. Only the holder remediates; the token fences stale holders."""

    name = models.CharField(max_length=50, primary_key=True, default="supervisor")
    holder = models.CharField(max_length=200, blank=True, default="")
    #: Grows by one on every change of holder; remediations check it in their transaction.
    token = models.BigIntegerField(default=0)
    expires_at = models.DateTimeField(null=True, blank=True)
    acquired_at = models.DateTimeField(null=True, blank=True)
    last_scan_at = models.DateTimeField(null=True, blank=True)
    #: Figures of the last scan: examined, remediated, duration_ms, lag_ms, batches.
    last_scan = models.JSONField(default=dict, blank=True)
    handovers = models.PositiveIntegerField(default=0)
    #: When the holder last committed a remediation: written in the transaction of the batch that
    #: made it, so a batch that fails (and rolls back) leaves it as it was. What tells a holder
    #: working through a backlog from one that renews but does nothing (supervisor.debt).
    progressed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder or 'nobody'} (token {self.token})"


class LeaseTerm(models.Model):
    """One finished term of a lease holder: written by the database itself (a trigger on the
    lease row, supervisor/migrations/0003) in the statement that hands the lease to the next
    holder, so the record costs no round trip and cannot be skipped.

    A holder acts only in transactions that see `expires_at` in the future under the lease row's
    lock (`lease_fence`), and the next holder takes over only once `expires_at` has passed, so a
    term's `expired_at` is never after the next term's `acquired_at`: the terms of a lease never
    overlap (the many-hosts test checks this on the record)."""

    lease = models.CharField(max_length=50)
    token = models.BigIntegerField()
    holder = models.CharField(max_length=200)
    acquired_at = models.DateTimeField(null=True, blank=True)
    #: The last moment this holder could act: its lease's expiry when the next holder took it.
    expired_at = models.DateTimeField(null=True, blank=True)
    #: When the next holder took the lease, and who (its term's `acquired_at` and `holder`).
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.CharField(max_length=200)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.lease} term {self.token} of {self.holder}"


class MetricsCheckpoint(models.Model):
    """The counters behind /metrics, carried forward from the event history: every scrape adds
    the events recorded since the last one (up to `event_id`) and stores the totals here, so the
    counters hold across every web and cluster process and outlive the history they came from."""

    name = models.CharField(max_length=50, primary_key=True, default="metrics")
    event_id = models.BigIntegerField(default=0)
    totals = models.JSONField(default=dict)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name} up to event {self.event_id}"


class ClusterHeartbeat(models.Model):
    """One cluster process (`manage.py qcluster`) saying it is alive: written when it starts, every
    SAS_CLUSTER_HEARTBEAT_SECONDS while django-q2's sentinel lives, and once more when it stops
    (supervisor.heartbeats). Read by `manage.py cluster_check` (a person's or a host's check) and
    the console's Clusters card; django-q2's own statistics live in a per-process cache that no
    other process can read, so the busy workers are counted by the cluster itself (supervisor.busy)."""

    #: `<host>:<pid>`: unique while the process lives, and what a probe on the same host finds.
    name = models.CharField(max_length=200, primary_key=True)
    host = models.CharField(max_length=200)
    pid = models.IntegerField()
    #: Worker processes the cluster runs (Q_CLUSTER workers).
    workers = models.IntegerField(default=0)
    #: Of them, those running a task at the last beat (supervisor.busy); null when not measured.
    busy = models.IntegerField(null=True, blank=True)
    #: The service's version the process runs.
    version = models.CharField(max_length=50, blank=True, default="")
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField()
    #: Set by a clean stop; a cluster whose beats stopped without it was lost (killed, host down).
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-beat_at"]
        indexes = [models.Index(fields=["host", "-beat_at"], name="heartbeat_host_idx")]

    def __str__(self) -> str:
        return self.name


#: The scans' histogram buckets, upper bounds in seconds (and +Inf, the row whose bound is null).
SCAN_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ScanHistogramBucket(models.Model):
    """The supervisor's scan durations as a cumulative histogram (`sas_supervisor_scan_seconds`):
    one row per bucket, `bound` its upper bound in seconds (null: +Inf), `count` the scans that
    took at most that long, `total` their summed seconds (the +Inf row's is the histogram's sum).
    The acting supervisor adds each scan with one statement (supervisor.lease.lease_record_scan);
    the rows are made by the migration, and again by the first scan that finds them gone
    (`ensure`)."""

    le = models.CharField(max_length=20, primary_key=True)
    bound = models.FloatField(null=True, blank=True)
    count = models.BigIntegerField(default=0)
    total = models.FloatField(default=0.0)

    class Meta:
        ordering = [models.F("bound").asc(nulls_last=True)]

    def __str__(self) -> str:
        return f"le {self.le}: {self.count}"

    @classmethod
    def ensure(cls) -> None:
        """The bucket rows, made where missing (a restored or flushed database)."""
        ScanHistogramBucket.objects.bulk_create(
            [ScanHistogramBucket(le=str(bound), bound=bound) for bound in SCAN_BUCKETS]
            + [ScanHistogramBucket(le="+Inf", bound=None)],
            ignore_conflicts=True,
        )


class CanaryState(models.Model):
    """One row: the canary's firing and what its last job showed (supervisor.canary). Every loop
    reads it; the loop that takes its lock (`FOR UPDATE SKIP LOCKED`) fires and records, so two
    clusters make one canary job a period."""

    name = models.CharField(max_length=50, primary_key=True, default="canary")
    #: When the last canary job was submitted, and which one.
    last_fired_at = models.DateTimeField(null=True, blank=True)
    last_job_id = models.UUIDField(null=True, blank=True)
    #: The last canary job that succeeded: when, and how long from submission to success.
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_recovery_seconds = models.FloatField(null=True, blank=True)
    #: When the current run of canary jobs not succeeded in their expected time began (the
    #: submission of its first job); None while they succeed. Names the run's one alert.
    failing_since = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"canary (last fired {self.last_fired_at})"


class CanaryCall(models.Model):
    """The canary route's memory, shared by every web process: the operation IDs it has been
    called with once already (and so answers now). Rows older than a day are deleted as the
    canary fires."""

    operation_id = models.CharField(max_length=200, primary_key=True)
    first_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.operation_id


class ReceiverBreaker(models.Model):
    """The circuit breaker of one receiver of the outbox (scheduler.models.Delivery.receiver),
    shared by every cluster's sender (supervisor.deliveries).

    No row: closed. Each try the receiver fails (no answer, a 5xx, ...) adds one to `failures`
    and one it answers deletes the row; from SAS_DELIVERY_BREAKER_FAILURES failures in a row the
    breaker is open until `open_until` (SAS_DELIVERY_BREAKER_OPEN_SECONDS after the last
    failure): the receiver's messages are not claimed, their tries not counted. Past
    `open_until` it is half-open: one sender claims one message as its probe and moves
    `open_until` past the probe's longest send, so nobody else probes meanwhile; the probe's
    result closes or reopens it."""

    receiver = models.CharField(max_length=300, primary_key=True)
    failures = models.PositiveIntegerField(default=0)
    open_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.receiver}: {self.failures} failures"
