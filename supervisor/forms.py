"""Parsing of the console's query strings and action bodies. No rules live here: the operator
services decide what is allowed; these forms only turn text into typed values."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django import forms
from django.utils import timezone

from scheduler.models import JobStatus
from supervisor.selectors import AttentionFilters, JobFilters
from supervisor.services import BULK_ACTIONS


def reason_field() -> forms.CharField:
    """An optional reason, recorded in the job's history."""
    return forms.CharField(required=False, max_length=500, strip=True)


class AttentionFilterForm(forms.Form):
    workflow = forms.CharField(required=False, max_length=100)
    step = forms.CharField(required=False, max_length=120)
    pool = forms.CharField(required=False, max_length=100)
    older_than = forms.IntegerField(
        required=False, min_value=0, max_value=60 * 24 * 365, label="Older than (min)"
    )

    def filters(self) -> AttentionFilters:
        """The valid filters (an invalid field is ignored and reported by the form)."""
        data = self.cleaned_data if self.is_valid() else {}
        return AttentionFilters(
            workflow=data.get("workflow") or "",
            step=data.get("step") or "",
            pool=data.get("pool") or "",
            older_than_minutes=data.get("older_than") or None,
        )


class JobSearchForm(forms.Form):
    id = forms.UUIDField(required=False, label="Job id")
    #: A business key ("order-1001") or an idempotency key, exact.
    key = forms.CharField(required=False, max_length=200, strip=True, label="Business or idempotency key")
    status = forms.ChoiceField(required=False, choices=[("", "any status"), *JobStatus.choices])
    workflow = forms.CharField(required=False, max_length=100)
    created_from = forms.DateField(
        required=False, label="Created from", widget=forms.DateInput(attrs={"type": "date"})
    )
    created_to = forms.DateField(required=False, label="to", widget=forms.DateInput(attrs={"type": "date"}))

    def filters(self) -> JobFilters:
        data = self.cleaned_data if self.is_valid() else {}

        def day(value: dt.date | None, *, after: bool = False) -> dt.datetime | None:
            if value is None:
                return None
            moment = dt.datetime.combine(value, dt.time.min, tzinfo=timezone.get_current_timezone())
            return moment + dt.timedelta(days=1) if after else moment

        return JobFilters(
            job_id=data.get("id"),
            key=data.get("key") or "",
            status=data.get("status") or "",
            workflow=data.get("workflow") or "",
            created_from=day(data.get("created_from")),
            created_to=day(data.get("created_to"), after=True),
        )


def json_object(text: str | None, what: str) -> dict[str, Any] | None:
    """A JSON object typed into a text box; None when the box is empty."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise forms.ValidationError(f"{what} is not valid JSON: {exc.msg} (line {exc.lineno})") from exc
    except RecursionError as exc:
        raise forms.ValidationError(f"{what} nests too deeply") from exc
    if not isinstance(value, dict):
        raise forms.ValidationError(f'{what} must be a JSON object, for example {{"id": 42}}')
    return value


class RetryForm(forms.Form):
    pool = forms.CharField(required=False, max_length=100)
    #: An edited input (JSON object); empty: the step's input as it was.
    input = forms.CharField(required=False, max_length=100_000, widget=forms.Textarea)
    reason = reason_field()

    def clean_input(self) -> dict[str, Any] | None:
        return json_object(self.cleaned_data.get("input"), "input")


class ResolveForm(forms.Form):
    output = forms.CharField(required=False, max_length=100_000, widget=forms.Textarea)
    reason = forms.CharField(required=True, max_length=500, strip=True)

    def clean_output(self) -> dict[str, Any] | None:
        return json_object(self.cleaned_data.get("output"), "output")


class ApprovalForm(forms.Form):
    """Approve or reject a step waiting for an approval, with a comment for the history."""

    decision = forms.ChoiceField(choices=[("approve", "approve"), ("reject", "reject")])
    comment = forms.CharField(required=False, max_length=2000, strip=True)


class SignalForm(forms.Form):
    """A signal sent to a job from its page: its name, and its payload (any JSON; empty: none),
    which becomes the output of the step that takes it."""

    name = forms.CharField(max_length=100, strip=True)
    payload = forms.CharField(required=False, max_length=100_000, widget=forms.Textarea)

    def clean_payload(self) -> Any:
        text = (self.cleaned_data.get("payload") or "").strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"payload is not valid JSON: {exc.msg} (line {exc.lineno})") from exc
        except RecursionError as exc:
            raise forms.ValidationError("payload nests too deeply") from exc


class RerunForm(forms.Form):
    from_step = forms.CharField(max_length=120, strip=True)
    #: A new input for the whole job (JSON object); empty: the original input.
    input = forms.CharField(required=False, max_length=100_000, widget=forms.Textarea)
    reason = reason_field()

    def clean_input(self) -> dict[str, Any] | None:
        return json_object(self.cleaned_data.get("input"), "input")


class EventReplayForm(forms.Form):
    """An operator's replay of an event: why (kept with the replay and the operator's name)."""

    reason = reason_field()


class ScheduleActionForm(forms.Form):
    action = forms.ChoiceField(choices=[("pause", "pause"), ("resume", "resume")])


class ScheduleBackfillForm(forms.Form):
    """A backfill's range, in UTC (scheduler.schedule_backfill)."""

    start = forms.DateTimeField()
    end = forms.DateTimeField()


JOB_ACTIONS = ("pause", "resume", "compensate", "cancel")


class JobActionForm(forms.Form):
    action = forms.ChoiceField(choices=[(a, a) for a in JOB_ACTIONS])
    reason = reason_field()


class IdListField(forms.Field):
    """Repeated `name=<int>` parameters (ticked checkboxes, hidden inputs), de-duplicated."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: Any) -> list[int]:
        if not value:
            return []
        values = value if isinstance(value, list | tuple) else [value]
        try:
            return list(dict.fromkeys(int(v) for v in values))
        except (TypeError, ValueError) as exc:
            raise forms.ValidationError("step ids must be integers") from exc


class BulkForm(forms.Form):
    action = forms.ChoiceField(choices=[(a, a) for a in BULK_ACTIONS])
    stage = forms.ChoiceField(choices=[("preview", "preview"), ("run", "run")])
    #: "selected": the ticked steps; "matching": every step matching the list's filters.
    scope = forms.ChoiceField(choices=[("selected", "selected"), ("matching", "matching")], required=False)
    step = IdListField(required=False)
    reason = reason_field()
