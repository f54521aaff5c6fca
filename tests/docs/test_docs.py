"""The living design document keeps up with the code."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from typing import Any

import pytest

from testbed.processes import ROOT

pytestmark = pytest.mark.sqlite

CODE = ("sas_project", "agents", "scheduler", "supervisor", "testbed", "scripts", "tests")
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SETTINGS = ROOT / "docs" / "settings.md"
MODULES = ROOT / "docs" / "modules.md"


def settings_read_in_code() -> set[str]:
    names: set[str] = set()
    for package in CODE:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            names |= set(re.findall(r"\bSAS_[A-Z][A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    return names


def settings_documented() -> set[str]:
    """Every `SAS_*` name docs/settings.md mentions, anywhere in the file."""
    return set(re.findall(r"`(SAS_[A-Z0-9_]+)`", SETTINGS.read_text()))


def test_every_sas_setting_read_in_code_is_in_the_settings_table() -> None:
    missing = settings_read_in_code() - settings_documented()
    assert not missing, f"add to docs/settings.md: {sorted(missing)}"


def test_the_settings_table_names_no_setting_the_code_has_forgotten() -> None:
    stale = settings_documented() - settings_read_in_code()
    assert not stale, f"documented but read nowhere: {sorted(stale)}"


def test_every_product_module_is_in_the_module_map() -> None:
    section = MODULES.read_text()
    missing = []
    packages = (
        "sas_project",
        "agents",
        "scheduler",
        "supervisor",
        "testbed",
        "clients/python-remote/sas_remote",
    )
    for package in packages:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts or path.name == "__init__.py" or path.name == "apps.py":
                continue
            name = path.stem
            if f"`{name}" not in section and f"{name}.py" not in section and f"`{name}`" not in section:
                missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"add to docs/modules.md: {missing}"


# --- the state machines drawn in docs/architecture.md ---------------------------------------------


def drawn_machine(text: str, machine: str) -> str:
    """The block between `<!-- machine:<name> -->` and `<!-- /machine:<name> -->`."""
    start, end = f"<!-- machine:{machine} -->\n", f"<!-- /machine:{machine} -->"
    assert text.count(start) == 1 and text.count(end) == 1, f"docs/architecture.md: one {machine} block"
    return text[text.index(start) + len(start) : text.index(end)]


@pytest.mark.parametrize("machine", ["step", "job", "attempt"])
def test_the_state_machine_drawn_in_the_architecture_is_the_table(machine: str) -> None:
    from scheduler.transitions import MACHINES, mermaid

    assert machine in MACHINES
    expected = f"```mermaid\n{mermaid(machine)}```\n"
    drawn = drawn_machine(ARCHITECTURE.read_text(), machine)
    assert drawn == expected, (
        f"the {machine} machine in docs/architecture.md differs from scheduler/transitions.py; "
        f"replace its block with:\n{expected}"
    )


def test_every_machine_of_the_transitions_module_is_drawn() -> None:
    from scheduler.transitions import MACHINES

    text = ARCHITECTURE.read_text()
    assert set(re.findall(r"<!-- machine:([a-z_]+) -->", text)) == set(MACHINES)


# --- docs/deployment.md and the monitoring files ---------------------------------------------------


def documented_environment() -> dict[str, str]:
    """The production environment file of docs/deployment.md, placeholders filled in."""
    text = (ROOT / "docs" / "deployment.md").read_text()
    block = text[text.index("# /etc/sas/sas.env") :]
    block = block[: block.index("```")]
    env: dict[str, str] = {}
    for line in block.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, _, value = line.partition("=")
        env[name] = re.sub(r"<[^>]+>", lambda _: secrets.token_urlsafe(48), value)
    return env


def test_check_deploy_is_clean_with_the_documented_production_environment() -> None:
    env = documented_environment()
    assert env["DJANGO_SECURE"] == "1" and env["DJANGO_DEBUG"] == "0"
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def known_environment() -> set[str]:
    """Every variable the service reads: its `SAS_*` settings and Django's own, and the ones boto3
    reads for the archive in object storage (its credential chain)."""
    return settings_read_in_code() | {
        "DATABASE_URL",
        "DJANGO_SECRET_KEY",
        "DJANGO_DEBUG",
        "DJANGO_SECURE",
        "DJANGO_ALLOWED_HOSTS",
        "DJANGO_CSRF_TRUSTED_ORIGINS",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_ROLE_ARN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    }


def test_the_documented_environment_names_only_settings_that_exist() -> None:
    assert set(documented_environment()) <= known_environment()


@pytest.mark.django_db
def test_the_alert_rules_and_the_dashboard_use_metrics_the_service_serves(settings: Any) -> None:
    from django.test import Client
    from prometheus_client.parser import text_string_to_metric_families

    settings.SAS_CANARY_SECONDS = 60  # its figures are served while it is on (off in the suite)
    settings.SAS_METRICS_TOKEN = "scrape"  # off without one

    scraped = Client(headers={"Authorization": "Bearer scrape"}).get("/metrics").content.decode()
    served: set[str] = set()
    for family in text_string_to_metric_families(scraped):
        served.add(family.name)
        served |= {sample.name for sample in family.samples}
        if family.type == "histogram":
            served |= {f"{family.name}_bucket", f"{family.name}_count", f"{family.name}_sum"}
        if family.type == "counter":
            served.add(f"{family.name}_total")
    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    used: set[str] = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            used |= set(re.findall(r"\bsas_[a-z_]+\b", target["expr"]))
    rules = (ROOT / "docs" / "prometheus-alerts.yml").read_text()
    used |= set(re.findall(r"\bsas_[a-z_]+\b", rules.split("groups:", 1)[1])) - {"sas"}
    deployment = (ROOT / "docs" / "deployment.md").read_text()
    used |= set(re.findall(r"`(sas_[a-z_]+)`", deployment))
    assert used, "no metric found in the monitoring files"
    assert used <= served, f"not served at /metrics: {sorted(used - served)}"
