"""REST API representations of the supervisor's resources (version 1): operator actions and
remediation policies. Request bodies are strict (sas_project.api.StrictSerializer)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from sas_project.api import MAX_INT, NAME_PATTERN, ReplaceMixin, StrictSerializer
from scheduler.models import Step
from scheduler.serializers import StepSerializer, step_data
from supervisor.models import (
    RETRYABLE_OUTCOMES,
    AlertKind,
    AlertSubscription,
    OnExhausted,
    PolicyRevision,
    RemediationPolicy,
)
from supervisor.policies import POLICY_FIELDS

# --- operator actions ---------------------------------------------------------------------------


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
    updated_at = serializers.DateTimeField(read_only=True)


class PolicyReplaceSerializer(ReplaceMixin, PolicyWriteSerializer):
    """Replacing a policy (PUT) needs every setting. A policy cannot be renamed."""


# --- alert subscriptions ----------------------------------------------------------------------


class AlertSubscriptionSerializer(serializers.ModelSerializer):
    kinds = serializers.ListField(child=serializers.ChoiceField(choices=AlertKind.choices))
    created_by = serializers.CharField(source="created_by.username", allow_null=True, read_only=True)

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


class AlertSubscriptionWriteSerializer(StrictSerializer):
    """Creating a subscription: a name, and a webhook URL and/or an email address. `kinds`
    defaults to every kind."""

    name = serializers.RegexField(NAME_PATTERN, max_length=100)
    webhook_url = serializers.CharField(
        max_length=500,
        required=False,
        allow_blank=True,
        help_text="POSTed each alert as JSON, signed with X-SAS-Signature; checked like an endpoint URL.",
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
