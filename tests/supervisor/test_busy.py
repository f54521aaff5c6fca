"""The workers' busy board (supervisor.busy): a worker forked from the cluster's process marks
itself busy around each task through django-q2's own signals; a worker that died in a task no
longer counts, and its slot is taken again."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from django_q.signals import post_execute_in_worker, pre_execute

from supervisor import busy

pytestmark = pytest.mark.sqlite


@pytest.fixture
def board() -> Iterator[busy.BusyBoard]:
    installed = busy.board_install(2)
    try:
        yield installed
    finally:
        pre_execute.disconnect(dispatch_uid="supervisor.busy.started")
        post_execute_in_worker.disconnect(dispatch_uid="supervisor.busy.ended")
        busy._board = None


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def worker(started: multiprocessing.synchronize.Event, release: multiprocessing.synchronize.Event) -> None:
    """What django-q2's worker does around a task, in a process forked from the board's."""
    pre_execute.send(sender="django_q", func=print, task={})
    started.set()
    release.wait(10)
    post_execute_in_worker.send(sender="django_q", func=print, task={})


def test_a_forked_worker_is_busy_from_pre_execute_until_its_task_has_run(board: busy.BusyBoard) -> None:
    fork = multiprocessing.get_context("fork")
    started, release = fork.Event(), fork.Event()
    process = fork.Process(target=worker, args=(started, release))
    process.start()
    try:
        assert started.wait(10)
        assert board.busy() == 1
        release.set()
        process.join(10)
        assert process.exitcode == 0
        assert board.busy() == 0
    finally:
        release.set()
        process.join(10)


def test_a_worker_that_died_in_a_task_no_longer_counts_and_its_slot_is_taken_again(
    board: busy.BusyBoard,
) -> None:
    gone = dead_pid()
    board.begin(gone)
    board.begin(os.getpid())
    board.begin(os.getpid())  # the same worker twice is one
    assert board.busy() == 1
    board.begin(os.getppid())
    board.begin(1)
    assert board.busy() == 3
    # Every slot is held (2 x 2 workers): a new worker takes the dead one's.
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        board.begin(sleeper.pid)
        assert board.busy() == 4
        assert sleeper.pid in board.slots[:] and gone not in board.slots[:]
    finally:
        sleeper.kill()
        sleeper.wait()
    # Reaped, the sleeper no longer counts, though it never ended its task.
    assert board.busy() == 3
    board.end(os.getpid())
    assert board.busy() == 2
    assert busy.pid_alive(os.getpid()) and not busy.pid_alive(gone)
