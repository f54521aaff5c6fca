"""The benchmark's CPU accounting (testbed.bench.cpu): a process's time lands in its group while it
runs, and in its parent's once reaped, counted once."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from testbed.bench import cpu

pytestmark = [
    pytest.mark.sqlite,
    pytest.mark.skipif(cpu.snapshot() is None, reason="/proc holds no CPU counters here"),
]

#: Burns `seconds` of CPU, says so on its standard output, then sleeps (argv[1]; its command
#: line names a group, argv[2]).
SPIN = (
    "import sys, time\nt = time.process_time()\n"
    "while time.process_time() - t < float(sys.argv[1]): pass\n"
    "print('spun', flush=True)\ntime.sleep(30)"
)


def test_a_running_process_is_counted_in_the_group_its_command_line_names() -> None:
    before = cpu.snapshot()
    spin = [sys.executable, "-c", SPIN, "0.3", "fastremote"]
    with subprocess.Popen(spin, stdout=subprocess.PIPE, text=True) as proc:
        try:
            # Once it has burnt its time, however long a loaded machine took to give it that.
            assert proc.stdout is not None and proc.stdout.readline().strip() == "spun"
            figures = cpu.per_step(before, cpu.snapshot(), 1)
            assert figures["remote"] >= 290  # ms, of the 300 it burnt
            assert figures["machine"] >= figures["remote"] - 20
        finally:
            proc.kill()


def test_a_child_reaped_during_the_workload_counts_for_its_parents_group() -> None:
    before = cpu.snapshot()
    subprocess.run([sys.executable, "-c", SPIN.replace("time.sleep(30)", ""), "0.3", "x"], check=True)
    figures = cpu.per_step(before, cpu.snapshot(), 3)
    assert figures["bench"] >= 95  # 300 ms over 3 steps, in this (the bench's) process


def test_a_process_gone_by_the_end_counts_only_its_time_since_the_start() -> None:
    before = cpu.Snapshot({1: ("cluster", 100), 2: ("cluster", 500), 3: ("database", 40)}, 0, 0)
    # Process 2 (500 ticks before, 520 at its end) was reaped by process 1, whose children's
    # times now hold its whole life.
    after = cpu.Snapshot({1: ("cluster", 100 + 520 + 30), 3: ("database", 70)}, 200, 400)
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    figures = cpu.per_step(before, after, 10)
    assert figures["cluster"] == round((30 + 20) * tick_ms / 10, 2)
    assert figures["database"] == round(30 * tick_ms / 10, 2)
    assert figures["machine"] == round(200 * tick_ms / 10, 2)


def test_processes_are_grouped_by_what_their_command_line_names() -> None:
    assert cpu.group_of(os.getpid(), "anything") == "bench"
    assert cpu.group_of(1, "postgres: postgres sas 127.0.0.1(5432) idle") == "database"
    assert cpu.group_of(1, "qcluster sas-1 worker") == "cluster"
    assert cpu.group_of(1, "gunicorn: worker [sas_project.wsgi]") == "web"
    assert cpu.group_of(1, "python manage.py runserver 127.0.0.1:8000 --noreload") == "web"
    assert cpu.group_of(1, "python -m testbed.fastremote --port 1") == "remote"
    assert cpu.group_of(1, "sshd") == "other"
    assert cpu.describe({}) == "not measured"
    assert cpu.describe({"cluster": 2.0, "database": 1.19, "web": 0.0, "machine": 3.5}) == (
        "cluster 2.0, database 1.19 (machine 3.5)"
    )
