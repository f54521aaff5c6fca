"""The hostile campaign's poison (`fault_campaign --poison`): what one tenant submits, one remote
answers or one producer publishes to stop every job's supervision, injected beside the healthy
workload through the public paths, bounded and counted; and the figures that say whether the
other jobs were still remediated in time (docs/reliability.md, "Poison").

What is injected, after a first phase without it:
- **impossible times**: jobs whose timer waits until a time an earlier step's answer gives, which
  the sandbox answers as a day that does not exist, a month 13 or an offset of +20:00; and jobs
  whose own input holds such a time (refused at submission with a 4xx, or accepted and then held:
  both are acceptable, and counted apart);
- **NaN**: a sub-workflow's input mapping `to_number(input.s)` over "NaN", and a call's output
  projection `to_number(output.note)` over an answer's "NaN";
- **unpaired surrogates**: a 2xx answer holding `"\\ud800"`;
- **compression bombs and deep strings** on the reply queue (with the asynchronous agents' broker);
- **black-holed receivers**: jobs whose callback URL is a loopback address (one host each, up to a
  thousand) that accepts the connection and never answers;
- **a supervisor that renews its lease while its remediation fails**: one cluster restarted with
  SAS_FAULT_REMEDIATION_FAILS=1 and left alone to take the lease, then its peers started again;
  the time until one of them takes the lease over is measured from the lease's record.

What it measures: how each poison job ended (never still running), the quarantines by loop, the
time to takeover, and the remediation lag of the healthy jobs' overdue steps (from the deadline to
the supervisor's decision, the `overdue_ms` of their `step_timed_out` events) before the poison,
with it, and while the stuck supervisor held the lease.
"""

from __future__ import annotations

import bz2
import contextlib
import datetime as dt
import json
import socket
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from scheduler.models import JOB_SETTLED, Event, EventKind, Job, JobStatus, Quarantine
from supervisor.lease import LEASE_NAME
from supervisor.models import ClusterHeartbeat, LeaseTerm, SupervisorLease
from testbed.definitions import ensure_workflow
from testbed.processes import ClusterProcess, SandboxProcess, percentile
from testbed.resend import post_until_answered

WORKFLOW_TIMER = "campaign_poison_timer"
WORKFLOW_INPUT_TIME = "campaign_poison_input_time"
WORKFLOW_PROJECTION = "campaign_poison_projection"
WORKFLOW_MAPPING = "campaign_poison_mapping"
WORKFLOW_CHILD = "campaign_poison_child"
WORKFLOW_CALL = "campaign_poison_call"
WORKFLOW_CALLBACK = "campaign_poison_callback"
#: Every workflow whose jobs this module makes (children included).
ALL_WORKFLOWS = (
    WORKFLOW_TIMER,
    WORKFLOW_INPUT_TIME,
    WORKFLOW_PROJECTION,
    WORKFLOW_MAPPING,
    WORKFLOW_CHILD,
    WORKFLOW_CALL,
    WORKFLOW_CALLBACK,
)
#: The poison jobs' kinds, dealt in turn: (kind, workflow, input). `answer_with` asks the sandbox
#: for a poisoned answer (testbed.sandbox.core.POISON_ANSWERS).
JOB_KINDS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("time_feb30", WORKFLOW_TIMER, {"answer_with": "feb30"}),
    ("surrogate", WORKFLOW_CALL, {"answer_with": "surrogate"}),
    ("time_month13", WORKFLOW_TIMER, {"answer_with": "month13"}),
    ("nan_mapping", WORKFLOW_MAPPING, {"s": "NaN"}),
    ("time_offset", WORKFLOW_TIMER, {"answer_with": "offset"}),
    ("input_time", WORKFLOW_INPUT_TIME, {"not_before": "2024-02-30T00:00:00Z"}),
    ("nan_projection", WORKFLOW_PROJECTION, {"answer_with": "nan_text"}),
    ("input_time_offset", WORKFLOW_INPUT_TIME, {"not_before": "2024-03-01T00:00:00+20:00"}),
)
#: Poison on the reply queue, in turn, beside the hostile mode's.
QUEUE_KINDS = ("bz2_bomb", "zlib_bomb", "deep_string")
#: What a compression bomb inflates to.
BOMB_BYTES = 64 * 2**20
DEEP_NESTING = 100_000
#: How long a cluster the campaign starts takes before its supervisor scans, at most (seconds): an
#: outage of the campaign's own lasts until then, and the lease's expiry after it.
CLUSTER_START_SECONDS = 5.0
#: Must be 0.
MUST_BE_ZERO = ("poison_jobs_not_settled", "poison_submissions_failed")


def ensure_poison_definitions() -> None:
    """The poison jobs' workflows (the campaign's pools and policies must exist)."""
    fetch = {
        "name": "fetch",
        "pool": "campaign-inventory",
        "path": "/inventory/reserve",
        "status_path": "/inventory/reservations/{operation_id}",
        "compensation_path": "/inventory/release",
        "policy": "campaign",
    }
    ensure_workflow(
        WORKFLOW_TIMER,
        description="A call whose answer gives the time a timer waits for.",
        steps=[fetch, {"name": "ripen", "kind": "timer", "until": "fetch.ready_at", "depends_on": ["fetch"]}],
    )
    ensure_workflow(
        WORKFLOW_INPUT_TIME,
        description="A call, then a timer until the job's input.not_before.",
        steps=[
            fetch,
            {"name": "ripen", "kind": "timer", "until": "input.not_before", "depends_on": ["fetch"]},
        ],
    )
    ensure_workflow(
        WORKFLOW_PROJECTION,
        description="A call whose output is projected through to_number.",
        steps=[{**fetch, "output": "to_number(output.note)"}],
    )
    ensure_workflow(WORKFLOW_CHILD, description="One call.", steps=[fetch])
    ensure_workflow(
        WORKFLOW_MAPPING,
        description="A child job whose input is mapped through to_number.",
        steps=[
            {
                "name": "child",
                "kind": "workflow",
                "workflow": WORKFLOW_CHILD,
                "input": {"amount.$": "to_number(input.s)", "quantity": 1},
                "policy": "campaign",
            }
        ],
    )
    ensure_workflow(WORKFLOW_CALL, description="One call.", steps=[fetch])
    ensure_workflow(
        WORKFLOW_CALLBACK,
        description="A timer of no time: the job ends at once and calls back.",
        steps=[{"name": "now", "kind": "timer", "wait_seconds": 0}],
    )


class BlackHoles:
    """`count` listeners on as many loopback addresses (127.0.1.1 on), one port: each accepts
    connections into its backlog and never reads or answers them."""

    def __init__(self, count: int, port: int) -> None:
        self.port = port
        self.sockets: list[socket.socket] = []
        self.hosts: list[str] = []
        for i in range(count):
            host = f"127.0.{1 + i // 250}.{1 + i % 250}"
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(64)
            self.sockets.append(sock)
            self.hosts.append(host)

    def url(self, index: int, tag: str) -> str:
        return f"http://{self.hosts[index % len(self.hosts)]}:{self.port}/callback/{tag}"

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


def _bomb(compressor: Any) -> bytes:
    chunk = b"0" * 2**20
    return b"".join(compressor.compress(chunk) for _ in range(BOMB_BYTES // len(chunk))) + compressor.flush()


@dataclass
class PoisonLog:
    #: Poison jobs submitted and accepted, by kind: job id -> kind.
    jobs: dict[str, str] = field(default_factory=dict)
    #: Submissions refused with a 4xx, by kind.
    refused: Counter[str] = field(default_factory=Counter)
    #: Submissions that got no answer but 5xx and dropped connections, however often sent again.
    failed: Counter[str] = field(default_factory=Counter)
    #: Jobs calling back to a black hole.
    callback_jobs: list[str] = field(default_factory=list)
    callback_refused: int = 0
    queue_published: Counter[str] = field(default_factory=Counter)
    queue_failed: int = 0
    errors: list[str] = field(default_factory=list)


class PoisonDriver:
    """A thread that submits the poison jobs and the black-holed callbacks through the REST API,
    and publishes poison on the reply queue, spread over `seconds`."""

    def __init__(
        self,
        *,
        api_url: str,
        token: str,
        jobs: int,
        callbacks: int,
        holes: BlackHoles | None,
        broker_url: str,
        reply_queue: str,
        seconds: float,
        run_id: str,
    ) -> None:
        self.client = httpx.Client(
            base_url=api_url,
            headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
            timeout=30,
            trust_env=False,
        )
        self.jobs = jobs
        self.callbacks = callbacks if holes is not None else 0
        self.holes = holes
        self.broker_url = broker_url
        self.reply_queue = reply_queue
        self.seconds = seconds
        self.run_id = run_id
        self.log = PoisonLog()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="poison-driver", daemon=True)
        self._bombs: dict[str, bytes] = {}

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 60) -> PoisonLog:
        """Wait for what is due to be sent (at most `timeout`), then stop."""
        self._thread.join(timeout)
        self._stop.set()
        self._thread.join(10)
        self.client.close()
        return self.log

    def _run(self) -> None:
        try:
            started = time.monotonic()
            total = self.jobs + self.callbacks
            queue_every = self.seconds / (2 * len(QUEUE_KINDS)) if self.broker_url else 0.0
            next_queue = started
            done_jobs = done_callbacks = queue_turn = 0
            while not self._stop.is_set() and (
                done_jobs + done_callbacks < total
                or queue_turn < 2 * len(QUEUE_KINDS) * bool(self.broker_url)
            ):
                share = min(1.0, (time.monotonic() - started) / max(self.seconds, 0.001))
                while done_jobs < min(self.jobs, int(share * self.jobs) + 1):
                    self._submit_poison(done_jobs)
                    done_jobs += 1
                batch_until = time.monotonic() + 0.5
                while done_callbacks < min(self.callbacks, int(share * self.callbacks) + 1):
                    self._submit_callback(done_callbacks)
                    done_callbacks += 1
                    if time.monotonic() > batch_until:
                        break
                if self.broker_url and queue_turn < 2 * len(QUEUE_KINDS) and time.monotonic() >= next_queue:
                    self._publish(QUEUE_KINDS[queue_turn % len(QUEUE_KINDS)])
                    queue_turn += 1
                    next_queue = time.monotonic() + queue_every
                self._stop.wait(0.1)
        except Exception as exc:  # noqa: BLE001 - reported; the campaign's checks still run
            self.log.errors.append(f"{type(exc).__name__}: {exc}"[:300])
        finally:
            connection.close()

    def _post(self, body: dict[str, Any], key: str) -> tuple[int, str]:
        """(status, job id or error) of one submission; a 5xx or a dropped connection is sent
        again under the same key (testbed.resend): (0, the last error)."""
        response = (sent := post_until_answered(self.client, "/api/v1/jobs/", body, key=key)).response
        if response is None:
            return 0, sent.error
        if response.status_code in (200, 201):
            return response.status_code, str(response.json()["id"])
        return response.status_code, response.text[:300]

    def _submit_poison(self, index: int) -> None:
        kind, workflow, payload = JOB_KINDS[index % len(JOB_KINDS)]
        status, got = self._post(
            {"workflow": workflow, "input": {"sku": f"P{index}", **payload}}, f"{self.run_id}-poison-{index}"
        )
        if status in (200, 201):
            self.log.jobs[got] = kind
        elif status:
            self.log.refused[kind] += 1
        else:
            self.log.failed[kind] += 1
            self.log.errors.append(f"{kind}: {got}"[:300])

    def _submit_callback(self, index: int) -> None:
        assert self.holes is not None
        tag = f"{self.run_id}-hole-{index}"
        status, got = self._post(
            {"workflow": WORKFLOW_CALLBACK, "input": {}, "callback_url": self.holes.url(index, tag)}, tag
        )
        if status in (200, 201):
            self.log.callback_jobs.append(got)
        elif status:
            self.log.callback_refused += 1
            if len(self.log.errors) < 10:
                self.log.errors.append(f"callback: {got}"[:300])
        else:
            self.log.failed["callback"] += 1

    def _publish(self, kind: str) -> None:
        from kombu import Connection, Queue

        headers: dict[str, Any] = {}
        if kind == "deep_string":
            # A JSON string holding JSON nested too deep to read.
            body = json.dumps("[" * DEEP_NESTING).encode()
        else:
            if kind not in self._bombs:
                self._bombs[kind] = _bomb(bz2.BZ2Compressor() if kind == "bz2_bomb" else zlib.compressobj(9))
            body = self._bombs[kind]
            headers = {"compression": "application/x-bz2" if kind == "bz2_bomb" else "application/x-gzip"}
        try:
            with Connection(self.broker_url, connect_timeout=3) as conn, conn.Producer() as producer:
                producer.publish(
                    body,
                    routing_key=self.reply_queue,
                    declare=[Queue(self.reply_queue, routing_key=self.reply_queue, durable=True)],
                    content_type="application/json",
                    content_encoding="utf-8",
                    headers=headers,
                    delivery_mode=2,
                    retry=True,
                    retry_policy={"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5},
                )
        except Exception:  # noqa: BLE001 - the broker is being restarted: counted, not fatal
            self.log.queue_failed += 1
            return
        self.log.queue_published[kind] += 1


@dataclass
class StuckWindow:
    """The cluster whose remediation fails while it renews its lease: when it was started alone,
    the holder name it took the lease under, and when the window ended."""

    started_at: dt.datetime
    holder: str = ""
    peers_started_at: dt.datetime | None = None
    #: The process ids of the peers started again.
    peers: list[int] = field(default_factory=list)
    ended_at: dt.datetime | None = None
    note: str = ""


class StuckSupervisor:
    """Drives the window of a supervisor that renews its lease while its remediation fails, one
    step per turn of the campaign's loop: every cluster killed and the first started alone with
    SAS_FAULT_REMEDIATION_FAILS (`env(faulty=True)`), so that it takes the lease; once it has
    (or after `limit` seconds), its peers started again and a call dropped so that a step is
    overdue for certain; once a peer took the lease over (or after `limit`), the first cluster
    started again without the fault."""

    def __init__(
        self,
        clusters: Sequence[ClusterProcess],
        *,
        env: Callable[[bool], dict[str, str]],
        sandbox: SandboxProcess,
        limit: float,
    ) -> None:
        self.clusters = clusters
        self.env = env
        self.sandbox = sandbox
        self.limit = limit
        self.state = "off"  # off, alone, peers, done
        self.window: StuckWindow | None = None
        self._since = 0.0
        self._holders_before: set[str] = set()

    @property
    def active(self) -> bool:
        """Whether the window is open (the campaign keeps its clusters as they are meanwhile)."""
        return self.state in ("alone", "peers")

    def step(self, now: float) -> str:
        """One turn; what happened, for the log ("" when nothing did)."""
        if self.state == "off":
            self._holders_before = set(
                SupervisorLease.objects.filter(pk=LEASE_NAME).values_list("holder", flat=True)
            )
            for cluster in self.clusters:
                cluster.kill()
            self.clusters[0].env = self.env(True)
            self.clusters[0].start()
            self.window = StuckWindow(started_at=timezone.now())
            self.state, self._since = "alone", now
            return "a supervisor whose remediation fails, alone"
        window = self.window
        assert window is not None
        if self.state == "alone":
            holder = (
                SupervisorLease.objects.filter(pk=LEASE_NAME).values_list("holder", flat=True).first() or ""
            )
            took = bool(holder) and holder not in self._holders_before
            if not took and now - self._since <= self.limit:
                return ""
            window.holder = holder if took else ""
            window.note = "" if took else "(it never took the lease)"
            for cluster in self.clusters[1:]:
                cluster.start()
                if cluster.proc is not None:
                    window.peers.append(cluster.proc.pid)
            window.peers_started_at = timezone.now()
            with contextlib.suppress(httpx.HTTPError):
                self.sandbox.config(script={"/inventory/reserve": ["drop", "drop"]})
            self.state, self._since = "peers", now
            return f"its peers started; the stuck holder: {window.holder or 'none'}"
        if self.state == "peers":
            over = (
                not window.holder
                or LeaseTerm.objects.filter(holder=window.holder, ended_at__isnull=False).exists()
            )
            if not over and now - self._since <= self.limit:
                return ""
            if not over:
                window.note = f"(not taken over within {self.limit:.0f} s)"
            self.clusters[0].kill()
            self.clusters[0].env = self.env(False)
            self.clusters[0].start()
            window.ended_at = timezone.now()
            self.state = "done"
            return f"the stuck supervisor's window is over {window.note}"
        return ""


def holds_lease(pid: int) -> bool:
    """Whether the cluster of process `pid` holds the supervisor's lease (a holder's name is
    `<kind>@<host>:<pid>:<nonce>`, supervisor.loop.holder_name; the cluster runs its loop in its
    main process)."""
    holder = SupervisorLease.objects.filter(pk=LEASE_NAME).values_list("holder", flat=True).first() or ""
    return holder.split(":")[1:2] == [str(pid)]


def takeover(window: StuckWindow | None) -> dict[str, Any]:
    """The stuck holder's term from the lease's record: when it took the lease, when another
    holder took it over (and who), and the time to takeover from when its debt began: the first
    deadline, not before it took the lease, of a step overdue while it held it and decided only
    after its term (at best two intervals later it counts as debt, at three a peer takes over)."""
    if window is None or not window.holder:
        return {
            "holder": window.holder if window else "",
            "taken_over": False,
            "note": window.note if window else "",
        }
    term = LeaseTerm.objects.filter(holder=window.holder).order_by("id").first()
    if term is None or term.ended_at is None or term.acquired_at is None:
        return {"holder": window.holder, "taken_over": False, "note": window.note}
    deadlines = [
        created_at - dt.timedelta(milliseconds=float(data["overdue_ms"]))
        for created_at, data in Event.objects.filter(
            kind=EventKind.STEP_TIMED_OUT, created_at__gte=term.ended_at, data__has_key="overdue_ms"
        ).values_list("created_at", "data")[:5000]
    ]
    owed = [max(d, term.acquired_at) for d in deadlines if d <= term.ended_at]
    debt_began = min(owed) if owed else None
    # When the first peer was up (its cluster's first heartbeat): a takeover needs one.
    ready = (
        ClusterHeartbeat.objects.filter(pid__in=window.peers, started_at__gte=window.peers_started_at)
        .order_by("started_at")
        .values_list("started_at", flat=True)
        .first()
        if window.peers_started_at
        else None
    )
    return {
        "holder": window.holder,
        "taken_over": True,
        "taken_over_by": term.ended_by,
        "held_s": round((term.ended_at - term.acquired_at).total_seconds(), 2),
        "after_debt_began_s": round((term.ended_at - debt_began).total_seconds(), 2) if debt_began else None,
        "after_peers_started_s": (
            round((term.ended_at - window.peers_started_at).total_seconds(), 2)
            if window.peers_started_at
            else None
        ),
        "after_a_peer_was_up_s": round((term.ended_at - ready).total_seconds(), 2) if ready else None,
        "note": window.note,
    }


def _lag(values: list[float]) -> dict[str, Any]:
    return {"count": len(values), "p50": percentile(values, 50), "p99": percentile(values, 99)}


def remediation_lag(
    healthy: Sequence[Any],
    *,
    since: dt.datetime,
    poison_from: dt.datetime | None,
    stuck: tuple[dt.datetime, dt.datetime] | None,
    outages: Sequence[tuple[dt.datetime, dt.datetime]] = (),
    goal: dt.timedelta,
) -> dict[str, Any]:
    """The lag of the healthy jobs' overdue steps (deadline to decision, ms), by phase: before the
    poison, with it, those due while the stuck supervisor held the lease (their lag is the time to
    takeover, by design), and those due while the campaign itself had stopped a supervisor or the
    database (`outages`: the acting cluster killed, a PostgreSQL restart, every cluster down, the
    restart when the faults stop; their lag is the lease's expiry and a cluster's start); with
    the slowest decisions of each phase, to read them. A step is due in a window when its
    remediation was (its deadline plus the `goal`)."""
    phases: dict[str, list[tuple[float, dict[str, Any]]]] = {
        "without_poison": [],
        "with_poison": [],
        "stuck_window": [],
        "campaign_outages": [],
    }
    rows = Event.objects.filter(
        job_id__in=list(healthy), kind=EventKind.STEP_TIMED_OUT, created_at__gte=since
    ).values_list("created_at", "data", "job_id", "step_id", "source")
    for created_at, data, job_id, step_id, source in rows.iterator(chunk_size=2000):
        if not data or data.get("overdue_ms") is None:
            continue
        lag = float(data["overdue_ms"])
        deadline = created_at - dt.timedelta(milliseconds=lag)
        if stuck is not None and stuck[0] - goal <= deadline <= stuck[1]:
            phase = "stuck_window"
        elif any(start - goal <= deadline <= end for start, end in outages):
            phase = "campaign_outages"
        elif poison_from is not None and deadline >= poison_from:
            phase = "with_poison"
        else:
            phase = "without_poison"
        what = {
            "lag_ms": lag,
            "deadline": deadline.isoformat(),
            "decided_at": created_at.isoformat(),
            "job": str(job_id),
            "step": step_id,
            "by": source,
        }
        phases[phase].append((lag, what))
    report: dict[str, Any] = {
        "goal_ms": goal.total_seconds() * 1000,
        "poison_from": poison_from.isoformat() if poison_from else None,
        # The windows as classified, to read a slow decision against them.
        "stuck": [t.isoformat() for t in stuck] if stuck else None,
        "outages": [[start.isoformat(), end.isoformat()] for start, end in outages],
    }
    for phase, found in phases.items():
        report[phase] = _lag([lag for lag, _ in found])
        report[phase]["slowest"] = [what for _, what in sorted(found, key=lambda f: -f[0])[:5]]
    return report


def check_poison(
    log: PoisonLog,
    *,
    since: dt.datetime,
    healthy: Sequence[Any],
    window: StuckWindow | None,
    sandbox_poison: dict[str, int],
) -> dict[str, Any]:
    """The poison figures. Every poison job must have ended (settled or needing attention: never
    still running), and no submission may have been left without an answer."""
    ids = list(log.jobs)
    jobs = {str(pk): status for pk, status in Job.objects.filter(pk__in=ids).values_list("pk", "status")}
    by_kind: dict[str, Counter[str]] = {}
    not_settled: list[str] = []
    for job_id, kind in log.jobs.items():
        status = jobs.get(job_id, "missing")
        by_kind.setdefault(kind, Counter())[str(status)] += 1
        if status not in JOB_SETTLED and status != JobStatus.NEEDS_ATTENTION:
            not_settled.append(job_id)
    callbacks = Counter(
        str(s) for s in Job.objects.filter(pk__in=log.callback_jobs).values_list("status", flat=True)
    )
    not_settled += [
        str(pk)
        for pk in Job.objects.filter(pk__in=log.callback_jobs)
        .exclude(status__in=[*JOB_SETTLED, JobStatus.NEEDS_ATTENTION])
        .values_list("pk", flat=True)
    ]
    quarantines = dict(
        Quarantine.objects.filter(created_at__gte=since)
        .values_list("loop")
        .annotate(n=Count("id"))
        .order_by("loop")
    )
    healthy_set = {str(j) for j in healthy}
    healthy_quarantined = sum(
        1
        for job_id in Quarantine.objects.filter(created_at__gte=since, job_id__isnull=False).values_list(
            "job_id", flat=True
        )
        if str(job_id) in healthy_set
    )
    figures = {
        "poison_jobs": len(ids),
        "poison_jobs_by_kind": {kind: dict(sorted(c.items())) for kind, c in sorted(by_kind.items())},
        "poison_submissions_refused": dict(sorted(log.refused.items())),
        "poison_submissions_failed": sum(log.failed.values()),
        "poison_answers_at_the_remote": {k: n for k, n in sandbox_poison.items() if n},
        "poison_jobs_not_settled": len(not_settled),
        "callback_jobs": len(log.callback_jobs),
        "callback_jobs_by_status": dict(sorted(callbacks.items())),
        "callback_submissions_refused": log.callback_refused,
        "queue_poison_published": dict(sorted(log.queue_published.items())),
        "queue_poison_failed": log.queue_failed,
        "quarantines_by_loop": quarantines,
        "healthy_jobs_quarantined": healthy_quarantined,
        "takeover": takeover(window),
        "stuck_window": {
            "started_at": window.started_at.isoformat() if window else None,
            "peers_started_at": (
                window.peers_started_at.isoformat() if window and window.peers_started_at else None
            ),
            "ended_at": window.ended_at.isoformat() if window and window.ended_at else None,
        },
    }
    return {
        "figures": figures,
        "violations": {name: figures[name] for name in MUST_BE_ZERO if figures[name]},
        "examples": {"not_settled": not_settled[:5]},
        "driver_errors": log.errors[:10],
        "poison_job_ids": ids,
    }


def _counts(counts: dict[str, Any]) -> str:
    return ", ".join(f"{kind} {n}" for kind, n in counts.items()) or "-"


def _lag_cell(lag: dict[str, Any]) -> str:
    return f"{lag['p50']} / {lag['p99']} (n={lag['count']})"


def table_rows(poison: dict[str, Any]) -> list[tuple[str, Any]]:
    f = poison["figures"]
    t = f["takeover"]
    took = (
        f"{t.get('after_debt_began_s')} s after its debt began, "
        f"{t.get('after_peers_started_s')} s after its peers started, {t.get('after_a_peer_was_up_s')} s "
        f"after one was up (held {t.get('held_s')} s)"
        if t.get("taken_over")
        else f"not taken over {t.get('note', '')}"
    )
    return [
        (
            "poison jobs by kind and status",
            "; ".join(f"{k}: {_counts(v)}" for k, v in f["poison_jobs_by_kind"].items()),
        ),
        ("poison submissions refused (4xx) by kind", _counts(f["poison_submissions_refused"])),
        ("poison submissions without an answer (must be 0)", f["poison_submissions_failed"]),
        ("poisoned answers at the remote", _counts(f["poison_answers_at_the_remote"])),
        ("poison jobs still running (must be 0)", f["poison_jobs_not_settled"]),
        (
            "black-holed callback jobs by status",
            f"{f['callback_jobs']} ({_counts(f['callback_jobs_by_status'])})",
        ),
        ("queue poison published", _counts(f["queue_poison_published"])),
        ("quarantines by loop", _counts(f["quarantines_by_loop"])),
        ("healthy jobs quarantined", f["healthy_jobs_quarantined"]),
        ("stuck supervisor taken over", took),
    ]


def lag_rows(lag: dict[str, Any]) -> list[tuple[str, Any]]:
    """The healthy jobs' remediation lag by phase (`remediation_lag`)."""
    return [
        ("remediation lag of healthy jobs p50 / p99 ms, goal", lag["goal_ms"]),
        ("  without poison", _lag_cell(lag["without_poison"])),
        ("  with poison", _lag_cell(lag["with_poison"])),
        ("  due while the stuck supervisor held the lease", _lag_cell(lag["stuck_window"])),
        ("  due while the campaign stopped a supervisor or the database", _lag_cell(lag["campaign_outages"])),
    ]


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if condition():
            return True
        time.sleep(0.2)
    return False
