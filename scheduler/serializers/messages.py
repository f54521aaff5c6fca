"""What reaches a running job from outside: a remote's result reported later (HTTP 202, then
a callback) and its heartbeats, signals sent to the job, and approvals' decisions.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from sas_project.api import NAME_PATTERN, StrictSerializer
from scheduler.serializers.rendering import drf_datetime

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


class KeyedSignalSendSerializer(StrictSerializer):
    """A signal sent by business key: every live job with that key (of `workflow`, when named)
    that has a step taking its name receives it; with none, it is kept for a job with that key
    that starts within SAS_SIGNAL_LOOKBACK_SECONDS."""

    business_key = serializers.CharField(max_length=200, help_text="The jobs' business key.")
    workflow = serializers.RegexField(
        NAME_PATTERN,
        max_length=100,
        required=False,
        allow_null=True,
        help_text="Only the jobs of this workflow (default: any workflow whose signal step takes the name).",
    )
    name = serializers.RegexField(NAME_PATTERN, max_length=100, help_text="The signal's name.")
    payload = serializers.JSONField(
        required=False, allow_null=True, help_text="Any JSON: the output of the step that consumes it."
    )


class KeyedSignalAnswerSerializer(serializers.Serializer):
    """What a signal by business key did."""

    jobs = serializers.ListField(child=serializers.UUIDField(), help_text="The live jobs it reached.")
    buffered = serializers.BooleanField(
        help_text="True: it reached no job and is kept for a job with the key that starts within the "
        "lookback (`expires_at`)."
    )
    expires_at = serializers.DateTimeField(allow_null=True, help_text="When a kept signal expires.")

    def to_representation(self, instance: Any) -> dict[str, Any]:
        return {
            "jobs": [str(j) for j in instance.reached],
            "buffered": instance.buffered,
            "expires_at": drf_datetime(instance.expires_at),
        }


# --- inbound events ---------------------------------------------------------------------------------


class InboundEventSerializer(StrictSerializer):
    """An event from another system (scheduler.services.events): it starts the jobs of the
    workflows whose triggers take its type, and reaches the live jobs waiting for it."""

    type = serializers.CharField(
        max_length=100,
        help_text="What happened, e.g. order.paid: 1-100 letters, digits, '-', '_', '.', ':' or '/'.",
    )
    id = serializers.CharField(
        max_length=200,
        help_text="The event's id, unique per source (1-200 printable characters): the same source "
        "and id again is a duplicate, answered with the first answer.",
    )

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        # `source` and `data` name attributes of a serializer, so they are declared here.
        return {
            **super().get_fields(),
            "source": serializers.CharField(
                max_length=100,
                help_text="Who says so, e.g. payments: 1-100 letters, digits, '-', '_', '.', ':' or '/'.",
            ),
            "data": serializers.JSONField(
                required=False,
                allow_null=True,
                help_text="Any JSON: what the event says. A trigger without `input` starts its job with "
                "it (then an object); a step waiting for the event outputs it.",
            ),
        }


class EventRefusalSerializer(serializers.Serializer):
    workflow = serializers.CharField(help_text="The workflow whose trigger could not start a job.")
    trigger = serializers.IntegerField(help_text="The trigger's index in the workflow's `triggers`.")
    reason = serializers.CharField(
        help_text="Why: an expression that cannot be evaluated, an input that is "
        "not an object, a submission refused (its contract, its concurrency)."
    )


class InboundEventAnswerSerializer(serializers.Serializer):
    """What an inbound event did (the same for a duplicate, with `duplicate` true)."""

    event = serializers.IntegerField(help_text="The id of the event as stored.")
    started = serializers.ListField(child=serializers.UUIDField(), help_text="The jobs its triggers started.")
    signalled = serializers.ListField(
        child=serializers.UUIDField(), help_text="The live jobs waiting for it that it reached."
    )
    refused = EventRefusalSerializer(many=True, help_text="The triggers that could not start their job.")
    duplicate = serializers.BooleanField(help_text="True: this source and id was received before.")


class EventReplaySerializer(StrictSerializer):
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=500,
        help_text="Why: kept with the replay and your name.",
    )


class EventReplayAnswerSerializer(InboundEventAnswerSerializer):
    """What a replay of an event did, and whose it is."""

    replay_of = serializers.IntegerField(help_text="The event replayed.")
    replayed_by = serializers.CharField(help_text="The operator who replayed it.")
    reason = serializers.CharField(allow_blank=True, help_text="Why, as the operator said.")


class SignalWithStartSerializer(StrictSerializer):
    """A submission's signal (signal-with-start)."""

    name = serializers.RegexField(NAME_PATTERN, max_length=100, help_text="The signal's name.")
    payload = serializers.JSONField(required=False, allow_null=True, help_text="Any JSON.")


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
    output = serializers.JSONField(
        allow_null=True, help_text="The output of the step that consumed it; null while it waits for one."
    )

    def to_representation(self, instance: Any) -> dict[str, Any]:
        consumer = instance.consumed_by
        return {
            "id": instance.pk,
            "name": instance.name,
            "payload": instance.payload,
            "sender": instance.sender.username if instance.sender is not None else None,
            "created_at": drf_datetime(instance.created_at),
            "consumed_by": consumer.name if consumer is not None else None,
            "consumed_at": drf_datetime(instance.consumed_at),
            "output": consumer.output if consumer is not None else None,
        }


class SignalWaitSerializer(serializers.Serializer):
    """How long the sender waits for its signal's consumption."""

    wait = serializers.FloatField(
        required=False,
        min_value=0,
        help_text="Seconds to wait for a step to consume the signal (at most SAS_SIGNAL_WAIT_MAX_SECONDS, "
        "30): 200 with the consuming step's `output` once it is consumed, 202 as without it when it "
        "is not consumed in time.",
    )

    def validate_wait(self, value: float) -> float:
        from sas_project.conf import sas_settings

        if value > sas_settings.signal_wait_max_seconds:
            raise serializers.ValidationError(
                f"at most {sas_settings.signal_wait_max_seconds:g} seconds (SAS_SIGNAL_WAIT_MAX_SECONDS)"
            )
        return value


class ApprovalDecisionSerializer(StrictSerializer):
    comment = serializers.CharField(
        required=False, allow_blank=True, max_length=2000, help_text="Why: recorded with the decision."
    )
