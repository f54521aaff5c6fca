"""The tests' real subprocesses: the sandbox remote and qcluster against the test database, on
the shared helpers of testbed.processes."""

from __future__ import annotations

import os
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
        return self

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
