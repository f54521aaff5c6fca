"""The documents a newcomer reads stay short enough to read in one sitting, and every file or
folder of the repository they name exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testbed.processes import ROOT

pytestmark = pytest.mark.sqlite

DOCS = ROOT / "docs"

#: The most lines each document may have. The design document holds what lasts and sends the
#: details to the topic documents; the performance document holds the current figures and sends
#: the dated runs to docs/performance-history.md, which has no budget.
BUDGETS = {
    "architecture.md": 500,
    "performance.md": 300,
    "workflow-language.md": 400,
    "agents.md": 200,
    "database-code.md": 200,
    "supervisor.md": 150,
    "capacity.md": 150,
}

#: The top-level folders a document may name a path under: the repository's own, not those the
#: service and its tests make and git ignores (`var/`, `staticfiles/`, `test-artifacts/`, `build/`),
#: which exist on one machine and not on another.
MADE = {"var", "staticfiles", "test-artifacts", "build"}
TOP = sorted(
    path.name
    for path in ROOT.iterdir()
    if path.is_dir() and path.name[0] not in "._" and path.name not in MADE
)

#: A path under one of them: a file with an extension, or a folder written with its trailing slash
#: (`scheduler/services/waits.py`, `scheduler/sql/postgresql/sas_submit.sql`, `scheduler/sql/`). A
#: pattern (`<app>/sql/<dialect>/`, `*.sql`, `requirements-<peer>.txt`) names no one path and is
#: left out, as is a name run into other text (`var/peers/...`).
PATH = re.compile(
    r"(?<![\w/.<>-])"
    rf"((?:{'|'.join(TOP)})/(?:[\w.-]+/)*"
    r"(?:[\w-]+\.(?:py|sql|md|ya?ml|json|toml|txt|html|js|css|sh|ini|cfg|conf|service)|))"
    r"(?![\w<*-])"
)


def documents() -> list[Path]:
    """Every document a reader may follow a path from: docs/ (decisions included), the README and
    the clients' READMEs."""
    return [*sorted(DOCS.rglob("*.md")), ROOT / "README.md", *sorted(ROOT.glob("clients/*/README.md"))]


@pytest.mark.parametrize("name", sorted(BUDGETS))
def test_the_document_stays_within_its_line_budget(name: str) -> None:
    lines = len((DOCS / name).read_text().splitlines())
    assert lines <= BUDGETS[name], (
        f"docs/{name} has {lines} lines, over its budget of {BUDGETS[name]}: move details to a topic document"
    )


def test_the_documents_name_paths_the_pattern_recognises() -> None:
    text = "`scheduler/services/waits.py`, supervisor/debt.py, (agents/http.py) and `scheduler/sql/`"
    assert PATH.findall(text) == [
        "scheduler/services/waits.py",
        "supervisor/debt.py",
        "agents/http.py",
        "scheduler/sql/",
    ]
    assert PATH.findall("`<app>/sql/<dialect>/`, `testbed/bench/peers/requirements-<peer>.txt`") == []


def test_every_path_a_document_names_exists() -> None:
    missing = [
        f"{doc.relative_to(ROOT)}: {path}"
        for doc in documents()
        for path in sorted(set(PATH.findall(doc.read_text())))
        if not (ROOT / path).exists()
    ]
    assert not missing, "named in a document but not in the repository:\n" + "\n".join(missing)
