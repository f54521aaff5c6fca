"""Admin for agent pools and their endpoints, saved through `agents.services.pool_save`.

An endpoint's secret header value is write-only: the form never renders it back (not even
masked characters of it), an empty field keeps the stored value (when the row's URL is edited,
only if it keeps its origin: pool_save drops it otherwise), and read-only views leave the field
out altogether. Each row is checked by `agents.services.endpoint_spec_clean` for the pool's kind,
as over the API: an HTTP URL or a queue pool's broker URL, a secret header name that is not
reserved.
"""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import Count, QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest

from agents.models import AgentEndpoint, AgentKind, AgentPool
from agents.services import endpoint_spec_clean, pool_save, rate_check
from sas_project.admin_access import ManagersOnly, SavedByTheService
from sas_project.errors import InvalidInput


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
        # The URL the row had when the page was shown ("" for a new row), kept aside before
        # validation writes the form's values onto the instance.
        self.previous_url = self.instance.url if self.instance.pk else ""
        self.initial.pop("secret_header_value", None)

    def clean_url(self) -> str:
        # Checked by the formset, which knows the pool's kind (an HTTP URL or a broker's).
        return str(self.cleaned_data.get("url") or "").strip()

    def clean_secret_header_name(self) -> str:
        return str(self.cleaned_data.get("secret_header_name") or "").strip()

    def spec(self) -> dict[str, Any]:
        """The endpoint as pool_save takes it. An empty secret keeps the stored one: pool_save
        keeps it for the same URL, and for an edited URL (`previous_url`) only on the same
        origin."""
        data = self.cleaned_data
        name = data.get("secret_header_name") or ""
        return {
            "url": data["url"],
            "enabled": bool(data.get("enabled")),
            "secret_header_name": name,
            "secret_header_value": (data.get("secret_header_value") or "") if name else "",
        }


class EndpointFormSet(BaseInlineFormSet):
    specs: list[dict[str, Any]]
    moved: dict[str, str]

    def clean(self) -> None:
        super().clean()
        if any(self.errors):
            return
        rows = [
            cast(EndpointForm, form)
            for form in self.forms
            if form.cleaned_data and not form.cleaned_data.get("DELETE")  # type: ignore[attr-defined]
        ]
        kind = self.instance.kind
        if kind == AgentKind.PYTHON and rows:
            raise ValidationError("A python pool runs in-process and has no endpoints.")
        self.specs, self.moved = [], {}
        for row in rows:
            try:
                spec = endpoint_spec_clean(kind, item=row.spec())
            except InvalidInput as exc:
                row.add_error(None, exc.message)
                continue
            self.specs.append(spec)
            if row.previous_url and row.previous_url != spec["url"]:
                self.moved[spec["url"]] = row.previous_url
        if any(self.errors):
            return
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
        fields = ["name", "kind", "alternate", "max_in_flight", "max_per_second", "rate"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            data["rate"] = rate_check(data.get("rate"))
        except InvalidInput as exc:
            raise ValidationError({"rate": exc.message}) from exc
        alternate = data.get("alternate")
        if alternate is not None:
            if alternate.pk == self.instance.pk or alternate.name == data.get("name"):
                raise ValidationError({"alternate": "A pool cannot be its own alternate."})
            if alternate.kind != data.get("kind"):
                raise ValidationError({"alternate": "The alternate pool must be of the same kind."})
        return data


@admin.register(AgentPool)
class AgentPoolAdmin(ManagersOnly, SavedByTheService, admin.ModelAdmin):
    """Saved with its endpoints through agents.services.pool_save, which records who did it."""

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
            rate=form.cleaned_data.get("rate"),
            moved=endpoints.moved,
        )
        form.instance.pk = pool.pk
