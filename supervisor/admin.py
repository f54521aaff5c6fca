"""Admin for remediation policies: every save goes through the audited policy services.

Also hides django-q2's "resubmit" action: an operator retry goes through the supervisor's
services and keeps the step's operation ID; a resubmitted task would be an unrelated new one.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe
from django_q import admin as django_q_admin
from django_q.models import Failure, Success

from scheduler.errors import InvalidInput
from scheduler.permissions import can_manage
from supervisor.models import RETRYABLE_OUTCOMES, PolicyRevision, RemediationPolicy, SupervisorLease
from supervisor.policies import POLICY_FIELDS, policy_create, policy_update, policy_validate


class PolicyForm(forms.ModelForm):
    retry_on = forms.MultipleChoiceField(
        choices=[(o, o.replace("_", " ")) for o in RETRYABLE_OUTCOMES],
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="Outcomes that are retried; a business failure usually is not.",
    )

    class Meta:
        model = RemediationPolicy
        fields = ["name", *POLICY_FIELDS]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        values: dict[str, Any] = {name: data.get(name) for name in POLICY_FIELDS}
        values["retry_on"] = list(data.get("retry_on") or [])
        for name in ("max_attempts", "reassign_after_attempts"):
            if values[name] is not None:
                values[name] = int(values[name])
        try:
            policy_validate(values)
        except InvalidInput as exc:
            field = exc.detail.get("field")
            raise ValidationError({str(field): exc.message} if field in self.fields else exc.message) from exc
        return data


def _shown(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "none"
    return str(value)


class PolicyRevisionInline(admin.TabularInline):
    model = PolicyRevision
    extra = 0
    can_delete = False
    fields = ("version", "changed_at", "changed_by", "what_changed")
    readonly_fields = ("version", "changed_at", "changed_by", "what_changed")
    ordering = ["-version"]
    verbose_name_plural = "change history"

    @admin.display(description="changes (old → new)")
    def what_changed(self, revision: PolicyRevision) -> str:
        pairs = [
            (name, *(value if isinstance(value, list) and len(value) == 2 else (None, value)))
            for name, value in sorted((revision.changes or {}).items())
        ]
        return format_html_join(
            mark_safe("<br>"),
            "<code>{}</code>: {} → {}",
            ((name, _shown(old), _shown(new)) for name, old, new in pairs),
        )

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(RemediationPolicy)
class RemediationPolicyAdmin(admin.ModelAdmin):
    form = PolicyForm
    list_display = ["name", "version", "timeout_seconds", "max_attempts", "on_exhausted", "updated_at"]
    search_fields = ["name"]
    readonly_fields = ["version", "updated_at"]
    inlines = [PolicyRevisionInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # The name identifies the policy in step definitions and in history.
        return [*self.readonly_fields, "name"] if obj else list(self.readonly_fields)

    def save_model(self, request: HttpRequest, obj: RemediationPolicy, form: Any, change: bool) -> None:
        values = {name: form.cleaned_data.get(name) for name in POLICY_FIELDS}
        values["retry_on"] = list(form.cleaned_data.get("retry_on") or [])
        if change:
            saved = policy_update(obj.pk, actor=request.user, changes=values)
        else:
            saved = policy_create(name=form.cleaned_data["name"], actor=request.user, **values)
        obj.pk, obj.version = saved.pk, saved.version

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        pass  # revisions are written by the policy services, never by the admin

    def construct_change_message(
        self, request: HttpRequest, form: Any, formsets: Any, add: bool = False
    ) -> Any:
        return []  # the inlines were saved by the service, not by the formsets

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return None  # policy_create already wrote the admin log entry, naming the user

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return None  # policy_update already wrote it, with the changed fields

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_manage(request.user) or super().has_view_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return can_manage(request.user) or super().has_add_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_manage(request.user) or super().has_change_permission(request, obj)


@admin.register(SupervisorLease)
class SupervisorLeaseAdmin(admin.ModelAdmin):
    list_display = ["name", "holder", "token", "expires_at", "last_scan_at", "handovers"]
    readonly_fields = [f.name for f in SupervisorLease._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _without_resubmit() -> None:
    for model in (Success, Failure):
        if admin.site.is_registered(model):
            model_admin = admin.site.get_model_admin(model)
            model_admin.actions = [
                a for a in model_admin.actions or () if a is not django_q_admin.resubmit_task
            ]


_without_resubmit()
