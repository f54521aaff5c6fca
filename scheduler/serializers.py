"""REST API representations of the scheduler's resources (version 1): jobs, their steps,
attempts and events, and workflows.

Request serializers check shapes, types and the limits of the columns the values end up in; the
rules of the domain (unknown workflow, cycles, ...) stay in the services, which name the offending
field. Request bodies are strict (sas_project.api.StrictSerializer): a key the serializer does not
declare is an error, so a misspelt field is reported instead of silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agents.outcome import Outcome
from sas_project.api import MAX_INT, NAME_PATTERN, ReplaceMixin, StrictSerializer
from scheduler.models import (
    Attempt,
    CatchUp,
    Delivery,
    DeliveryStatus,
    Event,
    Job,
    JobStatus,
    OnTimeout,
    Schedule,
    Step,
    StepDefinition,
    StepDefinitionKind,
    StepKind,
    StepStatus,
)

# --- jobs -------------------------------------------------------------------------------------


class JobSubmitSerializer(StrictSerializer):
    workflow = serializers.CharField(max_length=100, help_text="Name of the workflow (its latest version).")
    input = serializers.DictField(help_text="The job's input: a JSON object, passed to every step.")
    callback_url = serializers.CharField(
        max_length=500,
        required=False,
        allow_blank=True,
        allow_null=True,
        help_text=(
            "Where to POST the job's summary (id, workflow, status, result, finished_at) when it "
            "settles: http(s), to hosts the callback lists allow (docs/security.md). Signed with "
            "the webhook-id, webhook-timestamp and webhook-signature headers of Standard "
            "Webhooks (docs/api.md) and sent with Idempotency-Key `<job id>:<status>`, at least once."
        ),
    )
    business_key = serializers.CharField(
        max_length=200,
        required=False,
        allow_blank=True,
        allow_null=True,
        help_text='Your own name for what the job is about ("order 1001"): searchable, not unique.',
    )
    priority = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=-1000,
        max_value=1000,
        help_text="Among steps waiting for a limited pool, higher goes first (default 0).",
    )


class JobBatchItemSerializer(JobSubmitSerializer):
    idempotency_key = serializers.CharField(
        min_length=1,
        max_length=255,
        required=False,
        allow_null=True,
        help_text="This job's idempotency key (printable ASCII): a batch sent again with it finds the "
        "job it made instead of making another. Keys are per user, shared with the header of single "
        "submissions.",
    )

    def validate_idempotency_key(self, value: str | None) -> str | None:
        if value is not None and not all(" " <= ch <= "~" for ch in value):
            raise serializers.ValidationError("must be printable ASCII")
        return value


class JobBatchSerializer(StrictSerializer):
    jobs = JobBatchItemSerializer(
        many=True,
        allow_empty=False,
        help_text="The jobs, each as a single submission's body plus its own `idempotency_key`; at most "
        "SAS_MAX_BATCH_JOBS (100).",
    )

    def validate_jobs(self, value: list[Any]) -> list[Any]:
        from sas_project.conf import sas_settings

        if len(value) > sas_settings.max_batch_jobs:
            raise serializers.ValidationError(
                f"at most {sas_settings.max_batch_jobs} jobs per batch (SAS_MAX_BATCH_JOBS)"
            )
        return value


class JobBatchResultSerializer(serializers.Serializer):
    index = serializers.IntegerField(help_text="The job's place in the request's `jobs`.")
    id = serializers.UUIDField()
    created = serializers.BooleanField(
        help_text="False: the job an earlier request made with the same idempotency key and body."
    )
    url = serializers.CharField(help_text="The job's resource, `/api/v1/jobs/<id>/`.")


class JobBatchResponseSerializer(serializers.Serializer):
    jobs = JobBatchResultSerializer(many=True)


class JobFilterSerializer(serializers.Serializer):
    """Query parameters of the job list. Besides these, `input.<field>=<value>` (with `workflow`)
    finds the jobs whose input has that field with that value (a JSON value: `42`, `true`,
    `"text"`, or else the text as it is)."""

    business_key = serializers.CharField(
        required=False, allow_blank=True, max_length=200, help_text="Jobs with this business key."
    )
    idempotency_key = serializers.CharField(
        required=False, allow_blank=True, max_length=255, help_text="The job submitted with this key."
    )

    status = serializers.ChoiceField(choices=JobStatus.choices, required=False, allow_blank=True)
    workflow = serializers.CharField(
        required=False, allow_blank=True, max_length=100, help_text="Workflow name."
    )
    created_after = serializers.DateTimeField(
        required=False, help_text="ISO 8601; jobs created at or after this instant."
    )
    created_before = serializers.DateTimeField(
        required=False, help_text="ISO 8601; jobs created before this instant."
    )


# --- reading at speed --------------------------------------------------------------------------
#
# The job, step and attempt representations are read on every submission and every job page:
# DRF builds a ModelSerializer's fields from the model's metadata on each use, which costs more
# than the rest of the request. These serializers keep their declared fields (the schema and
# the documentation come from them) but render with the plain functions below, which give the
# same output field for field (tests/api/test_jobs.py compares them with DRF's own rendering).


def drf_datetime(value: Any) -> str | None:
    """A datetime as DRF renders one: ISO 8601 in the current time zone, UTC as "Z"."""
    if value is None:
        return None
    text: str = value.astimezone(timezone.get_current_timezone()).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def attempt_data(attempt: Attempt) -> dict[str, Any]:
    return {
        "number": attempt.number,
        "kind": attempt.kind,
        "endpoint": attempt.endpoint_url,
        "pool": attempt.pool.name,
        "policy_version": attempt.policy_version,
        "dispatched_at": drf_datetime(attempt.dispatched_at),
        "deadline": drf_datetime(attempt.deadline),
        "started_at": drf_datetime(attempt.started_at),
        "finished_at": drf_datetime(attempt.finished_at),
        "outcome": attempt.outcome,
        "decided_by": attempt.decided_by,
        "status_code": attempt.status_code,
        "latency_ms": attempt.latency_ms,
        "response_excerpt": attempt.response_excerpt,
        "error": attempt.error,
        "late_outcome": attempt.late_outcome,
        "late_at": drf_datetime(attempt.late_at),
        "heartbeat_at": drf_datetime(attempt.heartbeat_at),
        "heartbeat_details": attempt.heartbeat_details,
    }


def waiting_for(step: Step) -> dict[str, Any] | None:
    """What a waiting step waits for, as the API shows it (`waiting_for`), or None when it does
    not wait: `{"kind": "signal", "signal", "timeout_at"}`, `{"kind": "approval", "group",
    "timeout_at"}`, `{"kind": "timer", "until"}`, `{"kind": "workflow", "workflow", "child_job"}`
    or `{"kind": "capacity", "pool"}`."""
    if step.status != StepStatus.WAITING:
        return None
    definition = step.definition
    if definition.kind == StepDefinitionKind.WORKFLOW:
        return {"kind": "workflow", "workflow": definition.child_workflow, "child_job": child_job(step)}
    at = drf_datetime(step.deadline)
    if definition.kind == StepDefinitionKind.SIGNAL:
        return {"kind": "signal", "signal": definition.signal, "timeout_at": at}
    if definition.kind == StepDefinitionKind.APPROVAL:
        return {"kind": "approval", "group": definition.group or None, "timeout_at": at}
    if definition.kind == StepDefinitionKind.TIMER:
        return {"kind": "timer", "until": at}
    if definition.for_each and step.kind == StepKind.ACTION:
        return {"kind": "items"}
    return {"kind": "capacity", "pool": step.pool.name if step.pool is not None else None}


def child_job(step: Step) -> str | None:
    """The id of the child job a sub-workflow step started, or None. Read from `child_job_id`
    when the step's reader put it there (the job's selectors do, for all its steps at once)."""
    if step.definition.kind != StepDefinitionKind.WORKFLOW or step.kind != StepKind.ACTION:
        return None
    if hasattr(step, "child_job_id"):
        found = step.child_job_id
    else:
        found = (
            Job.objects.filter(parent_job_id=step.job_id, parent_step=step.name)
            .values_list("pk", flat=True)
            .first()
        )
    return str(found) if found is not None else None


def step_data(step: Step) -> dict[str, Any]:
    return {
        "id": step.pk,
        "name": step.name,
        "kind": step.kind,
        "compensates": step.compensates_id,
        "status": step.status,
        "operation_id": step.operation_id,
        "attempt_count": step.attempt,
        "calls": step.calls,
        "last_outcome": step.last_outcome,
        "type": step.definition.kind,
        "pool": step.pool.name if step.pool is not None else None,
        "waiting_for": waiting_for(step),
        "items": getattr(step, "item_summary", None),
        "deadline": drf_datetime(step.deadline),
        "not_before": drf_datetime(step.not_before),
        "output": step.output,
        "error": step.error,
        "reason": step.status_reason or None,
        "input_override": step.input_override,
        "reused_from": step.reused_from_id,
        "child_job": child_job(step),
        "created_at": drf_datetime(step.created_at),
        "updated_at": drf_datetime(step.updated_at),
        "finished_at": drf_datetime(step.finished_at),
        "attempts": [attempt_data(a) for a in step.attempts.all()],
    }


def job_summary_data(job: Job) -> dict[str, Any]:
    return {
        "id": str(job.pk),
        "workflow": job.workflow.name,
        "workflow_version": job.workflow.version,
        "status": job.status,
        "paused": job.paused_at is not None,
        "compensation_reason": job.compensation_reason,
        "submitter": job.submitter.username if job.submitter is not None else None,
        "business_key": job.business_key or None,
        "priority": job.priority,
        "rerun_of": str(job.rerun_of_id) if job.rerun_of_id else None,
        "parent_job": str(job.parent_job_id) if job.parent_job_id else None,
        "parent_step": job.parent_step,
        "created_at": drf_datetime(job.created_at),
        "updated_at": drf_datetime(job.updated_at),
        "finished_at": drf_datetime(job.finished_at),
    }


def callback_data(delivery: Delivery) -> dict[str, Any]:
    return {
        "job_status": delivery.payload.get("status"),
        "status": delivery.status,
        "tries": delivery.tries,
        "last_status_code": delivery.last_status_code,
        "last_error": delivery.last_error,
        "created_at": drf_datetime(delivery.created_at),
        "next_try_at": drf_datetime(delivery.next_try_at),
        "delivered_at": drf_datetime(delivery.delivered_at),
    }


def _rerun_ids(job: Job) -> list[str]:
    """The jobs that rerun this one, oldest first (light rows carry them; else one query)."""
    given = getattr(job, "rerun_ids", None)
    if given is not None:
        return [str(pk) for pk in given]
    return [
        str(pk)
        for pk in Job.objects.filter(rerun_of_id=job.pk).order_by("created_at").values_list("pk", flat=True)
    ]


# On PostgreSQL the API's answers with a whole job are built by the database in one statement
# (`scheduler/sql/postgresql/sas_job_document.sql`, its timestamps by
# `scheduler/sql/postgresql/sas_drf_time.sql`): a field added here is added there.
def job_data(job: Job) -> dict[str, Any]:
    return {
        **job_summary_data(job),
        "input": job.input,
        "result": job.result,
        "paused_at": drf_datetime(job.paused_at),
        "deadline": drf_datetime(job.deadline),
        "callback_url": job.callback_url or None,
        "callbacks": [callback_data(d) for d in job.callbacks],
        "reruns": _rerun_ids(job),
        "steps": [step_data(s) for s in job.steps.all()],
    }


def _outcome_field(help_text: str) -> serializers.ChoiceField:
    """An outcome, or "" while there is none (ModelSerializer drops allow_blank on read-only fields)."""
    return serializers.ChoiceField(
        choices=Outcome.choices, allow_blank=True, read_only=True, help_text=help_text
    )


class AttemptSerializer(serializers.ModelSerializer):
    outcome = _outcome_field("Empty while the attempt is in flight.")
    late_outcome = _outcome_field("A result that arrived after the outcome was set (noted once).")
    endpoint = serializers.CharField(source="endpoint_url", help_text="The endpoint's URL (empty: python).")
    pool = serializers.CharField(source="pool.name")

    class Meta:
        model = Attempt
        fields = [
            "number",
            "kind",
            "endpoint",
            "pool",
            "policy_version",
            "dispatched_at",
            "deadline",
            "started_at",
            "finished_at",
            "outcome",
            "decided_by",
            "status_code",
            "latency_ms",
            "response_excerpt",
            "error",
            "late_outcome",
            "late_at",
            "heartbeat_at",
            "heartbeat_details",
        ]
        read_only_fields = fields

    def to_representation(self, instance: Attempt) -> dict[str, Any]:
        return attempt_data(instance)


class WaitingForSerializer(serializers.Serializer):
    """What a waiting step waits for (schema only; `waiting_for` renders it)."""

    kind = serializers.ChoiceField(
        choices=["signal", "approval", "timer", "workflow", "capacity", "items"],
        help_text="workflow: a sub-workflow step waiting for its child job; capacity: a call whose pool "
        "is at its limit; items: a fan-out waiting for its items (see `items` and "
        "GET .../steps/{step_name}/items/).",
    )
    signal = serializers.CharField(required=False, help_text="signal: its name.")
    group = serializers.CharField(
        required=False, allow_null=True, help_text="approval: who decides (null: operators)."
    )
    until = serializers.DateTimeField(required=False, help_text="timer: when it fires.")
    timeout_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="signal, approval: when the wait times out (null: never)."
    )
    pool = serializers.CharField(required=False, help_text="capacity: the pool.")
    workflow = serializers.CharField(required=False, help_text="workflow: the child's workflow.")
    child_job = serializers.UUIDField(
        required=False, allow_null=True, help_text="workflow: the child job (null until it has started)."
    )


class StepItemSerializer(serializers.ModelSerializer):
    """One item of a fan-out step: its element, position, operation ID and fate."""

    index = serializers.IntegerField(source="item_index", help_text="Its position in the list.")
    item = serializers.JSONField(help_text="The element, as its remote receives it (`item`).")
    last_outcome = _outcome_field("Outcome of the last finished attempt.")
    attempt_count = serializers.IntegerField(source="attempt", help_text="Dispatches so far.")
    reason = serializers.SerializerMethodField(help_text="Why it is in its status (why it was skipped).")
    compensation = serializers.SerializerMethodField(
        help_text="The status of its undo, when it was undone (null otherwise)."
    )

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_reason(self, step: Step) -> str | None:
        return step.status_reason or None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_compensation(self, step: Step) -> str | None:
        undo = getattr(step, "compensation", None)
        return undo.status if undo is not None else None

    class Meta:
        model = Step
        fields = [
            "index",
            "status",
            "operation_id",
            "item",
            "output",
            "error",
            "reason",
            "attempt_count",
            "calls",
            "last_outcome",
            "deadline",
            "compensation",
            "created_at",
            "updated_at",
            "finished_at",
        ]
        read_only_fields = fields


class StepSerializer(serializers.ModelSerializer):
    last_outcome = _outcome_field("Outcome of the last finished attempt.")
    attempt_count = serializers.IntegerField(
        source="attempt", help_text="Dispatches so far (the fencing number)."
    )
    type = serializers.CharField(
        source="definition.kind",
        help_text="call, workflow (a sub-workflow step), or what the step waits for: signal, approval, "
        "timer.",
    )
    child_job = serializers.SerializerMethodField(
        help_text="A sub-workflow step: the child job it started (null before it starts, and for other "
        "steps)."
    )
    pool = serializers.CharField(source="pool.name", allow_null=True, help_text="null for a wait step.")
    waiting_for = serializers.SerializerMethodField(
        help_text="While the step is waiting: what for (null otherwise)."
    )
    reason = serializers.SerializerMethodField(
        help_text="Why the step is in its status when that alone does not say (why it was skipped)."
    )
    items = serializers.SerializerMethodField(
        help_text="A fan-out step's items: how many in all (`total`) and in each status they are in "
        "(e.g. `succeeded`); null for any other step. The items themselves: GET "
        "/api/v1/jobs/{id}/steps/{step_name}/items/."
    )

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_reason(self, step: Step) -> str | None:
        return step.status_reason or None

    @extend_schema_field(serializers.DictField(child=serializers.IntegerField(), allow_null=True))
    def get_items(self, step: Step) -> dict[str, int] | None:
        return getattr(step, "item_summary", None)

    attempts = AttemptSerializer(many=True, read_only=True)

    @extend_schema_field(WaitingForSerializer(allow_null=True))
    def get_waiting_for(self, step: Step) -> dict[str, Any] | None:
        return waiting_for(step)

    @extend_schema_field(serializers.UUIDField(allow_null=True))
    def get_child_job(self, step: Step) -> str | None:
        return child_job(step)

    class Meta:
        model = Step
        fields = [
            "id",
            "name",
            "kind",
            "compensates",
            "status",
            "operation_id",
            "attempt_count",
            "calls",
            "last_outcome",
            "type",
            "pool",
            "waiting_for",
            "items",
            "deadline",
            "not_before",
            "output",
            "error",
            "reason",
            "input_override",
            "reused_from",
            "child_job",
            "created_at",
            "updated_at",
            "finished_at",
            "attempts",
        ]
        read_only_fields = fields

    def to_representation(self, instance: Step) -> dict[str, Any]:
        return step_data(instance)


class JobSummarySerializer(serializers.ModelSerializer):
    """A job in a list: no input, result or steps (read the job for those)."""

    workflow = serializers.CharField(source="workflow.name")
    workflow_version = serializers.IntegerField(source="workflow.version")
    paused = serializers.SerializerMethodField(help_text="Whether an operator paused the job.")
    submitter = serializers.CharField(source="submitter.username", allow_null=True)
    business_key = serializers.SerializerMethodField(help_text="The submitter's business key, or null.")
    rerun_of = serializers.SerializerMethodField(help_text="The job this one reruns, or null.")
    parent_job = serializers.SerializerMethodField(
        help_text="A child job: the job whose sub-workflow step started it, or null."
    )
    parent_step = serializers.CharField(
        help_text="A child job: the name of the sub-workflow step that started it (empty otherwise)."
    )

    class Meta:
        model = Job
        fields = [
            "id",
            "workflow",
            "workflow_version",
            "status",
            "paused",
            "compensation_reason",
            "submitter",
            "business_key",
            "priority",
            "rerun_of",
            "parent_job",
            "parent_step",
            "created_at",
            "updated_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_paused(self, job: Job) -> bool:
        return job.paused_at is not None

    def get_business_key(self, job: Job) -> str | None:
        return job.business_key or None

    def get_rerun_of(self, job: Job) -> str | None:
        return str(job.rerun_of_id) if job.rerun_of_id else None

    @extend_schema_field(serializers.UUIDField(allow_null=True))
    def get_parent_job(self, job: Job) -> str | None:
        return str(job.parent_job_id) if job.parent_job_id else None

    def to_representation(self, instance: Job) -> dict[str, Any]:
        return job_summary_data(instance)


class CallbackSerializer(serializers.ModelSerializer):
    """A completion callback of the job and how its delivery goes."""

    job_status = serializers.CharField(
        source="payload.status", help_text="The job status the callback reports."
    )
    status = serializers.ChoiceField(
        choices=DeliveryStatus.choices,
        read_only=True,
        help_text="pending (tried again at next_try_at), delivered, or failed (given up).",
    )

    class Meta:
        model = Delivery
        fields = [
            "job_status",
            "status",
            "tries",
            "last_status_code",
            "last_error",
            "created_at",
            "next_try_at",
            "delivered_at",
        ]
        read_only_fields = fields

    def to_representation(self, instance: Delivery) -> dict[str, Any]:
        return callback_data(instance)


class JobSerializer(JobSummarySerializer):
    callback_url = serializers.SerializerMethodField(
        help_text="Where the job's completion callbacks go, or null."
    )
    callbacks = CallbackSerializer(many=True, read_only=True)
    reruns = serializers.SerializerMethodField(help_text="The jobs that rerun this one, oldest first.")
    steps = StepSerializer(many=True, read_only=True)

    def get_reruns(self, job: Job) -> list[str]:
        return _rerun_ids(job)

    class Meta(JobSummarySerializer.Meta):
        fields = [
            *JobSummarySerializer.Meta.fields,
            "input",
            "result",
            "paused_at",
            "deadline",
            "callback_url",
            "callbacks",
            "reruns",
            "steps",
        ]
        read_only_fields = fields

    def get_callback_url(self, job: Job) -> str | None:
        return job.callback_url or None

    def to_representation(self, instance: Job) -> dict[str, Any]:
        return job_data(instance)


class EventSerializer(serializers.ModelSerializer):
    step = serializers.CharField(source="step.name", allow_null=True, help_text="Step name, if any.")
    actor = serializers.CharField(
        source="actor.username", allow_null=True, help_text="The operator, for operator actions."
    )

    class Meta:
        model = Event
        fields = [
            "id",
            "kind",
            "step",
            "from_status",
            "to_status",
            "attempt",
            "source",
            "actor",
            "reason",
            "data",
            "created_at",
        ]
        read_only_fields = fields


# --- workflows --------------------------------------------------------------------------------


class StepDefinitionSerializer(StrictSerializer):
    """One step of a workflow (the same shape is read and written): a call (no `kind`, or
    `call`), or a wait: `signal`, `approval` or `timer`."""

    name = serializers.CharField(max_length=100)
    kind = serializers.ChoiceField(
        choices=StepDefinitionKind.choices,
        required=False,
        help_text="call (default): a remote call through a pool; signal: waits for a named signal sent "
        "to the job; approval: waits for an operator's Approve or Reject; timer: waits for a time.",
    )
    pool = serializers.CharField(max_length=100, required=False, help_text="call: the pool's name.")
    path = serializers.CharField(
        max_length=300,
        required=False,
        help_text="call: the path POSTed under the endpoint (HTTP), a queue name, or a registered callable.",
    )
    status_path = serializers.CharField(
        max_length=300,
        required=False,
        allow_blank=True,
        help_text="call: where to ask whether operation {operation_id} happened (GET: 200 yes, 404 no).",
    )
    compensation_path = serializers.CharField(
        max_length=300, required=False, allow_blank=True, help_text="call: the action that undoes this one."
    )
    depends_on = serializers.ListField(
        child=serializers.CharField(max_length=100), required=False, max_length=100
    )
    policy = serializers.CharField(
        max_length=100,
        required=False,
        help_text="Remediation policy name (required for a call; for a signal or approval, its "
        "on_exhausted decides what a rejection or a failing timeout does to the job).",
    )
    signal = serializers.CharField(max_length=100, required=False, help_text="signal: the name it waits for.")
    group = serializers.CharField(
        max_length=150,
        required=False,
        allow_blank=True,
        help_text="approval: the group whose members may decide (default: operators).",
    )
    timeout_seconds = serializers.FloatField(
        required=False, allow_null=True, help_text="signal, approval: how long to wait (default: for ever)."
    )
    on_timeout = serializers.ChoiceField(
        choices=OnTimeout.choices,
        required=False,
        allow_blank=True,
        help_text="signal, approval: hold (default) for an operator, fail the step (its policy then "
        "decides the job), or continue with default_output.",
    )
    default_output = serializers.JSONField(
        required=False, allow_null=True, help_text="The step's output when on_timeout is continue."
    )
    wait_seconds = serializers.FloatField(
        required=False, allow_null=True, help_text="timer: wait this long once the step is ready."
    )
    until = serializers.CharField(
        max_length=300,
        required=False,
        allow_blank=True,
        help_text="timer: wait until the ISO 8601 time at this field: input.<field> or <step>.<field>.",
    )
    when = serializers.CharField(
        max_length=1000,
        required=False,
        allow_blank=True,
        help_text="A condition, in JMESPath (https://jmespath.org), over `input` (the job's input) and "
        "`results` (the outputs of the steps it depends on, by name): when false (false, null, empty), "
        "the step is skipped with the reason. Example: input.amount > `100`.",
    )
    run_if_skipped = serializers.BooleanField(
        required=False,
        help_text="Run even when every step it depends on was skipped (default: it is skipped too).",
    )
    input = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text="call, workflow: the `input` its remote (or child job) receives instead of the job's "
        "input and `results`: a JMESPath expression over `input`, `results` (and, in a fan-out, `item` "
        "and `index`), or a JSON template whose keys ending in `.$` hold such expressions, e.g. "
        '{"amount.$": "input.total", "currency": "EUR"}. Absent: the body carries `input` and `results`.',
    )
    output = serializers.CharField(
        max_length=1000,
        required=False,
        allow_blank=True,
        help_text="call, workflow: which part of the answer becomes the step's output, in JMESPath over "
        "`output` (the answer), `input` and `results`, e.g. output.charge_id.",
    )
    for_each = serializers.CharField(
        max_length=1000,
        required=False,
        allow_blank=True,
        help_text="call: fan out over the list this JMESPath expression yields (over `input` and "
        "`results`): each element is an item with its own operation ID, attempts and retries; its "
        "remote receives the element as `item` and its position as `index`.",
    )
    item_key = serializers.CharField(
        max_length=1000,
        required=False,
        allow_blank=True,
        help_text="call with for_each: a JMESPath expression over `item` naming the item in its "
        "operation ID (<step's operation ID>:<key>); default: its index.",
    )
    max_parallel = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        help_text="call with for_each: the most items with a call in flight at once.",
    )
    join = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text='call with for_each: {"mode": "all" (default) | "at_least" | "any", "count": N}: how many '
        "items must succeed. When that can no longer happen, the items that succeeded are compensated.",
    )
    workflow = serializers.CharField(
        max_length=100,
        required=False,
        help_text="workflow: the workflow whose latest version runs as a child job; the step waits for it "
        "and its result is the step's output.",
    )

    def to_internal_value(self, data: Any) -> Any:
        # A call's pool, path and policy are required, as they were before steps had kinds.
        if isinstance(data, Mapping) and data.get("kind") in (None, "", StepDefinitionKind.CALL):
            missing = {
                key: ["This field may not be null." if key in data else "This field is required."]
                for key in ("pool", "path", "policy")
                if data.get(key) is None
            }
            if missing:
                raise serializers.ValidationError(missing)
        return super().to_internal_value(data)

    def to_representation(self, instance: StepDefinition) -> Any:
        data = {
            **self._kind_fields(instance),
            "when": instance.when,
            "run_if_skipped": instance.run_if_skipped,
        }
        if instance.kind in (StepDefinitionKind.CALL, StepDefinitionKind.WORKFLOW):
            data["input"] = instance.input_map
            data["output"] = instance.output_map
        if instance.kind == StepDefinitionKind.CALL:
            data["for_each"] = instance.for_each
            data["item_key"] = instance.item_key
            data["max_parallel"] = instance.max_parallel
            data["join"] = (
                {"mode": instance.join_mode, "count": instance.join_count} if instance.for_each else None
            )
        return data

    def _kind_fields(self, instance: StepDefinition) -> dict[str, Any]:
        base: dict[str, Any] = {"name": instance.name, "kind": instance.kind}
        if instance.kind == StepDefinitionKind.CALL:
            return {
                **base,
                "pool": instance.pool.name if instance.pool is not None else None,
                "path": instance.path,
                "status_path": instance.status_path,
                "compensation_path": instance.compensation_path,
                "depends_on": list(instance.depends_on or []),
                "policy": instance.call_policy.name,
            }
        if instance.kind == StepDefinitionKind.WORKFLOW:
            return {
                **base,
                "workflow": instance.child_workflow,
                "depends_on": list(instance.depends_on or []),
                "policy": instance.policy.name if instance.policy is not None else None,
            }
        if instance.kind == StepDefinitionKind.TIMER:
            return {
                **base,
                "wait_seconds": instance.wait_seconds,
                "until": instance.until,
                "depends_on": list(instance.depends_on or []),
            }
        wait: dict[str, Any] = (
            {"signal": instance.signal}
            if instance.kind == StepDefinitionKind.SIGNAL
            else {"group": instance.group}
        )
        return {
            **base,
            **wait,
            "timeout_seconds": instance.timeout_seconds,
            "on_timeout": instance.on_timeout,
            "default_output": instance.default_output,
            "depends_on": list(instance.depends_on or []),
            "policy": instance.policy.name if instance.policy is not None else None,
        }


class WorkflowSerializer(StrictSerializer):
    """A workflow version as read, and as written to create one (POST): `name` and `steps` are
    required."""

    name = serializers.CharField(max_length=100)
    version = serializers.IntegerField(read_only=True)
    description = serializers.CharField(required=False, allow_blank=True, default="", max_length=10_000)
    deadline_seconds = serializers.FloatField(
        required=False, allow_null=True, default=None, help_text="Time limit of a whole job, if any."
    )
    input_schema = serializers.JSONField(
        required=False,
        allow_null=True,
        default=None,
        help_text="A JSON Schema (2020-12) every job's input must match (a 400 lists each error with "
        "its JSON pointer). It may refer ($ref) only inside itself.",
    )
    steps = StepDefinitionSerializer(many=True)
    created_by = serializers.CharField(source="created_by.username", allow_null=True, read_only=True)
    created_at = serializers.DateTimeField(read_only=True)


class WorkflowReplaceSerializer(ReplaceMixin, WorkflowSerializer):
    """The next version (PUT) states description, deadline_seconds and steps; left out,
    input_schema is none (PATCH keeps the latest version's). A workflow cannot be renamed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["input_schema"].required = False
        self.fields["input_schema"].default = None


class WorkflowVersionSerializer(serializers.Serializer):
    version = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_INT, help_text="A past version (default: latest)."
    )


# --- results reported later (HTTP 202 + callback) ---------------------------------------------


class AttemptCallbackSerializer(StrictSerializer):
    """The result a remote POSTs to an attempt's callback URL."""

    outcome = serializers.ChoiceField(
        choices=[("succeeded", "succeeded"), ("refused", "refused"), ("failed", "failed")],
        help_text="succeeded (output is the step's output), refused (a business failure, not "
        "retried by default) or failed (a transient failure).",
    )
    output = serializers.JSONField(required=False, allow_null=True, help_text="The step's output.")
    error = serializers.CharField(required=False, allow_blank=True, max_length=2000)


class AttemptCallbackResultSerializer(serializers.Serializer):
    recorded = serializers.ChoiceField(
        choices=[("recorded", "recorded"), ("late", "late")],
        help_text="recorded: the attempt's result; late: evidence for an attempt already given up on "
        "(a success still completes its step if nothing else did).",
    )


class AttemptHeartbeatSerializer(StrictSerializer):
    """A heartbeat a remote POSTs while it works on an accepted call."""

    details = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text="Any JSON (at most 16 KiB): how far the work got. Kept on the attempt, and sent to "
        "the next attempt of the same operation as `heartbeat_details`. Absent: the attempt keeps "
        "the details of its last heartbeat that had some.",
    )


class AttemptHeartbeatResultSerializer(serializers.Serializer):
    recorded = serializers.BooleanField(help_text="Always true: the attempt is alive.")
    deadline = serializers.DateTimeField(
        allow_null=True,
        help_text="When the attempt is overdue unless another heartbeat or its result comes.",
    )


# --- signals and approvals ------------------------------------------------------------------------


class SignalSendSerializer(StrictSerializer):
    """A signal sent to a job: a step waiting for its name takes it (now, or when it starts
    waiting) and its payload becomes the step's output."""

    name = serializers.RegexField(NAME_PATTERN, max_length=100, help_text="The signal's name.")
    payload = serializers.JSONField(
        required=False, allow_null=True, help_text="Any JSON: the output of the step that consumes it."
    )


class SignalSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    payload = serializers.JSONField(allow_null=True)
    sender = serializers.CharField(allow_null=True, help_text="Who sent it.")
    created_at = serializers.DateTimeField()
    consumed_by = serializers.CharField(
        allow_null=True, help_text="The step that consumed it; null while it waits for one."
    )
    consumed_at = serializers.DateTimeField(allow_null=True)

    def to_representation(self, instance: Any) -> dict[str, Any]:
        return {
            "id": instance.pk,
            "name": instance.name,
            "payload": instance.payload,
            "sender": instance.sender.username if instance.sender is not None else None,
            "created_at": drf_datetime(instance.created_at),
            "consumed_by": instance.consumed_by.name if instance.consumed_by is not None else None,
            "consumed_at": drf_datetime(instance.consumed_at),
        }


class ApprovalDecisionSerializer(StrictSerializer):
    comment = serializers.CharField(
        required=False, allow_blank=True, max_length=2000, help_text="Why: recorded with the decision."
    )


# --- schedules ------------------------------------------------------------------------------------


class ScheduleSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", allow_null=True, read_only=True)
    paused = serializers.SerializerMethodField(help_text="Whether the schedule is paused.")
    last_job = serializers.SerializerMethodField(help_text="The job of the last firing, if any.")

    class Meta:
        model = Schedule
        fields = [
            "name",
            "workflow",
            "input",
            "business_key",
            "priority",
            "run_at",
            "cron",
            "timezone",
            "catch_up",
            "paused",
            "next_fire_at",
            "last_fired_at",
            "last_job",
            "last_error",
            "created_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_paused(self, schedule: Schedule) -> bool:
        return schedule.paused_at is not None

    def get_last_job(self, schedule: Schedule) -> str | None:
        return str(schedule.last_job_id) if schedule.last_job_id else None


class ScheduleWriteSerializer(StrictSerializer):
    """Creating a schedule: a name, a workflow, and either `run_at` or `cron`."""

    name = serializers.RegexField(NAME_PATTERN, max_length=100)
    workflow = serializers.CharField(max_length=100, help_text="Each firing submits its latest version.")
    input = serializers.DictField(required=False, help_text="The jobs' input (default {}).")
    business_key = serializers.CharField(required=False, allow_blank=True, max_length=200)
    priority = serializers.IntegerField(required=False, min_value=-1000, max_value=1000)
    run_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="Fire once, at this instant (ISO 8601; without an offset, UTC).",
    )
    cron = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=100,
        help_text="Fire at every time of this five-field cron expression (minute hour day month weekday).",
    )
    timezone = serializers.CharField(
        required=False, max_length=64, help_text="The cron expression's time zone (IANA name; default UTC)."
    )
    catch_up = serializers.ChoiceField(
        choices=CatchUp.choices,
        required=False,
        help_text="After downtime: `once` submits one job for the latest missed firing, `skip` none.",
    )


class ScheduleReplaceSerializer(ReplaceMixin, ScheduleWriteSerializer):
    """Replacing a schedule (PUT) states every value; it cannot be renamed."""
