"""The layers hold inside the database too: an app's database code (`<app>/sql/<vendor>/*.sql`)
names only its own tables. Another app's rows are read and written through that app's functions
(the scheduler's dispatch reaches pools, endpoints and the broker's queue through
`agents/sql/postgresql/`: sas_agent_pool, sas_endpoint_choice, sas_enqueue), as its Python is
reached through its modules, so that the owner of a table knows every statement that names it.
Django's own tables (the users) are shared plumbing. import-linter holds the same line for the
Python (pyproject.toml)."""

from __future__ import annotations

import re

import pytest
from django.apps import apps

from sas_project import dbcode

pytestmark = pytest.mark.sqlite

#: Apps whose tables any database code may name: Django's own.
SHARED = frozenset({"auth", "contenttypes"})
#: Third-party apps whose tables belong to the app that wraps them: django-q2's queue is the
#: agents' broker (agents.broker).
WRAPPED_BY = {"django_q": "agents"}


def table_owners() -> dict[str, str]:
    """Every model's table and the app it belongs to (by app label, not by the table's prefix:
    the remediation policies are the scheduler's although their table says supervisor)."""
    return {
        model._meta.db_table: WRAPPED_BY.get(model._meta.app_label, model._meta.app_label)
        for model in apps.get_models(include_auto_created=True)
    }


def named_tables(text: str, tables: dict[str, str]) -> set[str]:
    return {table for table in tables if re.search(rf"\b{re.escape(table)}\b", text)}


def test_each_apps_database_code_names_only_its_own_tables() -> None:
    owners = table_owners()
    found = sorted(
        f"{source.app}/sql/{vendor}/{source.path.name} names {table} ({owners[table]}'s)"
        for vendor in ("postgresql", "sqlite")
        for source in dbcode.sources(vendor)
        for table in named_tables(source.text, owners)
        if owners[table] not in {source.app, *SHARED}
    )
    assert found == []


def test_the_rule_sees_the_tables_it_is_about() -> None:
    """The broker's queue and the agents' pools are known tables, the agents', so a scheduler file
    naming them fails the test above; the scheduler's dispatch reaches them through the agents'
    functions."""
    owners = table_owners()
    assert owners["django_q_ormq"] == owners["agents_agentpool"] == owners["agents_agentendpoint"] == "agents"
    assert owners["supervisor_remediationpolicy"] == "scheduler"
    dispatch = dbcode.source("scheduler", "sas_dispatch_ready")
    assert named_tables(dispatch.text, owners) >= {"scheduler_step", "scheduler_attempt"}
    assert all(
        f"{name}(" in dispatch.text for name in ("sas_agent_pool", "sas_endpoint_choice", "sas_enqueue")
    )
    agents = {source.name for source in dbcode.sources("postgresql") if source.app == "agents"}
    assert agents == {"sas_agent_pool", "sas_endpoint_choice", "sas_enqueue"}
