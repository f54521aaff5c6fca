"""Expressions in workflow definitions: JMESPath (https://jmespath.org), a query language with a
specification and a well-kept implementation, evaluated on data only (no `eval`, no code).

An expression sees what a remote's body carries: `input` (the job's input, or the step's edited
input) and `results` (the outputs of the steps it depends on, directly or not, by name). A plain
dotted path (`input.prepaid`, `results.reserve.items`) is that value. Numbers and strings in
comparisons are JSON literals in backquotes: `input.amount > \\`100\\``. Truth is JMESPath's: false,
null, "", [] and {} are false; every number (0 too) is true.

Checked when a workflow is saved: the syntax, and that every path starts at `input` or at
`results.<a step it depends on>` (a fan-out item's mapping also sees `item` and `index`; an
output projection sees the remote's answer as `output`).

A step's input mapping is an expression (a string: its value is the body's `input`) or a JSON
template: objects and lists copied as written, except that a key ending in `.$` holds an
expression whose value goes under the key without the suffix (`{"amount.$": "input.total"}`),
as Amazon States Language writes it.

Bounded whoever writes them (docs/security.md, "What expressions make"): parsing or evaluating
one never recurses into a 500 (`"!" * 998` is a 400 on save, a held step at run time), and no
value grows past MAX_VALUE_BYTES of JSON: `join` and `to_string` refuse to make a larger string
(doubling a string twenty-five times no longer makes 100 MiB), and a value, or an input template's
values together, larger than that (as when `[x, x]` nests references) is refused as the
expression's failure, measured in time linear in the limit.
"""

from __future__ import annotations

import json
from typing import Any

import jmespath
from jmespath import functions
from jmespath.exceptions import JMESPathError

from sas_project.errors import InvalidInput
from sas_project.validation import unstorable

MAX_LENGTH = 1000
#: The roots an expression reads unless its place says otherwise.
ROOTS = ("input", "results")
#: The largest input template (JSON text), and how deep it may nest.
MAX_TEMPLATE_BYTES = 16 * 1024
MAX_TEMPLATE_DEPTH = 16
#: The suffix of a template key whose value is an expression.
EXPR_SUFFIX = ".$"
#: The largest value (as JSON, near enough) one expression, or one input template, may make.
MAX_VALUE_BYTES = 1024 * 1024

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


def _negates_a_root(node: dict[str, Any]) -> bool:
    """Whether the expression reads a field of a negation (`!input.x`, which JMESPath parses as
    `(!input).x`: a field of a boolean, always null) anywhere in it."""
    children = node.get("children", [])
    if (
        node.get("type") in ("subexpression", "index_expression")
        and children
        and children[0].get("type") == "not_expression"
    ):
        return True
    return any(_negates_a_root(child) for child in children if isinstance(child, dict))


def check(expression: Any, *, where: str, ancestors: set[str], roots: tuple[str, ...] = ROOTS) -> str:
    """A definition's expression, checked: its syntax, and that it reads only `roots` (`results`
    only of `ancestors`). Raises InvalidInput naming `where`."""
    if not isinstance(expression, str) or not expression.strip() or len(expression) > MAX_LENGTH:
        raise InvalidInput(
            f"{where} must be a JMESPath expression of 1 to {MAX_LENGTH} characters", field="steps"
        )
    try:
        parsed = jmespath.compile(expression).parsed
        return _check_parsed(parsed, expression, where=where, ancestors=ancestors, roots=roots)
    except JMESPathError as exc:
        first = str(exc).splitlines()[0]
        raise InvalidInput(f"{where}: not a JMESPath expression ({first})", field="steps") from exc
    except RecursionError as exc:
        # The parser (and the walks below) recurse once per operator: `!!!...` or `((((...`.
        raise InvalidInput(f"{where}: the expression nests too deeply", field="steps") from exc


def _check_parsed(
    parsed: dict[str, Any], expression: str, *, where: str, ancestors: set[str], roots: tuple[str, ...]
) -> str:
    if _negates_a_root(parsed):
        raise InvalidInput(
            f"{where}: `!` binds tighter than `.`: `!input.x` reads a field of `!input` (always "
            "null); write `!(input.x)`",
            field="steps",
        )
    for path in _root_paths(parsed):
        if path[0] not in roots:
            allowed = " or ".join(f"`{r}.<step>`" if r == "results" else f"`{r}`" for r in roots)
            raise InvalidInput(
                f"{where} reads {path[0]!r}: an expression here reads {allowed}", field="steps"
            )
        if path[0] == "results" and len(path) > 1 and path[1] not in ancestors:
            raise InvalidInput(
                f"{where} reads results.{path[1]}, which is not a step it depends on (directly or not)",
                field="steps",
            )
    return expression


def check_template(template: Any, *, where: str, ancestors: set[str], roots: tuple[str, ...] = ROOTS) -> Any:
    """An input mapping, checked: an expression, or a template whose `.$` keys hold expressions
    (each checked as `check` does, named by its path in the template). Raises InvalidInput."""
    if isinstance(template, str):
        return check(template, where=where, ancestors=ancestors, roots=roots)
    if not isinstance(template, dict | list):
        raise InvalidInput(
            f"{where} must be an expression (a string) or a JSON object or list", field="steps"
        )
    try:
        size = len(json.dumps(template))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{where} must be JSON", field="steps") from exc
    if size > MAX_TEMPLATE_BYTES:
        raise InvalidInput(f"{where} is larger than {MAX_TEMPLATE_BYTES} bytes of JSON", field="steps")
    _check_node(template, where, ancestors, roots, depth=0)
    return template


def _check_node(node: Any, where: str, ancestors: set[str], roots: tuple[str, ...], *, depth: int) -> None:
    if depth > MAX_TEMPLATE_DEPTH:
        raise InvalidInput(f"{where} nests deeper than {MAX_TEMPLATE_DEPTH} levels", field="steps")
    if isinstance(node, list):
        for index, value in enumerate(node):
            _check_node(value, f"{where}[{index}]", ancestors, roots, depth=depth + 1)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key.endswith(EXPR_SUFFIX):
            name = key[: -len(EXPR_SUFFIX)]
            if not name:
                raise InvalidInput(
                    f"{where}: the key {key!r} names nothing before {EXPR_SUFFIX}", field="steps"
                )
            if name in node:
                raise InvalidInput(f"{where}: both {name!r} and {key!r} are given", field="steps")
            check(value, where=f"{where}.{key}", ancestors=ancestors, roots=roots)
        else:
            _check_node(value, f"{where}.{key}", ancestors, roots, depth=depth + 1)


class NotStorable(JMESPathError):
    """An expression's value that the database cannot store (sas_project.validation.unstorable:
    NaN or an infinity from `to_number`, `sum` or `avg`, a NUL or an unpaired surrogate, too deep
    a nesting). A JMESPathError, so every place that keeps a value holds its step with the reason,
    as it does for an expression that cannot be evaluated."""


class TooLarge(JMESPathError):
    """An expression's value, or a template's values together, past MAX_VALUE_BYTES: held as an
    expression that cannot be evaluated is."""


def _size(value: Any, budget: int) -> int:
    """The JSON size of `value`, near enough, walked without recursion and counting a value each
    time it is referred to (as its JSON would repeat it). Raises TooLarge past `budget`, so the
    walk costs at most `budget` steps whatever shares what."""
    total, stack = 0, [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            total += len(node) + 2
        elif isinstance(node, dict):
            total += 2 + len(node)
            for key, child in node.items():
                total += len(key) + 3
                stack.append(child)
        elif isinstance(node, list):
            total += 2 + len(node)
            stack.extend(node)
        else:
            total += 8
        if total > budget:
            raise TooLarge(f"its value is larger than {budget} bytes of JSON")
    return total


class _Bounded(functions.Functions):
    """JMESPath's functions, but those that make a new string refuse one past MAX_VALUE_BYTES."""

    @functions.signature({"types": ["string"]}, {"types": ["array-string"]})
    def _func_join(self, separator: str, array: list[str]) -> str:
        size = len(separator) * max(len(array) - 1, 0) + sum(len(item) for item in array)
        if size > MAX_VALUE_BYTES:
            raise TooLarge(f"join would make a string of {size} characters, more than {MAX_VALUE_BYTES}")
        return separator.join(array)

    @functions.signature({"types": []})
    def _func_to_string(self, arg: Any) -> str:
        if not isinstance(arg, str):
            _size(arg, MAX_VALUE_BYTES)
        result: str = super()._func_to_string(arg)
        return result


_OPTIONS = jmespath.Options(custom_functions=_Bounded())


def render(template: Any, data: dict[str, Any]) -> Any:
    """A checked input mapping's value on `data`. Raises JMESPathError as `evaluate` does, and
    TooLarge when its values together pass MAX_VALUE_BYTES."""
    budget = [MAX_VALUE_BYTES]
    return _render(template, data, budget)


def _render(template: Any, data: dict[str, Any], budget: list[int]) -> Any:
    if isinstance(template, str):
        return _spend(evaluate(template, data), budget)
    if isinstance(template, list):
        return [
            _render(value, data, budget) if isinstance(value, dict | list) else value for value in template
        ]
    if isinstance(template, dict):
        out: dict[str, Any] = {}
        for key, value in template.items():
            if key.endswith(EXPR_SUFFIX):
                out[key[: -len(EXPR_SUFFIX)]] = _spend(evaluate(value, data), budget)
            else:
                out[key] = _render(value, data, budget) if isinstance(value, dict | list) else value
        return out
    return template


def _spend(value: Any, budget: list[int]) -> Any:
    budget[0] -= _size(value, budget[0])
    return value


def evaluate(expression: str, data: dict[str, Any], *, stored: bool = True) -> Any:
    """The expression's value on `data` (`{"input", "results"}`). Raises JMESPathError when it
    cannot be evaluated (a function given the wrong type of value, a value past MAX_VALUE_BYTES,
    a nesting past the interpreter's depth), and NotStorable (one) when its value is to be
    `stored` and the database cannot store it."""
    try:
        value = jmespath.search(expression, data, options=_OPTIONS)
        if stored and value is not None:
            _size(value, MAX_VALUE_BYTES)
    except RecursionError as exc:
        raise TooLarge("it nests too deeply to evaluate") from exc
    if stored and value is not None:
        problem = unstorable(value)
        if problem is not None:
            raise NotStorable(f"its value cannot be stored: {problem}")
    return value


def truthy(value: Any) -> bool:
    """JMESPath's truth: false, null and empty strings, lists and objects are false."""
    return not (value is None or value is False or value in ("", [], {}))
