"""Shared fixtures: the in-process task drain, the fake remote, real subprocesses."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.utils.module_loading import import_string
from django_q.models import OrmQ

from agents.broker import task_of
from agents.fake import FakeRemote
from agents.validation import clear_resolution_cache
from scheduler.services.capacity import forget_limits_cache
from scheduler.services.sla import forget_step_durations
from supervisor.scan import ScanReport, scan
from testbed.processes import allow_loopback_remotes
from tests.processes import Cluster, Sandbox, free_port


def pytest_configure(config: pytest.Config) -> None:
    """The suite's remotes (the sandbox, webhook receivers, the fake HTTP servers) listen on
    loopback, which outbound requests reach only when SAS_OUTBOUND_INTERNAL_HOSTS names it: the
    suite names it, for itself and the processes it starts, as `make run` names its sandbox. The
    guard's own tests (tests/security/test_outbound.py) set the list themselves."""
    allow_loopback_remotes()


@pytest.fixture(autouse=True)
def _fresh_caches() -> None:
    """The guard's save-time answers and the pools' limits live in this process's memory; no test
    sees another test's. (The API's request counts are rows, rolled back with each test.)"""
    clear_resolution_cache()
    forget_limits_cache()
    forget_step_durations()


def on_sqlite() -> bool:
    from django.conf import settings

    return bool(settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On SQLite (the default database of `make run`) only the tests marked `sqlite` run: the core
    path every demo user takes. Everything else needs PostgreSQL (`make test` runs both)."""
    if not on_sqlite():
        return
    kept = [item for item in items if item.get_closest_marker("sqlite")]
    deselected = [item for item in items if not item.get_closest_marker("sqlite")]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def run_queued_tasks(max_tasks: int = 10_000) -> int:
    """Run the agent tasks waiting in the broker, in this process, oldest first, until none is
    left (tasks they enqueue included). Returns how many ran."""
    ran = 0
    while ran < max_tasks:
        row = OrmQ.objects.order_by("id").first()
        if row is None:
            return ran
        row.delete()
        task = task_of(row.payload)
        import_string(task["func"])(*task["args"], **task["kwargs"])
        ran += 1
    raise AssertionError(f"more than {max_tasks} tasks: a loop?")


@pytest.fixture
def drain(db: None) -> Callable[[], int]:
    return run_queued_tasks


@pytest.fixture
def one_delivery_per_task(settings: Any) -> None:
    """Each task delivers its own attempt only (SAS_Q_CONTINUE=0), not the job's next ones: for
    tests that look at a job between two deliveries."""
    settings.SAS_Q_CONTINUE = 0


@pytest.fixture
def fake_remote(monkeypatch: pytest.MonkeyPatch) -> FakeRemote:
    remote = FakeRemote()
    monkeypatch.setattr("agents.calls.run_call", remote)
    return remote


@pytest.fixture
def supervise(db: None) -> Callable[..., ScanReport]:
    """One scan by the test's supervisor."""

    def run(**kwargs: Any) -> ScanReport:
        return scan(
            holder=kwargs.pop("holder", "test-supervisor"), draw=kwargs.pop("draw", lambda: 0.0), **kwargs
        )

    return run


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    remote = Sandbox(port=free_port(), db=tmp_path / "sandbox.sqlite3").start()
    yield remote
    remote.stop()


@pytest.fixture
def clusters() -> Iterator[Callable[..., Cluster]]:
    """Start qcluster processes; all are stopped at the end of the test."""
    started: list[Cluster] = []

    def start(name: str = "c1", **env: Any) -> Cluster:
        cluster = Cluster(name=name, env={k: str(v) for k, v in env.items()}).start()
        started.append(cluster)
        return cluster

    yield start
    for cluster in started:
        cluster.stop()
