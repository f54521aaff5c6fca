"""A job as the API shows it: the job, its steps, their attempts and its callbacks (declared in
scheduler.serializers.rendering, which renders them), a fan-out's items and a job's events.

These serializers declare the fields (the schema and the documentation come from them) but render
with scheduler.serializers.rendering, whose tables give their `Meta.fields` (RenderedMeta).
"""

from __future__ import annotations

from typing import Any, cast

from django.db import models
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agents.outcome import Outcome
from scheduler.models import Attempt, Delivery, DeliveryStatus, Event, Job, Step
from scheduler.serializers import rendering


def _outcome_field(help_text: str) -> serializers.ChoiceField:
    """An outcome, or "" while there is none (ModelSerializer drops allow_blank on read-only fields)."""
    return serializers.ChoiceField(
        choices=Outcome.choices, allow_blank=True, read_only=True, help_text=help_text
    )


class RenderedMeta:
    """The Meta of a RenderedSerializer: its `model`, and its `table` in
    scheduler.serializers.rendering, which gives the fields (in its order, all read-only) and the
    output."""

    model: type[models.Model]
    table: rendering.Fields[Any]
    fields: list[str]
    read_only_fields: list[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A Meta that names its own table takes its fields from it; one that only inherits a table
        # keeps the fields it declares (a serializer that adds to a rendered one).
        if "table" in vars(cls):
            cls.fields = cls.read_only_fields = list(cls.table)


# A resource declared by a table of scheduler.serializers.rendering (its Meta is a RenderedMeta):
# the serializer declares only the fields whose type or text the model does not give the schema,
# and renders with the table. (A comment, not a docstring: the schema would show a docstring as
# the description of every subclass that has none.)
class RenderedSerializer(serializers.ModelSerializer):
    def to_representation(self, instance: Any) -> dict[str, Any]:
        meta = cast("type[RenderedMeta]", self.Meta)
        return rendering.render(meta.table, instance)


class AttemptSerializer(RenderedSerializer):
    outcome = _outcome_field("Empty while the attempt is in flight.")
    late_outcome = _outcome_field("A result that arrived after the outcome was set (noted once).")
    endpoint = serializers.CharField(source="endpoint_url", help_text="The endpoint's URL (empty: python).")
    pool = serializers.CharField(source="pool.name")

    class Meta(RenderedMeta):
        model = Attempt
        table = rendering.ATTEMPT_FIELDS


class NextRungSerializer(serializers.Serializer):
    do = serializers.ChoiceField(choices=["remind", "reassign", "hold", "fail", "continue"])
    at = serializers.DateTimeField(help_text="When it comes, without a decision before.")


class EscalationStateSerializer(serializers.Serializer):
    """Where a waiting signal or approval is on its escalation ladder (schema only)."""

    rung = serializers.IntegerField(help_text="The rungs walked so far (0: none yet).")
    rungs = serializers.IntegerField(help_text="How many the ladder has.")
    group = serializers.CharField(allow_null=True, help_text="The group a reassign rung let decide too.")
    next = NextRungSerializer(allow_null=True, help_text="The next rung (null: none left).")


class WaitingForSerializer(serializers.Serializer):
    """What a waiting step waits for (schema only; `waiting_for` renders it)."""

    kind = serializers.ChoiceField(
        choices=[
            "signal",
            "approval",
            "timer",
            "workflow",
            "capacity",
            "concurrency",
            "rate",
            "backoff",
            "items",
        ],
        help_text="workflow: a sub-workflow step waiting for its child job; capacity: a call whose pool "
        "is at its limit; concurrency: a call whose step's key is at its limit; rate: a call a keyed "
        "rate (the step's or the pool's) held back; backoff: a call whose remote asked for no calls "
        "before `until` (Retry-After); items: a fan-out waiting for its items (see `items` and "
        "GET .../steps/{step_name}/items/).",
    )
    signal = serializers.CharField(required=False, help_text="signal: its name.")
    timeout_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="signal, approval: when the wait times out (null: never)."
    )
    escalation = EscalationStateSerializer(
        required=False,
        allow_null=True,
        help_text="signal, approval: where the wait is on its escalation ladder (null: it has none).",
    )
    group = serializers.CharField(
        required=False, allow_null=True, help_text="approval: who decides (null: operators)."
    )
    until = serializers.DateTimeField(
        required=False,
        help_text="timer: when it fires; backoff: the time the remote asked to wait till; rate: when its "
        "bucket has room again.",
    )
    key = serializers.CharField(required=False, help_text="concurrency, rate: the key's value.")
    limit = serializers.IntegerField(required=False, help_text="concurrency: calls in flight per key value.")
    pool = serializers.CharField(required=False, help_text="capacity, rate, backoff: the pool.")
    workflow = serializers.CharField(required=False, help_text="workflow: the child's workflow.")
    child_job = serializers.UUIDField(
        required=False,
        allow_null=True,
        help_text="workflow: the latest child job (null until the first has started; a failed child "
        "stays named while the step waits its backoff before the next).",
    )
    tries = serializers.IntegerField(
        required=False,
        help_text="workflow: the try the step is on (1: its first child; each child its policy "
        "restarts after a failure is one more; the next starts at the step's `not_before`).",
    )


class JobWaitingForSerializer(serializers.Serializer):
    """What a waiting job waits for (schema only; `job_waiting_for` renders it)."""

    kind = serializers.ChoiceField(
        choices=["concurrency", "debounce", "throttle"],
        help_text="concurrency: its workflow's concurrency key is at its limit; it starts when a job "
        "holding the key settles. debounce: it starts at `until` unless a newer job of its key "
        "replaces it. throttle: its key's starts are at their limit; it starts at `until`.",
    )
    key = serializers.CharField(help_text="The key's value, read from the job's input.")
    limit = serializers.IntegerField(
        required=False, help_text="concurrency: jobs that may hold the key at once."
    )
    until = serializers.DateTimeField(required=False, help_text="debounce, throttle: when it starts.")


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


class StepSerializer(RenderedSerializer):
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
        return rendering.waiting_for(step)

    @extend_schema_field(serializers.UUIDField(allow_null=True))
    def get_child_job(self, step: Step) -> str | None:
        return rendering.child_job(step)

    class Meta(RenderedMeta):
        model = Step
        table = rendering.STEP_FIELDS


class JobSummarySerializer(RenderedSerializer):
    """A job in a list: no input, result or steps (read the job for those)."""

    workflow = serializers.CharField(source="workflow.name")
    workflow_version = serializers.IntegerField(source="workflow.version")
    paused = serializers.SerializerMethodField(help_text="Whether an operator paused the job.")
    at_risk = serializers.BooleanField(
        read_only=True,
        help_text="Whether the job was found likely to miss its workflow's sla_seconds (by the clock or "
        "by the projection of its remaining steps); set once, never cleared.",
    )
    submitter = serializers.CharField(source="submitter.username", allow_null=True)
    business_key = serializers.SerializerMethodField(help_text="The submitter's business key, or null.")
    rerun_of = serializers.SerializerMethodField(help_text="The job this one reruns, or null.")
    parent_job = serializers.SerializerMethodField(
        help_text="A child job: the job whose sub-workflow step started it, or null."
    )
    parent_step = serializers.CharField(
        help_text="A child job: the name of the sub-workflow step that started it (empty otherwise)."
    )

    def get_paused(self, job: Job) -> bool:
        return job.paused_at is not None

    def get_business_key(self, job: Job) -> str | None:
        return job.business_key or None

    def get_rerun_of(self, job: Job) -> str | None:
        return str(job.rerun_of_id) if job.rerun_of_id else None

    @extend_schema_field(serializers.UUIDField(allow_null=True))
    def get_parent_job(self, job: Job) -> str | None:
        return str(job.parent_job_id) if job.parent_job_id else None

    class Meta(RenderedMeta):
        model = Job
        table = rendering.JOB_SUMMARY_FIELDS


class CallbackSerializer(RenderedSerializer):
    """A completion callback of the job and how its delivery goes."""

    job_status = serializers.CharField(
        source="payload.status", help_text="The job status the callback reports."
    )
    status = serializers.ChoiceField(
        choices=DeliveryStatus.choices,
        read_only=True,
        help_text="pending (tried again at next_try_at), delivered, or failed (given up).",
    )

    class Meta(RenderedMeta):
        model = Delivery
        table = rendering.CALLBACK_FIELDS


class JobSerializer(JobSummarySerializer):
    callback_url = serializers.SerializerMethodField(
        help_text="Where the job's completion callbacks go, or null."
    )
    callbacks = CallbackSerializer(many=True, read_only=True)
    reruns = serializers.SerializerMethodField(help_text="The jobs that rerun this one, oldest first.")
    waiting_for = serializers.SerializerMethodField(
        help_text="While the job is waiting at its debounce or throttle or for its concurrency key: "
        "which (null otherwise)."
    )
    started_by_event = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="The inbound event whose trigger started the job (POST /api/v1/events/), or null.",
    )
    steps = StepSerializer(many=True, read_only=True)

    @extend_schema_field(JobWaitingForSerializer(allow_null=True))
    def get_waiting_for(self, job: Job) -> dict[str, Any] | None:
        return rendering.job_waiting_for(job)

    def get_reruns(self, job: Job) -> list[str]:
        return rendering.rerun_ids(job)

    def get_callback_url(self, job: Job) -> str | None:
        return job.callback_url or None

    class Meta(JobSummarySerializer.Meta):
        table = rendering.JOB_FIELDS


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
