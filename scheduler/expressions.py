"""Expressions in workflow definitions: JMESPath (https://jmespath.org), a query language with a
specification and a well-kept implementation, evaluated on data only (no `eval`, no code).

An expression sees what a remote's body carries: `input` (the job's input, or the step's edited
input) and `results` (the outputs of the steps it depends on, directly or not, by name). A plain
dotted path (`input.prepaid`, `results.reserve.items`) is that value. Numbers and strings in
comparisons are JSON literals in backquotes: `input.amount > \\`100\\``. Truth is JMESPath's: false,
null, "", [] and {} are false; every number (0 too) is true.

Checked when a workflow is saved: the syntax, and that every path starts at `input` or at
`results.<a step it depends on>`.
"""

from __future__ import annotations

from typing import Any

import jmespath
from jmespath.exceptions import JMESPathError

from sas_project.errors import InvalidInput

MAX_LENGTH = 1000

#: Node types whose children are all evaluated against the same data as the node itself.
_SAME_CONTEXT = {
    "comparator",
    "and_expression",
    "or_expression",
    "not_expression",
    "function_expression",
    "multi_select_list",
    "multi_select_dict",
    "key_val_pair",
    "or",
}
#: Node types whose first child is evaluated against the node's data (the rest against its result).
_LEFT_CONTEXT = {
    "subexpression",
    "index_expression",
    "pipe",
    "projection",
    "value_projection",
    "filter_projection",
    "flatten",
}


def _root_paths(node: dict[str, Any]) -> list[list[str]]:
    """The field paths an expression reads from its top-level data (at most two names each)."""
    kind = node.get("type")
    children = node.get("children", [])
    if kind == "field":
        return [[node["value"]]]
    if kind in _SAME_CONTEXT:
        return [path for child in children for path in _root_paths(child)]
    if kind in _LEFT_CONTEXT and children:
        paths = _root_paths(children[0])
        if kind == "subexpression" and len(children) > 1 and children[1].get("type") == "field":
            paths = [[*p, children[1]["value"]] if len(p) == 1 else p for p in paths]
        return paths
    return []


def check(expression: Any, *, where: str, ancestors: set[str]) -> str:
    """A definition's expression, checked: its syntax, and that it reads only `input` and the
    results of `ancestors`. Raises InvalidInput naming `where`."""
    if not isinstance(expression, str) or not expression.strip() or len(expression) > MAX_LENGTH:
        raise InvalidInput(
            f"{where} must be a JMESPath expression of 1 to {MAX_LENGTH} characters", field="steps"
        )
    try:
        parsed = jmespath.compile(expression).parsed
    except JMESPathError as exc:
        first = str(exc).splitlines()[0]
        raise InvalidInput(f"{where}: not a JMESPath expression ({first})", field="steps") from exc
    for path in _root_paths(parsed):
        if path[0] not in ("input", "results"):
            raise InvalidInput(
                f"{where} reads {path[0]!r}: an expression reads `input` or `results.<step>`", field="steps"
            )
        if path[0] == "results" and len(path) > 1 and path[1] not in ancestors:
            raise InvalidInput(
                f"{where} reads results.{path[1]}, which is not a step it depends on (directly or not)",
                field="steps",
            )
    return expression


def evaluate(expression: str, data: dict[str, Any]) -> Any:
    """The expression's value on `data` (`{"input", "results"}`). Raises JMESPathError when it
    cannot be evaluated (a function given the wrong type of value)."""
    return jmespath.search(expression, data)


def truthy(value: Any) -> bool:
    """JMESPath's truth: false, null and empty strings, lists and objects are false."""
    return not (value is None or value is False or value in ("", [], {}))
