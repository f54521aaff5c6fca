"""The history archive on disk: private files whatever the umask, and a full disk met with a
backoff and an alert instead of rebuilding a batch under row locks at every pass."""

from __future__ import annotations

import datetime as dt
import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from scheduler import archive
from scheduler.models import AlertKind, Delivery, Job
from scheduler.services import retention
from scheduler.services.retention import ArchiveHealth, ArchiveUnwritable, history_prune_if_due
from supervisor.alerts import archive_failed_alert
from supervisor.subscriptions import subscription_create
from tests.scheduler.test_history import archive_dir, settled_jobs  # noqa: F401 - a fixture

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def healthy_archive(monkeypatch: pytest.MonkeyPatch) -> ArchiveHealth:
    health = ArchiveHealth()
    monkeypatch.setattr(retention, "ARCHIVE_HEALTH", health)
    return health


@pytest.fixture
def open_umask() -> Iterator[None]:
    previous = os.umask(0)
    yield
    os.umask(previous)


@pytest.mark.sqlite
@pytest.mark.usefixtures("open_umask")
def test_archive_files_are_0600_in_0700_folders_whatever_the_umask(tmp_path: Path) -> None:
    store = archive.LocalArchiveStorage(location=tmp_path / "var" / "archive")
    name = archive.write_object(store, dt.date(2026, 1, 1), ['{"a":1}'])
    path = tmp_path / "var" / "archive" / name
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700  # the day's folder
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700  # the archive's


@pytest.mark.sqlite
def test_a_full_disk_backs_off_and_alerts_instead_of_retrying_at_every_pass(
    drain: Callable[[], int],
    archive_dir: Path,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
    healthy_archive: ArchiveHealth,
) -> None:
    subscription_create(
        name="oncall", actor=None, webhook_url="https://hooks.example.com/x", kinds=["archive_failed"]
    )
    history_prune_if_due(source="supervisor:a")  # today's run, with nothing to do
    (job,) = settled_jobs(drain, 1, age_days=2 / 24)
    tries: list[str] = []

    def full_disk(store: Any, name: str, content: Any) -> str:
        tries.append(name)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(archive.LocalArchiveStorage, "_save", full_disk)
    with pytest.raises(ArchiveUnwritable) as failure:
        history_prune_if_due(source="supervisor:a")
    assert len(tries) == 1 and failure.value.error.errno == errno.ENOSPC
    job.refresh_from_db()
    assert job.archived_at is None  # the batch rolled back

    # The supervisor's loop alerts (once for this run of failures).
    assert archive_failed_alert(failure.value) == 1
    (alert,) = Delivery.objects.filter(payload__alert=AlertKind.ARCHIVE_FAILED)
    assert "No space left" in alert.payload["error"] and alert.payload["failures"] == 1

    # The next passes do not try again until the backoff has passed...
    assert history_prune_if_due(source="supervisor:a") is None
    assert len(tries) == 1
    # ... then try once, fail, and wait twice as long.
    first_wait = failure.value.retry_at - failure.value.failing_since
    with pytest.raises(ArchiveUnwritable) as again:
        history_prune_if_due(source="supervisor:a", now=failure.value.retry_at + dt.timedelta(seconds=1))
    assert len(tries) == 2 and again.value.failures == 2
    assert again.value.retry_at - timezone.now() > first_wait * 1.5
    archive_failed_alert(again.value)  # the same run of failures: no second alert
    assert Delivery.objects.filter(payload__alert=AlertKind.ARCHIVE_FAILED).count() == 1

    # Space again: the job is archived and the backoff forgotten.
    monkeypatch.undo()
    monkeypatch.setattr(retention, "ARCHIVE_HEALTH", healthy_archive)
    history_prune_if_due(source="supervisor:a", now=again.value.retry_at + dt.timedelta(seconds=1))
    assert Job.objects.get(pk=job.pk).archived_at is not None
    assert healthy_archive.failures == 0 and healthy_archive.retry_at is None


@pytest.mark.sqlite
@pytest.mark.django_db(transaction=True)  # the loop closes and reopens its connection
def test_the_supervisor_loop_alerts_once_and_does_not_retry_at_its_next_passes(
    drain: Callable[[], int],
    archive_dir: Path,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from supervisor.loop import run_loop

    subscription_create(
        name="oncall", actor=None, webhook_url="https://hooks.example.com/x", kinds=["archive_failed"]
    )
    settled_jobs(drain, 1, age_days=2 / 24)
    tries: list[str] = []

    def full_disk(store: Any, name: str, content: Any) -> str:
        tries.append(name)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(archive.LocalArchiveStorage, "_save", full_disk)
    run_loop(holder="loop-1", should_stop=lambda: False, interval=0, max_scans=3)
    assert len(tries) == 1  # three passes, one try
    (alert,) = Delivery.objects.filter(payload__alert=AlertKind.ARCHIVE_FAILED)
    assert alert.payload["failures"] == 1 and "No space left" in alert.payload["error"]
