"""Which of a cluster's workers are running a task now: a board shared by the `qcluster` process
and every worker django-q2 forks from it, read by the heartbeats (supervisor.heartbeats).

django-q2 keeps its own statistics (`django_q.status.Stat`) in a per-process cache, and they
count worker processes, not the busy ones; its sentinel's per-worker timers live in the
sentinel's memory. So each worker marks itself here: around each task (django-q2's `pre_execute`
signal, sent in the worker before the task runs, and `post_execute_in_worker`, after it ran,
failed or timed out) it writes its pid into a slot of a shared array, then clears it. *Busy* is
the number of slots holding the pid of a worker still alive: a worker killed in the middle of a
task (its time limit, the OOM killer) leaves its pid behind, which no longer counts, and its
slot is taken by the next worker that needs one.

The board is made before the cluster starts (django-q2 forks its sentinel, which forks the
workers: they inherit the board and the signal receivers). Brokers play no part: it works with
the ORM broker and any other.
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Any

from django_q.signals import post_execute_in_worker, pre_execute

#: The board of this process tree, once `board_install` made it (the qcluster process only).
_board: BusyBoard | None = None


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs (on Linux, not a zombie waiting for its parent to reap it)."""
    if os.path.isdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class BusyBoard:
    """Slots shared across fork: each holds the pid of a worker running a task, or 0."""

    def __init__(self, slots: int) -> None:
        self.slots = multiprocessing.get_context("fork").Array("i", max(1, slots))

    def begin(self, pid: int) -> None:
        """Worker `pid` starts a task. With every slot held by a live worker it is not counted."""
        with self.slots.get_lock():
            free = None
            for i, held in enumerate(self.slots[:]):
                if held == pid:
                    return
                if free is None and (held == 0 or not pid_alive(held)):
                    free = i
            if free is not None:
                self.slots[free] = pid

    def end(self, pid: int) -> None:
        """Worker `pid` finished its task (whatever its outcome)."""
        with self.slots.get_lock():
            for i, held in enumerate(self.slots[:]):
                if held == pid:
                    self.slots[i] = 0

    def busy(self) -> int:
        """Workers running a task now."""
        with self.slots.get_lock():
            held = [pid for pid in self.slots[:] if pid]
        return sum(1 for pid in held if pid_alive(pid))


def task_started(sender: Any, **kwargs: Any) -> None:
    if _board is not None:
        _board.begin(os.getpid())


def task_ended(sender: Any, **kwargs: Any) -> None:
    if _board is not None:
        _board.end(os.getpid())


def board_install(workers: int) -> BusyBoard:
    """Make this process tree's board (before the cluster forks) and have every worker mark
    itself on it around each task. Twice the workers' slots: a worker recycled or replaced
    leaves room for its successor while its own slot is being freed."""
    global _board
    _board = BusyBoard(2 * workers)
    pre_execute.connect(task_started, dispatch_uid="supervisor.busy.started", weak=False)
    post_execute_in_worker.connect(task_ended, dispatch_uid="supervisor.busy.ended", weak=False)
    return _board
