"""What a job runs: its steps (one per step definition, plus compensations and fan-out items),
each step's attempts (one per dispatch) and the signals a waiting step consumes.

Statuses and outcomes are written only by scheduler.transitions; an attempt's outcome once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from agents.outcome import AttemptKind, Outcome
from scheduler.models.definitions import StepDefinition
from scheduler.models.jobs import OPTIONAL_POINTER, POINTER, Job

if TYPE_CHECKING:
    from agents.models import AgentPool


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
    #: priority first, in turn across concurrency keys; or a wait step (signal, approval, timer),
    #: whose `deadline` is its timeout or its timer's time.
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
    definition = models.ForeignKey(StepDefinition, on_delete=models.PROTECT, related_name="+", **POINTER)
    name = models.CharField(max_length=120)
    kind = models.CharField(max_length=16, choices=StepKind.choices, default=StepKind.ACTION)
    #: The step of the same job that this compensation step undoes (see the note above Job,
    #: scheduler.models.jobs).
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
        "agents.AgentPool", null=True, on_delete=models.PROTECT, related_name="+", **OPTIONAL_POINTER
    )
    endpoint = models.ForeignKey(
        "agents.AgentEndpoint", null=True, on_delete=models.SET_NULL, related_name="+", **OPTIONAL_POINTER
    )
    deadline = models.DateTimeField(null=True, blank=True)
    not_before = models.DateTimeField(null=True, blank=True)
    first_dispatched_at = models.DateTimeField(null=True, blank=True)
    output = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    #: A wait step: when it began waiting (its escalation's rungs count from it), the rungs of its
    #: ladder walked so far, and the group a `reassign` rung let decide too.
    waiting_since = models.DateTimeField(null=True, blank=True)
    escalation_rung = models.PositiveSmallIntegerField(default=0, db_default=0)
    escalation_group = models.CharField(max_length=150, blank=True, default="", db_default="")
    #: Why the step is in its status, when the status alone does not say (why it was skipped).
    status_reason = models.TextField(blank=True, default="", db_default="")
    #: The input this step is called with instead of the job's (an operator's edited retry).
    input_override = models.JSONField(null=True, blank=True)
    #: In a rerun, the step of the original job whose output this one reuses (it is not called).
    reused_from = models.ForeignKey(
        "self", null=True, on_delete=models.SET_NULL, related_name="+", **OPTIONAL_POINTER
    )
    #: An item's fan-out step (same job), its position in the list and the element itself.
    parent = models.ForeignKey(
        "self", null=True, on_delete=models.CASCADE, related_name="items", **OPTIONAL_POINTER
    )
    item_index = models.PositiveIntegerField(null=True, blank=True)
    item = models.JSONField(null=True, blank=True)
    #: The step's concurrency key while a call of it waits or is in flight: `<workflow>.<step>:`
    #: and the value its `concurrency.key` read (scheduler.services.capacity); "" without one.
    concurrency_key = models.CharField(max_length=300, blank=True, default="", db_default="")
    #: The rate bucket that last held the waiting step back (scheduler.services.capacity): the
    #: pump groups steps by it, so that one throttled key's backlog never fills its batch.
    rate_key = models.CharField(max_length=300, blank=True, default="", db_default="")
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
            # Step concurrency: the calls of a key in flight (what its limit bounds).
            models.Index(
                fields=["concurrency_key", "status"],
                condition=~Q(concurrency_key=""),
                name="step_concurrency_key_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"

    @property
    def fans_out(self) -> bool:
        """A fan-out step (`for_each`): it calls nothing itself, its items do."""
        return bool(self.definition.for_each) and self.kind == StepKind.ACTION

    @property
    def repeats(self) -> bool:
        """A repeat step: it calls nothing itself, its iterations (items) do."""
        return self.definition.kind == "repeat" and self.kind == StepKind.ACTION

    @property
    def has_items(self) -> bool:
        """A fan-out or a repeat: a step whose calls are its items'."""
        return self.fans_out or self.repeats

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
    pool = models.ForeignKey("agents.AgentPool", on_delete=models.PROTECT, related_name="+", **POINTER)
    endpoint = models.ForeignKey(
        "agents.AgentEndpoint",
        null=True,
        on_delete=models.SET_NULL,
        related_name="attempts",
        **OPTIONAL_POINTER,
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
    #: The seconds the remote asked to wait before the next call (a 429 or 503 with Retry-After),
    #: as it asked them; the retry waits that long, within its policy's longest backoff.
    retry_after_seconds = models.FloatField(null=True, blank=True)

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


#: The number of a cancel's attempt row: a cancel is not a dispatch of its step (whose numbers,
#: the fencing of its calls, count from 1), and a step has at most one cancel.
CANCEL_ATTEMPT_NUMBER = 0


class RemoteCancel(models.Model):
    """The durable intent to cancel a step's operation at its remote: written with the decision
    that stopped the job (cancel or compensation) while the step's call was in flight, in the same
    transaction, with the task that sends it (scheduler.services.cancels). One per step at most.

    `tries` fences the deliveries of that task: a try is taken by raising it from n - 1 to n, so a
    duplicate delivery takes nothing. `due_at` is when the cancel needs a task again: the next
    try's time after a failed one, or, for a try taken, when its task counts as lost (the scan
    enqueues it again). Finished when the remote answered or the tries ran out; the answer is the
    step's attempt of kind `cancel`.
    """

    step = models.OneToOneField(Step, on_delete=models.CASCADE, related_name="remote_cancel")
    #: The endpoint the call in flight went to: the cancel goes there too.
    endpoint = models.ForeignKey(
        "agents.AgentEndpoint", null=True, on_delete=models.SET_NULL, related_name="+", **OPTIONAL_POINTER
    )
    endpoint_url = models.CharField(max_length=500, blank=True, default="")
    #: The number of the call attempt in flight when the job stopped (sent as the cancel's attempt).
    call_attempt = models.PositiveIntegerField()
    tries = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    #: When the last try was taken by its task.
    tried_at = models.DateTimeField(null=True, blank=True)
    due_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            # The scan's sweep of cancels whose task is due again
            # (scheduler.services.cancels.cancels_due): the unfinished ones only, few at a time.
            models.Index(
                fields=["due_at"], condition=Q(finished_at__isnull=True), name="remotecancel_due_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"cancel of step {self.step_id} ({'finished' if self.finished_at else 'due'})"


class Signal(models.Model):
    """A message sent to a running job (POST /api/v1/jobs/{id}/signals/), kept until a step
    waiting for its name consumes it: a signal that comes before its step waits is buffered.

    Written in the transaction of its `signal_received` event; consumed by a guarded write
    (`consumed_at` still null) in the transaction that completes the waiting step, so each signal
    is consumed at most once. With an idempotency key, one key makes one signal per job.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="signals", db_index=False)
    #: The signal's name, or `event:<type>` for an inbound event (its payload is the event).
    name = models.CharField(max_length=110)
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
