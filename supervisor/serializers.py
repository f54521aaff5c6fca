"""REST API representations of the supervisor's resources (version 1): operator actions and
remediation policies. Request bodies are strict (sas_project.api.StrictSerializer)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.db.models import prefetch_related_objects
from rest_framework import serializers

from sas_project.api import MAX_INT, NAME_PATTERN, ReplaceMixin, StrictSerializer
from sas_project.permissions import can_manage
from scheduler.models import (
    RETRYABLE_OUTCOMES,
    AlertKind,
    AlertSubscription,
    OnExhausted,
    PolicyRevision,
    RemediationPolicy,
    Step,
)
from scheduler.serializers import StepSerializer, step_data
from supervisor.policies import POLICY_FIELDS
from supervisor.services import BULK_ACTIONS, BULK_LIMIT

# --- operator actions ---------------------------------------------------------------------------


class ActionSerializer(StrictSerializer):
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        allow_null=True,
        default="",
        max_length=2000,
        help_text="Why: recorded in the job's history with your name.",
    )

    def validate_reason(self, value: str | None) -> str:
        return value or ""


class StepRetrySerializer(ActionSerializer):
    pool = serializers.CharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        max_length=100,
        help_text="Dispatch on this pool (same kind) instead of the step's own.",
    )
    input = serializers.DictField(
        required=False,
        allow_null=True,
        help_text=(
            "Call the step with this input instead (held or failed steps whose last outcome proves "
            "no effect: a refusal or 'did not happen'). The step gets a new operation ID; the event "
            "records the old and new input."
        ),
    )


class JobRerunSerializer(ActionSerializer):
    from_step = serializers.CharField(
        max_length=120, help_text="Run this step and every step after it again (new operation IDs)."
    )
    input = serializers.DictField(
        required=False,
        allow_null=True,
        help_text="The new job's input; the original's when left out. Reused outputs are kept either way.",
    )
    version = serializers.ChoiceField(
        choices=[("job", "job"), ("current", "current")],
        required=False,
        default="job",
        help_text="job (default): the job's own workflow version; current: the latest version (a path or "
        "policy fixed meanwhile), its steps matched by name. 409 when it has no `from_step`. The new "
        "job's `workflow_version` says which was used.",
    )


class StepResolveSerializer(ActionSerializer):
    output = serializers.DictField(
        allow_null=True, help_text="The step's output, as the remote would have returned it."
    )


class StepActionResultSerializer(StepSerializer):
    """A step after an operator action; `job` is the id of its job."""

    class Meta(StepSerializer.Meta):
        fields = ["job", *StepSerializer.Meta.fields]
        read_only_fields = fields

    def to_representation(self, instance: Step) -> dict[str, Any]:
        return {"job": instance.job_id, **step_data(instance)}


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
    heartbeat_seconds = serializers.FloatField(
        required=False,
        allow_null=True,
        help_text="A call that answers later (HTTP 202, queue) must send a heartbeat at least this "
        "often (> 0): each one moves its deadline this far ahead, past timeout_seconds if need be. "
        "Empty: no heartbeats needed.",
    )
    updated_at = serializers.DateTimeField(read_only=True)


class PolicyReplaceSerializer(ReplaceMixin, PolicyWriteSerializer):
    """Replacing a policy (PUT) needs every setting. A policy cannot be renamed."""


# --- signing secrets ----------------------------------------------------------------------------


class CallbackSecretSerializer(serializers.Serializer):
    """A submitter's key for verifying its jobs' completion callbacks (Standard Webhooks)."""

    signing_secret = serializers.CharField(
        help_text="`whsec_` and the base64 of the key: pass it whole to a Standard Webhooks verifier."
    )
    previous_signing_until = serializers.DateTimeField(
        allow_null=True,
        help_text="After a rotation, the previous secret still signs (a second `v1,` signature) "
        "until this instant.",
    )
    signing_rotated_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


# --- alert subscriptions ----------------------------------------------------------------------


def webhook_origin(url: str) -> str:
    """What of a webhook URL may be shown to those who cannot change subscriptions: its scheme
    and host. The rest is often the webhook's secret (a chat service's incoming-webhook URL is
    its own credential)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}/(hidden)" if host else "(hidden)"


class AlertSubscriptionSerializer(serializers.ModelSerializer):
    kinds = serializers.ListField(child=serializers.ChoiceField(choices=AlertKind.choices))
    created_by = serializers.CharField(source="created_by.username", allow_null=True, read_only=True)
    webhook_url = serializers.SerializerMethodField(
        help_text="Whole for administrators; for other readers only its scheme and host, as the "
        "rest of a webhook URL is often its secret."
    )
    # Not `format: email`: a subscription with a webhook only has none, and answers "".
    email = serializers.CharField(
        read_only=True, help_text='The address alerts are emailed to, or "" when none is.'
    )

    def get_webhook_url(self, subscription: AlertSubscription) -> str:
        request = self.context.get("request")
        if not subscription.webhook_url or (request is not None and can_manage(request.user)):
            return subscription.webhook_url
        return webhook_origin(subscription.webhook_url)

    class Meta:
        model = AlertSubscription
        fields = [
            "name",
            "webhook_url",
            "email",
            "kinds",
            "enabled",
            "created_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class AlertSubscriptionCreatedSerializer(AlertSubscriptionSerializer):
    """A subscription as its creation answers it: once, with its signing secret."""

    signing_secret = serializers.CharField(
        help_text="The secret its webhooks are signed with (Standard Webhooks; docs/api.md). Shown in "
        "this answer only; administrators reveal and rotate it in the admin."
    )

    class Meta(AlertSubscriptionSerializer.Meta):
        fields = [*AlertSubscriptionSerializer.Meta.fields, "signing_secret"]


class AlertSubscriptionWriteSerializer(StrictSerializer):
    """Creating a subscription: a name, and a webhook URL and/or an email address. `kinds`
    defaults to every kind."""

    name = serializers.RegexField(NAME_PATTERN, max_length=100)
    webhook_url = serializers.CharField(
        max_length=500,
        required=False,
        allow_blank=True,
        help_text="POSTed each alert as JSON, signed the Standard Webhooks way (webhook-signature, "
        "docs/api.md); to hosts the webhook lists allow.",
    )
    email = serializers.CharField(max_length=254, required=False, allow_blank=True)
    kinds = serializers.ListField(
        child=serializers.ChoiceField(choices=AlertKind.choices),
        required=False,
        min_length=1,
        max_length=len(AlertKind.values) * 2,
        help_text="The alert kinds wanted (default: all).",
    )
    enabled = serializers.BooleanField(required=False)


class AlertSubscriptionReplaceSerializer(ReplaceMixin, AlertSubscriptionWriteSerializer):
    """Replacing a subscription (PUT) states every value; it cannot be renamed."""


# --- the Needs-attention list and the supervisor, as the console shows them ----------------------


class AttentionFilterSerializer(serializers.Serializer):
    workflow = serializers.CharField(required=False, allow_blank=True, max_length=100)
    step = serializers.CharField(required=False, allow_blank=True, max_length=120)
    pool = serializers.CharField(required=False, allow_blank=True, max_length=100)
    older_than_minutes = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=10**6
    )


class LastEventSerializer(serializers.Serializer):
    kind = serializers.CharField()
    reason = serializers.CharField()
    source = serializers.CharField()  # type: ignore[assignment]
    actor = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()


class AttentionPageSerializer(serializers.ListSerializer):
    """A page of Needs-attention items: their steps' attempts read in one query, not one per item."""

    def to_representation(self, data: Any) -> list[Any]:
        prefetch_related_objects([item.step for item in data], "attempts__pool")
        return super().to_representation(data)


class AttentionItemSerializer(serializers.Serializer):
    class Meta:
        list_serializer_class = AttentionPageSerializer

    step = StepSerializer(help_text="The step (with its attempts).")
    job = serializers.CharField(help_text="The step's job.")
    workflow = serializers.CharField()
    job_status = serializers.CharField()
    why = serializers.CharField(help_text="Why the step is on the list.")
    age_seconds = serializers.IntegerField(help_text="How long it has been in its current state.")
    last_event = LastEventSerializer(allow_null=True)
    can_retry = serializers.BooleanField()
    can_resolve = serializers.BooleanField()
    other_pools = serializers.ListField(child=serializers.CharField())

    def to_representation(self, item: Any) -> dict[str, Any]:
        event = item.last_event
        return {
            "step": step_data(item.step),
            "job": str(item.step.job_id),
            "workflow": item.step.job.workflow.name,
            "job_status": item.step.job.status,
            "why": item.why,
            "age_seconds": int(item.age.total_seconds()),
            "last_event": None
            if event is None
            else {
                "kind": event.kind,
                "reason": event.reason,
                "source": event.source,
                "actor": event.actor.username if event.actor_id else None,
                "created_at": event.created_at.isoformat().replace("+00:00", "Z"),
            },
            "can_retry": item.can_retry,
            "can_resolve": item.can_resolve,
            "other_pools": item.other_pools,
        }


class BulkActionSerializer(ActionSerializer):
    action = serializers.ChoiceField(choices=[(a, a) for a in BULK_ACTIONS])
    step_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1),
        min_length=1,
        max_length=BULK_LIMIT,
        help_text="Steps from the Needs-attention list; compensate and cancel act on their jobs.",
    )
    dry_run = serializers.BooleanField(
        required=False, default=False, help_text="Say what would happen to each item; change nothing."
    )


class BulkItemSerializer(serializers.Serializer):
    step_id = serializers.IntegerField()
    job_id = serializers.CharField()
    step = serializers.CharField()
    allowed = serializers.BooleanField(help_text="Dry run: whether it would be done; run: whether it was.")
    detail = serializers.CharField()


class BulkResultSerializer(serializers.Serializer):
    action = serializers.CharField()
    dry_run = serializers.BooleanField()
    done = serializers.IntegerField()
    refused = serializers.IntegerField()
    items = BulkItemSerializer(many=True)


class LeaseSerializer(serializers.Serializer):
    holder = serializers.CharField(help_text="Who acts now (empty: nobody).")
    token = serializers.IntegerField(allow_null=True, help_text="Fencing token: grows at each hand-over.")
    expires_at = serializers.DateTimeField(allow_null=True)
    handovers = serializers.IntegerField()
    valid = serializers.BooleanField()


class EndpointHealthSerializer(serializers.Serializer):
    url = serializers.CharField()
    enabled = serializers.BooleanField()
    recent_calls = serializers.IntegerField()
    bad_calls = serializers.IntegerField()
    circuit_open = serializers.BooleanField()
    circuit_open_until = serializers.DateTimeField(allow_null=True)
    wait_asked_until = serializers.DateTimeField(
        allow_null=True,
        help_text="While the remote's own ask holds (a 429 or 503 with Retry-After): no call before then.",
    )


class PoolHealthSerializer(serializers.Serializer):
    name = serializers.CharField()
    kind = serializers.CharField()
    alternate = serializers.CharField(allow_blank=True)
    endpoints = EndpointHealthSerializer(many=True)


class RemediationDebtSerializer(serializers.Serializer):
    steps = serializers.IntegerField(help_text="Remediable steps more than two intervals past due.")
    oldest_seconds = serializers.FloatField(
        help_text="Seconds since the oldest of them became due (0: none)."
    )


class SupervisorStatusSerializer(serializers.Serializer):
    lease = LeaseSerializer()
    interval_seconds = serializers.FloatField()
    last_scan_at = serializers.DateTimeField(allow_null=True)
    last_scan_age_seconds = serializers.FloatField(allow_null=True)
    stale = serializers.BooleanField(help_text="No scan within three intervals.")
    last_scan = serializers.DictField(
        help_text="Figures of the last scan: examined, remediated, duration_ms, lag_ms, batches."
    )
    remediation_debt = RemediationDebtSerializer(
        help_text=(
            "Read from the step rows, not from the supervisor's word: the remediable steps more than "
            "two intervals past due with nothing done since, and the oldest one's age. A working "
            "supervisor keeps it at zero."
        )
    )
    pools = PoolHealthSerializer(many=True)
