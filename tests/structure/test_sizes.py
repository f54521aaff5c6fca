"""Rooms a newcomer holds in their head: no product module over 700 lines and no function over
120 (docs/architecture.md, "How the code is laid out"). A module that grows past its room is
split by aggregate, as `scheduler/models/` and `scheduler/serializers/` were; a function, into
named steps, as the reply consumer and the compensation's advance were."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from testbed.processes import ROOT

pytestmark = pytest.mark.sqlite

#: The apps and the plumbing: the product, not its tests, test bed or migrations.
PRODUCT = ("scheduler", "agents", "supervisor", "sas_project")
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 120


def product_modules() -> list[Path]:
    return sorted(
        path
        for package in PRODUCT
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    )


def test_no_product_module_is_longer_than_its_room() -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for path in product_modules()
        if (lines := path.read_text().count("\n")) > MAX_MODULE_LINES
    }
    assert not long, f"split by aggregate: {long}"


def test_no_product_function_is_longer_than_its_room() -> None:
    long = {}
    for path in product_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert not long, f"split into named steps: {long}"
