"""Admin for remediation policies: every save goes through the audited policy services."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from scheduler.errors import InvalidInput
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
        values = {name: data.get(name) for name in POLICY_FIELDS}
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


class PolicyRevisionInline(admin.TabularInline):
    model = PolicyRevision
    extra = 0
    can_delete = False
    fields = ["version", "changed_at", "changed_by", "changes"]
    readonly_fields = fields
    ordering = ["-version"]
    verbose_name_plural = "change history"

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


@admin.register(SupervisorLease)
class SupervisorLeaseAdmin(admin.ModelAdmin):
    list_display = ["name", "holder", "token", "expires_at", "last_scan_at", "handovers"]
    readonly_fields = [f.name for f in SupervisorLease._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
