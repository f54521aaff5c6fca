"""Real subprocesses for end-to-end tests: the sandbox remote and qcluster.

Each is started in its own session (process group) so that a stop or a SIGKILL reaches the
whole process tree, never only the main PID (django-q2 leaves orphans otherwise).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("SAS_TEST_ARTIFACTS", ROOT / "test-artifacts"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def database_url() -> str:
    """The URL of the database the tests run on (pytest-django's test database)."""
    s = connection.settings_dict
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


def stop_group(proc: subprocess.Popen[Any], timeout: float = 20) -> None:
    """SIGTERM the main process (django-q2's sentinel dies at once on a group-wide SIGTERM, which
    would orphan its workers), wait, then SIGKILL whatever is left of the group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
    kill_group(proc)


def kill_group(proc: subprocess.Popen[Any]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


@dataclass
class Sandbox:
    port: int
    db: Path
    proc: subprocess.Popen[Any] | None = None
    log: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *extra: str, reset: bool = True) -> Sandbox:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.log = ARTIFACTS / f"sandbox-{self.port}.log"
        args = [
            sys.executable,
            "manage.py",
            "sandbox_remote",
            "--port",
            str(self.port),
            "--db",
            str(self.db),
            *(["--reset"] if reset else []),
            *extra,
        ]
        self.proc = subprocess.Popen(
            args,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        wait_for_line(self.proc, "listening", timeout=30, log=self.log)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc)
            if self.proc.stdout is not None:
                self.proc.stdout.close()

    def stats(self) -> dict[str, Any]:
        return httpx.get(f"{self.url}/stats", timeout=10).json()

    def config(self, **values: Any) -> dict[str, Any]:
        return httpx.post(f"{self.url}/config", json=values, timeout=10).json()


def wait_for_line(proc: subprocess.Popen[Any], needle: str, *, timeout: float, log: Path) -> None:
    """Read the child's output until `needle` appears; then keep copying it to `log`."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    seen = b""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited early: {seen.decode(errors='replace')[-2000:]}")
        if sel.select(timeout=0.2):
            line = proc.stdout.readline()
            seen += line
            if needle.encode() in line:
                log.write_bytes(seen)
                _drain_to(proc, log)
                return
    raise RuntimeError(f"no {needle!r} within {timeout}s: {seen.decode(errors='replace')[-2000:]}")


def _drain_to(proc: subprocess.Popen[Any], log: Path) -> None:
    import threading

    def copy() -> None:
        assert proc.stdout is not None
        with log.open("ab") as out:
            for line in proc.stdout:
                out.write(line)
                out.flush()

    threading.Thread(target=copy, daemon=True).start()


@dataclass
class Cluster:
    """One `manage.py qcluster` (django-q2 cluster + supervisor loop) in its own process group."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[Any] | None = None

    def start(self) -> Cluster:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        with (ARTIFACTS / f"qcluster-{self.name}.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "qcluster"],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=child_env(**self.env),
            )
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc)

    def kill(self) -> None:
        if self.proc is not None:
            kill_group(self.proc)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def wait_until(predicate: Any, *, timeout: float, interval: float = 0.1, message: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message or predicate}")
