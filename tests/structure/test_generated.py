"""Generated code is marked as such: a header in every generated file, and `linguist-generated` in
.gitattributes for each, so that readers and review tools tell what is made from what is written."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from scheduler.sqlgen import generated
from testbed.processes import ROOT

CLIENT = ROOT / "clients" / "python" / "sas_client" / "openapi"


def _regenerate_header() -> str:
    spec = importlib.util.spec_from_file_location("regenerate", ROOT / "clients" / "python" / "regenerate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    header: str = module.HEADER
    return header


def marked_generated() -> set[str]:
    """The patterns .gitattributes marks linguist-generated."""
    lines = (ROOT / ".gitattributes").read_text().splitlines()
    return {
        line.split()[0]
        for line in lines
        if line.strip() and not line.startswith("#") and "linguist-generated=true" in line
    }


def test_every_file_of_the_generated_client_starts_with_the_generated_header() -> None:
    header = _regenerate_header()
    files = sorted(CLIENT.rglob("*.py"))
    assert files
    unmarked = [str(path.relative_to(ROOT)) for path in files if not path.read_text().startswith(header)]
    assert not unmarked, f"run clients/python/regenerate.py: {unmarked[:5]}"


@pytest.mark.django_db
def test_every_generated_sql_file_says_so_and_is_marked_in_gitattributes() -> None:
    marked = marked_generated()
    for path in generated():
        assert path.read_text().startswith("-- Generated from"), path
        assert str(path.relative_to(ROOT)) in marked, f"{path.relative_to(ROOT)} is not in .gitattributes"


def test_gitattributes_marks_the_generated_client_and_nothing_written_by_hand() -> None:
    marked = marked_generated()
    assert "clients/python/sas_client/openapi/**" in marked
    sql = {str(path.relative_to(ROOT)) for path in generated()}
    assert marked - sql == {"clients/python/sas_client/openapi/**"}
    assert all(Path(ROOT / name).exists() for name in sql)
