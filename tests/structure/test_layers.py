"""A layer reaches no model above it, not even by string: import-linter sees imports only.

`agents` imports no other app and `scheduler` only `agents` (the layers contract in
pyproject.toml); these checks close the ways around it: following a relation to its model
(`related_model`), looking a model up by name (`apps.get_model`), or naming an upper app's model
in a string.
"""

from __future__ import annotations

import ast

import pytest

from testbed.processes import ROOT

pytestmark = pytest.mark.sqlite

UPPER_APPS = ("scheduler", "supervisor")


def sources(app: str) -> list[tuple[str, ast.Module]]:
    """The app's modules, its migrations left out: they are history, written against the models
    as they were."""
    return [
        (str(path.relative_to(ROOT)), ast.parse(path.read_text(), filename=str(path)))
        for path in sorted((ROOT / app).rglob("*.py"))
        if "migrations" not in path.parts
    ]


def agents_sources() -> list[tuple[str, ast.Module]]:
    return sources("agents")


def model_names(tree: ast.Module, apps: tuple[str, ...]) -> list[ast.Constant]:
    """String constants of the form "<app>.<Model>": a lazy relation or a model label."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and any(node.value.startswith(f"{app}.") and node.value[len(app) + 1 :][:1].isupper() for app in apps)
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
        for node in model_names(tree, UPPER_APPS)
    ]
    assert not found, f"agents name a model above them: {found}"


def test_the_scheduler_names_no_supervisor_model_in_a_string() -> None:
    found = [
        f"{name}:{node.lineno} {node.value!r}"
        for name, tree in sources("scheduler")
        for node in model_names(tree, ("supervisor",))
    ]
    assert not found, f"the scheduler names a supervisor model: {found}"


def test_the_scheduler_holds_the_remediation_policies_a_step_definition_points_at() -> None:
    from scheduler.models import PolicyRevision, RemediationPolicy, StepDefinition

    assert StepDefinition._meta.get_field("policy").related_model is RemediationPolicy
    assert RemediationPolicy._meta.app_label == PolicyRevision._meta.app_label == "scheduler"
    # The tables keep the names the database code joins.
    assert RemediationPolicy._meta.db_table == "supervisor_remediationpolicy"
    assert PolicyRevision._meta.db_table == "supervisor_policyrevision"


def test_the_scheduler_holds_the_alert_subscriptions_its_deliveries_point_at() -> None:
    from scheduler.models import AlertSubscription, Delivery

    assert Delivery._meta.get_field("subscription").related_model is AlertSubscription
    assert AlertSubscription._meta.app_label == "scheduler"
    # The table keeps the name it was created with.
    assert AlertSubscription._meta.db_table == "supervisor_alertsubscription"
