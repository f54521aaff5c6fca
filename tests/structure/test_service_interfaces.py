"""A service takes one positional argument, the thing the call is about; everything else by name.

`step_retry(step_id, *, actor=..., reason=...)`: a call site says what each value is, and a
service can grow or reorder its parameters without a caller silently passing one value as another.
Every public (no leading underscore) module-level function of every service module holds it:
`services.py` or `services/` in the product's apps.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from testbed.processes import ROOT

pytestmark = pytest.mark.sqlite

APPS = ("scheduler", "agents", "supervisor", "sas_project")

#: Functions that must stay positional, each with the reason beside it. Empty: no service is a
#: django-q2 task entry point (those are `scheduler.tasks`, called by dotted path with positional
#: ids) or a callback handed to code that calls it positionally.
POSITIONAL_ALLOWED: dict[str, str] = {}


def service_modules() -> list[Path]:
    found: set[Path] = set()
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            parts = path.relative_to(ROOT).parts
            if "migrations" in parts:
                continue
            if path.name == "services.py" or "services" in parts[:-1]:
                found.add(path)
    return sorted(found)


def public_functions(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_")
    ]


def test_the_service_modules_are_found() -> None:
    names = {str(path.relative_to(ROOT)) for path in service_modules()}
    assert {"scheduler/services/saga.py", "supervisor/services.py", "agents/services.py"} <= names
    assert sum(len(public_functions(path)) for path in service_modules()) > 50


def test_every_public_service_function_takes_at_most_one_positional_argument() -> None:
    found = []
    for path in service_modules():
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in public_functions(path):
            positional = [a.arg for a in node.args.posonlyargs + node.args.args]
            allowed = f"{module}.{node.name}" in POSITIONAL_ALLOWED
            if (len(positional) > 1 or node.args.vararg) and not allowed:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}({', '.join(positional)})")
    assert not found, f"make every parameter after the first keyword-only (`*,`): {found}"


def test_the_allow_list_names_only_functions_that_exist() -> None:
    existing = {
        f"{'.'.join(path.relative_to(ROOT).with_suffix('').parts)}.{node.name}"
        for path in service_modules()
        for node in public_functions(path)
    }
    assert set(POSITIONAL_ALLOWED) <= existing
