"""API tokens in the admin: every user's tokens, read-only (keys are never stored), and the action
to revoke them, recorded with the administrator who did it."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from sas_project.tokens.models import ApiToken
from sas_project.tokens.services import token_revoke


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "user",
        "prefix",
        "status",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = ["revoked_at", "expires_at"]
    search_fields = ["name", "prefix", "user__username"]
    readonly_fields = [
        "user",
        "name",
        "prefix",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
        "revoked_by",
    ]
    fields = tuple(readonly_fields)
    actions = ["revoke"]
    list_select_related = ["user"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        # A key is shown once, to its owner: tokens are made on the console or by drf_create_token.
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Revoked, not deleted: the row keeps who revoked it and when.
        return False

    @admin.action(description="Revoke the selected tokens", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token_id in queryset.values_list("pk", flat=True):
            token_revoke(token_id=token_id, actor=request.user)
        self.message_user(request, f"Revoked {queryset.count()} token(s).", messages.SUCCESS)
