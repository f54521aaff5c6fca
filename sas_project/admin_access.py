"""Who may do what in the Django admin, as mixins for ModelAdmin and inline classes: the roles of
sas_project.permissions, in one place instead of four methods repeated on every admin class; and
how an admin hands its writes to the services that check and record them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from django.db.models import Model, QuerySet
from django.http import HttpRequest

from sas_project.permissions import can_manage


class ManagersOnly:
    """Definitions: administrators see and change them; nobody else sees them here."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_manage(request.user)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_manage(request.user)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_manage(request.user)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_manage(request.user)


class WrittenByTheService:
    """Records only the service writes: never added, changed or deleted here."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class SavedByTheService:
    """Rows a service saves and records with the user (an event, a revision, or the admin log
    entry the service writes itself): the admin writes no log entry of its own, and no change
    message for inlines that the service saved, not the formsets."""

    def construct_change_message(
        self, request: HttpRequest, form: Any, formsets: Any, add: bool = False
    ) -> Any:
        return []

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return None

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return None


@dataclass(frozen=True)
class NamedWrites:
    """The services that create, change and delete rows known by their `name`, and the fields
    they take: `create(name=, actor=, **values)`, `update(name, actor=, changes=)`,
    `delete(name, actor=)`."""

    fields: Sequence[str]
    create: Callable[..., Model]
    update: Callable[..., Model]
    delete: Callable[..., object]


class WrittenByName(SavedByTheService):
    """Every save and delete goes through the services `writes` names (checked, logged with the
    user): the admin only collects the values."""

    writes: ClassVar[NamedWrites]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        values = {name: form.cleaned_data.get(name) for name in self.writes.fields}
        if change:
            saved = self.writes.update(obj.name, actor=request.user, changes=values)
        else:
            saved = self.writes.create(name=form.cleaned_data["name"], actor=request.user, **values)
        obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        self.writes.delete(obj.name, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for name in queryset.values_list("name", flat=True):
            self.writes.delete(name, actor=request.user)

    def log_deletion(self, request: HttpRequest, obj: Any, object_repr: str) -> Any:
        return None
