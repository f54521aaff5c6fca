"""The living design document keeps up with the code."""

from __future__ import annotations

import re

import pytest

from testbed.processes import ROOT

pytestmark = pytest.mark.sqlite

CODE = ("sas_project", "agents", "scheduler", "supervisor", "testbed", "scripts", "tests")
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def settings_read_in_code() -> set[str]:
    names: set[str] = set()
    for package in CODE:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            names |= set(re.findall(r"\bSAS_[A-Z][A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    return names


def settings_documented() -> set[str]:
    text = ARCHITECTURE.read_text()
    section = text[text.index("## Settings") :]
    section = section[: section.index("\n## ", 1)]
    return set(re.findall(r"`(SAS_[A-Z0-9_]+)`", section))


def test_every_sas_setting_read_in_code_is_in_the_settings_table() -> None:
    missing = settings_read_in_code() - settings_documented()
    assert not missing, f"add to the Settings section of docs/architecture.md: {sorted(missing)}"


def test_the_settings_table_names_no_setting_the_code_has_forgotten() -> None:
    stale = settings_documented() - settings_read_in_code()
    assert not stale, f"documented but read nowhere: {sorted(stale)}"


def test_every_product_module_is_in_the_module_map() -> None:
    text = ARCHITECTURE.read_text()
    section = text[text.index("## Module map") : text.index("## Durable model")]
    missing = []
    for package in ("sas_project", "agents", "scheduler", "supervisor", "testbed"):
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts or path.name == "__init__.py" or path.name == "apps.py":
                continue
            name = path.stem
            if f"`{name}" not in section and f"{name}.py" not in section and f"`{name}`" not in section:
                missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"add to the Module map of docs/architecture.md: {missing}"
