"""Who changed a definition: written to Django's admin log (LogEntry), which the admin shows as
each object's history, whether the change came from the admin, the API or a command."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db.models import Model


def definition_logged(
    actor: Any, obj: Model, *, created: bool, changes: dict[str, Any] | None = None
) -> None:
    """Record that `actor` created or changed `obj` (nothing is recorded without a user)."""
    if actor is None or not getattr(actor, "is_authenticated", False):
        return
    message: list[dict[str, Any]] = (
        [{"added": {}}] if created else [{"changed": {"fields": sorted(changes or {})}}]
    )
    LogEntry.objects.create(
        user_id=actor.pk,
        content_type_id=ContentType.objects.get_for_model(type(obj)).pk,
        object_id=str(obj.pk),
        object_repr=str(obj)[:200],
        action_flag=ADDITION if created else CHANGE,
        change_message=json.dumps(message),
    )


def definition_deleted(actor: Any, obj: Model) -> None:
    """Record that `actor` deleted `obj` (call before the delete: the row's id is kept)."""
    if actor is None or not getattr(actor, "is_authenticated", False):
        return
    LogEntry.objects.create(
        user_id=actor.pk,
        content_type_id=ContentType.objects.get_for_model(type(obj)).pk,
        object_id=str(obj.pk),
        object_repr=str(obj)[:200],
        action_flag=DELETION,
        change_message=json.dumps([{"deleted": {}}]),
    )
