"""Admin for remediation policies (every save goes through the audited policy services), and the
operators' read-only view of jobs and steps.

Jobs and steps cannot be added, edited or deleted here; the actions Retry (steps), Compensate and
Cancel (jobs) call supervisor.services with the signed-in user, exactly as the console does, and
report each item's result.

Also hides django-q2's "resubmit" action: an operator retry goes through the supervisor's
services and keeps the step's operation ID; a resubmitted task would be an unrelated new one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django_q import admin as django_q_admin
from django_q.models import Failure, Success

from sas_project.admin_access import (
    ManagersOnly,
    NamedWrites,
    SavedByTheService,
    WrittenByName,
    WrittenByTheService,
)
from sas_project.errors import InvalidInput, SasError
from sas_project.permissions import can_manage, can_operate
from scheduler.models import (
    RETRYABLE_OUTCOMES,
    AlertKind,
    AlertSubscription,
    Delivery,
    DeliveryKind,
    Job,
    PolicyRevision,
    RemediationPolicy,
    Step,
)
from supervisor import services
from supervisor.deliveries import delivery_retry
from supervisor.models import SupervisorLease
from supervisor.policies import POLICY_FIELDS, policy_create, policy_update, policy_validate
from supervisor.serializers import webhook_origin
from supervisor.signing import subscription_secret_rotate
from supervisor.subscriptions import (
    SUBSCRIPTION_FIELDS,
    subscription_create,
    subscription_delete,
    subscription_update,
    subscription_validate,
)


class _CheckedForm(forms.ModelForm):
    """The form of a definition whose service checks its values: `service_fields`, of which
    `listed` is a list of choices. The service's InvalidInput is shown on the field it names."""

    service_fields: ClassVar[Sequence[str]]
    listed: ClassVar[str]

    @classmethod
    def values(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """The service's values among the form's (cleaned) data."""
        values = {name: data.get(name) for name in cls.service_fields}
        values[cls.listed] = list(data.get(cls.listed) or [])
        return values

    def check(self, values: dict[str, Any]) -> Mapping[str, Any]:
        """Raise InvalidInput when the service refuses `values`; the values it cleaned."""
        raise NotImplementedError

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            data.update(self.check(self.values(data)))
        except InvalidInput as exc:
            field = exc.detail.get("field")
            raise ValidationError({str(field): exc.message} if field in self.fields else exc.message) from exc
        return data


class PolicyForm(_CheckedForm):
    service_fields = POLICY_FIELDS
    listed = "retry_on"
    retry_on = forms.MultipleChoiceField(
        choices=[(o, o.replace("_", " ")) for o in RETRYABLE_OUTCOMES],
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="Outcomes that are retried; a business failure usually is not.",
    )

    class Meta:
        model = RemediationPolicy
        fields = ["name", *POLICY_FIELDS]

    def check(self, values: dict[str, Any]) -> Mapping[str, Any]:
        for name in ("max_attempts", "reassign_after_attempts"):
            if values[name] is not None:
                values[name] = int(values[name])
        policy_validate(values)
        return {}


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
class RemediationPolicyAdmin(SavedByTheService, admin.ModelAdmin):
    """policy_create and policy_update write the admin log entry, naming the user and the changed
    fields, and the revision."""

    form = PolicyForm
    list_display = ["name", "version", "timeout_seconds", "max_attempts", "on_exhausted", "updated_at"]
    search_fields = ["name"]
    readonly_fields = ["version", "updated_at"]
    inlines = [PolicyRevisionInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # The name identifies the policy in step definitions and in history.
        return [*self.readonly_fields, "name"] if obj else list(self.readonly_fields)

    def save_model(self, request: HttpRequest, obj: RemediationPolicy, form: Any, change: bool) -> None:
        values = PolicyForm.values(form.cleaned_data)
        if change:
            saved = policy_update(obj.pk, actor=request.user, changes=values)
        else:
            saved = policy_create(name=form.cleaned_data["name"], actor=request.user, **values)
        obj.pk, obj.version = saved.pk, saved.version

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        pass  # revisions are written by the policy services, never by the admin

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_manage(request.user) or super().has_view_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return can_manage(request.user) or super().has_add_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_manage(request.user) or super().has_change_permission(request, obj)


class AlertSubscriptionForm(_CheckedForm):
    service_fields = SUBSCRIPTION_FIELDS
    listed = "kinds"
    kinds = forms.MultipleChoiceField(
        choices=AlertKind.choices,
        widget=forms.CheckboxSelectMultiple,
        help_text="The alerts this subscription wants.",
    )

    class Meta:
        model = AlertSubscription
        fields = ["name", *SUBSCRIPTION_FIELDS]

    def check(self, values: dict[str, Any]) -> Mapping[str, Any]:
        return subscription_validate(values)


@admin.register(AlertSubscription)
class AlertSubscriptionAdmin(ManagersOnly, WrittenByName, admin.ModelAdmin):
    """Every save and delete goes through supervisor.subscriptions (checked, logged with the user)."""

    form = AlertSubscriptionForm
    writes = NamedWrites(SUBSCRIPTION_FIELDS, subscription_create, subscription_update, subscription_delete)
    list_display = ["name", "webhook_url", "email", "kinds", "enabled", "updated_at"]
    search_fields = ["name", "webhook_url", "email"]
    readonly_fields = ["created_by", "created_at", "updated_at"]
    #: The secret is shown on the subscription's page (administrators only, behind a click),
    #: never in the list; it changes only by the rotate action.
    secret_fields = ["signing_secret_shown", "signing_rotated_at", "previous_signing_until"]
    actions = ["rotate_signing_secret"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return list(self.readonly_fields)
        return [*self.readonly_fields, "name", *self.secret_fields]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = ["name", *SUBSCRIPTION_FIELDS]
        return [*fields, *self.secret_fields, *self.readonly_fields] if obj else fields

    @admin.display(description="signing secret")
    def signing_secret_shown(self, subscription: AlertSubscription) -> str:
        return format_html(
            "<details><summary>Show</summary><code>{}</code></details>"
            "<p class='help'>Receivers verify this subscription's webhooks with it (Standard "
            "Webhooks). Rotate it with the list's action; the previous one signs too for a while.</p>",
            subscription.signing_secret,
        )

    @admin.action(description="Rotate the signing secret of the selected subscriptions")
    def rotate_signing_secret(self, request: HttpRequest, queryset: QuerySet[AlertSubscription]) -> None:
        names = list(queryset.values_list("name", flat=True))
        for name in names:
            subscription_secret_rotate(name, actor=request.user)
        self.message_user(
            request,
            f"{len(names)} signing secret(s) rotated; the previous ones still sign until "
            "the grace period ends. Each subscription's page shows its new secret.",
            messages.SUCCESS,
        )


#: Whether the user the Delivery admin is rendering a page for is an administrator (the admin
#: object is shared by every request; the display method has no request of its own).
_reader_manages: ContextVar[bool] = ContextVar("delivery_reader_manages", default=False)


def _rendered(response: Any) -> Any:
    """The response rendered now (a TemplateResponse renders after the view returns)."""
    if hasattr(response, "render") and not getattr(response, "is_rendered", True):
        response.render()
    return response


class _SeenByOperators(WrittenByTheService):
    """Records operators see and nobody edits here."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_operate(request.user)


@admin.register(Delivery)
class DeliveryAdmin(_SeenByOperators, admin.ModelAdmin):
    """The outbox: completion callbacks and alerts, with how their delivery goes."""

    list_display = [
        "id",
        "kind",
        "status",
        "target_shown",
        "tries",
        "last_status_code",
        "next_try_at",
        "delivered_at",
        "job_link",
    ]
    list_filter = ["status", "kind"]
    search_fields = ["key", "target"]
    readonly_fields = [f.name if f.name != "target" else "target_shown" for f in Delivery._meta.fields]
    #: Only the read-only values: the raw `target` would otherwise be shown as a form field.
    fields = tuple(readonly_fields)
    actions = ["retry_failed"]
    show_facets = admin.ShowFacets.NEVER

    @admin.display(description="target")
    def target_shown(self, delivery: Delivery) -> str:
        """The whole URL for administrators (who read the subscriptions too); for operators
        only its scheme and host, as the rest of a webhook URL is often its credential. An email
        address is shown to both."""
        if delivery.kind == DeliveryKind.EMAIL or _reader_manages.get():
            return delivery.target
        return webhook_origin(delivery.target)

    def get_search_fields(self, request: HttpRequest) -> list[str]:
        # Searching the hidden part of a URL would reveal it a character at a time.
        return list(self.search_fields) if can_manage(request.user) else ["key"]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        reset = _reader_manages.set(can_manage(request.user))
        try:
            return _rendered(super().changelist_view(request, extra_context))
        finally:
            _reader_manages.reset(reset)

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: Any = None,
    ) -> Any:
        reset = _reader_manages.set(can_manage(request.user))
        try:
            return _rendered(super().changeform_view(request, object_id, form_url, extra_context))
        finally:
            _reader_manages.reset(reset)

    @admin.display(description="job")
    def job_link(self, delivery: Delivery) -> str:
        if delivery.job_id is None:
            return "—"
        return format_html(
            '<a href="{}">{}</a>', reverse("ops:job", args=[delivery.job_id]), str(delivery.job_id)[:8]
        )

    @admin.action(description="Send the selected failed deliveries again")
    def retry_failed(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> None:
        count = delivery_retry(actor=request.user, delivery_ids=list(queryset.values_list("pk", flat=True)))
        self.message_user(request, f"{count} failed deliveries will be sent again.", messages.SUCCESS)

    def get_actions(self, request: HttpRequest) -> Any:
        actions = super().get_actions(request)
        if not can_operate(request.user):
            actions.pop("retry_failed", None)
        return actions


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


#: Per-item messages an admin action shows before it summarises the rest.
MAX_ITEM_MESSAGES = 20


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


class ReadOnlyAdmin(_SeenByOperators, admin.ModelAdmin):
    """History: visible to operators, never edited here."""

    # Facet counts would count the whole table on every filtered page.
    show_facets = admin.ShowFacets.NEVER

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


class StepInline(_SeenByOperators, admin.TabularInline):
    model = Step
    fk_name = "job"
    extra = 0
    can_delete = False
    show_change_link = True
    fields = STEP_COLUMNS
    readonly_fields = STEP_COLUMNS

    def get_queryset(self, request: HttpRequest) -> QuerySet[Step]:
        return super().get_queryset(request).select_related("pool", "endpoint").order_by("id")


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
        self._each_job(request, queryset, services.job_compensate, "compensating")

    @admin.action(description="Cancel the selected jobs", permissions=["operate"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._each_job(request, queryset, services.job_cancel, "cancelling")

    def _each_job(
        self, request: HttpRequest, queryset: QuerySet[Job], act: Callable[..., object], doing: str
    ) -> None:
        """Apply the operator action `act` to each selected job, reporting what it did."""
        _report(
            self,
            request,
            ((f"job {pk}", pk) for pk in queryset.values_list("pk", flat=True)),
            lambda pk: act(actor=request.user, job_id=pk, reason="admin action"),
            doing,
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
