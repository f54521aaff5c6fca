"""Authentication and permissions at the cost of one prepared statement each.

Every API request looks its token up and checks a role. DRF's token authentication and Django's
model backend do that through the ORM, whose query compilation cost more than the rest of a job
submission; these read the same rows with hand-written SQL:

- `TokenAuthentication`: DRF's `Authorization: Token <key>`, looked up in our own token table
  (sas_project.tokens: expiring, revocable, several per user) with its user, and on PostgreSQL
  the user's permissions, in one statement;
  its last use is written at most every SAS_TOKEN_LAST_USED_SECONDS (a second, rare statement);
- `RoleBackend`: Django's model backend, a user's own and group permissions in one statement.

Semantics are DRF's and Django's (an unknown token or an inactive user is refused with DRF's
messages; superusers hold every permission; an inactive user none), plus expiry and revocation:
an expired or revoked token is a 401 that says so.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.db import connection
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions

from sas_project.conf import sas_settings
from sas_project.database import is_postgresql
from sas_project.tokens.models import ApiToken
from sas_project.tokens.services import digest_of

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
#: The user's permissions as `app_label.codename`, in the token's statement (PostgreSQL): `u` is
#: the user's row. Superusers hold every permission, as ModelBackend says.
USER_PERMISSIONS_COLUMN = """ARRAY(
    SELECT ct.app_label || '.' || p.codename
    FROM auth_permission p JOIN django_content_type ct ON ct.id = p.content_type_id
    WHERE u.is_superuser OR p.id IN (
        SELECT permission_id FROM auth_user_user_permissions WHERE user_id = u.id
        UNION SELECT gp.permission_id FROM auth_group_permissions gp
              JOIN auth_user_groups ug ON ug.group_id = gp.group_id WHERE ug.user_id = u.id))"""


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


def _aware(value: Any) -> dt.datetime | None:
    """A timestamp read by raw SQL: aware on PostgreSQL, naive UTC on SQLite."""
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value if timezone.is_aware(value) else value.replace(tzinfo=dt.UTC)


class TokenAuthentication(authentication.TokenAuthentication):
    """DRF's token authentication (`Authorization: Token <key>`) on sas_project.tokens: the
    token (by its key's digest) and its user read in one hand-written statement."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        user_model = get_user_model()
        fields = list(user_model._meta.concrete_fields)
        columns = ", ".join(f"u.{connection.ops.quote_name(str(f.column))}" for f in fields)
        # On PostgreSQL the user's permissions come in the same statement: the role check that
        # follows every authentication costs no second round trip.
        with_permissions = is_postgresql()
        if with_permissions:
            columns += f", {USER_PERMISSIONS_COLUMN}"
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT t.id, t.expires_at, t.revoked_at, t.last_used_at, {columns} "  # noqa: S608 - names only
                f"FROM api_token t JOIN {user_model._meta.db_table} u ON u.id = t.user_id "
                "WHERE t.digest = %s",
                [digest_of(key)],
            )
            row = cursor.fetchone()
        if row is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        permissions: set[str] | None = None
        if with_permissions:
            permissions, row = set(row[-1]), row[:-1]
        token_id, expires_at, revoked_at, last_used_at = (
            row[0],
            _aware(row[1]),
            _aware(row[2]),
            _aware(row[3]),
        )
        user = user_model.from_db(connection.alias, [f.attname for f in fields], row[4:])
        if not user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        if permissions is not None:
            user._perm_cache = permissions  # type: ignore[attr-defined] # as RoleBackend keeps them
        if revoked_at is not None:
            raise exceptions.AuthenticationFailed("Token revoked.")
        now = timezone.now()
        if expires_at is not None and expires_at <= now:
            raise exceptions.AuthenticationFailed("Token expired: make a new one (console: API tokens).")
        every = dt.timedelta(seconds=sas_settings.token_last_used_seconds)
        if last_used_at is None or now - last_used_at >= every:
            # Guarded, so that concurrent requests write it once per interval.
            ApiToken.objects.filter(pk=token_id).filter(
                Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - every)
            ).update(last_used_at=now)
            last_used_at = now
        token = ApiToken(
            id=token_id, user=user, expires_at=expires_at, revoked_at=None, last_used_at=last_used_at
        )
        token._state.adding = False
        token._state.db = connection.alias
        return user, token
