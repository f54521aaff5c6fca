"""REST API representations of the agents' resources (version 1): pools and endpoints. A secret
header value is write-only: it is never shown. Request bodies are strict
(sas_project.api.StrictSerializer)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agents.models import AgentKind
from agents.selectors import EndpointState
from sas_project.api import ReplaceMixin, StrictSerializer

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


class RateSerializer(StrictSerializer):
    """A keyed rate (scheduler.services.capacity): the calls it counts start at most `per_second`
    a second per value of `key`, `burst` at once; the others wait, holding no worker. Shared by
    every cluster (counted in the database)."""

    key = serializers.CharField(
        max_length=1000,
        required=False,
        allow_blank=True,
        default="",
        help_text="An expression over the call's `input` and `results`, written as conditions are "
        "(`input.merchant`); empty: one bucket for every call. A call whose key reads nothing shares "
        "the bucket of the empty key.",
    )
    per_second = serializers.FloatField(
        min_value=0.001, max_value=100_000, help_text="Calls started per second per key value."
    )
    burst = serializers.IntegerField(
        min_value=1, max_value=100_000, default=1, help_text="Calls that may start at once (default 1)."
    )


class PoolSerializer(serializers.Serializer):
    name = serializers.CharField(source="pool.name")
    kind = serializers.ChoiceField(source="pool.kind", choices=AgentKind.choices)
    alternate = serializers.CharField(
        source="pool.alternate.name", allow_null=True, help_text="Pool a step may be reassigned to."
    )
    max_in_flight = serializers.IntegerField(
        source="pool.max_in_flight", allow_null=True, help_text="Calls in flight at most (null: no limit)."
    )
    max_per_second = serializers.FloatField(
        source="pool.max_per_second",
        allow_null=True,
        help_text="Calls started per second at most (null: no limit).",
    )
    rate = RateSerializer(source="pool.rate", allow_null=True, help_text="A rate per key value (null: none).")
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


_Number = TypeVar("_Number", serializers.IntegerField, serializers.FloatField)


def _optional_limit(field: Callable[..., _Number], min_value: float, help_text: str) -> _Number:
    """A limit a pool may leave out or set to null: it then has none."""
    return field(
        required=False,
        allow_null=True,
        default=None,
        min_value=min_value,
        max_value=100_000,
        help_text=help_text,
    )


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
    max_in_flight = _optional_limit(
        serializers.IntegerField,
        1,
        "At most this many calls in flight; steps beyond it wait for capacity (null: no limit).",
    )
    max_per_second = _optional_limit(
        serializers.FloatField, 0.001, "At most this many calls started per second (null: no limit)."
    )
    rate = RateSerializer(
        required=False,
        allow_null=True,
        default=None,
        help_text="At most `per_second` calls started per value of `key` (null: no keyed rate).",
    )
    created_at = serializers.DateTimeField(read_only=True)
    updated_at = serializers.DateTimeField(read_only=True)


class PoolReplaceSerializer(ReplaceMixin, PoolWriteSerializer):
    """Replacing a pool (PUT) needs kind, endpoints and alternate; left out, `rate` is none (PATCH
    keeps it). A different `name` in the body renames the pool."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["rate"].required = False
        self.fields["rate"].default = None
