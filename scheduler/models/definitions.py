"""Workflow definitions: the versions of a workflow, their steps, and the remediation policies
the steps name.

A version never changes: an edit makes version n+1, and a job keeps the version it was submitted
with. Remediation policies are data the dispatch reads (an attempt's deadline) and the supervisor
decides with (supervisor.policies.decide), so they live here, below both; the supervisor owns their
editing.
"""

from __future__ import annotations

from django.conf import settings
from django.conf import settings as django_settings
from django.db import models
from django.db.models import Q


class Workflow(models.Model):
    """A named, versioned DAG of steps. A version never changes; an edit makes a new version."""

    name = models.SlugField(max_length=100)
    version = models.PositiveIntegerField(default=1)
    description = models.TextField(blank=True, default="")
    #: Optional time limit of a whole job, counted from submission.
    deadline_seconds = models.FloatField(null=True, blank=True)
    #: Optional service-level target of a whole job, in seconds from submission: a job not
    #: finished in time is flagged at risk before it is late (supervisor.sla). Unlike the
    #: deadline it stops nothing.
    sla_seconds = models.FloatField(null=True, blank=True)
    #: The fraction of `sla_seconds` after which a job not finished is at risk by the clock,
    #: in (0, 1]. The database default too, so that a previous release's inserts still work.
    warn_fraction = models.FloatField(default=0.8, db_default=0.8)
    #: Optional JSON Schema (2020-12) every job's input must match (scheduler.contracts).
    input_schema = models.JSONField(null=True, blank=True)
    #: Optional flow control by key: {"key": "<expression over the input>", "limit": N,
    #: "on_limit": "queue" | "cancel_newest" | "cancel_in_progress"} (scheduler.services.flow).
    concurrency = models.JSONField(null=True, blank=True)
    #: Optional debounce of starts by key: {"key": "<expression over the input>", "seconds": S,
    #: "max_seconds": M or absent}: a job not started yet is replaced by a newer one of its key
    #: (scheduler.services.gates).
    debounce = models.JSONField(null=True, blank=True)
    #: Optional throttle of starts by key: {"key": "<expression over the input>", "per_seconds":
    #: P, "limit": L}: at most L starts per P seconds per key value (scheduler.services.gates).
    throttle = models.JSONField(null=True, blank=True)
    #: Optional: the inbound events that start a job of this workflow (its latest version only):
    #: [{"event": "<type>", "when", "input", "business_key"}], the last three null when absent
    #: (scheduler.event_definitions checks them, scheduler.services.events applies them).
    triggers = models.JSONField(null=True, blank=True)
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
            models.CheckConstraint(
                condition=Q(sla_seconds__isnull=True) | Q(sla_seconds__gt=0), name="workflow_sla_positive"
            ),
            models.CheckConstraint(
                condition=Q(warn_fraction__gt=0, warn_fraction__lte=1), name="workflow_warn_fraction_range"
            ),
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
    #: Calls a remote again, one iteration after another, until an expression over the answer
    #: holds (poll-until; scheduler.services.repeat).
    REPEAT = "repeat", "Repeat a call until"


#: The kinds that wait instead of calling: no pool, no attempt, no worker while they wait.
WAIT_KINDS = frozenset({StepDefinitionKind.SIGNAL, StepDefinitionKind.APPROVAL, StepDefinitionKind.TIMER})

#: The kinds whose steps call a pool: a call, and a repeat (each iteration a call).
CALLING_KINDS = ["call", "repeat"]


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
    #: Optional (HTTP and queue pools): where a cancel of a call in flight is POSTed when its job is
    #: cancelled or compensated (a queue step's cancel goes to its request queue). Empty: none.
    cancel_path = models.CharField(max_length=300, blank=True, default="", db_default="")
    depends_on = models.JSONField(default=list, blank=True, help_text="Names of earlier steps.")
    #: A call's remediation policy; a wait's (optional) says what its failure does to the job.
    policy = models.ForeignKey(
        RemediationPolicy, null=True, blank=True, on_delete=models.PROTECT, related_name="step_definitions"
    )
    #: signal: the name of the signal the step waits for; a wait for an inbound event of type T
    #: takes the signals named `event:T` (no signal's own name has a colon: valid_name).
    signal = models.CharField(max_length=110, blank=True, default="", db_default="")
    #: signal, waiting for an event: which events of its type the job takes (API `match`,
    #: JMESPath over `event` and `input`; scheduler.services.events).
    event_match = models.CharField(max_length=1000, blank=True, default="", db_default="")
    #: approval: the group whose members may decide (empty: the operators).
    group = models.CharField(max_length=150, blank=True, default="", db_default="")
    #: signal, approval: how long the wait may last (none: for ever).
    timeout_seconds = models.FloatField(null=True, blank=True)
    #: signal, approval: what the timeout does.
    on_timeout = models.CharField(
        max_length=8, choices=OnTimeout.choices, blank=True, default="", db_default=""
    )
    #: signal, approval with on_timeout `continue` (or an escalation rung `continue`): the step's
    #: output after a timeout.
    default_output = models.JSONField(null=True, blank=True)
    #: signal, approval: the ladder walked while no decision comes (scheduler.wait_definitions):
    #: `[{"after_seconds", "do", "group"}]`, in time order.
    escalation = models.JSONField(default=list, blank=True, db_default=[])
    #: approval: the job's submitter may decide it too (separation of duties otherwise).
    allow_self_approval = models.BooleanField(default=False, db_default=False)
    #: signal (a named one): only members of this group may send it (empty: whoever may signal).
    sender_group = models.CharField(max_length=150, blank=True, default="", db_default="")
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
    #: call: at most `limit` calls of this step in flight at once per value of `key`
    #: ({"key", "limit"}; scheduler.services.capacity); None: no limit.
    concurrency = models.JSONField(null=True, blank=True)
    #: call: at most `per_second` calls of this step started per value of `key`, `burst` at once
    #: ({"key", "per_second", "burst"}; scheduler.services.capacity); None: no limit.
    rate = models.JSONField(null=True, blank=True)
    #: repeat: `{"until", "interval_seconds", "max_iterations", "on_exhausted"}` (scheduler.
    #: definitions); its call's fields are the call fields above. None for the other kinds.
    repeat = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["workflow_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["workflow", "name"], name="stepdefinition_unique_name"),
            models.CheckConstraint(
                condition=Q(kind__in=StepDefinitionKind.values), name="stepdefinition_kind_valid"
            ),
            # A call (and a repeat's call) has a pool and a policy; a wait has no pool.
            models.CheckConstraint(
                condition=(Q(kind__in=CALLING_KINDS) & Q(pool__isnull=False) & Q(policy__isnull=False))
                | (~Q(kind__in=CALLING_KINDS) & Q(pool__isnull=True)),
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
