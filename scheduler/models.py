"""Durable state of the scheduler: workflows, remediation policies, jobs, steps, attempts, the
event history, the outbox and the alert subscriptions it delivers to, and schedules.

Status fields are written only by scheduler.transitions (the state machines); everything else
reads them. Over 500 lines because each table sits next to its vocabulary (statuses, event kinds)
and its constraints, which the PostgreSQL functions and the migrations mirror: one place to read
what a row may hold.
"""

from __future__ import annotations

import base64
import secrets
import uuid
from typing import TYPE_CHECKING

from django.conf import settings
from django.conf import settings as django_settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from agents.outcome import AttemptKind, Outcome

if TYPE_CHECKING:
    from agents.models import AgentPool


class Workflow(models.Model):
    """A named, versioned DAG of steps. A version never changes; an edit makes a new version."""

    name = models.SlugField(max_length=100)
    version = models.PositiveIntegerField(default=1)
    description = models.TextField(blank=True, default="")
    #: Optional time limit of a whole job, counted from submission.
    deadline_seconds = models.FloatField(null=True, blank=True)
    #: Optional JSON Schema (2020-12) every job's input must match (scheduler.contracts).
    input_schema = models.JSONField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    #: The SQL fast path (sas_submit, sas_record_outcome) runs this version's jobs: every step is
    #: a plain call (scheduler.definitions.step_plain), decided once when the version is created
    #: (a version never changes). The database's default says no: a version written by anything
    #: but workflow_create goes the Python way.
    plain = models.BooleanField(default=False, db_default=False, editable=False)

    class Meta:
        ordering = ["name", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["name", "version"], name="workflow_unique_version"),
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"


class OnExhausted(models.TextChoices):
    #: Undo what the job's steps did, in reverse dependency order.
    COMPENSATE = "compensate", "Compensate the job"
    #: End the job `failed` and leave side effects as they are.
    FAIL = "fail", "Fail the job"
    #: Park the step for an operator; the job shows `needs_attention`.
    HOLD = "hold", "Hold for an operator"


RETRYABLE_OUTCOMES = ("transient_failure", "no_answer", "business_failure")


def default_retry_on() -> list[str]:
    return ["transient_failure", "no_answer"]


class RemediationPolicy(models.Model):
    """How a step that failed or did not answer is treated: its deadline, retries, backoff and
    what happens when they run out.

    Data the dispatch reads (the attempt's deadline) and the supervisor decides with
    (supervisor.policies.decide), so it lives here, below both; the supervisor owns the editing.
    Read at decision time, so an edit applies to in-flight steps at their next decision. Every
    edit bumps `version` and writes a PolicyRevision (supervisor.policies.policy_update).
    """

    name = models.SlugField(max_length=100, unique=True)
    version = models.PositiveIntegerField(default=1)
    timeout_seconds = models.FloatField(default=10.0, help_text="Deadline of one attempt.")
    max_attempts = models.PositiveIntegerField(default=3, help_text="Calls in total, first included.")
    backoff_initial_seconds = models.FloatField(default=1.0)
    backoff_multiplier = models.FloatField(default=2.0)
    backoff_max_seconds = models.FloatField(default=60.0)
    backoff_jitter = models.FloatField(
        default=0.5,
        help_text="Fraction of the delay drawn at random: 0 = none, 1 = full jitter.",
    )
    retry_on = models.JSONField(default=default_retry_on, help_text="Outcomes that are retried.")
    reassign_after_attempts = models.PositiveIntegerField(
        null=True, blank=True, help_text="After this many failed calls move to the alternate pool."
    )
    on_exhausted = models.CharField(
        max_length=16, choices=OnExhausted.choices, default=OnExhausted.COMPENSATE
    )
    reconcile_before_retry = models.BooleanField(
        default=False,
        help_text="For an unknown outcome, ask the remote (status path) before calling again.",
    )
    step_budget_seconds = models.FloatField(
        null=True, blank=True, help_text="Total time across all attempts of a step."
    )
    heartbeat_seconds = models.FloatField(
        null=True,
        blank=True,
        help_text="A call that answers later (HTTP 202, queue) must report progress at least this "
        "often: silence for longer is no answer. Each heartbeat moves the deadline this far ahead.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        # The tables keep the names they were created with: the database code joins them by name.
        db_table = "supervisor_remediationpolicy"
        verbose_name_plural = "remediation policies"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(on_exhausted__in=OnExhausted.values),
                name="policy_on_exhausted_valid",
            ),
            models.CheckConstraint(condition=models.Q(timeout_seconds__gt=0), name="policy_timeout_positive"),
            models.CheckConstraint(condition=models.Q(max_attempts__gte=1), name="policy_max_attempts_min"),
            models.CheckConstraint(
                condition=models.Q(backoff_jitter__gte=0, backoff_jitter__lte=1),
                name="policy_jitter_fraction",
            ),
            models.CheckConstraint(
                condition=models.Q(heartbeat_seconds__isnull=True) | models.Q(heartbeat_seconds__gt=0),
                name="policy_heartbeat_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"


class PolicyRevision(models.Model):
    """Append-only: the full settings of each version of a policy, who made it and what changed."""

    policy = models.ForeignKey(RemediationPolicy, on_delete=models.CASCADE, related_name="revisions")
    version = models.PositiveIntegerField()
    settings = models.JSONField(help_text="All fields of the policy at this version.")
    changes = models.JSONField(default=dict, help_text="{field: [old, new]} against the previous version.")
    # `settings` is the row's own field in this class body, hence the project's settings by alias.
    changed_by = models.ForeignKey(
        django_settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    changed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "supervisor_policyrevision"
        ordering = ["policy_id", "version"]
        constraints = [
            models.UniqueConstraint(fields=["policy", "version"], name="policyrevision_unique_version"),
        ]

    def __str__(self) -> str:
        return f"{self.policy_id} v{self.version}"


class StepDefinitionKind(models.TextChoices):
    #: A call of a remote through a pool's agent (every step before wait steps existed).
    CALL = "call", "Call"
    #: Waits for a named signal sent to the job (POST /api/v1/jobs/{id}/signals/).
    SIGNAL = "signal", "Wait for a signal"
    #: Waits for an operator's Approve or Reject.
    APPROVAL = "approval", "Wait for an approval"
    #: Waits for a duration, or until a time read from the input or an ancestor's output.
    TIMER = "timer", "Wait for a time"
    #: Starts a child job of a named workflow and waits for it (scheduler.services.children).
    WORKFLOW = "workflow", "Run a sub-workflow"


#: The kinds that wait instead of calling: no pool, no attempt, no worker while they wait.
WAIT_KINDS = frozenset({StepDefinitionKind.SIGNAL, StepDefinitionKind.APPROVAL, StepDefinitionKind.TIMER})


class JoinMode(models.TextChoices):
    #: Every item must succeed (the default).
    ALL = "all", "All items"
    #: At least `join_count` items must succeed.
    AT_LEAST = "at_least", "At least N items"
    #: One item succeeding is enough; the rest are stopped.
    ANY = "any", "Any one item"


class OnTimeout(models.TextChoices):
    #: Park the step for an operator (the job needs attention).
    HOLD = "hold", "Hold for an operator"
    #: The step fails; its policy's on_exhausted decides the job (compensate by default).
    FAIL = "fail", "Fail the step"
    #: The step succeeds with the definition's default output.
    CONTINUE = "continue", "Continue with the default output"


class StepDefinition(models.Model):
    """One step of a workflow version: a call (its action, compensation, dependencies and
    policy) or a wait (for a signal, an approval or a time; scheduler.services.waits)."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="steps")
    name = models.SlugField(max_length=100)
    position = models.PositiveIntegerField(default=0)
    kind = models.CharField(
        max_length=16, choices=StepDefinitionKind.choices, default=StepDefinitionKind.CALL, db_default="call"
    )
    #: The pool of a call; a wait has none.
    pool = models.ForeignKey(
        "agents.AgentPool", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    #: HTTP: the path POSTed under the endpoint's base URL. Python: the callable's dotted path.
    path = models.CharField(max_length=300, blank=True, default="")
    #: Optional: where to ask whether operation `{operation_id}` happened (GET, 200/404).
    status_path = models.CharField(max_length=300, blank=True, default="")
    #: Optional: the action that undoes this one. Empty means nothing to undo.
    compensation_path = models.CharField(max_length=300, blank=True, default="")
    depends_on = models.JSONField(default=list, blank=True, help_text="Names of earlier steps.")
    #: A call's remediation policy; a wait's (optional) says what its failure does to the job.
    policy = models.ForeignKey(
        RemediationPolicy, null=True, blank=True, on_delete=models.PROTECT, related_name="step_definitions"
    )
    #: signal: the name of the signal the step waits for.
    signal = models.CharField(max_length=100, blank=True, default="", db_default="")
    #: approval: the group whose members may decide (empty: the operators).
    group = models.CharField(max_length=150, blank=True, default="", db_default="")
    #: signal, approval: how long the wait may last (none: for ever).
    timeout_seconds = models.FloatField(null=True, blank=True)
    #: signal, approval: what the timeout does.
    on_timeout = models.CharField(
        max_length=8, choices=OnTimeout.choices, blank=True, default="", db_default=""
    )
    #: signal, approval with on_timeout `continue`: the step's output after a timeout.
    default_output = models.JSONField(null=True, blank=True)
    #: timer: wait this long after the step becomes ready; or...
    wait_seconds = models.FloatField(null=True, blank=True)
    #: ... until the ISO 8601 time at this field: `input.<path>` or `<ancestor step>.<path>`.
    until = models.CharField(max_length=300, blank=True, default="", db_default="")
    #: A condition (JMESPath over `input` and `results`): when false, the step is skipped.
    when = models.CharField(max_length=1000, blank=True, default="", db_default="")
    #: Run even when every step it depends on was skipped (otherwise it is skipped too).
    run_if_skipped = models.BooleanField(default=False, db_default=False)
    #: The body's `input` the remote receives instead of the job's (API `input`): a JMESPath
    #: expression (a string), or a JSON template whose keys ending in `.$` hold expressions.
    input_map = models.JSONField(null=True, blank=True)
    #: Which part of the remote's answer becomes the step's output (API `output`; JMESPath).
    output_map = models.CharField(max_length=1000, blank=True, default="", db_default="")
    #: Fan-out: an expression yielding a list; each element becomes an item of the step.
    for_each = models.CharField(max_length=1000, blank=True, default="", db_default="")
    #: Fan-out: an expression over `item` whose value names the item in its operation ID
    #: (empty: its index).
    item_key = models.CharField(max_length=1000, blank=True, default="", db_default="")
    #: Fan-out: the most items with a call in flight at once (empty: no bound beyond the pool's).
    max_parallel = models.PositiveIntegerField(null=True, blank=True)
    #: Fan-out: how many items must succeed (empty means all).
    join_mode = models.CharField(
        max_length=8, choices=JoinMode.choices, blank=True, default="", db_default=""
    )
    join_count = models.PositiveIntegerField(null=True, blank=True)
    #: workflow: the name of the workflow the step runs as a child job (its latest version).
    child_workflow = models.CharField(max_length=100, blank=True, default="", db_default="")
    #: sas_record_outcome may record this step's success (an item's, for a fan-out) as it came:
    #: nothing projects it and it settles nothing by itself (scheduler.definitions.outcome_plain),
    #: decided when the version is created. The database's default says no.
    plain_outcome = models.BooleanField(default=False, db_default=False, editable=False)

    class Meta:
        ordering = ["workflow_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["workflow", "name"], name="stepdefinition_unique_name"),
            models.CheckConstraint(
                condition=Q(kind__in=StepDefinitionKind.values), name="stepdefinition_kind_valid"
            ),
            # A call has a pool and a policy; a wait has no pool.
            models.CheckConstraint(
                condition=(Q(kind="call") & Q(pool__isnull=False) & Q(policy__isnull=False))
                | (~Q(kind="call") & Q(pool__isnull=True)),
                name="stepdefinition_call_has_pool",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_id}:{self.name}"

    @property
    def waits(self) -> bool:
        return self.kind in WAIT_KINDS

    @property
    def call_policy(self) -> RemediationPolicy:
        """The policy of a call step (every call has one; the constraint holds it)."""
        if self.policy is None:
            raise ValueError(f"step {self.name} is a {self.kind} step: it has no call policy")
        return self.policy


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
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="reruns",
        db_index=False,
        db_constraint=False,
    )
    #: A child job: the job and the step (by name) that started it (a sub-workflow step).
    parent_job = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="children",
        db_index=False,
        db_constraint=False,
    )
    parent_step = models.CharField(max_length=120, blank=True, default="", db_default="")
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
        ]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=JobStatus.values), name="job_status_valid"),
            models.UniqueConstraint(
                fields=["submitter", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="job_unique_idempotency_key",
            ),
            # A sub-workflow step starts one child, however often it is retried or redelivered.
            models.UniqueConstraint(
                fields=["parent_job", "parent_step"],
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


class StepKind(models.TextChoices):
    #: A step of the workflow.
    ACTION = "action", "Action"
    #: Undoes an action step of the same job (saga).
    COMPENSATION = "compensation", "Compensation"
    #: One element of a fan-out step (`parent`): its own operation ID, attempts and retries.
    ITEM = "item", "Item"


class StepStatus(models.TextChoices):
    #: Waiting on its dependencies.
    PENDING = "pending", "Pending"
    #: Holds no worker and no queue row while it waits: a call whose pool is at its limit
    #: (max_in_flight, max_per_second; no deadline), dispatched as capacity frees, highest job
    #: priority first; or a wait step (signal, approval, timer), whose `deadline` is its timeout
    #: or its timer's time.
    WAITING = "waiting", "Waiting"
    #: An attempt is in flight; `deadline` says when it is overdue.
    DISPATCHED = "dispatched", "Dispatched"
    #: The last attempt failed; the supervisor decides what next.
    ATTEMPT_FAILED = "attempt_failed", "Attempt failed"
    #: The last attempt got no answer: it may or may not have happened.
    UNKNOWN = "unknown", "Outcome unknown"
    #: A retry is decided; it is dispatched once `not_before` has passed.
    RETRY_WAIT = "retry_wait", "Waiting to retry"
    #: Parked for an operator.
    HELD = "held", "Held"
    #: Done (settled; its compensation may still undo it).
    SUCCEEDED = "succeeded", "Succeeded"
    #: Given up (settled; an operator may retry it, or the saga compensate it).
    FAILED = "failed", "Failed"
    #: Never started: its job stopped first, or its condition was false (final).
    SKIPPED = "skipped", "Skipped"
    #: Its compensation succeeded (final).
    COMPENSATED = "compensated", "Compensated"


STEP_LIVE = frozenset(
    {
        StepStatus.PENDING,
        StepStatus.WAITING,
        StepStatus.DISPATCHED,
        StepStatus.ATTEMPT_FAILED,
        StepStatus.UNKNOWN,
        StepStatus.RETRY_WAIT,
        StepStatus.HELD,
    }
)
#: Settled: the step's own work is over and `finished_at` is set. Only the saga (undoing a step
#: that succeeded or may have had an effect) or an operator moves a settled step.
STEP_SETTLED = frozenset(
    {StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.SKIPPED, StepStatus.COMPENSATED}
)
#: Final: no move out of these at all.
STEP_FINAL = frozenset({StepStatus.SKIPPED, StepStatus.COMPENSATED})
#: Statuses the supervisor scan looks at (a subset of STEP_LIVE).
STEP_SCANNED = frozenset(
    {StepStatus.DISPATCHED, StepStatus.ATTEMPT_FAILED, StepStatus.UNKNOWN, StepStatus.RETRY_WAIT}
)


class Step(models.Model):
    """One step of one job. `operation_id` is what the remote de-duplicates on: it changes only when
    an operator retries the step with an edited input (a different request needs a new ID)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="steps")
    definition = models.ForeignKey(
        StepDefinition, on_delete=models.PROTECT, related_name="+", db_index=False, db_constraint=False
    )
    name = models.CharField(max_length=120)
    kind = models.CharField(max_length=16, choices=StepKind.choices, default=StepKind.ACTION)
    #: The step of the same job that this compensation step undoes (see the note above Job).
    compensates = models.OneToOneField(
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="compensation",
        db_constraint=False,
    )
    status = models.CharField(max_length=20, choices=StepStatus.choices, default=StepStatus.PENDING)
    operation_id = models.CharField(max_length=200, unique=True)
    #: Fencing number: grows on every dispatch; every write from an attempt checks it.
    attempt = models.PositiveIntegerField(default=0)
    #: Calls made (reconcile queries not counted); what max_attempts limits.
    calls = models.PositiveIntegerField(default=0)
    last_outcome = models.CharField(max_length=20, choices=Outcome.choices, blank=True, default="")
    #: The pool it calls (a wait step has none).
    pool = models.ForeignKey(
        "agents.AgentPool",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    endpoint = models.ForeignKey(
        "agents.AgentEndpoint",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    deadline = models.DateTimeField(null=True, blank=True)
    not_before = models.DateTimeField(null=True, blank=True)
    first_dispatched_at = models.DateTimeField(null=True, blank=True)
    output = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    #: Why the step is in its status, when the status alone does not say (why it was skipped).
    status_reason = models.TextField(blank=True, default="", db_default="")
    #: The input this step is called with instead of the job's (an operator's edited retry).
    input_override = models.JSONField(null=True, blank=True)
    #: In a rerun, the step of the original job whose output this one reuses (it is not called).
    reused_from = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    #: An item's fan-out step (same job), its position in the list and the element itself.
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="items",
        db_index=False,
        db_constraint=False,
    )
    item_index = models.PositiveIntegerField(null=True, blank=True)
    item = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job_id", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=StepStatus.values), name="step_status_valid"),
            models.CheckConstraint(condition=Q(kind__in=StepKind.values), name="step_kind_valid"),
            # One item per position of a fan-out; the items API pages through this index.
            models.UniqueConstraint(
                fields=["parent", "item_index"],
                condition=Q(parent__isnull=False),
                name="step_item_unique_index",
            ),
        ]
        indexes = [
            # The supervisor scan (supervisor.scan.due_steps) and the Needs-attention list read live
            # steps only; terminal history never enters this index, so their cost follows the live
            # work, not the size of the table.
            models.Index(
                fields=["status", "deadline"],
                condition=Q(status__in=sorted(STEP_LIVE)),
                name="step_live_idx",
            ),
            # The reruns' reused steps (few): deleting a step (history retention) checks that no
            # step still reuses it, which without this index is a scan of the whole table per step.
            models.Index(
                fields=["reused_from"], condition=Q(reused_from__isnull=False), name="step_reused_from_idx"
            ),
            # A fan-out's items by status: what its join counts and the outcome function probes on
            # every item's outcome (scheduler.services.fanout).
            models.Index(
                fields=["parent", "status"], condition=Q(parent__isnull=False), name="step_item_status_idx"
            ),
            # Capacity: a limited pool's calls in flight and its steps waiting for a slot.
            models.Index(
                fields=["pool", "status"],
                condition=Q(status__in=["dispatched", "waiting"]),
                name="step_pool_busy_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"

    @property
    def fans_out(self) -> bool:
        """A fan-out step (`for_each`): it calls nothing itself, its items do."""
        return bool(self.definition.for_each) and self.kind == StepKind.ACTION

    @property
    def forward(self) -> bool:
        """A step of the job's forward work (an action, or an item of a fan-out), not an undo."""
        return self.kind != StepKind.COMPENSATION

    @property
    def call_pool(self) -> AgentPool:
        """The pool a call step calls (a wait step has none, and is never dispatched)."""
        if self.pool is None:
            raise ValueError(f"step {self.name} waits: it has no pool")
        return self.pool


class Attempt(models.Model):
    """One dispatch of a step. History: the outcome is never rewritten once set.

    A result that arrives after the outcome was set (a late success, or a late failure that
    changes nothing) is recorded beside it in `late_outcome`, once, so that the original verdict
    stays visible and a copy of that result is known as one.
    """

    # (step, number) is unique: that index also serves lookups by step.
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="attempts", db_index=False)
    number = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=AttemptKind.choices, default=AttemptKind.CALL)
    pool = models.ForeignKey(
        "agents.AgentPool", on_delete=models.PROTECT, related_name="+", db_index=False, db_constraint=False
    )
    endpoint = models.ForeignKey(
        "agents.AgentEndpoint",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="attempts",
        db_index=False,
        db_constraint=False,
    )
    endpoint_url = models.CharField(max_length=500, blank=True, default="")
    policy_version = models.PositiveIntegerField()
    dispatched_at = models.DateTimeField()
    deadline = models.DateTimeField()
    #: Set by the one agent delivery that claimed this attempt; a duplicate delivery finds it set.
    started_at = models.DateTimeField(null=True, blank=True)
    #: The broker's queue row of this attempt's task, while known: an overdue attempt whose task
    #: still waits in the queue is waiting for a worker, not for the remote.
    queue_row = models.BigIntegerField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, choices=Outcome.choices, blank=True, default="")
    #: Who decided the outcome: "agent", "supervisor" or "operator:<name>".
    decided_by = models.CharField(max_length=150, blank=True, default="")
    status_code = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    response_excerpt = models.TextField(blank=True, default="")
    error = models.TextField(blank=True, default="")
    late_outcome = models.CharField(max_length=20, choices=Outcome.choices, blank=True, default="")
    late_at = models.DateTimeField(null=True, blank=True)
    #: The last progress report of a call that answers later, and what it said (sent on to the
    #: next attempt of the same operation, so that the remote can resume).
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    heartbeat_details = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["step_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["step", "number"], name="attempt_unique_number"),
            # At most one attempt of a step is in flight at any time.
            models.UniqueConstraint(
                fields=["step"], condition=Q(finished_at__isnull=True), name="attempt_one_live_per_step"
            ),
            models.CheckConstraint(
                condition=Q(outcome="") | Q(outcome__in=Outcome.values), name="attempt_outcome_valid"
            ),
            models.CheckConstraint(condition=Q(kind__in=AttemptKind.values), name="attempt_kind_valid"),
        ]
        indexes = [
            # Endpoint health: the last finished calls of one endpoint.
            models.Index(fields=["endpoint", "-finished_at"], name="attempt_endpoint_recent_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.step_id}#{self.number} {self.outcome or 'in flight'}"


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
    #: A fan-out step expanded its list into items (how many, and the bound on calls in flight).
    ITEMS_STARTED = "items_started", "Items started"
    #: Enough of a fan-out step's items succeeded: the step succeeded with their outputs.
    JOIN_MET = "join_met", "Join met"
    #: A fan-out step's join can no longer be met: its items that succeeded are compensated.
    JOIN_FAILED = "join_failed", "Join failed"
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
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="events", db_index=False, db_constraint=False
    )
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


class Signal(models.Model):
    """A message sent to a running job (POST /api/v1/jobs/{id}/signals/), kept until a step
    waiting for its name consumes it: a signal that comes before its step waits is buffered.

    Written in the transaction of its `signal_received` event; consumed by a guarded write
    (`consumed_at` still null) in the transaction that completes the waiting step, so each signal
    is consumed at most once. With an idempotency key, one key makes one signal per job.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="signals", db_index=False)
    name = models.CharField(max_length=100)
    payload = models.JSONField(null=True, blank=True)
    # NULL, not "": the unique constraint must only bind signals that were given a key.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    #: Hash of the name and payload, to tell a replay from a conflicting reuse of a key.
    request_hash = models.CharField(max_length=64, blank=True, default="")
    sender = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    #: The step that consumed it (of the same job), and when.
    consumed_by = models.ForeignKey(
        Step, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    consumed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="signal_unique_idempotency_key",
            ),
        ]
        indexes = [
            # A job's signals (API, job page, retention) and the buffered ones a step consumes.
            models.Index(fields=["job", "name", "id"], name="signal_job_name_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name} -> {self.job_id}"


class DeliveryKind(models.TextChoices):
    #: A job's completion callback, POSTed to the URL its submitter gave.
    CALLBACK = "callback", "Completion callback"
    #: An alert POSTed to a subscription's webhook.
    WEBHOOK = "webhook", "Alert webhook"
    #: An alert sent to a subscription's email address.
    EMAIL = "email", "Alert email"


class DeliveryStatus(models.TextChoices):
    #: Waiting for its (next) try.
    PENDING = "pending", "Pending"
    #: The receiver took it (2xx; or the mail server accepted it).
    DELIVERED = "delivered", "Delivered"
    #: Given up after its tries; kept, visible, and retried only by hand.
    FAILED = "failed", "Failed"


class AlertKind(models.TextChoices):
    #: A step is held for an operator (the job needs attention).
    STEP_NEEDS_ATTENTION = "step_needs_attention", "A step needs attention"
    #: A job failed.
    JOB_FAILED = "job_failed", "A job failed"
    #: A job was compensated.
    JOB_COMPENSATED = "job_compensated", "A job was compensated"
    #: The supervisor's last scan is older than three intervals.
    SUPERVISOR_STALE = "supervisor_stale", "The supervisor stopped scanning"
    #: An endpoint's circuit opened (most of its recent calls failed).
    CIRCUIT_OPENED = "circuit_opened", "An endpoint's circuit opened"
    #: An approval step waits for an operator's decision.
    APPROVAL_REQUESTED = "approval_requested", "An approval is requested"
    #: Writing the history archive failed (a full or read-only disk): archiving backs off.
    ARCHIVE_FAILED = "archive_failed", "The history archive cannot be written"
    #: A loop that serves many jobs set one item aside (held it for an operator, paused a
    #: schedule) because handling it raised: the rest went on (scheduler.services.quarantine).
    QUARANTINED = "quarantined", "An item was quarantined by a supervision loop"
    #: Remediable steps are overdue for longer than the takeover threshold while the lease
    #: holder keeps renewing: another cluster took the lease (supervisor.debt).
    SUPERVISOR_NOT_REMEDIATING = "supervisor_not_remediating", "The supervisor is not remediating"
    #: A canary job (the recovery path exercised end to end) did not succeed in its expected time.
    CANARY_UNREMEDIATED = "canary_unremediated", "The canary job was not remediated in time"


def all_alert_kinds() -> list[str]:
    return list(AlertKind.values)


#: The prefix of a Standard Webhooks secret: `whsec_` and the base64 of the key's bytes.
SIGNING_SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret


def signing_secret_new() -> str:
    """A new Standard Webhooks signing secret: `whsec_` and 32 random bytes in base64."""
    return SIGNING_SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


class SigningSecrets(models.Model):
    """The keys a receiver verifies messages with (supervisor.signing): the current one, and the
    one it replaced, which still signs until `previous_until` so that receivers can change their
    key without refusing a message. Never shown in logs, events, the job API or the archive."""

    signing_secret = models.CharField(max_length=100, default=signing_secret_new)
    previous_signing_secret = models.CharField(max_length=100, blank=True, default="")
    #: The previous secret signs (beside the current one) until this instant.
    previous_signing_until = models.DateTimeField(null=True, blank=True)
    signing_rotated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True


class AlertSubscription(SigningSecrets):
    """Who is told when something needs a person: a webhook (signed with the subscription's own
    secret) and/or an email address, for some kinds of alert.

    Data the outbox points at (Delivery.subscription), so it lives here, below the supervisor,
    which writes the alerts (supervisor.alerts) and owns the editing (supervisor.subscriptions)."""

    name = models.SlugField(max_length=100, unique=True)
    webhook_url = models.CharField(max_length=500, blank=True, default="")
    email = models.EmailField(blank=True, default="")
    kinds = models.JSONField(default=all_alert_kinds, help_text="The alert kinds this subscription wants.")
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        # The table keeps the name it was created with (docs/decisions/0021).
        db_table = "supervisor_alertsubscription"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=~(models.Q(webhook_url="") & models.Q(email="")),
                name="alertsubscription_has_target",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class CallbackSecret(SigningSecrets):
    """A submitter's key for the completion callbacks of its jobs: created on first need (the
    first callback sent, or the first time the user reads it over the API), rotated by the user
    (POST /api/v1/callback-secret/rotate/). One per user: a receiver of one user's callbacks
    cannot sign another's."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="callback_secret"
    )
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"callback secret of user {self.user_id}"


class Delivery(models.Model):
    """The outbox: a message to send to a receiver outside the service, written in the same
    transaction as what it tells, then sent (and retried with backoff) by the supervisor loop.

    `key` is the message's idempotency key, unique: a message is written at most once however often
    what it tells is recorded, and the receiver gets it as `Idempotency-Key` to de-duplicate the
    retries of one message.
    """

    kind = models.CharField(max_length=16, choices=DeliveryKind.choices)
    key = models.CharField(max_length=255, unique=True)
    #: The URL (callback, webhook) or email address.
    target = models.CharField(max_length=500)
    #: Who receives it: the URL's `host:port` (scheduler.outbox.receiver_of); empty for an email.
    #: The sender takes turns between receivers and keeps a circuit breaker for each.
    receiver = models.CharField(max_length=300, blank=True, default="", db_default="")
    payload = models.JSONField(default=dict)
    job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries", db_index=False
    )
    subscription = models.ForeignKey(
        AlertSubscription,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="deliveries",
        db_index=False,
    )
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    tries = models.PositiveIntegerField(default=0)
    next_try_at = models.DateTimeField(default=timezone.now)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "deliveries"
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=DeliveryKind.values), name="delivery_kind_valid"),
            models.CheckConstraint(
                condition=Q(status__in=DeliveryStatus.values), name="delivery_status_valid"
            ),
        ]
        indexes = [
            # The sender's claim (pending messages whose try is due, oldest first) and the
            # /metrics gauge of what is not delivered: delivered rows, the many, stay out.
            models.Index(
                fields=["next_try_at"], condition=~Q(status="delivered"), name="delivery_undelivered_idx"
            ),
            # A job's callbacks (job page, API).
            models.Index(fields=["job", "id"], name="delivery_job_idx"),
            # The alerts' lane of the sender's claim (supervisor.deliveries): alerts due are read
            # first, whatever the callbacks' backlog.
            models.Index(
                fields=["next_try_at"],
                condition=Q(status="pending") & ~Q(kind="callback"),
                name="delivery_alert_due_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.key} ({self.status})"


class EventReaction(models.Model):
    """An event someone reacts to (the supervisor's alerts), queued for them by the database: a
    trigger on the event table (scheduler/sql/, generated from scheduler.outbox.REACTION_KINDS)
    copies each event of those kinds here, whoever wrote it (the unit of work, the hot path's
    functions, the set-wise scan), in the event's transaction. The reader takes rows oldest first,
    skipping locked ones, and deletes them in the transaction of its reaction: each is handled
    once, and none is missed for being written outside Python.

    A copy of the event's fields, not a key to it: the event table is partitioned and large, and
    this queue is short."""

    event_id = models.BigIntegerField()
    kind = models.CharField(max_length=40)
    job_id = models.UUIDField()
    step_id = models.BigIntegerField(null=True, blank=True)
    attempt = models.PositiveIntegerField(null=True, blank=True)
    reason = models.TextField(blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.kind} (event {self.event_id})"


class CatchUp(models.TextChoices):
    #: After downtime, the firings missed meanwhile make one job (for the latest of them).
    ONCE = "once", "Submit once"
    #: After downtime, missed firings are skipped; the next one is on time.
    SKIP = "skip", "Skip"


class QuarantineLoop(models.TextChoices):
    """The loops that serve many jobs or users, each isolating its items."""

    #: The scan's remediation batches (timeouts, retries, reconciles, give-ups).
    REMEDIATION = "remediation", "Remediation"
    #: The scan's sweep of jobs past their whole-job deadline.
    JOB_DEADLINES = "job_deadlines", "Job deadlines"
    #: The scan's sweep of waits whose time came (timers, wait timeouts).
    WAITS = "waits", "Waits"
    #: The scan's sweep of sub-workflow steps.
    CHILDREN = "children", "Children"
    #: The schedules' firings.
    SCHEDULES = "schedules", "Schedules"
    #: History retention's archive and deletion batches.
    RETENTION = "retention", "Retention"


class Quarantine(models.Model):
    """One item a loop set aside because handling it raised (scheduler.services.quarantine): what
    it was, the error, and what was done with it (a step held for an operator, a job made to need
    attention, a schedule moved on or paused). The loop's queries leave an item quarantined less
    than SAS_QUARANTINE_RETRY_SECONDS ago alone, so one item costs one failure per period, never
    one per pass. Kept for the record, the metric `sas_quarantined_total{loop}` and the
    `quarantined` alert (written once per row by the supervisor's loop)."""

    loop = models.CharField(max_length=20, choices=QuarantineLoop.choices)
    job_id = models.UUIDField(null=True, blank=True)
    step_id = models.BigIntegerField(null=True, blank=True)
    #: What else names the item (a schedule's name, a batch of history).
    subject = models.CharField(max_length=200, blank=True, default="")
    #: `<exception type>: <message>`, at most 2,000 characters.
    error = models.TextField()
    #: What the loop did with it: held, needs_attention, schedule_paused, skipped.
    action = models.CharField(max_length=30)
    created_at = models.DateTimeField()
    #: Set once the `quarantined` alert is written for it.
    alerted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=Q(loop__in=QuarantineLoop.values), name="quarantine_loop_valid"),
        ]
        indexes = [
            # The loops' "quarantined lately" exclusions read by job and by step.
            models.Index(fields=["job_id", "created_at"], name="quarantine_job_idx"),
            models.Index(fields=["step_id", "created_at"], name="quarantine_step_idx"),
            # The supervisor's alert writer: the rows not alerted yet.
            models.Index(
                fields=["id"], condition=Q(alerted_at__isnull=True), name="quarantine_unalerted_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.loop}: {self.subject or self.step_id or self.job_id}: {self.action}"


class Schedule(models.Model):
    """Submits a job of a workflow at `run_at`, or at every time of a cron expression in a time zone.

    Each firing submits exactly once: its idempotency key names the schedule and the fire time,
    so two clusters firing the same minute make one job (scheduler.schedules).
    """

    name = models.SlugField(max_length=100, unique=True)
    workflow = models.CharField(
        max_length=100, help_text="Workflow name (its latest version at each firing)."
    )
    input = models.JSONField(default=dict)
    business_key = models.CharField(max_length=200, blank=True, default="")
    priority = models.IntegerField(default=0)
    #: Once, at this instant; or...
    run_at = models.DateTimeField(null=True, blank=True)
    #: ... at every time of this five-field cron expression, in `timezone`.
    cron = models.CharField(max_length=100, blank=True, default="")
    timezone = models.CharField(max_length=64, default="UTC")
    catch_up = models.CharField(max_length=8, choices=CatchUp.choices, default=CatchUp.ONCE)
    #: Set while paused: no firing (and none caught up for the pause unless catch_up is once).
    paused_at = models.DateTimeField(null=True, blank=True)
    #: When it fires next; None once a one-off schedule has fired.
    next_fire_at = models.DateTimeField(null=True, blank=True)
    last_fired_at = models.DateTimeField(null=True, blank=True)
    last_job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_constraint=False
    )
    #: Why the last firing submitted nothing (an unknown workflow, say); empty when it worked.
    last_error = models.TextField(blank=True, default="")
    #: Firings in a row that raised (not a refusal: an error of the service); at
    #: SAS_SCHEDULE_MAX_FAILURES the schedule pauses itself. Zero again after a firing that worked.
    failures = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(catch_up__in=CatchUp.values), name="schedule_catch_up_valid"),
            models.CheckConstraint(
                condition=(Q(run_at__isnull=False) & Q(cron="")) | (Q(run_at__isnull=True) & ~Q(cron="")),
                name="schedule_run_at_or_cron",
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_fire_at"],
                condition=Q(paused_at__isnull=True) & Q(next_fire_at__isnull=False),
                name="schedule_due_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.name


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
