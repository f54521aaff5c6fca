"""`manage.py qcluster`: django-q2's cluster, with the supervisor loop running beside it.

The cluster (sentinel, pusher, workers, monitor) is started exactly as django-q2 does it; this
process, which django-q2 leaves waiting on the cluster, runs the supervisor loop meanwhile, and
the consumer of queue pools' replies (scheduler.replies) and the capacity pump of limited pools
(scheduler.services.capacity) in threads. Every
cluster therefore watches; the lease makes one of them act, and if that cluster dies another takes
over within one lease period. Set SAS_SUPERVISOR_IN_CLUSTER=0 to run the supervisor apart
(`manage.py supervise`).

Stopping. SIGTERM or SIGINT to this process stops the loop (which gives its lease up) and then
the cluster, gracefully: the pusher stops, the workers finish what they hold, the monitor
flushes. A SIGTERM sent to the whole process group (systemd's default `KillMode=control-group`,
Ctrl-C in a terminal) also reaches django-q2's processes, which die at once, and django-q2's own
stop would then wait forever on an event a dead process held; this command waits for its
children instead of signalling through that event, and returns within `SAS_Q_STOP_SECONDS`
whatever state they are in. Work a dead worker held is recovered by the supervisor after the
attempt's deadline, with the same operation ID.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django_q.cluster import Cluster
from django_q.management.commands.qcluster import Command as DjangoQClusterCommand

from agents import egress
from sas_project.conf import sas_settings
from scheduler.replies import run_replies
from scheduler.services.capacity import run_capacity
from scheduler.services.dispatch import step_dispatch
from supervisor.busy import board_install
from supervisor.heartbeats import run_heartbeats, this_cluster
from supervisor.heartbeats import stopped as heartbeat_stopped
from supervisor.loop import holder_name, run_loop

logger = logging.getLogger("supervisor")


class Command(DjangoQClusterCommand):
    help = "Start a django-q2 cluster with the supervisor loop beside it."

    def handle(self, *args: Any, **options: Any) -> None:
        if options.get("run_once"):
            super().handle(*args, **options)
            return
        settings.SECRET_KEY  # noqa: B018 - django-q2 signs tasks with it: fail early without one
        if options.get("cluster_name"):
            os.environ["Q_CLUSTER_NAME"] = options["cluster_name"]
        stopping = threading.Event()
        # Built once here, inherited by every worker the sentinel forks (and forks again after a
        # recycle), instead of once in each at its first HTTP call.
        egress.ssl_context()
        workers = int(str(settings.Q_CLUSTER.get("workers", 0)))
        # Before the cluster forks: its workers mark themselves on it around each task.
        board = board_install(workers)
        cluster = cluster_start(stopping, seconds=sas_settings.q_start_seconds)
        if cluster is None:
            return  # asked to stop before it started
        tree = ProcessTree()

        def done() -> bool:
            # Know the cluster's processes while they live: after a group-wide signal the
            # sentinel dies first and its children are no longer ours to find.
            tree.refresh()
            return stopping.is_set() or cluster.sentinel is None or not cluster.sentinel.is_alive()

        replies: threading.Thread | None = None
        if sas_settings.replies_in_cluster:
            # The replies of queue pools' remotes, in a thread of this process (it idles, and
            # connects to no broker, while no queue pool exists).
            replies = threading.Thread(
                target=run_replies, args=(stopping.is_set,), name="agent-replies", daemon=True
            )
            replies.start()
        # The capacity pump of limited pools (idle while no pool has a limit).
        pump = threading.Thread(
            target=run_capacity,
            args=(stopping.is_set,),
            kwargs={"dispatch": step_dispatch},
            name="capacity",
            daemon=True,
        )
        pump.start()
        # Heartbeats while the sentinel lives (supervisor.heartbeats): the Clusters card and
        # `manage.py cluster_check` read them; the liveness probe reads the file each beat touches.
        name = this_cluster()
        heartbeats = threading.Thread(
            target=run_heartbeats,
            args=(name,),
            kwargs={
                "workers": workers,
                "busy": board.busy,
                "alive": lambda: cluster.sentinel is not None and cluster.sentinel.is_alive(),
                "should_stop": stopping.is_set,
            },
            name="heartbeats",
            daemon=True,
        )
        heartbeats.start()
        if sas_settings.supervisor_in_cluster:
            # The sentinel is forked before the loop opens any database connection.
            run_loop(holder=holder_name("qcluster"), should_stop=done)
        else:
            while not done():
                time.sleep(0.2)
        stopping.set()
        stop_cluster(cluster, tree, timeout=sas_settings.q_stop_seconds)
        if replies is not None:
            replies.join(timeout=5)
        pump.join(timeout=5)
        heartbeats.join(timeout=5)
        try:
            heartbeat_stopped(name)
        except Exception:
            # The database away: the cluster shows as lost instead of stopped.
            logger.warning("cluster %s: its stop was not recorded", name, exc_info=True)


def cluster_start(stopping: threading.Event, *, seconds: float) -> Cluster | None:
    """A started django-q2 cluster, with this process's signal handlers (which only set
    `stopping`); None when asked to stop before one started.

    django-q2's first act is a query (its ORM broker's, here and in the sentinel): with the
    database away (a restart, a failover, a node that boots before it) the sentinel dies and
    the start raises. A process manager would start us again, but `restart: on-failure`
    backs off for ever longer and a bare process stays dead: so the start is tried again
    here, 1 s apart and then up to 5 s, for `seconds` (SAS_Q_START_SECONDS); after that the
    error is raised and the process exits non-zero."""
    deadline = time.monotonic() + seconds
    pause, tries = 1.0, 0
    while True:
        tries += 1
        try:
            cluster = Cluster()
            # Cluster() installed django-q2's handlers, which stop the cluster from inside the
            # signal handler; ours only ask the loop to end, and the stop runs with a time limit.
            signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
            signal.signal(signal.SIGINT, lambda signum, frame: stopping.set())
            cluster.start()
        except (RuntimeError, DatabaseError) as exc:
            # The broken connection is not the sentinel's to inherit at the next fork.
            connection.close()
            if stopping.is_set():
                return None
            if time.monotonic() + pause > deadline:
                raise
            logger.warning(
                "the cluster did not start (try %d): %s; starting it again in %.0f s",
                tries,
                str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__,
                pause,
                extra={"tries": tries},
            )
            stopping.wait(pause)
            pause = min(pause * 2, 5.0)
            continue
        if stopping.is_set() and (cluster.sentinel is None or not cluster.sentinel.is_alive()):
            return None  # stopped while it started: django-q2 let its sentinel end quietly
        return cluster


class ProcessTree:
    """The cluster's processes (this one's descendants), seen over time: workers are recycled
    under new pids, and orphans are re-parented away from this process when the sentinel dies."""

    def __init__(self) -> None:
        self.pgid = os.getpgid(0)
        self.pids: set[int] = set()
        self.seen_at = 0.0

    def refresh(self, *, every: float = 2.0) -> None:
        if time.monotonic() - self.seen_at < every:
            return
        self.seen_at = time.monotonic()
        self.pids = {pid for pid in self.pids if _alive(pid, self.pgid)} | set(_children())

    def alive(self) -> list[int]:
        return sorted(pid for pid in self.pids | set(_children()) if _alive(pid, self.pgid))


def stop_cluster(cluster: Cluster, tree: ProcessTree, *, timeout: float) -> None:
    """Stop the cluster's processes within `timeout` seconds, whatever happened to them.

    If the sentinel still runs (only this process was signalled), ask it to stop gracefully; if
    it died (the whole group was signalled), there is nothing to ask. Either way, wait until every
    process of the cluster has ended, and kill whatever still runs when the time is up: this
    process ends last, so a process manager that sees it gone sees the whole cluster gone.
    """
    sentinel = cluster.sentinel
    if sentinel is None:
        return
    tree.refresh(every=0)
    deadline = time.monotonic() + timeout
    # A group-wide signal kills the sentinel in a moment: give it that moment before asking.
    grace = time.monotonic() + 0.5
    while sentinel.is_alive() and time.monotonic() < grace:
        time.sleep(0.05)
    if sentinel.is_alive() and cluster.stop_event is not None:
        # django-q2's graceful stop, in a thread: the event it sets can block forever if one of
        # its processes died while holding it.
        threading.Thread(target=cluster.stop_event.set, daemon=True).start()
    while (sentinel.is_alive() or tree.alive()) and time.monotonic() < deadline:
        time.sleep(0.1)
    leftovers = tree.alive()
    if leftovers:
        logger.warning("qcluster: %d process(es) still running after %.0fs: killed", len(leftovers), timeout)
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    sentinel.join(timeout=1)


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, ...)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _alive(pid: int, pgid: int) -> bool:
    """Still running (not a zombie), and still in our process group: not a reused pid."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z" and int(fields[2]) == pgid


def _children() -> list[int]:
    """The pids of every descendant of this process (from /proc; Linux)."""
    me = os.getpid()
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat(int(entry))
        if fields is not None and fields[0] != "Z":  # zombies are gone already
            parents[int(entry)] = int(fields[1])
    found: list[int] = []
    frontier = [me]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent:
                found.append(pid)
                frontier.append(pid)
    return found
