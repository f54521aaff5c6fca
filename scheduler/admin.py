"""Admin for workflows (versioned, validated, created through scheduler.definitions). Jobs and
steps are shown, read-only with operator actions, by the supervisor's admin.

A workflow version never changes: the add form (optionally prefilled from an existing version)
creates the next version of its name through `workflow_create`, whose validation (unknown pools
or policies, unknown dependencies, cycles) runs before anything is saved and shows its message
on the form. Existing versions are read-only.
"""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import Count, QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest

from sas_project.admin_access import (
    ManagersOnly,
    NamedWrites,
    SavedByTheService,
    WrittenByName,
    WrittenByTheService,
)
from sas_project.errors import InvalidInput, SasError
from sas_project.permissions import can_manage
from scheduler import contracts
from scheduler.definitions import (
    DEFAULT_WARN_FRACTION,
    concurrency_check,
    debounce_check,
    gates_combination_check,
    sla_check,
    throttle_check,
    validate_steps,
    workflow_create,
)
from scheduler.event_definitions import event_of_signal, triggers_check
from scheduler.models import EventSource, PruneRun, Schedule, StepDefinition, StepDefinitionKind, Workflow
from scheduler.schedules import (
    SCHEDULE_FIELDS,
    schedule_create,
    schedule_delete,
    schedule_set_paused,
    schedule_update,
    schedule_validate,
)
from scheduler.services.event_sources import event_source_rotate

# --- workflows ------------------------------------------------------------------------------------


#: Every field of a step; each kind uses some (docs/workflow-language.md, "Steps that wait").
STEP_FIELDS = [
    "name",
    "kind",
    "pool",
    "path",
    "status_path",
    "compensation_path",
    "cancel_path",
    "depends_on",
    "policy",
    "signal",
    "event_match",
    "group",
    "timeout_seconds",
    "on_timeout",
    "default_output",
    "escalation",
    "allow_self_approval",
    "sender_group",
    "wait_seconds",
    "until",
    "when",
    "run_if_skipped",
    "child_workflow",
    "input_map",
    "output_map",
    "for_each",
    "item_key",
    "max_parallel",
    "join_mode",
    "join_count",
    "repeat",
]


class StepDefinitionForm(forms.ModelForm):
    depends_on = forms.CharField(
        required=False, help_text="Names of the steps this one waits for, separated by commas."
    )

    class Meta:
        model = StepDefinition
        fields = STEP_FIELDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["kind"].required = False  # empty: a call, as before steps had kinds
        if self.instance.pk and isinstance(self.instance.depends_on, list):
            self.initial["depends_on"] = ", ".join(self.instance.depends_on)
        elif isinstance(self.initial.get("depends_on"), list):
            self.initial["depends_on"] = ", ".join(self.initial["depends_on"])

    def clean_depends_on(self) -> list[str]:
        text = self.cleaned_data.get("depends_on") or ""
        return [name.strip() for name in text.replace(";", ",").split(",") if name.strip()]

    def spec(self) -> dict[str, Any]:
        """The step as `validate_steps` / `workflow_create` take it: the fields of its kind (the
        others, left empty, are not sent; a value in one of them is refused by the validation)."""
        data = self.cleaned_data
        pool, policy = data.get("pool"), data.get("policy")
        spec: dict[str, Any] = {
            "name": data["name"],
            "kind": data.get("kind") or StepDefinitionKind.CALL,
            "pool": pool.name if pool is not None else None,
            "policy": policy.name if policy is not None else None,
            "path": data.get("path") or "",
            "status_path": data.get("status_path") or "",
            "compensation_path": data.get("compensation_path") or "",
            "cancel_path": data.get("cancel_path") or "",
            "depends_on": data.get("depends_on") or [],
            "signal": data.get("signal") or "",
            "group": data.get("group") or "",
            "timeout_seconds": data.get("timeout_seconds"),
            "on_timeout": data.get("on_timeout") or "",
            "default_output": data.get("default_output"),
            # Absent when empty (a call step takes none of them).
            "escalation": data.get("escalation") or None,
            "allow_self_approval": data.get("allow_self_approval") or None,
            "sender_group": data.get("sender_group") or "",
            "wait_seconds": data.get("wait_seconds"),
            "until": data.get("until") or "",
            "when": data.get("when") or "",
            "run_if_skipped": bool(data.get("run_if_skipped")),
        }
        event_type = event_of_signal(spec["signal"])
        if event_type is not None or data.get("event_match"):
            # A wait for an event: the API's `event` and `match` (its signal is `event:<type>`).
            spec["event"], spec["signal"] = event_type or spec["signal"], ""
            spec["match"] = data.get("event_match") or ""
        if spec["kind"] == StepDefinitionKind.WORKFLOW:
            # The API's name for the field; the other kinds have none.
            spec["workflow"] = data.get("child_workflow") or ""
        if spec["kind"] == StepDefinitionKind.REPEAT:
            # The API's form: the call's fields under `call`, the loop's (the `repeat` field, a
            # JSON object {until, interval_seconds, max_iterations, on_exhausted}) beside them.
            call = {k: spec.pop(k) for k in ("pool", "path", "status_path", "compensation_path", "policy")}
            call["input"] = data.get("input_map")
            spec.pop("cancel_path", None)
            loop = data.get("repeat")
            return {**spec, "call": call, **(loop if isinstance(loop, dict) else {"repeat": loop})}
        # The API's names: `input`, `output`, and `join` as one object.
        spec["input"] = data.get("input_map")
        spec["output"] = data.get("output_map") or ""
        spec["for_each"] = data.get("for_each") or ""
        spec["item_key"] = data.get("item_key") or ""
        spec["max_parallel"] = data.get("max_parallel")
        if data.get("join_mode") or data.get("join_count") is not None:
            spec["join"] = {"mode": data.get("join_mode") or "all", "count": data.get("join_count")}
        return spec


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
    fields = tuple(STEP_FIELDS)
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


#: A workflow version's own fields, as the add form shows them (its steps are inline).
WORKFLOW_FIELDS = (
    "name",
    "description",
    "deadline_seconds",
    "sla_seconds",
    "warn_fraction",
    "input_schema",
    "concurrency",
    "debounce",
    "throttle",
    "triggers",
)


class WorkflowForm(forms.ModelForm):
    # Optional here as in the API: empty is the default fraction (scheduler.definitions.sla_check).
    warn_fraction = forms.FloatField(
        required=False,
        initial=DEFAULT_WARN_FRACTION,
        help_text="In (0, 1]: a job not finished after this fraction of sla_seconds is at risk.",
    )

    class Meta:
        model = Workflow
        fields = WORKFLOW_FIELDS

    def clean_concurrency(self) -> Any:
        try:
            return concurrency_check(self.cleaned_data.get("concurrency"))
        except InvalidInput as exc:
            raise ValidationError(exc.message) from exc

    def clean_debounce(self) -> Any:
        try:
            return debounce_check(self.cleaned_data.get("debounce"))
        except InvalidInput as exc:
            raise ValidationError(exc.message) from exc

    def clean_throttle(self) -> Any:
        try:
            return throttle_check(self.cleaned_data.get("throttle"))
        except InvalidInput as exc:
            raise ValidationError(exc.message) from exc

    def clean_triggers(self) -> Any:
        try:
            return triggers_check(self.cleaned_data.get("triggers"))
        except InvalidInput as exc:
            raise ValidationError(exc.message) from exc

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        try:
            cleaned["sla_seconds"], cleaned["warn_fraction"] = sla_check(
                cleaned.get("sla_seconds"), warn_fraction=cleaned.get("warn_fraction")
            )
        except InvalidInput as exc:
            field = exc.detail.get("field")
            self.add_error(field if isinstance(field, str) else None, exc.message)
        try:
            gates_combination_check(
                concurrency=cleaned.get("concurrency"),
                debounce=cleaned.get("debounce"),
                throttle=cleaned.get("throttle"),
            )
        except InvalidInput as exc:
            self.add_error("concurrency", exc.message)
        return cleaned

    def clean_input_schema(self) -> Any:
        try:
            return contracts.schema_check(self.cleaned_data.get("input_schema"))
        except InvalidInput as exc:
            raise ValidationError(exc.message) from exc

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
class WorkflowAdmin(SavedByTheService, admin.ModelAdmin):
    """A version is made with its steps through workflow_create, which records who made it."""

    form = WorkflowForm
    inlines = [StepDefinitionInline]
    list_display = [
        "name",
        "version",
        "step_count",
        "deadline_seconds",
        "sla_seconds",
        "created_by",
        "created_at",
    ]
    search_fields = ["name"]
    ordering = ["name", "-version"]
    fields = WORKFLOW_FIELDS
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
            "sla_seconds": source.sla_seconds,
            "warn_fraction": source.warn_fraction,
            "input_schema": source.input_schema,
            "concurrency": source.concurrency,
            "debounce": source.debounce,
            "throttle": source.throttle,
            "triggers": source.triggers,
        }

    def get_formset_kwargs(self, request: HttpRequest, obj: Any, inline: Any, prefix: str) -> dict[str, Any]:
        kwargs = super().get_formset_kwargs(request, obj, inline, prefix)
        source = _source_workflow(request)
        # Only the empty form is prefilled: on POST, initial values would make unchanged rows
        # count as "not filled in" and be dropped.
        if request.method == "GET" and source is not None and isinstance(inline, StepDefinitionInline):
            kwargs["initial"] = [
                {
                    **{name: getattr(d, name) for name in STEP_FIELDS if name not in ("pool", "policy")},
                    "pool": d.pool_id,
                    "policy": d.policy_id,
                    "depends_on": ", ".join(d.depends_on or []),
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
            input_schema=form.cleaned_data.get("input_schema"),
            concurrency=form.cleaned_data.get("concurrency"),
            debounce=form.cleaned_data.get("debounce"),
            throttle=form.cleaned_data.get("throttle"),
            triggers=form.cleaned_data.get("triggers"),
            sla_seconds=form.cleaned_data.get("sla_seconds"),
            warn_fraction=form.cleaned_data.get("warn_fraction"),
        )
        form.instance.pk, form.instance.version = workflow.pk, workflow.version


# --- schedules ------------------------------------------------------------------------------------


class ScheduleForm(forms.ModelForm):
    """Every value is checked by scheduler.schedules (the rules the API applies), and its message
    shown on the field at fault."""

    # `{}` is an empty value to Django's JSON field: optional here, an empty object by default.
    input = forms.JSONField(required=False, initial=dict, help_text="The job's input, a JSON object.")

    class Meta:
        model = Schedule
        fields = [
            "name",
            "workflow",
            "input",
            *[f for f in SCHEDULE_FIELDS if f not in ("workflow", "input")],
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Left empty, they are their defaults (as the API's): start regardless, no jitter.
        for name in ("overlap", "jitter_seconds"):
            if name in self.fields:
                self.fields[name].required = False

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        if not data.get("overlap"):
            data["overlap"] = Schedule._meta.get_field("overlap").get_default()
        if data.get("jitter_seconds") is None:
            data["jitter_seconds"] = 0
        values = {f: data.get(f) for f in SCHEDULE_FIELDS}
        try:
            data.update(schedule_validate(values))
        except InvalidInput as exc:
            field = exc.detail.get("field") if isinstance(exc.detail, dict) else None
            self.add_error(field if field in self.fields else None, exc.message)
        return data


@admin.register(Schedule)
class ScheduleAdmin(ManagersOnly, WrittenByName, admin.ModelAdmin):
    """Every save and delete goes through scheduler.schedules (checked, logged with the user)."""

    form = ScheduleForm
    writes = NamedWrites(SCHEDULE_FIELDS, schedule_create, schedule_update, schedule_delete)
    list_display = [
        "name",
        "workflow",
        "cron",
        "timezone",
        "run_at",
        "next_fire_at",
        "last_fired_at",
        "paused",
    ]
    list_filter = ["catch_up"]
    search_fields = ["name", "workflow", "business_key"]
    readonly_fields = ["next_fire_at", "last_fired_at", "last_job", "last_error", "paused_at", "created_by"]
    actions = ["pause", "resume"]

    @admin.display(boolean=True, description="paused")
    def paused(self, obj: Schedule) -> bool:
        return obj.paused_at is not None

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # A schedule's name is its identity (in its firings' idempotency keys): never renamed.
        fields = list(super().get_readonly_fields(request, obj))
        return ["name", *fields] if obj is not None else fields

    def _set_paused(self, request: HttpRequest, queryset: QuerySet[Schedule], paused: bool) -> None:
        done = 0
        for schedule in queryset:
            try:
                schedule_set_paused(schedule.name, actor=request.user, paused=paused)
                done += 1
            except SasError as exc:
                self.message_user(request, exc.message, level="warning")
        self.message_user(request, f"{done} schedule(s) {'paused' if paused else 'resumed'}.")

    @admin.action(description="Pause the selected schedules")
    def pause(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._set_paused(request, queryset, True)

    @admin.action(description="Resume the selected schedules")
    def resume(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._set_paused(request, queryset, False)


@admin.register(EventSource)
class EventSourceAdmin(ManagersOnly, admin.ModelAdmin):
    """Providers that post signed events (POST /api/v1/events/<name>/): administrators create
    them, read the secret to give the provider, and rotate it (the previous one still verifies
    for SAS_SIGNING_ROTATION_GRACE_SECONDS)."""

    list_display = ["name", "run_as", "enabled", "signing_rotated_at", "created_at"]
    fields = ["name", "run_as", "enabled", "signing_secret", "previous_signing_until", "signing_rotated_at"]
    readonly_fields = ["signing_secret", "previous_signing_until", "signing_rotated_at"]
    actions = ["rotate_secret"]

    @admin.action(description="Rotate the secret (the previous one verifies for a grace period)")
    def rotate_secret(self, request: HttpRequest, queryset: QuerySet[EventSource]) -> None:
        for source in queryset:
            event_source_rotate(source.name, actor=request.user)
        self.message_user(request, f"Rotated the secret of {queryset.count()} event source(s).")


@admin.register(PruneRun)
class PruneRunAdmin(WrittenByTheService, admin.ModelAdmin):
    """History retention's runs: what each archived and deleted. Written by the service only."""

    list_display = ["started_at", "source", "cutoff", "archived", "jobs", "finished_at", "error"]
    list_filter = ["source"]
    readonly_fields = [f.name for f in PruneRun._meta.fields]
