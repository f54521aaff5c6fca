"""The leaf layer reaches no model above it, not even by string: import-linter sees imports only.

`agents` imports no other app (the layers contract in pyproject.toml); these checks close the
ways around it: following a relation to its model (`related_model`), looking a model up by name
(`apps.get_model`), or naming an upper app's model in a string.
"""

from __future__ import annotations

import ast

import pytest

from testbed.processes import ROOT

pytestmark = pytest.mark.sqlite

UPPER_APPS = ("scheduler", "supervisor")


def agents_sources() -> list[tuple[str, ast.Module]]:
    return [
        (str(path.relative_to(ROOT)), ast.parse(path.read_text(), filename=str(path)))
        for path in sorted((ROOT / "agents").rglob("*.py"))
        if "migrations" not in path.parts
    ]


def test_agents_follow_no_relation_to_its_model_and_look_no_model_up_by_name() -> None:
    found = [
        f"{name}:{node.lineno} .{node.attr}"
        for name, tree in agents_sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in ("related_model", "get_model")
    ]
    assert not found, f"agents reach a model above them: {found}"


def test_agents_name_no_model_of_an_upper_app_in_a_string() -> None:
    found = [
        f"{name}:{node.lineno} {node.value!r}"
        for name, tree in agents_sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and any(
            node.value.startswith(f"{app}.") and node.value[len(app) + 1 :][:1].isupper()
            for app in UPPER_APPS
        )
    ]
    assert not found, f"agents name a model above them: {found}"
