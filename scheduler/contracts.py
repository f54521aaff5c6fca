"""Input contracts: a workflow may carry a JSON Schema (2020-12) that every job's input must match.

Checked with `jsonschema` (the reference implementation for Python) where an input enters: a
submission, a schedule (when it is saved, and at each firing), an operator's retry with an edited
input, and a rerun with a new input. A refusal is a 400 listing each error with the JSON pointer
of the value at fault (`errors: [{"pointer", "message"}]`), and nothing is created.

A schema is checked when the workflow is saved: it must be a valid 2020-12 schema, at most 64 KiB,
and may refer (`$ref`) only inside itself: nothing is ever fetched. `format` is an annotation, as
2020-12 makes it by default. The hot path's `scheduler/sql/postgresql/sas_submit.sql` leaves the
jobs of a workflow with a schema to the general path, which checks their inputs here.
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing.exceptions import Unresolvable

from sas_project.errors import InvalidInput

MAX_SCHEMA_BYTES = 64 * 1024
#: Errors listed in one refusal (the rest are counted).
MAX_ERRORS = 20


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [v for k, v in node.items() if k in ("$ref", "$dynamicRef") and isinstance(v, str)]
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def schema_check(schema: Any) -> dict[str, Any] | None:
    """A workflow's input schema, checked (None: no contract). Raises InvalidInput."""
    if schema is None:
        return None
    if not isinstance(schema, dict):
        raise InvalidInput("input_schema must be a JSON Schema object (or null)", field="input_schema")
    if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
        raise InvalidInput(
            f"input_schema is larger than {MAX_SCHEMA_BYTES // 1024} KiB", field="input_schema"
        )
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/" + "/".join(str(p) for p in exc.absolute_path)
        raise InvalidInput(
            f"input_schema is not a JSON Schema (2020-12) at {where}: {exc.message}", field="input_schema"
        ) from exc
    outside = [r for r in _refs(schema) if not r.startswith("#")]
    if outside:
        raise InvalidInput(
            f"input_schema may refer only inside itself ($ref starting with #), not to {outside[0]!r}",
            field="input_schema",
        )
    return schema


def _pointer(path: Any) -> str:
    """The RFC 6901 JSON pointer of a path ("" is the whole input)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def input_check(schema: dict[str, Any] | None, value: Any, *, field: str = "input") -> None:
    """Refuse `value` unless it matches `schema`: InvalidInput listing each error's JSON pointer."""
    if schema is None:
        return
    try:
        errors = sorted(Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.absolute_path))
    except Unresolvable as exc:  # a local $ref to nothing: the schema's fault, said as such
        raise InvalidInput(f"the workflow's input_schema cannot be applied: {exc}", field=field) from exc
    if not errors:
        return
    listed = [
        {
            "pointer": _pointer(e.absolute_path),
            "message": e.message[:500],
        }
        for e in errors[:MAX_ERRORS]
    ]
    more = f" (and {len(errors) - MAX_ERRORS} more)" if len(errors) > MAX_ERRORS else ""
    summary = "; ".join(f"{e['pointer'] or '(the input)'}: {e['message']}" for e in listed[:3])
    raise InvalidInput(
        f"{field} does not match the workflow's input_schema: {summary}{more}", field=field, errors=listed
    )
