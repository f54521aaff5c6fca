"""Template context for the console: whether the signed-in user may act (operators and
administrators) or only read (viewers). Templates render action buttons only when `can_act`;
the action views refuse everyone else with 403 whatever the page showed."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from sas_project.permissions import can_operate


def console_roles(request: HttpRequest) -> dict[str, Any]:
    return {"can_act": can_operate(getattr(request, "user", None))}
