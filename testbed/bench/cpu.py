"""Where a workload's CPU went: milliseconds per step for each kind of process on this machine
(the database, the cluster, the web server, the remote, the benchmark itself), and the whole
machine's busy time beside them.

Read from /proc (Linux; elsewhere nothing is reported). A process's own times and those of the
children it has reaped are counted, so a recycled worker or a closed database session, gone
before the workload ended, still counts (its parent reaped it): a process there before and gone
after is taken to have been reaped by a parent of its group, and only its time since counts. One
that started and ended during the workload without being reaped by a process seen at the end is
missed, which the machine's busy time beside the groups shows. Comparing the groups of the
service with those of bare django-q2 in the same run says which part of the gap is the database
and which the Python around it (docs/performance-history.md, "Engine III").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")

#: (group, what its command line holds), first match wins; setproctitle keeps the names.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("database", ("postgres",)),
    ("cluster", ("qcluster",)),
    ("web", ("gunicorn", "runserver")),
    ("remote", ("fastremote", "sandbox_remote")),
)


@dataclass(frozen=True)
class Snapshot:
    """Clock ticks by process id (with the group each belongs to), and the machine's busy and
    total ticks."""

    processes: dict[int, tuple[str, int]]
    busy: int
    total: int


def group_of(pid: int, command: str) -> str:
    if pid == os.getpid():
        return "bench"
    for group, needles in GROUPS:
        if any(needle in command for needle in needles):
            return group
    return "other"


def snapshot() -> Snapshot | None:
    """The counters now, or None where /proc does not have them."""
    try:
        fields = (PROC / "stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    ticks = [int(v) for v in fields]
    idle = ticks[3] + ticks[4]  # idle and iowait
    processes: dict[int, tuple[str, int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        # After the command name in parentheses (which may hold spaces): utime, stime, cutime and
        # cstime are fields 14 to 17 of the line, the 12th to 15th after it.
        after = stat.rsplit(")", 1)[1].split()
        spent = sum(int(v) for v in after[11:15])
        pid = int(entry.name)
        processes[pid] = (group_of(pid, command), spent)
    return Snapshot(processes, sum(ticks) - idle, sum(ticks))


def per_step(before: Snapshot | None, after: Snapshot | None, steps: int) -> dict[str, float]:
    """Milliseconds of CPU per step by group between two snapshots, and `machine`: the whole
    machine's busy time per step (every core's)."""
    if before is None or after is None or steps <= 0:
        return {}
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    spent: dict[str, int] = {}
    for pid, (group, ticks) in after.processes.items():
        earlier = before.processes.get(pid)
        start = earlier[1] if earlier is not None and earlier[0] == group else 0
        spent[group] = spent.get(group, 0) + max(ticks - start, 0)
    for pid, (group, ticks) in before.processes.items():
        if pid not in after.processes:
            # Gone, and (as a recycled worker or a closed session) reaped by a parent of its
            # group, whose children's times now hold its whole life: only its part since counts.
            spent[group] = max(spent.get(group, 0) - ticks, 0)
    figures = {group: round(ticks * tick_ms / steps, 2) for group, ticks in sorted(spent.items())}
    figures["machine"] = round((after.busy - before.busy) * tick_ms / steps, 2)
    return figures


def describe(figures: dict[str, float]) -> str:
    """`database 1.19, cluster 1.99, ... (machine 3.37)`, the groups that spent anything."""
    if not figures:
        return "not measured"
    parts = [f"{group} {ms}" for group, ms in figures.items() if group != "machine" and ms > 0]
    return ", ".join(parts) + f" (machine {figures['machine']})"
