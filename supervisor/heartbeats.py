"""Cluster heartbeats (supervisor.models.ClusterHeartbeat): which clusters are alive, which were
lost, and a liveness check for one of them.

Every `qcluster` beats from a thread while django-q2's sentinel lives (a cluster whose sentinel
died runs no work, so it stops beating and shows as lost), and marks its row stopped when it stops
cleanly. A cluster is *live* when it beat within STALE_BEATS intervals, *lost* when it did not and
never said it stopped, *stopped* when it did. Rows of clusters gone for a week are deleted by the
beats themselves (a few rows per host, one statement).

Each beat also records how many of the cluster's workers are running a task at that moment
(`busy`, counted by supervisor.busy: a worker is busy from django-q2's `pre_execute` until its
task has run); the others are idle.

Each beat also touches SAS_CLUSTER_ALIVE_FILE, database or not: a container's liveness probe reads
the file's age from the shell (`docker/entrypoint alive`), so a probe costs no Python start and no
database connection, and a database restart restarts no cluster.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import close_old_connections, connection
from django.db.models import Q
from django.db.models.functions import Now

from sas_project import VERSION
from sas_project.conf import sas_settings
from supervisor.models import ClusterHeartbeat

logger = logging.getLogger("supervisor.heartbeats")

#: A cluster is lost once it missed this many beats.
STALE_BEATS = 3
#: Rows of clusters stopped or lost longer ago than this are deleted.
KEEP = dt.timedelta(days=7)


def this_cluster() -> str:
    """This process's heartbeat name."""
    return f"{socket.gethostname()}:{os.getpid()}"


def stale_after() -> dt.timedelta:
    return dt.timedelta(seconds=STALE_BEATS * sas_settings.cluster_heartbeat_seconds)


def beat(name: str, *, workers: int, busy: int | None = None) -> None:
    """Record that cluster `name` is alive (its row made at the first beat), and how many of its
    workers are running a task now (`busy`, supervisor.busy; None: not measured)."""
    host, _, pid = name.rpartition(":")
    updated = ClusterHeartbeat.objects.filter(pk=name).update(beat_at=Now(), stopped_at=None, busy=busy)
    if not updated:
        ClusterHeartbeat.objects.update_or_create(
            name=name,
            defaults={"beat_at": Now(), "stopped_at": None, "busy": busy},
            create_defaults={
                "host": host,
                "pid": int(pid or 0),
                "workers": workers,
                "busy": busy,
                "version": VERSION,
                "started_at": Now(),
                "beat_at": Now(),
            },
        )
        # Once per start: the rows of clusters long gone.
        ClusterHeartbeat.objects.filter(
            Q(stopped_at__lt=Now() - KEEP) | Q(stopped_at__isnull=True, beat_at__lt=Now() - KEEP)
        ).delete()


def stopped(name: str) -> None:
    """Record that cluster `name` stopped cleanly."""
    ClusterHeartbeat.objects.filter(pk=name).update(stopped_at=Now())


def touch_alive_file() -> None:
    """Mark this host's cluster alive for the liveness probe (a file's modification time)."""
    path = sas_settings.cluster_alive_file
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError:
        # A read-only or full disk: the probe will say so by the file's age.
        logger.warning("cluster: %s not touched", path, exc_info=True)


def run_heartbeats(
    name: str,
    *,
    workers: int,
    alive: Callable[[], bool],
    should_stop: Callable[[], bool],
    busy: Callable[[], int | None] = lambda: None,
) -> None:
    """Beat every SAS_CLUSTER_HEARTBEAT_SECONDS while `alive()`, until `should_stop()` (a thread of
    qcluster), each beat with `busy()`, the workers running a task at that moment. A database
    error skips a beat; the thread carries on."""
    interval = sas_settings.cluster_heartbeat_seconds
    next_beat = 0.0
    try:
        while not should_stop():
            if time.monotonic() >= next_beat and alive():
                touch_alive_file()
                try:
                    close_old_connections()
                    beat(name, workers=workers, busy=busy())
                except Exception:
                    # A database away: the next beat will tell.
                    logger.warning("cluster %s: heartbeat not recorded", name, exc_info=True)
                    connection.close()
                next_beat = time.monotonic() + interval
            time.sleep(0.2)
    finally:
        connection.close()


@dataclass(frozen=True)
class ClusterState:
    name: str
    host: str
    pid: int
    workers: int
    version: str
    started_at: dt.datetime
    beat_at: dt.datetime
    stopped_at: dt.datetime | None
    #: "live", "lost" or "stopped".
    state: str
    beat_age: float
    #: Workers running a task at the last beat (None: not measured, or the cluster is not live).
    busy: int | None = None

    @property
    def idle(self) -> int | None:
        return None if self.busy is None else max(0, self.workers - self.busy)


def clusters(
    now: dt.datetime, *, stopped_within: dt.timedelta = dt.timedelta(hours=24)
) -> list[ClusterState]:
    """Live and lost clusters, and those stopped within `stopped_within`: live first."""
    rows = ClusterHeartbeat.objects.filter(
        Q(stopped_at__isnull=True) | Q(stopped_at__gte=now - stopped_within)
    )
    found = [_state(row, now) for row in rows]
    order = {"live": 0, "lost": 1, "stopped": 2}
    return sorted(found, key=lambda c: (order[c.state], c.host, c.pid))


def _state(row: ClusterHeartbeat, now: dt.datetime) -> ClusterState:
    age = (now - row.beat_at).total_seconds()
    if row.stopped_at is not None:
        state = "stopped"
    elif age > stale_after().total_seconds():
        state = "lost"
    else:
        state = "live"
    fields: dict[str, Any] = {
        f: getattr(row, f)
        for f in ("name", "host", "pid", "workers", "version", "started_at", "beat_at", "stopped_at")
    }
    return ClusterState(**fields, state=state, beat_age=age, busy=row.busy if state == "live" else None)


def check(now: dt.datetime, *, name: str | None = None, host: str | None = None) -> tuple[bool, str]:
    """Whether cluster `name`, or else some cluster of `host` (this host by default), is live;
    with what to say."""
    rows = (
        ClusterHeartbeat.objects.filter(pk=name)
        if name
        else ClusterHeartbeat.objects.filter(host=host or socket.gethostname(), stopped_at__isnull=True)
    )
    states = [_state(row, now) for row in rows]
    live = [c for c in states if c.state == "live"]
    if live:
        newest = min(live, key=lambda c: c.beat_age)
        return True, f"cluster {newest.name} live: last beat {newest.beat_age:.1f}s ago"
    if not states:
        return False, f"no heartbeat of {'cluster ' + name if name else 'a cluster on this host'}"
    newest = min(states, key=lambda c: c.beat_age)
    return False, f"cluster {newest.name} {newest.state}: last beat {newest.beat_age:.0f}s ago"
