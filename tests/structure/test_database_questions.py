"""What the database can do is asked in one place, `sas_project.database`, by name."""

from __future__ import annotations

import ast
from collections.abc import Callable

import pytest
from django.db import connection

from sas_project import database
from testbed.processes import ROOT
from tests.conftest import on_sqlite

pytestmark = pytest.mark.sqlite

CODE = ("sas_project", "agents", "scheduler", "supervisor", "testbed")
QUESTIONS: tuple[Callable[..., bool], ...] = (
    database.is_postgresql,
    database.supports_skip_locked,
    database.supports_listen_notify,
    database.supports_json_containment,
    database.supports_percentiles,
)


def vendor_reads() -> list[str]:
    """Where code outside `sas_project/database.py` (and the migrations) reads `.vendor`."""
    found = []
    for package in CODE:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts or path == ROOT / "sas_project" / "database.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Attribute) and node.attr == "vendor":
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_module_but_the_database_module_reads_the_vendor() -> None:
    reads = vendor_reads()
    assert not reads, f"ask sas_project.database what the database can do instead: {reads}"


def test_every_question_is_answered_yes_on_postgresql_and_no_on_sqlite() -> None:
    answers = {question.__name__: question() for question in QUESTIONS}
    assert answers == {question.__name__: not on_sqlite() for question in QUESTIONS}


def test_where_django_knows_the_answer_ours_is_the_same() -> None:
    features = connection.features
    assert database.supports_skip_locked() == features.has_select_for_update_skip_locked
    assert database.supports_json_containment() == features.supports_json_field_contains
