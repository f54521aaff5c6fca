"""The tests' real subprocesses: the sandbox remote and qcluster against the test database, on
the shared helpers of testbed.processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import connection

from testbed.processes import (
    ROOT,
    ClusterProcess,
    SandboxProcess,
    free_port,
    kill_group,
    stop_group,
    wait_until,
)

ARTIFACTS = Path(os.environ.get("SAS_TEST_ARTIFACTS", ROOT / "test-artifacts"))

__all__ = [
    "ARTIFACTS",
    "ROOT",
    "Cluster",
    "Sandbox",
    "child_env",
    "database_url",
    "free_port",
    "kill_group",
    "stop_group",
    "wait_until",
]


def database_url() -> str:
    """The URL of the database the tests run on (pytest-django's test database)."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    user = s.get("USER") or "postgres"
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


def child_env(**extra: Any) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "SAS_SUPERVISOR_INTERVAL": "0.5",
        "SAS_LEASE_SECONDS": "2",
        "SAS_Q_POLL": "0.05",
        "SAS_Q_WORKERS": "3",
        "SAS_Q_RETRY": "600",
        "SAS_LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Sandbox(SandboxProcess):
    def __init__(self, port: int, db: Path) -> None:
        super().__init__(port=port, db=db, log=ARTIFACTS / f"sandbox-{port}.log")


@dataclass
class Cluster:
    """One `manage.py qcluster` against the test database, in its own process group."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    process: ClusterProcess | None = None

    def start(self) -> Cluster:
        self.process = ClusterProcess(
            name=self.name, env=child_env(**self.env), log=ARTIFACTS / f"qcluster-{self.name}.log"
        ).start()
        self._wait_until_beating()
        return self

    def _wait_until_beating(self, timeout: float = 60) -> None:
        """Until the cluster's first heartbeat (its sentinel runs): a job submitted earlier would
        spend its first attempt's deadline on the cluster's start, which a loaded machine makes
        longer than the demo's 5 s. A cluster that dies first is left to the test to notice."""
        from supervisor.models import ClusterHeartbeat

        until = time.monotonic() + timeout
        while time.monotonic() < until and self.alive:
            if ClusterHeartbeat.objects.filter(pid=self.proc.pid, stopped_at__isnull=True).exists():
                return
            time.sleep(0.1)

    @property
    def proc(self) -> Any:
        return self.process.proc if self.process is not None else None

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.alive


def run_fault_campaign(name: str, *options: str) -> dict[str, Any]:
    """`manage.py fault_campaign *options` in a child process, with PostgreSQL restarts when this
    run controls the server's data directory (make test does); its output and report are kept in
    ARTIFACTS as `name`.txt and `name`.json. Returns the report, after checking it ran."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    report_path = ARTIFACTS / f"{name}.json"
    args = [sys.executable, "manage.py", "fault_campaign", *options, "--json", str(report_path)]
    if os.environ.get("SAS_PG_DATADIR"):
        args.append("--pg-restart")
    env = child_env()
    env.pop("SAS_SUPERVISOR_INTERVAL", None)
    env.pop("SAS_LEASE_SECONDS", None)
    result = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    connection.close()  # the campaign may have restarted the server under this connection
    (ARTIFACTS / f"{name}.txt").write_text(result.stdout + result.stderr)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report: dict[str, Any] = json.loads(report_path.read_text())
    assert report["ok"]
    return report


def assert_no_job_lost_and_no_effect_doubled(report: dict[str, Any], *, jobs: int) -> None:
    """The campaign's invariants, whatever its faults: every job there and settled, no effect
    doubled, no status moved backwards, no state change without its event."""
    figures = report["figures"]
    assert figures["jobs_submitted"] == jobs
    assert figures["jobs_missing"] == 0
    assert figures["jobs_not_settled"] == 0
    assert figures["duplicate_effects"] == 0
    assert figures["succeeded_steps_without_one_effect"] == 0
    assert figures["compensations_for_succeeded_jobs"] == 0
    assert figures["backward_moves"] == 0
    assert figures["missing_events"] == 0
    assert figures["remote_deliveries"] > figures["remote_effects"]  # retries and replays happened
    if os.environ.get("SAS_PG_DATADIR"):
        assert report["faults"]["restarts_of_postgres"] >= 1
