"""A job: one run of a workflow version, and its status vocabulary (final, settled, live).

Its status is written only by scheduler.transitions. The note above Job says which pointers
between jobs, steps, attempts and schedules are not foreign-key constraints, and what holds each.
"""

from __future__ import annotations

import uuid
from typing import Final, TypedDict

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from scheduler.models.definitions import Workflow
from scheduler.models.outbox import Delivery, DeliveryKind


class JobStatus(models.TextChoices):
    #: Created, nothing dispatched yet.
    PENDING = "pending", "Pending"
    #: Steps are being dispatched and run.
    RUNNING = "running", "Running"
    #: Every step succeeded (settled; a child job is undone when its parent compensates later).
    SUCCEEDED = "succeeded", "Succeeded"
    #: Undoing the steps that had (or may have had) side effects.
    COMPENSATING = "compensating", "Compensating"
    #: Compensation finished (final).
    COMPENSATED = "compensated", "Compensated"
    #: Gave up by policy without compensating (settled: an operator may reopen it).
    FAILED = "failed", "Failed"
    #: Cancelled by an operator; what ran was compensated (final).
    CANCELLED = "cancelled", "Cancelled"
    #: A step is held for an operator.
    NEEDS_ATTENTION = "needs_attention", "Needs attention"
    #: Created while its workflow's concurrency key was at its limit: nothing dispatched, no
    #: deadline yet; it starts when the key has room (scheduler.services.flow).
    WAITING = "waiting", "Waiting for its key"


#: Final: the state machine has no move out of these statuses at all.
JOB_FINAL = frozenset({JobStatus.COMPENSATED, JobStatus.CANCELLED})
#: Settled: no automatic move is left; the job's `finished_at` is set. Only an operator can move a
#: settled job on (a failed job may be retried or compensated), or, for a child job that
#: succeeded, its parent's compensation (it is undone); either clears `finished_at`.
JOB_SETTLED = JOB_FINAL | {JobStatus.FAILED, JobStatus.SUCCEEDED}
#: Live: the service itself will still move these jobs.
JOB_LIVE = frozenset(set(JobStatus) - JOB_SETTLED)


# Pointers that are not foreign-key constraints in the database (db_constraint=False), and what
# holds each instead. History retention deletes a million rows a day in batches, and every
# constraint costs a key probe at commit for each deleted row it covers: these four were half of
# that. They point between jobs, or within one, are written once when their row is created
# (under the lock of the row they point at) and never changed, and the one bulk deleter
# (scheduler.services.retention) follows the rule each constraint enforced; ORM deletes still
# apply `on_delete`. The ownership references (a step's job, an attempt's step, a delivery's
# job) stay constraints; an event's job is checked by a trigger (migration 0015).
# - Job.rerun_of: retention keeps a job while a rerun of it is in the tables.
# - Job.parent_job: retention keeps a job while a child of it is in the tables (children go
#   first), and a child while a job above it is live (it may still undo the child).
# - Step.reused_from: retention keeps a job while another job's step reuses one of its steps.
# - Step.compensates: a compensation step points into its own job, and leaves with it.
# - Schedule.last_job: retention clears it in the statement that deletes the job.
# The pointers from steps and attempts to what they run on are not constraints either: each
# was a key probe at every dispatch, and its row lock (FOR KEY SHARE) on the same few shared
# rows (the pool, its endpoint, the step's definition) took a multixact, dirtying that row's
# page, at every step. They are written from rows read in the same transaction, and kept so:
# - Step.definition: definitions go only with their workflow, which a job's workflow pointer (a
#   constraint) keeps while the job exists: a submission racing the workflow's deletion fails.
# - Step.pool, Attempt.pool: a pool is deleted only when no step definition names it (that
#   pointer stays a constraint), no other pool has it as alternate, and no step or attempt
#   points at it (the ORM's PROTECT).
# - Step.endpoint, Attempt.endpoint: an endpoint removed from its pool is cleared from the steps
#   and attempts that point at it (SET_NULL, by the ORM); an attempt dispatched to it in the
#   same instant keeps a pointer to no row, which every reader takes as that cleared endpoint
#   (an outer join: the call goes to the attempt's `endpoint_url`, with no pool secret).


class Unconstrained(TypedDict, total=False):
    """The keywords that make a pointer named in the note above: no foreign-key constraint in the
    database, and no index of its own (a pointer that is looked up by has one in its Meta)."""

    blank: bool
    db_index: bool
    db_constraint: bool


#: A pointer named in the note above (`**POINTER` in its ForeignKey).
POINTER: Final[Unconstrained] = {"db_index": False, "db_constraint": False}
#: A pointer named in the note above that may point nowhere. Its `null=True` stays in the call
#: itself, where the type checker reads it (the attribute's type is then optional).
OPTIONAL_POINTER: Final[Unconstrained] = {"blank": True, **POINTER}


#: The workflow of the service's canary (supervisor.canary): its jobs are the service's own, kept
#: out of users' lists, the job counters of /metrics and the history archive. The name is reserved.
CANARY_WORKFLOW = "sas-canary"


class Job(models.Model):
    """One run of a workflow version."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workflow = models.ForeignKey(Workflow, on_delete=models.PROTECT, related_name="jobs")
    status = models.CharField(max_length=20, choices=JobStatus.choices, default=JobStatus.PENDING)
    input = models.JSONField(default=dict)
    result = models.JSONField(null=True, blank=True)
    submitter = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # NULL, not "": the unique constraint must only bind jobs that were given a key.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    #: Hash of the submitted body, to tell a replay from a conflicting reuse of a key.
    request_hash = models.CharField(max_length=64, blank=True, default="")
    #: Why compensation started: "failure", "cancel", "deadline", "operator" or (a child job)
    #: "parent". Empty before.
    compensation_reason = models.CharField(max_length=16, blank=True, default="")
    #: Set while an operator has paused the job: no new dispatches. Orthogonal to `status`.
    paused_at = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField(null=True, blank=True)
    #: Where to POST the job's summary when it settles (empty: nowhere). Checked like an endpoint.
    #: The database supplies the default too (db_default), so that processes of the previous
    #: release, which do not know these columns, keep inserting jobs until they restart.
    callback_url = models.CharField(max_length=500, blank=True, default="", db_default="")
    #: The W3C traceparent of the job's trace, when tracing is on: every span of the job joins it.
    trace_parent = models.CharField(max_length=55, blank=True, default="", db_default="")
    #: The submitter's own name for what the job is about ("order 1001"): searchable, not unique.
    business_key = models.CharField(max_length=200, blank=True, default="", db_default="")
    #: Steps waiting for capacity in a limited pool go out highest priority first, then oldest.
    priority = models.IntegerField(default=0, db_default=0)
    #: The job this one runs again from a chosen step (an operator's rerun). Not a constraint in
    #: the database (see the note above Job).
    rerun_of = models.ForeignKey(
        "self", null=True, on_delete=models.SET_NULL, related_name="reruns", **OPTIONAL_POINTER
    )
    #: A child job: the job and the step (by name) that started it (a sub-workflow step).
    parent_job = models.ForeignKey(
        "self", null=True, on_delete=models.SET_NULL, related_name="children", **OPTIONAL_POINTER
    )
    parent_step = models.CharField(max_length=120, blank=True, default="", db_default="")
    #: A child job: which try of its parent step it is (0: the first child; a failed child that
    #: its step's policy retries is followed by try 1, 2, ...). The step's current child is the
    #: one whose try is the step's `attempt` (scheduler.services.children).
    parent_try = models.PositiveIntegerField(default=0, db_default=0)
    #: The value of the workflow's concurrency key read from the input (scheduler.services.flow);
    #: empty for a workflow without one, or when the key reads nothing.
    concurrency_key = models.CharField(max_length=200, blank=True, default="", db_default="")
    #: The inbound event (scheduler.models.InboundEvent) whose trigger started the job, by id:
    #: not a foreign key, since events are forgotten after SAS_EVENT_RETENTION_HOURS and the job
    #: still says what started it.
    started_by_event = models.BigIntegerField(null=True, blank=True)
    #: The gate a waiting job waits at before its concurrency key (scheduler.services.gates):
    #: "debounce" or "throttle"; empty when it waits for its key, or does not wait.
    start_gate = models.CharField(max_length=16, blank=True, default="", db_default="")
    #: When the gate opens for it (its quiet period's end, or its place in the throttle's window).
    start_at = models.DateTimeField(null=True, blank=True)
    #: The value of the workflow's debounce key read from the input; empty without one.
    debounce_key = models.CharField(max_length=200, blank=True, default="", db_default="")
    #: The submission of the first job of the chain this one replaced (itself when it replaced
    #: none): the debounce's max_seconds counts from it.
    debounce_since = models.DateTimeField(null=True, blank=True)
    #: The value of the workflow's throttle key read from the input; empty without one.
    throttle_key = models.CharField(max_length=200, blank=True, default="", db_default="")
    #: The start the throttle counted for this job in its key's window (set when it passed the
    #: throttle, whether at once or after waiting for its place).
    throttle_slot = models.DateTimeField(null=True, blank=True)
    #: The supervisor found the job likely to miss its workflow's `sla_seconds` (supervisor.sla):
    #: set once, with its `job_at_risk` event, and never cleared (a job that then finishes in
    #: time was still at risk). A flag beside `status`, not a status: being late changes nothing
    #: the job does.
    at_risk = models.BooleanField(default=False, db_default=False)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    #: When the settled job was written to the history archive (scheduler.services.retention),
    #: which it is some time before retention deletes it. Any later event clears it again (the
    #: trigger of migration 0015), so the job is archived anew before it may be deleted.
    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [
            ("submit_job", "Can submit jobs and read their own"),
            ("operate_job", "Can read every job and act on jobs and steps"),
            ("manage_definitions", "Can create and edit workflows, pools and policies"),
            ("view_all_jobs", "Can read every job, the console and the definitions"),
            ("post_events", "Can post inbound events and nothing else"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=JobStatus.values), name="job_status_valid"),
            models.UniqueConstraint(
                fields=["submitter", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="job_unique_idempotency_key",
            ),
            # A sub-workflow step starts one child per try, however often its start is
            # redelivered or its step retried.
            models.UniqueConstraint(
                fields=["parent_job", "parent_step", "parent_try"],
                condition=Q(parent_job__isnull=False),
                name="job_unique_child",
            ),
        ]
        indexes = [
            # Job lists filtered by status, newest first (API, console).
            models.Index(fields=["status", "-created_at"], name="job_status_created_idx"),
            models.Index(fields=["-created_at"], name="job_created_idx"),
            # Search by business key (only jobs that have one).
            models.Index(
                fields=["business_key", "-created_at"],
                condition=~Q(business_key=""),
                name="job_business_key_idx",
            ),
            # The jobs holding or waiting for a concurrency key (only jobs that have one).
            models.Index(
                fields=["concurrency_key", "status"],
                condition=~Q(concurrency_key=""),
                name="job_concurrency_key_idx",
            ),
            # The waiting jobs whose start gate opens first (scheduler.services.gates.gates_due,
            # the scan's sweep and the supervisor loop's tick).
            models.Index(
                fields=["start_at"],
                condition=Q(status="waiting") & ~Q(start_gate=""),
                name="job_start_gate_idx",
            ),
            # The job a newer one of its debounce key replaces (scheduler.services.gates).
            models.Index(
                fields=["debounce_key"],
                condition=Q(status="waiting", start_gate="debounce"),
                name="job_debounce_key_idx",
            ),
            # The latest starts of a throttle key, newest first (scheduler.services.gates).
            models.Index(
                fields=["throttle_key", "-throttle_slot"],
                condition=Q(throttle_slot__isnull=False),
                name="job_throttle_slot_idx",
            ),
            # A job's reruns.
            models.Index(fields=["rerun_of"], condition=Q(rerun_of__isnull=False), name="job_rerun_of_idx"),
            # History retention (scheduler.services.retention): the oldest settled jobs first.
            # One entry per job, written once when it settles.
            models.Index(
                fields=["finished_at"], condition=Q(finished_at__isnull=False), name="job_settled_idx"
            ),
            # The archiver's backlog: settled jobs not (or no longer) in the archive. It holds
            # only the last hour's settled jobs and those an event touched after archiving.
            models.Index(
                fields=["finished_at"],
                condition=Q(finished_at__isnull=False, archived_at__isnull=True),
                name="job_unarchived_idx",
            ),
            # The supervisor's at-risk sweep (supervisor.sla) and the console's At risk page: live
            # jobs not flagged yet, oldest first, and the flagged ones.
            models.Index(
                fields=["created_at", "id"],
                condition=Q(status__in=sorted(JOB_LIVE)) & Q(at_risk=False),
                name="job_live_unflagged_idx",
            ),
            models.Index(fields=["-created_at"], condition=Q(at_risk=True), name="job_at_risk_idx"),
            # The supervisor's job-deadline sweep: live jobs with a deadline only.
            models.Index(
                fields=["deadline"],
                condition=Q(status__in=sorted(JOB_LIVE)) & Q(deadline__isnull=False),
                name="job_live_deadline_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workflow.name} {self.id}"

    @property
    def callbacks(self) -> list[Delivery]:
        """The job's completion callbacks, oldest first (prefetched by the selectors)."""
        prefetched: list[Delivery] | None = getattr(self, "_prefetched_callbacks", None)
        if prefetched is not None:
            return prefetched
        return list(self.deliveries.filter(kind=DeliveryKind.CALLBACK).order_by("id"))
