"""Making, listing and revoking API tokens. Every change is recorded with its user in the admin
log (sas_project.audit); revoking is allowed to the token's owner and to administrators."""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from sas_project.audit import definition_logged
from sas_project.conf import sas_settings
from sas_project.errors import InvalidInput, NotFound
from sas_project.permissions import can_manage
from sas_project.tokens.models import ApiToken


def digest_of(key: str) -> str:
    """What a key is stored and looked up as."""
    return hashlib.sha256(key.encode()).hexdigest()


def token_create(
    *,
    user: Any,
    name: str,
    lifetime_days: float | None = None,
    actor: Any = None,
    minted_by: ApiToken | None = None,
) -> tuple[ApiToken, str]:
    """A new token for `user`; returns it and its key (which is never stored nor shown again).

    It expires after `lifetime_days`, at most SAS_TOKEN_LIFETIME_DAYS (the default); with
    SAS_TOKEN_LIFETIME_DAYS = 0 a token without a lifetime never expires. A token made with a
    token (`minted_by`, the request's credential) expires no later than that token: a stolen
    token cannot keep itself alive by minting successors, only a session (a person who signed
    in) makes a token that outlives the one before.
    """
    name = (name or "").strip()
    if not name or len(name) > 100 or not name.isprintable():
        raise InvalidInput("a token's name is 1-100 printable characters", field="name")
    longest = sas_settings.token_lifetime_days
    if lifetime_days is not None:
        if not 0 < lifetime_days <= (longest or float("inf")):
            limit = f"at most {longest:g}" if longest else "more than 0"
            raise InvalidInput(f"lifetime_days must be more than 0 and {limit}", field="lifetime_days")
        days: float | None = lifetime_days
    else:
        days = longest or None
    key = secrets.token_hex(20)
    now = timezone.now()
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name,
            digest=digest_of(key),
            prefix=key[:8],
            created_at=now,
            expires_at=_no_later_than(now + dt.timedelta(days=days) if days else None, minted_by),
        )
        definition_logged(actor, token, created=True)
    return token, key


def _no_later_than(expires_at: dt.datetime | None, minted_by: ApiToken | None) -> dt.datetime | None:
    if minted_by is None or minted_by.expires_at is None:
        return expires_at
    if expires_at is None:
        return minted_by.expires_at
    return min(expires_at, minted_by.expires_at)


def tokens_visible(actor: Any, *, owner: str | None = None) -> QuerySet[ApiToken]:
    """The actor's own tokens, newest first; an administrator may name another `owner`
    (a username). Anyone else naming another user sees nothing."""
    tokens = ApiToken.objects.select_related("user", "revoked_by").order_by("-created_at", "-id")
    if owner is None or owner == actor.get_username():
        return tokens.filter(user=actor)
    if not can_manage(actor):
        return tokens.none()
    return tokens.filter(user__in=get_user_model().objects.filter(username=owner))


def token_for(actor: Any, *, token_id: int) -> ApiToken:
    """One token, if it is the actor's or the actor is an administrator; else NotFound (another
    user's token looks as absent as a token that does not exist)."""
    token = ApiToken.objects.select_related("user", "revoked_by").filter(pk=token_id).first()
    if token is None or (token.user_id != actor.pk and not can_manage(actor)):
        raise NotFound(f"no token {token_id}")
    return token


def token_revoke(*, token_id: int, actor: Any) -> ApiToken:
    """Revoke a token (idempotent: a revoked one is returned as it is). Its owner may; an
    administrator may revoke any. Another user's token is NotFound, as if it did not exist."""
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().filter(pk=token_id).first()
        if token is None or (token.user_id != actor.pk and not can_manage(actor)):
            raise NotFound(f"no token {token_id}")
        if token.revoked_at is None:
            token.revoked_at = timezone.now()
            token.revoked_by = actor
            token.save(update_fields=["revoked_at", "revoked_by"])
            definition_logged(
                actor, token, created=False, changes={"revoked_at": [None, str(token.revoked_at)]}
            )
    return token


def token_revoke_named(*, user: Any, name: str, actor: Any = None) -> int:
    """Revoke every live token of `user` called `name` (drf_create_token --reset)."""
    with transaction.atomic():
        tokens = list(
            ApiToken.objects.select_for_update().filter(user=user, name=name, revoked_at__isnull=True)
        )
        now = timezone.now()
        for token in tokens:
            token.revoked_at = now
            token.revoked_by = actor
            token.save(update_fields=["revoked_at", "revoked_by"])
            definition_logged(actor, token, created=False, changes={"revoked_at": [None, str(now)]})
    return len(tokens)
