"""The fault campaign's hostile mode (`fault_campaign --hostile`): remotes, callback receivers and
messages that try to stall the supervisor, exhaust memory or lose a result; its figures and
checks (docs/reliability.md, "Hostile remotes, receivers and messages").

What turns hostile:
- the sandbox remote answers a share of its calls (`hostile_rate`) after doing the work, with a
  body trickled one byte a second, a 50 MB body, a gzip bomb, JSON the database cannot store, or
  a header value HTTP forbids; its queue replies carry outputs the database cannot store;
- half the plain jobs ask for a completion callback, at a receiver (testbed.receiver) that for
  half of them black-holes, trickles, answers 500 forever or answers 50 MB;
- the driver publishes poison on the reply queue: bodies that are not JSON, a content type the
  consumer refuses, a message of several megabytes, JSON that is not a reply, and a reply the
  database cannot store for an operation nobody asked for; meanwhile the broker restarts (the
  campaign's broker faults) with replies in flight.

What it measures: the longest time between two scans of one supervisor (a stalled loop shows
here; a hand-over to another holder does not count), the largest resident memory any process of
the service reached (clusters, their workers, web servers: not the campaign's own tools), the
results lost (an effect at the remote that its job neither recorded nor
undid, and a good receiver's callback never delivered), and the replies dead-lettered.
"""

from __future__ import annotations

import os
import pickle
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import connection
from django.utils import timezone

from agents.models import ReplyDeadLetters
from scheduler.models import (
    JOB_SETTLED,
    Delivery,
    DeliveryKind,
    DeliveryStatus,
    Job,
    Step,
    StepKind,
    StepStatus,
)
from supervisor.models import SupervisorLease
from testbed.receiver import HOSTILE_MODES, Receiver, make_server

#: The hostile callback modes, then the good receiver, dealt to the plain jobs in turn.
CALLBACK_MODES = (*HOSTILE_MODES, *(["ok"] * len(HOSTILE_MODES)))
#: Poison published on the reply queue, in turn.
POISON_KINDS = ("not_json", "pickle", "oversized", "not_a_reply", "unstorable_unknown")
OVERSIZED_BYTES = 4 * 1024 * 1024
#: What the command line of a process of the service holds.
SERVICE_COMMANDS = ("qcluster", "gunicorn", "runserver")
#: Must be 0.
MUST_BE_ZERO = ("results_lost", "good_callbacks_lost")


class HostileReceiver:
    """The campaign's callback receiver, served from a thread of the driver."""

    def __init__(self, port: int) -> None:
        self.receiver = Receiver()
        self.server = make_server(port, self.receiver)
        self.url = f"http://127.0.0.1:{port}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="hostile-receiver", daemon=True)
        self.thread.start()
        self.dealt = 0

    def deal(self, tag: str) -> tuple[str, str]:
        """(mode, callback URL) for the next job."""
        mode = CALLBACK_MODES[self.dealt % len(CALLBACK_MODES)]
        self.dealt += 1
        return mode, f"{self.url}/{mode}/{tag}"

    def stop(self) -> None:
        self.receiver.stopping.set()
        self.server.shutdown()
        self.server.server_close()


class PoisonPublisher:
    """Publishes poison on the service's reply queue of one broker."""

    def __init__(self, broker_url: str, queue: str) -> None:
        self.broker_url = broker_url
        self.queue = queue
        self.published: dict[str, int] = dict.fromkeys(POISON_KINDS, 0)
        self.failed = 0
        self.turn = 0

    def publish_next(self) -> None:
        from kombu import Connection, Queue

        kind = POISON_KINDS[self.turn % len(POISON_KINDS)]
        self.turn += 1
        body: Any
        content_type, encoding = "application/json", "utf-8"
        if kind == "not_json":
            body = b'{"operation_id": "poison", "outcome": '
        elif kind == "pickle":
            body, content_type, encoding = pickle.dumps({"x": 1}), "application/x-python-serialize", "binary"
        elif kind == "oversized":
            body = (
                b'{"operation_id": "poison-big", "outcome": "succeeded", "output": "'
                + b"x" * OVERSIZED_BYTES
                + b'"}'
            )
        elif kind == "not_a_reply":
            body = b"[1, 2, 3]"
        else:
            body = b'{"operation_id": "poison-unknown", "attempt": 1, "outcome": "succeeded", '
            body += b'"output": {"n": NaN}}'
        try:
            with Connection(self.broker_url, connect_timeout=3) as conn, conn.Producer() as producer:
                producer.publish(
                    body,
                    routing_key=self.queue,
                    declare=[Queue(self.queue, routing_key=self.queue, durable=True)],
                    content_type=content_type,
                    content_encoding=encoding,
                    delivery_mode=2,
                    retry=True,
                    retry_policy={"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5},
                )
        except Exception:  # noqa: BLE001 - the broker is being restarted: counted, not fatal
            self.failed += 1
            return
        self.published[kind] += 1


@dataclass
class Samples:
    longest_scan_gap: float = 0.0
    #: The longest pass any acting supervisor reported (its lease's `last_scan.longest_pass_ms`).
    longest_pass_ms: int = 0
    scans_seen: int = 0
    largest_rss_kb: int = 0
    largest_rss_process: str = ""
    errors: list[str] = field(default_factory=list)


def _children_of(root: int) -> list[int]:
    """Every process descended from `root` (read from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command is in parentheses and may hold spaces: the fields after it are fixed.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _peak_rss_kb(pid: int) -> tuple[int, str]:
    """(the process's peak resident memory in KiB, its command), or (0, "") once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return 0, ""
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]), command.strip()[:120]
    return 0, ""


class Sampler:
    """Samples, in a thread, the supervisor's scans (from the lease row) and the peak resident
    memory of every process the campaign started (and theirs)."""

    def __init__(self, every: float = 0.25) -> None:
        self.every = every
        self.samples = Samples()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hostile-sampler", daemon=True)
        self._last: tuple[str, Any] | None = None
        self._started_at = timezone.now()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> Samples:
        self._stop.set()
        self._thread.join(timeout=10)
        return self.samples

    def _run(self) -> None:
        next_memory = 0.0
        try:
            while not self._stop.is_set():
                self._scan_sample()
                if time.monotonic() >= next_memory:
                    self._memory_sample()
                    next_memory = time.monotonic() + 1.0
                self._stop.wait(self.every)
        finally:
            connection.close()

    def _scan_sample(self) -> None:
        try:
            row = (
                SupervisorLease.objects.filter(pk="supervisor")
                .values_list("holder", "last_scan_at", "last_scan")
                .first()
            )
        except Exception as exc:  # noqa: BLE001 - the database restarts under the campaign
            connection.close()
            if len(self.samples.errors) < 5:
                self.samples.errors.append(str(exc).splitlines()[0][:200])
            return
        if row is None or row[1] is None:
            return
        holder, scanned_at, figures = row
        passes = (figures or {}).get("longest_pass_ms") or 0
        self.samples.longest_pass_ms = max(self.samples.longest_pass_ms, int(passes))
        if self._last is not None and self._last[1] != scanned_at:
            self.samples.scans_seen += 1
            # Only scans seen during the run, by one holder: the row's first value may be a scan
            # of an earlier run, and a hand-over is not a pass.
            if self._last[0] == holder and holder and self._last[1] >= self._started_at:
                gap = (scanned_at - self._last[1]).total_seconds()
                self.samples.longest_scan_gap = max(self.samples.longest_scan_gap, gap)
        self._last = (holder, scanned_at)

    def _memory_sample(self) -> None:
        for pid in _children_of(os.getpid()):
            kb, command = _peak_rss_kb(pid)
            # The service's processes (clusters and their workers, web servers), not the tools
            # the campaign runs beside them (the sandbox remote, Redis).
            if not any(role in command for role in SERVICE_COMMANDS):
                continue
            if kb > self.samples.largest_rss_kb:
                self.samples.largest_rss_kb, self.samples.largest_rss_process = kb, command


def dead_lettered() -> dict[str, int]:
    """Queue replies dead-lettered so far, by reason (the counter behind the metric)."""
    return dict(ReplyDeadLetters.objects.values_list("reason", "count"))


def wait_for_callbacks(job_ids: Sequence[Any], timeout: float) -> None:
    """Wait until no callback of `job_ids` to a good receiver is still pending."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        pending = (
            Delivery.objects.filter(
                job_id__in=job_ids, kind=DeliveryKind.CALLBACK, status=DeliveryStatus.PENDING
            )
            .filter(target__contains="/ok/")
            .exists()
        )
        if not pending:
            return
        time.sleep(0.5)


def check_hostile(
    job_ids: Sequence[Any],
    callbacks: dict[str, tuple[str, str]],
    stats: dict[str, Any],
    receiver: HostileReceiver,
    samples: Samples,
    poison: PoisonPublisher | None,
    dead: dict[str, int],
) -> dict[str, Any]:
    """The hostile mode's figures. `callbacks` maps a job id to its callback's mode and tag."""
    effects: dict[str, int] = stats["effects"]
    jobs = dict(Job.objects.filter(pk__in=job_ids).values_list("pk", "status"))
    settled = {str(pk) for pk, status in jobs.items() if status in JOB_SETTLED}
    # A result is lost when the remote did the work and the job, settled, neither recorded it nor
    # undid it.
    lost = [
        step.operation_id
        for step in Step.objects.filter(job_id__in=job_ids, kind=StepKind.ACTION)
        if str(step.job_id) in settled
        and effects.get(step.operation_id, 0)
        and step.status not in (StepStatus.SUCCEEDED, StepStatus.COMPENSATED)
        and not effects.get(f"{step.operation_id}:compensate", 0)
    ]
    snapshot = receiver.receiver.snapshot()
    delivered_tags = {entry["path"].rsplit("/", 1)[-1] for entry in snapshot["accepted"]}
    good = [job for job, (mode, _) in callbacks.items() if mode == "ok" and job in settled]
    undelivered = [job for job in good if callbacks[job][1] not in delivered_tags]
    # Still due (a sender killed mid-send leaves its message claimed for a while): late, not lost.
    pending = {
        str(job_id)
        for job_id in Delivery.objects.filter(
            job_id__in=undelivered, kind=DeliveryKind.CALLBACK, status=DeliveryStatus.PENDING
        ).values_list("job_id", flat=True)
    }
    good_lost = [job for job in undelivered if job not in pending]
    figures = {
        "hostile_answers": stats.get("hostile", {}),
        "hostile_callback_tries": snapshot["hostile"],
        "jobs_with_callbacks": len(callbacks),
        "good_callbacks_delivered": len(good) - len(undelivered),
        "good_callbacks_lost": len(good_lost),
        "good_callbacks_pending": len(pending),
        "poison_published": dict(poison.published) if poison else {},
        "replies_dead_lettered": sum(dead.values()),
        "replies_dead_lettered_by_reason": {reason: n for reason, n in dead.items() if n},
        "supervisor_longest_scan_gap_s": round(samples.longest_scan_gap, 2),
        "supervisor_longest_pass_s": round(samples.longest_pass_ms / 1000, 2),
        "supervisor_scans_seen": samples.scans_seen,
        "largest_rss_mb": round(samples.largest_rss_kb / 1024, 1),
        "largest_rss_process": samples.largest_rss_process,
        "results_lost": len(lost),
    }
    return {
        "figures": figures,
        "violations": {name: figures[name] for name in MUST_BE_ZERO if figures[name]},
        "examples": {"results_lost": lost[:5], "good_callbacks_lost": good_lost[:5]},
        "sampler_errors": samples.errors,
    }


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{kind} {n}" for kind, n in counts.items())


def table_rows(hostile: dict[str, Any]) -> list[tuple[str, Any]]:
    f = hostile["figures"]
    dead = f"{f['replies_dead_lettered']} ({_counts(f['replies_dead_lettered_by_reason'])})"
    rss = f"{f['largest_rss_mb']} ({f['largest_rss_process'][:60]})"
    return [
        ("hostile answers by kind", _counts(f["hostile_answers"])),
        ("hostile callback tries by kind", _counts(f["hostile_callback_tries"])),
        ("poison replies published", _counts(f["poison_published"])),
        ("replies dead-lettered", dead),
        ("good callbacks delivered", f["good_callbacks_delivered"]),
        (
            "good callbacks still due / lost (must be 0)",
            f"{f['good_callbacks_pending']} / {f['good_callbacks_lost']}",
        ),
        ("results lost (must be 0)", f["results_lost"]),
        ("supervisor's longest pass, s", f["supervisor_longest_pass_s"]),
        ("longest time between two scans of one supervisor, s", f["supervisor_longest_scan_gap_s"]),
        ("largest resident memory of any process, MB", rss),
    ]
