"""A small run of the fault campaign, every fault on: the invariants must hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.processes import ARTIFACTS, ROOT, child_env

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.serial,
    pytest.mark.django_db(transaction=True),
]


def test_a_small_campaign_with_every_fault_on_loses_no_job_and_doubles_no_effect(tmp_path: Path) -> None:
    report_path = ARTIFACTS / "fault-campaign.json"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    args = [
        sys.executable,
        "manage.py",
        "fault_campaign",
        "--jobs",
        "60",
        "--duration",
        "20",
        "--drain",
        "90",
        "--json",
        str(report_path),
    ]
    # Restarting PostgreSQL needs a data directory this run controls (make test provides one).
    if os.environ.get("SAS_PG_DATADIR"):
        args.append("--pg-restart")
    env = child_env()
    env.pop("SAS_SUPERVISOR_INTERVAL", None)
    env.pop("SAS_LEASE_SECONDS", None)
    result = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    connection.close()  # the campaign may have restarted the server under this connection
    (ARTIFACTS / "fault-campaign.txt").write_text(result.stdout + result.stderr)
    report = json.loads(report_path.read_text())
    figures = report["figures"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert report["ok"]
    assert figures["jobs_submitted"] == 60
    assert figures["jobs_missing"] == 0
    assert figures["jobs_not_settled"] == 0
    assert figures["duplicate_effects"] == 0
    assert figures["compensations_for_succeeded_jobs"] == 0
    assert figures["backward_moves"] == 0
    assert figures["missing_events"] == 0
    # The faults really happened.
    faults = report["faults"]
    assert faults["kills"] >= 2
    assert faults["connections_dropped"] >= 1
    assert faults["operator_pairs"] >= 1
    assert faults["operator_pairs_violating"] == 0
    assert faults["broker_restarts"] >= 1
    remote_faults = report["remote_faults"]
    for kind in ("reply_lost", "reply_duplicate", "reply_late", "reply_unknown"):
        assert remote_faults[kind] >= 1, (kind, remote_faults)
    assert figures["remote_deliveries"] > figures["remote_effects"]  # retries and replays happened
