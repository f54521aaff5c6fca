"""What a client sends to make jobs and find them: a submission, a batch of submissions (and
what a batch answers), the job list's filters.

Request bodies are strict (sas_project.api.StrictSerializer): a key the serializer does not
declare is an error, so a misspelt field is reported instead of silently ignored.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.fields import empty

from sas_project.api import StrictSerializer
from scheduler.models import JobStatus
from scheduler.serializers.messages import SignalWithStartSerializer


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
    signal = SignalWithStartSerializer(
        required=False,
        allow_null=True,
        help_text="Signal-with-start (needs `business_key`): when a live job of the workflow has the "
        "business key, the signal goes to it and no job is made (200, that job); otherwise the job "
        "is made with the signal (201). One request: two at once make one job.",
    )


class JobBatchItemSerializer(JobSubmitSerializer):
    # A batch's jobs are made; signal-with-start is a single submission's.
    signal = None  # type: ignore[assignment]
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


class QueryBooleanField(serializers.BooleanField):
    """A boolean query parameter that is absent when not given (DRF reads a boolean missing from
    a query string as false, which would filter on it)."""

    default_empty_html = empty


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
    at_risk = QueryBooleanField(
        required=False,
        help_text="true: only the jobs flagged likely to miss their workflow's sla_seconds; false: only "
        "those not flagged.",
    )
