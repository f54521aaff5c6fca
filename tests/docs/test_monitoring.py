"""The monitoring adds up: the alert rules pass promtool's check and their unit tests (each alert
tested firing, with series from two targets that must be counted once), each has a runbook
section, and /metrics serves no NaN, its build and the scans' histogram."""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from sas_project import VERSION

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "prometheus-alerts.yml"
RULE_TESTS = ROOT / "tests" / "monitoring" / "alerts-test.yml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"


def alerts() -> list[dict[str, object]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_promtool_checks_the_rules_and_passes_their_unit_tests() -> None:
    check = subprocess.run(
        ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    tests = subprocess.run(
        ["promtool", "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert tests.returncode == 0 and "SUCCESS" in tests.stdout, tests.stdout + tests.stderr


def test_every_alert_is_unit_tested_firing() -> None:
    fired: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for expectation in case.get("alert_rule_test", []):
            if expectation.get("exp_alerts"):
                fired.add(expectation["alertname"])
    assert {str(rule["alert"]) for rule in alerts()} <= fired


def test_every_alert_points_at_its_runbook_section() -> None:
    sections = {
        re.sub(r"[^a-z0-9-]", "", heading.lower().replace(" ", "-"))
        for heading in re.findall(r"^## (.+)$", RUNBOOKS.read_text(), re.M)
    }
    for rule in alerts():
        annotations = rule["annotations"]
        assert isinstance(annotations, dict)
        url = annotations.get("runbook_url", "")
        assert url == f"docs/runbooks.md#{str(rule['alert']).lower()}", rule["alert"]
        assert url.split("#", 1)[1] in sections, rule["alert"]


@pytest.fixture
def scraper(settings: Any) -> Callable[[], Client]:
    """A client scraping as Prometheus does: /metrics is off without the token, outside debug."""
    settings.SAS_METRICS_TOKEN = "scrape"
    return lambda: Client(headers={"Authorization": "Bearer scrape"})


@pytest.mark.django_db
@pytest.mark.sqlite
def test_metrics_serve_no_nan_even_before_any_scan_and_name_the_build(scraper: Callable[[], Client]) -> None:
    families = {f.name: f for f in text_string_to_metric_families(scraper().get("/metrics").content.decode())}
    for family in families.values():
        for sample in family.samples:
            assert not math.isnan(sample.value), sample
    # Never scanned: infinitely old, so SasSupervisorNotScanning fires.
    (age,) = families["sas_supervisor_last_scan_age_seconds"].samples
    assert age.value == math.inf
    (build,) = families["sas_build_info"].samples
    assert build.labels == {"version": VERSION} and build.value == 1


@pytest.mark.django_db
@pytest.mark.sqlite
def test_every_scan_is_counted_in_the_scans_histogram(
    supervise: Callable[[], object], scraper: Callable[[], Client]
) -> None:
    def histogram() -> dict[str, float]:
        scraped = scraper().get("/metrics").content.decode()
        (family,) = [
            f for f in text_string_to_metric_families(scraped) if f.name == "sas_supervisor_scan_seconds"
        ]
        return {
            (s.labels.get("le") or s.name.rsplit("_", 1)[1]): s.value
            for s in family.samples
            if s.name.endswith(("_bucket", "_count", "_sum"))
        }

    before = histogram()
    supervise()
    supervise()
    after = histogram()
    assert after["+Inf"] == before["+Inf"] + 2
    assert after["count"] == after["+Inf"] and after["sum"] >= before["sum"]
    assert after["30.0"] == before["30.0"] + 2  # a test scan takes well under 30 s


def test_the_version_is_the_one_pyproject_declares() -> None:
    declared = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert declared is not None and declared.group(1) == VERSION


@pytest.mark.django_db
@pytest.mark.sqlite
def test_the_scans_histogram_survives_its_rows_being_gone(
    supervise: Callable[[], object], scraper: Callable[[], Client]
) -> None:
    from supervisor.models import ScanHistogramBucket

    ScanHistogramBucket.objects.all().delete()  # a flushed or hand-restored database
    response = scraper().get("/metrics")
    assert response.status_code == 200
    assert 'sas_supervisor_scan_seconds_bucket{le="+Inf"} 0.0' in response.content.decode()
    supervise()
    assert ScanHistogramBucket.objects.get(le="+Inf").count == 1
