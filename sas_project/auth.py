"""Authentication and permissions at the cost of one prepared statement each.

Every API request looks its token up and checks a role. DRF's token authentication and Django's
model backend do that through the ORM, whose query compilation cost more than the rest of a job
submission; these read the same rows with hand-written SQL:

- `TokenAuthentication`: DRF's, the token and its user in one statement;
- `RoleBackend`: Django's model backend, a user's own and group permissions in one statement.

Semantics are unchanged (an unknown token or an inactive user is refused with DRF's messages;
superusers hold every permission; an inactive user none).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.db import connection
from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions
from rest_framework.authtoken.models import Token

PERMISSIONS_SQL = """
SELECT DISTINCT ct.app_label, p.codename
FROM auth_permission p JOIN django_content_type ct ON ct.id = p.content_type_id
WHERE p.id IN (SELECT permission_id FROM auth_user_user_permissions WHERE user_id = %s
               UNION SELECT gp.permission_id FROM auth_group_permissions gp
                     JOIN auth_user_groups ug ON ug.group_id = gp.group_id WHERE ug.user_id = %s)
"""
ALL_PERMISSIONS_SQL = """
SELECT ct.app_label, p.codename
FROM auth_permission p JOIN django_content_type ct ON ct.id = p.content_type_id
"""


class RoleBackend(ModelBackend):
    """Django's model backend; a user's permissions read in one statement, once per request."""

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        if not hasattr(user_obj, "_perm_cache"):
            with connection.cursor() as cursor:
                if user_obj.is_superuser:
                    cursor.execute(ALL_PERMISSIONS_SQL)
                else:
                    cursor.execute(PERMISSIONS_SQL, [user_obj.pk, user_obj.pk])
                user_obj._perm_cache = {f"{app}.{codename}" for app, codename in cursor.fetchall()}
        cache: set[str] = user_obj._perm_cache
        return cache


class TokenAuthentication(authentication.TokenAuthentication):
    """DRF's token authentication (`Authorization: Token <key>`), the token and its user read in
    one hand-written statement."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        user_model = get_user_model()
        fields = list(user_model._meta.concrete_fields)
        columns = ", ".join(f"u.{connection.ops.quote_name(str(f.column))}" for f in fields)
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT t.created, {columns} FROM authtoken_token t "  # noqa: S608 - column names only
                f"JOIN {user_model._meta.db_table} u ON u.id = t.user_id WHERE t.key = %s",
                [key],
            )
            row = cursor.fetchone()
        if row is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        user = user_model.from_db(connection.alias, [f.attname for f in fields], row[1:])
        if not user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        token = Token(key=key, user=user, created=row[0])
        token._state.adding = False
        token._state.db = connection.alias
        return user, token
