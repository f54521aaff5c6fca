"""REST API representations (version 1): what requests may carry and what responses show.

Request serializers check shapes, types and the limits of the columns the values end up in; the
rules of the domain (unknown workflow, cycles, policy ranges, allowed hosts...) stay in the
services, which name the offending field. Request bodies are strict: a key the serializer does not
declare is an error, so a misspelt field is reported instead of silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agents.models import AgentKind
from scheduler.models import Attempt, Event, Job, JobStatus, Outcome, Step, StepDefinition
from scheduler.selectors import EndpointState
from supervisor.models import RETRYABLE_OUTCOMES, OnExhausted, PolicyRevision, RemediationPolicy
from supervisor.policies import POLICY_FIELDS

#: Largest value a PostgreSQL integer column holds.
MAX_INT = 2**31 - 1
NAME_PATTERN = r"^[A-Za-z0-9_-]{1,100}$"


class StrictSerializer(serializers.Serializer):
    """Refuses keys it does not declare. Read-only fields are declared, so a representation read
    from the API can be sent back as it is."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(str(key) for key in data if key not in self.fields)
            if unknown:
                raise serializers.ValidationError({key: ["Unknown field."] for key in unknown})
        return super().to_internal_value(data)


class ReplaceMixin(serializers.Serializer):
    """The PUT variant of a definition's write serializer: every writable field but the name is
    required and none falls back to a default, so a replacement states every value (PATCH, with
    partial=True, sends only the values to change). The name in the URL is the one that counts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, field in self.fields.items():
            if not field.read_only:
                field.required = name != "name"
                field.default = serializers.empty


class ErrorSerializer(serializers.Serializer):
    """Every error response. Field errors also carry `{field: [message, ...]}` entries."""

    detail = serializers.CharField(help_text="What went wrong, readable.")
    code = serializers.CharField(help_text="A stable, machine-readable code (invalid, not_found...).")
    field = serializers.CharField(
        required=False, allow_null=True, help_text="The request field at fault, when there is one."
    )


# --- jobs -------------------------------------------------------------------------------------


class JobSubmitSerializer(StrictSerializer):
    workflow = serializers.CharField(max_length=100, help_text="Name of the workflow (its latest version).")
    input = serializers.DictField(help_text="The job's input: a JSON object, passed to every step.")


class JobFilterSerializer(serializers.Serializer):
    """Query parameters of the job list."""

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


class ActionSerializer(StrictSerializer):
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=2000,
        help_text="Why: recorded in the job's history with your name.",
    )


class StepRetrySerializer(ActionSerializer):
    pool = serializers.CharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        max_length=100,
        help_text="Dispatch on this pool (same kind) instead of the step's own.",
    )


class StepResolveSerializer(ActionSerializer):
    output = serializers.DictField(
        allow_null=True, help_text="The step's output, as the remote would have returned it."
    )


def _outcome_field(help_text: str) -> serializers.ChoiceField:
    """An outcome, or "" while there is none (ModelSerializer drops allow_blank on read-only fields)."""
    return serializers.ChoiceField(
        choices=Outcome.choices, allow_blank=True, read_only=True, help_text=help_text
    )


class AttemptSerializer(serializers.ModelSerializer):
    outcome = _outcome_field("Empty while the attempt is in flight.")
    late_outcome = _outcome_field("A success that arrived after the outcome was set.")
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
        ]
        read_only_fields = fields


class StepSerializer(serializers.ModelSerializer):
    last_outcome = _outcome_field("Outcome of the last finished attempt.")
    attempt_count = serializers.IntegerField(
        source="attempt", help_text="Dispatches so far (the fencing number)."
    )
    pool = serializers.CharField(source="pool.name")
    attempts = AttemptSerializer(many=True, read_only=True)

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
            "pool",
            "deadline",
            "not_before",
            "output",
            "error",
            "created_at",
            "updated_at",
            "finished_at",
            "attempts",
        ]
        read_only_fields = fields


class StepActionResultSerializer(StepSerializer):
    """A step after an operator action; `job` is the id of its job."""

    class Meta(StepSerializer.Meta):
        fields = ["job", *StepSerializer.Meta.fields]
        read_only_fields = fields


class JobSummarySerializer(serializers.ModelSerializer):
    """A job in a list: no input, result or steps (read the job for those)."""

    workflow = serializers.CharField(source="workflow.name")
    workflow_version = serializers.IntegerField(source="workflow.version")
    paused = serializers.SerializerMethodField(help_text="Whether an operator paused the job.")
    submitter = serializers.CharField(source="submitter.username", allow_null=True)

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
            "created_at",
            "updated_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_paused(self, job: Job) -> bool:
        return job.paused_at is not None


class JobSerializer(JobSummarySerializer):
    steps = StepSerializer(many=True, read_only=True)

    class Meta(JobSummarySerializer.Meta):
        fields = [
            *JobSummarySerializer.Meta.fields,
            "input",
            "result",
            "paused_at",
            "deadline",
            "steps",
        ]
        read_only_fields = fields


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


# --- policies ---------------------------------------------------------------------------------


class PolicySerializer(serializers.ModelSerializer):
    retry_on = serializers.ListField(child=serializers.ChoiceField(choices=RETRYABLE_OUTCOMES))

    class Meta:
        model = RemediationPolicy
        fields = ["name", "version", *POLICY_FIELDS, "updated_at"]
        read_only_fields = fields


class PolicyRevisionSerializer(serializers.ModelSerializer):
    changed_by = serializers.CharField(source="changed_by.username", allow_null=True)
    settings = serializers.DictField(help_text="Every setting of the policy at this version.")
    changes = serializers.DictField(help_text="{field: [old, new]} against the previous version.")

    class Meta:
        model = PolicyRevision
        fields = ["version", "settings", "changes", "changed_by", "changed_at"]
        read_only_fields = fields


class PolicyWriteSerializer(StrictSerializer):
    """Creating a policy: only `name` is required; a setting left out takes its default."""

    name = serializers.RegexField(NAME_PATTERN, max_length=100)
    version = serializers.IntegerField(read_only=True)
    timeout_seconds = serializers.FloatField(required=False, help_text="Deadline of one attempt (> 0).")
    max_attempts = serializers.IntegerField(
        required=False, max_value=MAX_INT, help_text="Calls in total, the first included (>= 1)."
    )
    backoff_initial_seconds = serializers.FloatField(required=False)
    backoff_multiplier = serializers.FloatField(required=False)
    backoff_max_seconds = serializers.FloatField(required=False)
    backoff_jitter = serializers.FloatField(required=False, help_text="0 = none, 1 = full jitter.")
    retry_on = serializers.ListField(
        child=serializers.ChoiceField(choices=RETRYABLE_OUTCOMES), required=False, max_length=10
    )
    reassign_after_attempts = serializers.IntegerField(required=False, allow_null=True, max_value=MAX_INT)
    on_exhausted = serializers.ChoiceField(choices=OnExhausted.choices, required=False)
    reconcile_before_retry = serializers.BooleanField(required=False)
    step_budget_seconds = serializers.FloatField(required=False, allow_null=True)
    updated_at = serializers.DateTimeField(read_only=True)


class PolicyReplaceSerializer(ReplaceMixin, PolicyWriteSerializer):
    """Replacing a policy (PUT) needs every setting. A policy cannot be renamed."""


# --- pools ------------------------------------------------------------------------------------


class EndpointSerializer(serializers.Serializer):
    """An endpoint as read: its secret header value is never shown."""

    url = serializers.CharField(source="endpoint.url")
    enabled = serializers.BooleanField(source="endpoint.enabled")
    secret_header_name = serializers.CharField(source="endpoint.secret_header_name")
    secret_header_set = serializers.SerializerMethodField(
        help_text="Whether a secret header value is stored."
    )
    circuit_open_until = serializers.DateTimeField(
        source="endpoint.circuit_open_until",
        allow_null=True,
        help_text="While in the future, dispatch avoids this endpoint.",
    )
    recent_calls = serializers.IntegerField(help_text="Finished calls looked at by the circuit breaker.")
    recent_bad = serializers.IntegerField(help_text="Of those, transient failures and no answers.")

    def get_secret_header_set(self, state: EndpointState) -> bool:
        return bool(state.endpoint.secret_header_value)


class PoolSerializer(serializers.Serializer):
    name = serializers.CharField(source="pool.name")
    kind = serializers.ChoiceField(source="pool.kind", choices=AgentKind.choices)
    alternate = serializers.CharField(
        source="pool.alternate.name", allow_null=True, help_text="Pool a step may be reassigned to."
    )
    endpoints = EndpointSerializer(many=True)
    created_at = serializers.DateTimeField(source="pool.created_at")
    updated_at = serializers.DateTimeField(source="pool.updated_at")


class EndpointInputSerializer(StrictSerializer):
    """An endpoint to save. The read-only fields of its representation are accepted and ignored."""

    url = serializers.CharField(max_length=500, trim_whitespace=False)
    enabled = serializers.BooleanField(required=False, default=True)
    secret_header_name = serializers.CharField(required=False, allow_blank=True, max_length=100)
    secret_header_value = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=500,
        trim_whitespace=False,
        write_only=True,
        help_text="Write-only. Left empty on an update, the stored value is kept.",
    )
    secret_header_set = serializers.BooleanField(read_only=True)
    circuit_open_until = serializers.DateTimeField(read_only=True)
    recent_calls = serializers.IntegerField(read_only=True)
    recent_bad = serializers.IntegerField(read_only=True)


ENDPOINT_INPUT_SCHEMA: dict[str, Any] = {
    "oneOf": [
        {"type": "string", "maxLength": 500, "description": "The endpoint's base URL (http or https)."},
        {
            "type": "object",
            "properties": {
                "url": {"type": "string", "maxLength": 500},
                "enabled": {"type": "boolean", "default": True},
                "secret_header_name": {"type": "string", "maxLength": 100},
                "secret_header_value": {"type": "string", "maxLength": 500, "writeOnly": True},
            },
            "required": ["url"],
            "additionalProperties": False,
        },
    ]
}


@extend_schema_field(ENDPOINT_INPUT_SCHEMA)
class EndpointInputField(serializers.Field):
    """An endpoint to save: its base URL, or an object with the URL and its options."""

    default_error_messages = {"invalid": "Expected a URL or an object with a url."}

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, str):
            data = {"url": data}
        if not isinstance(data, Mapping):
            self.fail("invalid")
        spec = EndpointInputSerializer(data=data)
        spec.is_valid(raise_exception=True)
        return dict(spec.validated_data)

    def to_representation(self, value: Any) -> Any:
        return value


class PoolWriteSerializer(StrictSerializer):
    """Creating a pool: `name` is required; `kind` defaults to http, `endpoints` to none."""

    name = serializers.CharField(max_length=100)
    kind = serializers.ChoiceField(choices=AgentKind.choices, required=False, default=AgentKind.HTTP)
    alternate = serializers.CharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        default=None,
        max_length=100,
        help_text="Pool a step may be reassigned to (same kind).",
    )
    endpoints = serializers.ListField(
        child=EndpointInputField(), required=False, default=list, max_length=100
    )
    created_at = serializers.DateTimeField(read_only=True)
    updated_at = serializers.DateTimeField(read_only=True)


class PoolReplaceSerializer(ReplaceMixin, PoolWriteSerializer):
    """Replacing a pool (PUT) needs kind, endpoints and alternate. A different `name` in the body
    renames the pool."""


# --- workflows --------------------------------------------------------------------------------


class StepDefinitionSerializer(StrictSerializer):
    """One step of a workflow (the same shape is read and written)."""

    name = serializers.CharField(max_length=100)
    pool = serializers.CharField(max_length=100, help_text="Pool name.")
    path = serializers.CharField(
        max_length=300, help_text="HTTP: the path POSTed under the endpoint. Python: a dotted path."
    )
    status_path = serializers.CharField(
        max_length=300,
        required=False,
        allow_blank=True,
        help_text="Where to ask whether operation {operation_id} happened (GET: 200 yes, 404 no).",
    )
    compensation_path = serializers.CharField(
        max_length=300, required=False, allow_blank=True, help_text="The action that undoes this one."
    )
    depends_on = serializers.ListField(
        child=serializers.CharField(max_length=100), required=False, max_length=100
    )
    policy = serializers.CharField(max_length=100, help_text="Remediation policy name.")

    def to_representation(self, instance: StepDefinition) -> Any:
        return {
            "name": instance.name,
            "pool": instance.pool.name,
            "path": instance.path,
            "status_path": instance.status_path,
            "compensation_path": instance.compensation_path,
            "depends_on": list(instance.depends_on or []),
            "policy": instance.policy.name,
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
    steps = StepDefinitionSerializer(many=True)
    created_by = serializers.CharField(source="created_by.username", allow_null=True, read_only=True)
    created_at = serializers.DateTimeField(read_only=True)


class WorkflowReplaceSerializer(ReplaceMixin, WorkflowSerializer):
    """The next version (PUT) states description, deadline_seconds and steps. A workflow cannot be
    renamed."""


class WorkflowVersionSerializer(serializers.Serializer):
    version = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_INT, help_text="A past version (default: latest)."
    )
