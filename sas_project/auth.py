"""The permission backend: Django's ModelBackend, reading a user's permissions (their own and
their groups') in one query instead of two. Every API request checks a role, so this is one
statement less per request."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Permission
from django.db.models import Q


class RoleBackend(ModelBackend):
    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        if not hasattr(user_obj, "_perm_cache"):
            if user_obj.is_superuser:
                perms = Permission.objects.all()
            else:
                perms = Permission.objects.filter(Q(user=user_obj) | Q(group__user=user_obj))
            user_obj._perm_cache = {
                f"{app}.{codename}"
                for app, codename in perms.values_list("content_type__app_label", "codename").distinct()
            }
        cache: set[str] = user_obj._perm_cache
        return cache
