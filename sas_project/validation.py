"""Input checks every app shares: definition names, and JSON the database can store."""

from __future__ import annotations

import re
from typing import Any

from sas_project.errors import InvalidInput

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


def valid_name(value: Any, what: str, field: str) -> str:
    """A definition's name: it appears in URLs and in other definitions."""
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise InvalidInput(f"{what} must be 1-100 letters, digits, '-' or '_'", field=field)
    return value


def json_storable(value: Any, field: str, *, depth: int = 0) -> None:
    """Refuse JSON that the database cannot store or that nests absurdly deep: NUL characters
    (PostgreSQL's jsonb has no room for them), non-finite numbers, more than 64 levels."""
    if depth > 64:
        raise InvalidInput(f"{field} nests deeper than 64 levels", field=field)
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidInput(f"{field} contains a NUL character", field=field)
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidInput(f"{field} contains a number that is not finite", field=field)
    elif isinstance(value, dict):
        for key, item in value.items():
            json_storable(key, field, depth=depth + 1)
            json_storable(item, field, depth=depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            json_storable(item, field, depth=depth + 1)
