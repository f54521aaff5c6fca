"""What the services that edit a definition (a schedule, a policy, an alert subscription) share:
the fields they refuse, and the row they change, locked."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TypeVar

from django.db.models import Model, QuerySet

from sas_project.errors import InvalidInput, NotFound

M = TypeVar("M", bound=Model)


def fields_known(given: Iterable[str], fields: Collection[str], what: str) -> None:
    """Refuse any of the `given` field names that is not one of `fields` (of a `what`)."""
    unknown = set(given) - set(fields)
    if unknown:
        raise InvalidInput(f"unknown {what} fields: {', '.join(sorted(unknown))}")


def locked_one(rows: QuerySet[M], missing: str) -> M:
    """The first of `rows`, locked until the transaction ends (FOR UPDATE); NotFound(`missing`)
    when there is none."""
    row = rows.select_for_update().first()
    if row is None:
        raise NotFound(missing)
    return row
