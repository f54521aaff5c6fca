"""Who may do what in the Django admin, as mixins for ModelAdmin and inline classes: the roles of
sas_project.permissions, in one place instead of four methods repeated on every admin class."""

from __future__ import annotations

from typing import Any

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
