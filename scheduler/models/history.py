"""A job's history: the append-only event log and its one vocabulary (EventKind), and what
history retention leaves of the jobs it archived and deleted (ArchivedJob, PruneRun).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from scheduler.models.jobs import POINTER, Job
from scheduler.models.steps import Step


class EventKind(models.TextChoices):
    """What an Event records. The one vocabulary of the history: every kind is listed here, and a
    check constraint refuses any other."""

    #: A client submitted the job (the first event of every job).
    JOB_SUBMITTED = "job_submitted", "Job submitted"
    #: The job runs forward again (reopened by an operator, or no longer waiting on a held step).
    JOB_RUNNING = "job_running", "Job running"
    #: Every step succeeded; the job's result is set.
    JOB_SUCCEEDED = "job_succeeded", "Job succeeded"
    #: A step is held for an operator.
    JOB_NEEDS_ATTENTION = "job_needs_attention", "Job needs attention"
    #: The job stopped its forward work and undoes what may have happened.
    JOB_COMPENSATING = "job_compensating", "Job compensating"
    #: Everything that may have had an effect was undone.
    JOB_COMPENSATED = "job_compensated", "Job compensated"
    #: The job gave up by policy without compensating.
    JOB_FAILED = "job_failed", "Job failed"
    #: An operator cancelled the job; what ran was undone.
    JOB_CANCELLED = "job_cancelled", "Job cancelled"
    #: An operator paused the job: no new dispatches.
    JOB_PAUSED = "job_paused", "Job paused"
    #: An operator resumed a paused job.
    JOB_RESUMED = "job_resumed", "Job resumed"
    #: The job was created waiting for its concurrency key (scheduler.services.flow).
    JOB_WAITING = "job_waiting", "Job waiting for its key"
    #: The job is likely to miss its workflow's SLA (supervisor.sla): by the clock (past its warn
    #: fraction) or by the projection of its remaining steps; written once per job.
    JOB_AT_RISK = "job_at_risk", "Job at risk"
    #: An attempt of the step was dispatched (its intent, deadline and task written).
    STEP_DISPATCHED = "step_dispatched", "Step dispatched"
    #: The remote answered with success; the step is done.
    STEP_SUCCEEDED = "step_succeeded", "Step succeeded"
    #: A status query found that the operation happened; the step is done.
    STEP_RECONCILED = "step_reconciled", "Step reconciled"
    #: An operator completed the step by hand.
    STEP_RESOLVED = "step_resolved", "Step resolved"
    #: A success arrived after its attempt was decided or superseded, and completed the step.
    LATE_SUCCESS = "late_success", "Late success"
    #: A success arrived after the step had settled: noted as evidence, nothing moved.
    LATE_SUCCESS_NOTED = "late_success_noted", "Late success noted"
    #: A failure arrived for an attempt already decided: nothing moved.
    LATE_OUTCOME_IGNORED = "late_outcome_ignored", "Late outcome ignored"
    #: A queue reply naming the step could not be recorded (not a reply, or refused at every try):
    #: it went to the broker's dead-letter queue; nothing moved.
    REPLY_DEAD_LETTERED = "reply_dead_lettered", "Reply dead-lettered"
    #: The remote refused the operation (4xx other than 408/429).
    STEP_BUSINESS_FAILURE = "step_business_failure", "Business failure"
    #: The remote could not do it now (408, 429, 5xx, connection refused).
    STEP_TRANSIENT_FAILURE = "step_transient_failure", "Transient failure"
    #: The remote said the operation never happened.
    STEP_NOT_HAPPENED = "step_not_happened", "Did not happen"
    #: The call was sent and no answer came back: it may have happened.
    STEP_NO_ANSWER = "step_no_answer", "No answer"
    #: A status query failed: the operation's outcome is still unknown.
    STEP_RECONCILE_FAILED = "step_reconcile_failed", "Status query failed"
    #: The supervisor found the attempt past its deadline with no outcome.
    STEP_TIMED_OUT = "step_timed_out", "Step timed out"
    #: The policy decided a retry after a backoff.
    RETRY_SCHEDULED = "retry_scheduled", "Retry scheduled"
    #: An overdue attempt still waits in the queue for a worker: its deadline was moved.
    DEADLINE_EXTENDED = "deadline_extended", "Deadline extended"
    #: The step is parked for an operator.
    STEP_HELD = "step_held", "Step held"
    #: The step gave up (attempts, budget or deadline spent, or a refusal not retried).
    STEP_FAILED = "step_failed", "Step failed"
    #: A forward step awaiting a decision when its job stopped running: no more attempts.
    STEP_ABANDONED = "step_abandoned", "Step abandoned"
    #: Its job stopped while the step's call was in flight: a cancel of the operation is due to
    #: the remote (scheduler.services.cancels).
    STEP_CANCEL_REQUESTED = "step_cancel_requested", "Cancel requested"
    #: The remote answered the cancel of the step's operation, or it was given up; its attempt
    #: (kind `cancel`) holds the answer.
    STEP_CANCEL_SENT = "step_cancel_sent", "Cancel sent"
    #: A forward step never started because its job stopped first.
    STEP_SKIPPED = "step_skipped", "Step skipped"
    #: The step's compensation succeeded: its effect is undone.
    STEP_COMPENSATED = "step_compensated", "Step compensated"
    #: The remote took the call and reports its result later (an HTTP 202, a queued message).
    CALL_ACCEPTED = "call_accepted", "Call accepted"
    #: The step waits: for capacity (its pool is at its limit), a signal, an approval or a time.
    STEP_WAITING = "step_waiting", "Step waiting"
    #: An approval step began waiting for an operator's decision (an alert kind).
    APPROVAL_REQUESTED = "approval_requested", "Approval requested"
    #: A signal was sent to the job (kept until a step consumes it); its sender is the actor.
    SIGNAL_RECEIVED = "signal_received", "Signal received"
    #: A waiting step consumed a signal: its payload is the step's output.
    STEP_SIGNALLED = "step_signalled", "Step signalled"
    #: An operator approved the waiting step.
    STEP_APPROVED = "step_approved", "Step approved"
    #: An operator rejected the waiting step: it failed.
    STEP_REJECTED = "step_rejected", "Step rejected"
    #: A timer step's time came: it succeeded.
    TIMER_FIRED = "timer_fired", "Timer fired"
    #: A signal or approval was not given before the step's timeout.
    WAIT_TIMED_OUT = "wait_timed_out", "Wait timed out"
    #: A wait with no decision reached a `remind` rung of its escalation (an alert kind).
    WAIT_REMINDED = "wait_reminded", "Wait reminded"
    #: A wait with no decision reached a `reassign`, `hold`, `fail` or `continue` rung of its
    #: escalation (an alert kind).
    WAIT_ESCALATED = "wait_escalated", "Wait escalated"
    #: A fan-out step expanded its list into items (how many, and the bound on calls in flight).
    ITEMS_STARTED = "items_started", "Items started"
    #: Enough of a fan-out step's items succeeded: the step succeeded with their outputs.
    JOIN_MET = "join_met", "Join met"
    #: A fan-out step's join can no longer be met: its items that succeeded are compensated.
    JOIN_FAILED = "join_failed", "Join failed"
    #: A repeat step began an iteration (its number in the event's data): the first when the step
    #: became ready, a later one when its interval passed.
    ITERATION_STARTED = "iteration_started", "Iteration started"
    #: A repeat step's iteration succeeded and its `until` was false: the next iteration is due
    #: after the interval (its number and time in the event's data).
    ITERATION_SCHEDULED = "iteration_scheduled", "Iteration scheduled"
    #: A repeat step's `until` held on an iteration's answer: the step succeeded with it.
    UNTIL_MET = "until_met", "Until met"
    #: A repeat step ran `max_iterations` without its `until` holding: `on_exhausted` decides.
    ITERATIONS_EXHAUSTED = "iterations_exhausted", "Iterations exhausted"
    #: A sub-workflow step started its child job (named in the event's data).
    CHILD_STARTED = "child_started", "Child job started"
    #: A sub-workflow step's child job succeeded: its result is the step's output.
    CHILD_SUCCEEDED = "child_succeeded", "Child job succeeded"
    #: A sub-workflow step's child job ended without success: the step failed.
    CHILD_FAILED = "child_failed", "Child job failed"
    #: A sub-workflow step whose child succeeded is undone: its child job compensates (its parent
    #: compensates, and every step after this one is undone).
    CHILD_COMPENSATING = "child_compensating", "Child job compensating"
    #: An operator ran the job again from a step, as a new job (named in the event's data).
    OPERATOR_RERUN = "operator_rerun", "Operator rerun"
    #: A schedule submitted the job.
    JOB_SCHEDULED = "job_scheduled", "Submitted by a schedule"
    #: A duplicate or superseded delivery of an attempt's task: nothing was called.
    DELIVERY_IGNORED = "delivery_ignored", "Delivery ignored"
    #: An operator retried a step (the user is named on the event).
    OPERATOR_RETRY = "operator_retry", "Operator retry"
    #: An operator resolved a step by hand.
    OPERATOR_RESOLVE = "operator_resolve", "Operator resolve"
    #: An operator asked for the job to be compensated.
    OPERATOR_COMPENSATE = "operator_compensate", "Operator compensate"
    #: An operator cancelled the job.
    OPERATOR_CANCEL = "operator_cancel", "Operator cancel"


#: Every event kind, for a quick membership check (TextChoices.values builds a list each time).
EVENT_KINDS = frozenset(EventKind.values)

#: Every way a step comes to succeed: counted as "steps succeeded" wherever throughput is shown.
STEP_SUCCESS_KINDS = frozenset(
    {
        EventKind.STEP_SUCCEEDED,
        EventKind.STEP_RECONCILED,
        EventKind.STEP_RESOLVED,
        EventKind.LATE_SUCCESS,
        EventKind.STEP_SIGNALLED,
        EventKind.STEP_APPROVED,
        EventKind.TIMER_FIRED,
    }
)


class Event(models.Model):
    """Append-only history of a job: every state change, decision and operator action."""

    # event_job_idx (job, id) serves lookups by job.
    # No foreign-key constraints in the database (db_constraint=False), on purpose: a constraint
    # on this partitioned log makes every job and step that retention deletes probe every month's
    # index. The trigger of migration 0015 checks at commit, as the constraint did, that an
    # event's job exists (taking the same key-share lock); steps leave only with their job.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events", **POINTER)
    step = models.ForeignKey(
        Step, null=True, blank=True, on_delete=models.CASCADE, related_name="events", db_constraint=False
    )
    kind = models.CharField(max_length=40, choices=EventKind.choices)
    from_status = models.CharField(max_length=20, blank=True, default="")
    to_status = models.CharField(max_length=20, blank=True, default="")
    attempt = models.PositiveIntegerField(null=True, blank=True)
    #: The user behind an operator action; null for the service's own decisions.
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    #: Who or what did it, readable: "scheduler", "agent", "supervisor:<holder>", "operator:<name>".
    source = models.CharField(max_length=200)
    reason = models.TextField(blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=EventKind.values), name="event_kind_valid"),
        ]
        indexes = [
            models.Index(fields=["job", "id"], name="event_job_idx"),
            # Throughput over the last hour and the console's "recent activity".
            models.Index(fields=["kind", "created_at"], name="event_kind_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.from_status}->{self.to_status}"


class ArchivedJob(models.Model):
    """A job written to the history archive: where its rows went, so that once retention has
    deleted it the API and the console answer its id with 410 naming the archive object instead of
    a bare 404. Written when the job is archived, some time before the delete; read only for ids
    that are no longer in the hot tables.

    One small row per job and no payload (the archive holds the rows); `submitter_id` keeps the
    visibility rule of a live job (another user's archived job is still a 404).
    """

    job_id = models.UUIDField(primary_key=True)
    #: A plain id, not a foreign key: the user may be deleted long after the job was archived.
    submitter_id = models.IntegerField(null=True, blank=True)
    settled_at = models.DateTimeField()
    #: The archive object's name in the archive store (`jobs-YYYY-MM-DD/<written>-<host>-<pid>-
    #: <random>.jsonl.gz`; written earlier, the day's single file `jobs-YYYY-MM-DD.jsonl.gz`).
    archive = models.CharField(max_length=255)
    archived_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-settled_at"]

    def __str__(self) -> str:
        return f"{self.job_id} -> {self.archive}"


class PruneRun(models.Model):
    """One run of history retention (scheduler.services.retention): what it archived and deleted.

    The operator's record of every deletion (besides its log line), and the durable "last run"
    that keeps the supervisor's daily chore to once a day whichever cluster holds the lease.
    """

    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    #: "command" (manage.py history_prune) or "supervisor:<holder>" (the daily chore).
    source = models.CharField(max_length=200)
    dry_run = models.BooleanField(default=False)
    #: Jobs settled before this instant were due.
    cutoff = models.DateTimeField()
    #: Jobs deleted from the hot tables.
    jobs = models.PositiveIntegerField("jobs deleted", default=0)
    #: Jobs written to the archive by this run (most were written earlier, as they settled).
    archived = models.PositiveIntegerField("jobs archived", default=0, db_default=0)
    #: Rows deleted per table: {"job": n, "step": n, "attempt": n, "event": n, "delivery": n}.
    rows = models.JSONField(default=dict, blank=True)
    #: The archive objects written to.
    files = models.JSONField(default=list, blank=True)
    #: Event partitions dropped (PostgreSQL).
    partitions_dropped = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["-started_at"], name="prunerun_started_idx")]

    def __str__(self) -> str:
        return f"prune {self.started_at:%Y-%m-%d %H:%M} {self.jobs} jobs"
