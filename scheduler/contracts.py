"""Input contracts: a workflow may carry a JSON Schema (2020-12) that every job's input must match.

Checked with `jsonschema` (the reference implementation for Python) where an input enters: a
submission, a schedule (when it is saved, and at each firing), an operator's retry with an edited
input, and a rerun with a new input. A refusal is a 400 listing each error with the JSON pointer
of the value at fault (`errors: [{"pointer", "message"}]`), and nothing is created.

A schema is checked when the workflow is saved: it must be a valid 2020-12 schema, at most 64 KiB,
and may refer (`$ref`) only inside itself: nothing is ever fetched. `format` is an annotation, as
2020-12 makes it by default. The hot path's `scheduler/sql/postgresql/sas_submit.sql` leaves the
jobs of a workflow with a schema to the general path, which checks their inputs here.

A check's work is bounded by the input's size, whoever wrote the schema (an administrator's
schema runs on every submitter's input, docs/security.md "What contracts cost"):
- `pattern`, `patternProperties` (and `additionalProperties` beside them) run on RE2, a
  linear-time engine, never on Python's backtracking `re`; a pattern RE2 cannot run (a back
  reference, a look-around) is refused on save, and so is `unevaluatedProperties` beside
  `patternProperties` (jsonschema matches those with `re`);
- `uniqueItems` compares canonical forms in a hash set, in linear time, where jsonschema
  compares every pair;
- a `$ref` cycle that consumes nothing (`{"$ref": "#"}`, `allOf` back to itself) is refused on
  save; a recursion deeper than the interpreter's still ends in a 400, never a 500.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterator
from typing import Any

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator
from referencing.exceptions import Unresolvable

from sas_project.errors import InvalidInput

MAX_SCHEMA_BYTES = 64 * 1024
#: Errors listed in one refusal (the rest are counted, up to MAX_COUNTED).
MAX_ERRORS = 20
MAX_COUNTED = 1000
#: The keywords whose subschemas apply to the same value (no input consumed): a `$ref` cycle
#: through these alone never ends.
IN_PLACE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas")

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is the caller's 400, not a line on stderr


@functools.lru_cache(maxsize=512)
def _regex(pattern: str) -> Any:
    """`pattern` compiled by RE2 (raises re2.error for what RE2 cannot run)."""
    return re2.compile(pattern, _RE2_OPTIONS)


def _canonical(value: Any) -> Any:
    """One hashable key for every JSON value equal to `value` under JSON Schema's equality:
    object keys in any order, 1 and 1.0 alike (Python's own equality and hash), true and 1
    apart (a tag of their own). Tuples, not text: no encoder call per scalar."""
    if isinstance(value, dict):
        return ("o", frozenset((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("a", tuple(_canonical(v) for v in value))
    if isinstance(value, bool) or value is None:
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)
    return ("s", value)


def _unique_items(validator: Validator, unique: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: dict[Any, int] = {}
    for index, item in enumerate(instance):
        first = seen.setdefault(_canonical(item), index)
        if first != index:
            yield ValidationError(f"items {first} and {index} are equal: the items must be unique")
            return


def _pattern(validator: Validator, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _regex(pattern).search(instance):
        yield ValidationError(f"{instance[:100]!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Validator, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _regex(pattern).search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Validator, additional: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    patterns = [_regex(p) for p in schema.get("patternProperties", {})]
    extras = sorted(k for k in instance if k not in named and not any(p.search(k) for p in patterns))
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        shown = ", ".join(repr(e) for e in extras[:10]) + (" ..." if len(extras) > 10 else "")
        yield ValidationError(f"Additional properties are not allowed ({shown} unexpected)")


#: Draft 2020-12 with the keywords above in place of jsonschema's own.
BoundedValidator = validators.extend(
    Draft202012Validator,
    {
        "uniqueItems": _unique_items,
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)


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
    try:
        return _schema_check(schema)
    except RecursionError as exc:
        raise InvalidInput("input_schema is nested too deeply", field="input_schema") from exc


def _schema_check(schema: Any) -> dict[str, Any]:
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
    _patterns_check(schema)
    cycle = _in_place_cycle(schema)
    if cycle:
        raise InvalidInput(
            f"input_schema refers to itself without consuming any input ({' -> '.join(cycle)}): "
            "every check of it would never end",
            field="input_schema",
        )
    return schema


def _subschemas(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object in the schema with its JSON pointer (a superset of its subschemas)."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _subschemas(value, f"{path}/{_escape(key)}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _subschemas(value, f"{path}/{index}")


def _escape(key: str) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _patterns_check(schema: dict[str, Any]) -> None:
    nodes = list(_subschemas(schema))
    if any(isinstance(n.get("patternProperties"), dict) for _, n in nodes) and any(
        "unevaluatedProperties" in n for _, n in nodes
    ):
        raise InvalidInput(
            "input_schema may not combine patternProperties with unevaluatedProperties "
            "(use additionalProperties)",
            field="input_schema",
        )
    for where, node in nodes:
        patterns = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        properties = node.get("patternProperties")
        if isinstance(properties, dict):
            patterns += list(properties)
        for pattern in patterns:
            try:
                _regex(pattern)
            except re2.error as exc:
                raise InvalidInput(
                    f"input_schema's pattern {pattern[:100]!r} at {where or '/'} cannot run in linear "
                    f"time (back references and look-arounds are refused): {exc}",
                    field="input_schema",
                ) from exc


def _in_place_cycle(schema: dict[str, Any]) -> list[str]:
    """A chain of subschemas that applies to one value and comes back to its start, or []."""
    anchors = {
        f"#{node[key]}": path
        for path, node in _subschemas(schema)
        for key in ("$anchor", "$dynamicAnchor")
        if isinstance(node.get(key), str)
    }
    nodes = dict(_subschemas(schema))

    def applied(path: str) -> list[str]:
        node = nodes.get(path)
        if node is None:
            return []
        found = []
        for key in ("$ref", "$dynamicRef"):
            ref = node.get(key)
            if isinstance(ref, str):
                found.append(anchors.get(ref, ref[1:] if ref.startswith("#") else ref))
        for key in IN_PLACE:
            value = node.get(key)
            if isinstance(value, dict) and key != "dependentSchemas":
                found.append(f"{path}/{key}")
            elif isinstance(value, list):
                found += [f"{path}/{key}/{i}" for i in range(len(value))]
            elif isinstance(value, dict):
                found += [f"{path}/{key}/{_escape(k)}" for k in value]
        return found

    state: dict[str, int] = {}  # 1: on the current chain, 2: explored

    def visit(path: str, chain: list[str]) -> list[str]:
        if state.get(path) == 1:
            return [*chain[chain.index(path) :], path]
        if state.get(path) == 2:
            return []
        state[path] = 1
        for target in applied(path):
            found = visit(target, [*chain, path])
            if found:
                return found
        state[path] = 2
        return []

    for start in nodes:
        cycle = visit(start, [])
        if cycle:
            return [c or "#" for c in cycle]
    return []


def _path_order(error: ValidationError) -> list[tuple[int, int, str]]:
    """Errors in the input's order: array indexes as numbers, keys as text, never compared."""
    return [(0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in error.absolute_path]


def _pointer(path: Any) -> str:
    """The RFC 6901 JSON pointer of a path ("" is the whole input)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def input_check(schema: dict[str, Any] | None, value: Any, *, field: str = "input") -> None:
    """Refuse `value` unless it matches `schema`: InvalidInput listing each error's JSON pointer."""
    if schema is None:
        return
    try:
        found = list(itertools.islice(BoundedValidator(schema).iter_errors(value), MAX_COUNTED + 1))
    except (Unresolvable, RecursionError, re2.error) as exc:
        # A local $ref to nothing, a recursion past the interpreter's depth, a pattern saved before
        # patterns were vetted: the schema's fault, said as such.
        raise InvalidInput(
            f"the workflow's input_schema cannot be applied: {type(exc).__name__}: {str(exc)[:200]}",
            field=field,
        ) from exc
    if not found:
        return
    errors = sorted(found[:MAX_COUNTED], key=_path_order)
    listed = [
        {
            "pointer": _pointer(e.absolute_path),
            "message": e.message[:500],
        }
        for e in errors[:MAX_ERRORS]
    ]
    more = f" (and {len(errors) - MAX_ERRORS} more)" if len(errors) > MAX_ERRORS else ""
    if len(found) > MAX_COUNTED:
        more = f" (and more than {MAX_COUNTED - MAX_ERRORS} more)"
    summary = "; ".join(f"{e['pointer'] or '(the input)'}: {e['message']}" for e in listed[:3])
    raise InvalidInput(
        f"{field} does not match the workflow's input_schema: {summary}{more}", field=field, errors=listed
    )
