"""Admin for agent pools and their endpoints, saved through `agents.services.pool_save`.

An endpoint's secret header value is write-only: the form never renders it back (not even
masked characters of it), an empty field keeps the stored value, and read-only views leave the
field out altogether.
"""

from __future__ import annotations

import re
from typing import Any, cast

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import Count, QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest

from agents.models import AgentEndpoint, AgentKind, AgentPool
from agents.services import pool_save
from agents.validation import valid_field_value, validate_endpoint_url
from sas_project.admin_access import ManagersOnly
from sas_project.errors import InvalidInput

HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,100}$")


class EndpointForm(forms.ModelForm):
    secret_header_value = forms.CharField(
        required=False,
        max_length=500,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        label="Secret header value",
        help_text="Write-only. Leave empty to keep the stored value.",
    )

    class Meta:
        model = AgentEndpoint
        fields = ["url", "enabled", "secret_header_name", "secret_header_value"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Kept aside before validation writes the (empty) form value onto the instance.
        self.stored_secret = self.instance.secret_header_value if self.instance.pk else ""
        self.initial.pop("secret_header_value", None)

    def clean_url(self) -> str:
        try:
            return validate_endpoint_url(self.cleaned_data.get("url", ""))
        except InvalidInput as exc:
            raise ValidationError(exc.message) from exc

    def clean_secret_header_name(self) -> str:
        name = (self.cleaned_data.get("secret_header_name") or "").strip()
        if name and not HEADER_NAME.match(name):
            raise ValidationError("Use an HTTP header name: letters, digits and '-'.")
        return name

    def spec(self) -> dict[str, Any]:
        """The endpoint as pool_save takes it; an empty secret keeps the stored one (also when
        the URL was edited, which pool_save sees as a new endpoint)."""
        data = self.cleaned_data
        name = data.get("secret_header_name") or ""
        value = data.get("secret_header_value") or ""
        if name and not value:
            value = self.stored_secret
        return {
            "url": data["url"],
            "enabled": bool(data.get("enabled")),
            "secret_header_name": name,
            "secret_header_value": value if name else "",
        }


class EndpointFormSet(BaseInlineFormSet):
    specs: list[dict[str, Any]]

    def clean(self) -> None:
        super().clean()
        if any(self.errors):
            return
        self.specs = [
            cast(EndpointForm, form).spec()
            for form in self.forms
            if form.cleaned_data and not form.cleaned_data.get("DELETE")  # type: ignore[attr-defined]
        ]
        if self.instance.kind == AgentKind.PYTHON and self.specs:
            raise ValidationError("A python pool runs in-process and has no endpoints.")
        if self.instance.kind == AgentKind.HTTP and not all(
            valid_field_value(s["secret_header_value"]) for s in self.specs
        ):
            raise ValidationError(
                "A secret header value must be printable ASCII, with no space or tab at either end."
            )
        urls = [s["url"] for s in self.specs]
        duplicates = sorted({u for u in urls if urls.count(u) > 1})
        if duplicates:
            raise ValidationError(f"Endpoint {duplicates[0]} is listed twice.")


class EndpointInline(ManagersOnly, admin.TabularInline):
    model = AgentEndpoint
    form = EndpointForm
    formset = EndpointFormSet
    extra = 0
    fields = [
        "url",
        "enabled",
        "secret_header_name",
        "secret_header_value",
        "secret_state",
        "circuit_open_until",
    ]
    readonly_fields = ["secret_state", "circuit_open_until"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_fields(request, obj))
        if not self.has_change_permission(request, obj):
            # A read-only view would display the raw value: leave the field out.
            fields.remove("secret_header_value")
        return fields

    @admin.display(description="secret")
    def secret_state(self, obj: AgentEndpoint) -> str:
        return "stored" if obj.pk and obj.secret_header_value else "none"


class PoolForm(forms.ModelForm):
    class Meta:
        model = AgentPool
        fields = ["name", "kind", "alternate", "max_in_flight", "max_per_second"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        alternate = data.get("alternate")
        if alternate is not None:
            if alternate.pk == self.instance.pk or alternate.name == data.get("name"):
                raise ValidationError({"alternate": "A pool cannot be its own alternate."})
            if alternate.kind != data.get("kind"):
                raise ValidationError({"alternate": "The alternate pool must be of the same kind."})
        return data


@admin.register(AgentPool)
class AgentPoolAdmin(ManagersOnly, admin.ModelAdmin):
    form = PoolForm
    inlines = [EndpointInline]
    list_display = [
        "name",
        "kind",
        "alternate",
        "max_in_flight",
        "max_per_second",
        "endpoint_count",
        "updated_at",
    ]
    list_select_related = ["alternate"]
    search_fields = ["name"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[AgentPool]:
        return super().get_queryset(request).annotate(n_endpoints=Count("endpoints"))

    @admin.display(description="endpoints", ordering="n_endpoints")
    def endpoint_count(self, obj: AgentPool) -> int:
        return getattr(obj, "n_endpoints", 0)

    def save_model(self, request: HttpRequest, obj: AgentPool, form: Any, change: bool) -> None:
        pass  # saved with its endpoints by save_related, through pool_save

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        endpoints = next(f for f in formsets if isinstance(f, EndpointFormSet))
        alternate = form.cleaned_data.get("alternate")
        pool = pool_save(
            name=form.cleaned_data["name"],
            kind=form.cleaned_data["kind"],
            endpoints=endpoints.specs,
            alternate=alternate.name if alternate else None,
            pool=AgentPool.objects.get(pk=form.instance.pk) if change else None,
            actor=request.user,
            max_in_flight=form.cleaned_data.get("max_in_flight"),
            max_per_second=form.cleaned_data.get("max_per_second"),
        )
        form.instance.pk = pool.pk

    def construct_change_message(
        self, request: HttpRequest, form: Any, formsets: Any, add: bool = False
    ) -> Any:
        return []  # the inlines were saved by the service, not by the formsets

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return None  # pool_save records who changed the pool

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return None
