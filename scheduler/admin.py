"""Admin for workflows (versioned, validated, created through scheduler.definitions) and a
read-only view of jobs and steps whose actions call the operator services.

A workflow version never changes: the add form (optionally prefilled from an existing version)
creates the next version of its name through `workflow_create`, whose validation (unknown pools
or policies, unknown dependencies, cycles) runs before anything is saved and shows its message
on the form. Existing versions are read-only.

Jobs and steps cannot be added, edited or deleted here; the actions Retry (steps), Compensate and
Cancel (jobs) call supervisor.services with the signed-in user, exactly as the console does, and
report each item's result.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count, QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from scheduler.definitions import validate_steps, workflow_create
from scheduler.errors import InvalidInput, SasError
from scheduler.models import Job, Step, StepDefinition, Workflow
from scheduler.permissions import can_manage, can_operate
from supervisor import services

#: Per-item messages an admin action shows before it summarises the rest.
MAX_ITEM_MESSAGES = 20


# --- workflows ------------------------------------------------------------------------------------


class StepDefinitionForm(forms.ModelForm):
    depends_on = forms.CharField(
        required=False, help_text="Names of the steps this one waits for, separated by commas."
    )

    class Meta:
        model = StepDefinition
        fields = ["name", "pool", "path", "status_path", "compensation_path", "depends_on", "policy"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and isinstance(self.instance.depends_on, list):
            self.initial["depends_on"] = ", ".join(self.instance.depends_on)
        elif isinstance(self.initial.get("depends_on"), list):
            self.initial["depends_on"] = ", ".join(self.initial["depends_on"])

    def clean_depends_on(self) -> list[str]:
        text = self.cleaned_data.get("depends_on") or ""
        return [name.strip() for name in text.replace(";", ",").split(",") if name.strip()]

    def spec(self) -> dict[str, Any]:
        """The step as `validate_steps` / `workflow_create` take it."""
        data = self.cleaned_data
        return {
            "name": data["name"],
            "pool": data["pool"].name,
            "policy": data["policy"].name,
            "path": data["path"],
            "status_path": data.get("status_path") or "",
            "compensation_path": data.get("compensation_path") or "",
            "depends_on": data.get("depends_on") or [],
        }


class StepDefinitionFormSet(BaseInlineFormSet):
    """Validates the steps together (dependencies, cycles) with the same rules as the API."""

    specs: list[dict[str, Any]]

    def clean(self) -> None:
        super().clean()
        if any(self.errors):
            return
        self.specs = [
            cast(StepDefinitionForm, form).spec()
            for form in self.forms
            if form.cleaned_data and not form.cleaned_data.get("DELETE")  # type: ignore[attr-defined]
        ]
        try:
            validate_steps(self.specs)
        except InvalidInput as exc:
            raise ValidationError(exc.message) from exc


class StepDefinitionInline(admin.TabularInline):
    model = StepDefinition
    form = StepDefinitionForm
    formset = StepDefinitionFormSet
    fields = ["name", "pool", "path", "status_path", "compensation_path", "depends_on", "policy"]
    ordering = ["position"]
    extra = 1

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name in ("pool", "policy") and field is not None:
            # A plain select: pools and policies are edited on their own pages.
            for flag in ("can_add_related", "can_change_related", "can_delete_related", "can_view_related"):
                setattr(field.widget, flag, False)
        return field

    def get_extra(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> int:
        source = _source_workflow(request)
        return source.steps.count() if source is not None else (0 if obj else 3)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and can_manage(request.user)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and can_manage(request.user)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and can_manage(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_manage(request.user)


class WorkflowForm(forms.ModelForm):
    class Meta:
        model = Workflow
        fields = ["name", "description", "deadline_seconds"]

    def clean_deadline_seconds(self) -> float | None:
        value = self.cleaned_data.get("deadline_seconds")
        if value is not None and value <= 0:
            raise ValidationError("A job deadline must be empty or greater than 0 seconds.")
        return value


def _source_workflow(request: HttpRequest) -> Workflow | None:
    """The version an add form starts from (`?from=<id>`), when it exists."""
    value = request.GET.get("from", "")
    return Workflow.objects.filter(pk=int(value)).first() if value.isdigit() else None


@admin.register(Workflow)
class WorkflowAdmin(admin.ModelAdmin):
    form = WorkflowForm
    inlines = [StepDefinitionInline]
    list_display = ["name", "version", "step_count", "deadline_seconds", "created_by", "created_at"]
    search_fields = ["name"]
    ordering = ["name", "-version"]
    fields = ["name", "description", "deadline_seconds"]
    change_form_template = "admin/scheduler/workflow/change_form.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Workflow]:
        return super().get_queryset(request).select_related("created_by").annotate(n_steps=Count("steps"))

    @admin.display(description="steps", ordering="n_steps")
    def step_count(self, obj: Workflow) -> int:
        return getattr(obj, "n_steps", 0)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_manage(request.user)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return can_manage(request.user)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A version never changes; the add form makes the next one.
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        source = _source_workflow(request)
        if source is None:
            return super().get_changeform_initial_data(request)
        return {
            "name": source.name,
            "description": source.description,
            "deadline_seconds": source.deadline_seconds,
        }

    def get_formset_kwargs(self, request: HttpRequest, obj: Any, inline: Any, prefix: str) -> dict[str, Any]:
        kwargs = super().get_formset_kwargs(request, obj, inline, prefix)
        source = _source_workflow(request)
        # Only the empty form is prefilled: on POST, initial values would make unchanged rows
        # count as "not filled in" and be dropped.
        if request.method == "GET" and source is not None and isinstance(inline, StepDefinitionInline):
            kwargs["initial"] = [
                {
                    "name": d.name,
                    "pool": d.pool_id,
                    "path": d.path,
                    "status_path": d.status_path,
                    "compensation_path": d.compensation_path,
                    "depends_on": ", ".join(d.depends_on or []),
                    "policy": d.policy_id,
                }
                for d in source.steps.order_by("position")
            ]
        return kwargs

    def save_model(self, request: HttpRequest, obj: Workflow, form: Any, change: bool) -> None:
        pass  # created with its steps by save_related, through workflow_create

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        steps = next(f for f in formsets if isinstance(f, StepDefinitionFormSet))
        workflow = workflow_create(
            name=form.cleaned_data["name"],
            steps=steps.specs,
            actor=request.user,
            description=form.cleaned_data.get("description") or "",
            deadline_seconds=form.cleaned_data.get("deadline_seconds"),
        )
        form.instance.pk, form.instance.version = workflow.pk, workflow.version

    def construct_change_message(
        self, request: HttpRequest, form: Any, formsets: Any, add: bool = False
    ) -> Any:
        return []  # the inlines were saved by the service, not by the formsets

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return None  # workflow_create records who created the version

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return None


# --- jobs and steps -------------------------------------------------------------------------------


def _report(
    admin_view: admin.ModelAdmin,
    request: HttpRequest,
    items: Iterable[tuple[str, Any]],
    act: Callable[[Any], Any],
    done: str,
) -> None:
    """Run `act` on each item and tell the user what happened to each."""
    succeeded = refused = shown = 0
    for label, key in items:
        try:
            act(key)
        except SasError as exc:
            refused += 1
            text, level = f"{label}: refused: {exc.message}", messages.WARNING
        else:
            succeeded += 1
            text, level = f"{label}: {done}", messages.SUCCESS
        if shown < MAX_ITEM_MESSAGES:
            admin_view.message_user(request, text, level)
            shown += 1
    if succeeded + refused > MAX_ITEM_MESSAGES:
        admin_view.message_user(
            request,
            f"{succeeded} done, {refused} refused in all.",
            messages.WARNING if refused else messages.SUCCESS,
        )


class ReadOnlyAdmin(admin.ModelAdmin):
    """History: visible to operators, never edited here."""

    # Facet counts would count the whole table on every filtered page.
    show_facets = admin.ShowFacets.NEVER

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_operate(request.user)

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return can_operate(request.user)


STEP_COLUMNS = (
    "name",
    "kind",
    "status",
    "attempt",
    "calls",
    "pool",
    "endpoint",
    "last_outcome",
    "deadline",
    "updated_at",
)


class StepInline(admin.TabularInline):
    model = Step
    fk_name = "job"
    extra = 0
    can_delete = False
    show_change_link = True
    fields = STEP_COLUMNS
    readonly_fields = STEP_COLUMNS

    def get_queryset(self, request: HttpRequest) -> QuerySet[Step]:
        return super().get_queryset(request).select_related("pool", "endpoint").order_by("id")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_operate(request.user)


def _uuid_search(queryset: QuerySet[Any], term: str, field: str) -> QuerySet[Any]:
    try:
        value = uuid.UUID(term.strip())
    except ValueError:
        return queryset.none()
    return queryset.filter(**{field: value})


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ["id", "workflow", "status", "created_at", "finished_at", "console"]
    list_filter = ["status"]
    list_select_related = ["workflow"]
    search_fields = ["id"]
    search_help_text = "An exact job id."
    show_full_result_count = False
    ordering = ["-created_at"]
    inlines = [StepInline]
    actions = ["compensate_jobs", "cancel_jobs"]
    readonly_fields = [f.name for f in Job._meta.fields]

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Job], search_term: str) -> Any:
        if not search_term.strip():
            return queryset, False
        return _uuid_search(queryset, search_term, "pk"), False

    @admin.display(description="console")
    def console(self, obj: Job) -> str:
        return format_html('<a href="{}">open</a>', reverse("ops:job", args=[obj.pk]))

    @admin.action(description="Compensate the selected jobs", permissions=["operate"])
    def compensate_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        _report(
            self,
            request,
            ((f"job {pk}", pk) for pk in queryset.values_list("pk", flat=True)),
            lambda pk: services.job_compensate(actor=request.user, job_id=pk, reason="admin action"),
            "compensating",
        )

    @admin.action(description="Cancel the selected jobs", permissions=["operate"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        _report(
            self,
            request,
            ((f"job {pk}", pk) for pk in queryset.values_list("pk", flat=True)),
            lambda pk: services.job_cancel(actor=request.user, job_id=pk, reason="admin action"),
            "cancelling",
        )


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = ["id", "job_link", "name", "kind", "status", "attempt", "calls", "pool", "updated_at"]
    list_filter = ["status", "kind"]
    list_select_related = ["pool"]
    search_fields = ["=operation_id", "=name"]
    show_full_result_count = False
    ordering = ["-id"]
    actions = ["retry_steps"]
    readonly_fields = [f.name for f in Step._meta.fields]

    @admin.display(description="job")
    def job_link(self, obj: Step) -> str:
        return format_html('<a href="{}">{}</a>', reverse("ops:job", args=[obj.job_id]), str(obj.job_id)[:8])

    @admin.action(description="Retry the selected steps now", permissions=["operate"])
    def retry_steps(self, request: HttpRequest, queryset: QuerySet[Step]) -> None:
        _report(
            self,
            request,
            ((f"step {name} #{pk}", pk) for pk, name in queryset.values_list("pk", "name")),
            lambda pk: services.step_retry(actor=request.user, step_id=pk, reason="admin action"),
            "retried",
        )
