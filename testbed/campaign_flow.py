"""The fault campaign's flow control by key (docs/flow-control.md): a call step's concurrency and
rate, a debounce and a throttle of job starts, and cancellation sent to the remote; their jobs,
the driver that submits and cancels them, and the checks of docs/reliability.md ("Flow control").

Four workflows, each a few jobs per round (a round every 300 jobs, at least one, during the
faults):

* `campaign_flow_step_keyed`: one `charge` whose step holds its calls to STEP_KEY_LIMIT in flight
  per `input.account` (and to a generous rate per account); the sandbox holds each call
  `hold_ms`, so a burst of four jobs on an account finds the limit. The remote's own count of
  calls in flight on the charge's path per account (`max_concurrent_by_route_account`) must
  never pass the limit.
* `campaign_flow_debounced`: one `reserve` of a workflow debounced on `input.document`; bursts of
  three submissions 0.1 s apart on a few documents. Of each chain of replacements only the
  newest job runs, with the newest input; the others end cancelled naming their successor.
* `campaign_flow_throttled`: one `reserve` of a workflow throttled to THROTTLE_LIMIT starts per
  THROTTLE_PER_SECONDS on `input.account`; a burst of five on one account per round. No window
  of that length may hold more starts than the limit.
* `campaign_flow_cancellable`: one `charge` with a `cancel_path`, held `hold_ms` at the remote;
  the driver cancels most of them over the REST API (as an operator) while their call is in
  flight. Each such job has one cancel, sent once, finished, and the job settles.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from django.db import InterfaceError, OperationalError, close_old_connections, connection

from scheduler.definitions import workflow_create, workflow_latest
from scheduler.models import Attempt, Event, Job, JobStatus, RemoteCancel, Step, StepStatus
from scheduler.unit import db_now
from testbed.definitions import ensure_policy
from testbed.resend import post_until_answered

WORKFLOW_STEP_KEYED = "campaign_flow_step_keyed"
WORKFLOW_DEBOUNCED = "campaign_flow_debounced"
WORKFLOW_THROTTLED = "campaign_flow_throttled"
WORKFLOW_CANCELLABLE = "campaign_flow_cancellable"
ALL_WORKFLOWS = (WORKFLOW_STEP_KEYED, WORKFLOW_DEBOUNCED, WORKFLOW_THROTTLED, WORKFLOW_CANCELLABLE)
#: Calls of the step-keyed charge in flight at once per account.
STEP_KEY_LIMIT = 2
#: The path the step-keyed and the cancellable charges call, and where the cancels go.
CHARGE_PATH = "/payments/charge"
CANCEL_PATH = "/cancel/payments/charge"
DEBOUNCE_SECONDS = 1.0
THROTTLE_LIMIT = 2
THROTTLE_PER_SECONDS = 1.0
#: How long the sandbox holds a step-keyed call, and a cancellable one (ms).
STEP_KEYED_HOLD_MS = 800
CANCELLABLE_HOLD_MS = 2000
#: Per round: accounts of the step-keyed charge and jobs on each; documents debounced and
#: submissions in each burst (and the pause between two); throttled submissions; cancellable
#: jobs and how many of them are cancelled.
STEP_ACCOUNTS, STEP_JOBS_PER_ACCOUNT = 2, 4
DEBOUNCE_DOCUMENTS, DEBOUNCE_BURST, DEBOUNCE_PAUSE = 2, 3, 0.1
THROTTLE_BURST = 5
CANCELLABLE_JOBS, CANCELLED_JOBS = 3, 2
#: One round of flow jobs per this many jobs of the campaign (at least one).
JOBS_PER_ROUND = 300
#: A call whose answer came within this of the job's stop is neither judged in flight nor not.
IN_FLIGHT_MARGIN = dt.timedelta(seconds=0.5)
#: How long the driver watches a cancellable job for its call in flight before giving up.
WATCH_SECONDS = 30.0
#: The statuses a job the campaign cancelled may end in.
CANCELLED_ENDS = frozenset({JobStatus.CANCELLED, JobStatus.COMPENSATED})

MUST_BE_ZERO = (
    "step_keys_over_their_limit",
    "debounce_chains_not_running_one_job",
    "debounce_survivors_not_newest",
    "debounce_replacements_not_naming_their_successor",
    "debounce_replaced_jobs_that_ran",
    "debounced_jobs_left_waiting",
    "throttle_windows_over_limit",
    "throttle_slots_not_the_start",
    "throttled_jobs_left_waiting",
    "cancelled_in_flight_without_one_remote_cancel",
    "operations_cancelled_more_than_once",
    "cancels_at_remote_without_intent",
    "remote_cancels_unfinished",
    "cancelled_jobs_not_settled",
)


def rounds_for(jobs: int) -> int:
    return max(1, round(jobs / JOBS_PER_ROUND))


def ensure_flow_definitions(*, timeout_seconds: float) -> None:
    """The four workflows, on the campaign's pools (campaign.ensure_definitions made them)."""
    common: dict[str, Any] = {
        "max_attempts": 8,
        "backoff_initial_seconds": 0.2,
        "backoff_multiplier": 2.0,
        "backoff_max_seconds": 2.0,
        "backoff_jitter": 0.5,
        "retry_on": ["transient_failure", "no_answer"],
        "on_exhausted": "compensate",
        "reconcile_before_retry": True,
    }
    # Room for a held call, and for the campaign's latency fault on top of it.
    ensure_policy("campaign-patient", **common, timeout_seconds=max(10.0, timeout_seconds * 3))
    charge = {
        "name": "charge",
        "pool": "campaign-payments",
        "path": CHARGE_PATH,
        "status_path": "/payments/{operation_id}",
        "compensation_path": "/payments/refund",
        "policy": "campaign-careful",
    }
    reserve = {
        "name": "reserve",
        "pool": "campaign-inventory",
        "path": "/inventory/reserve",
        "status_path": "/inventory/reservations/{operation_id}",
        "compensation_path": "/inventory/release",
        "policy": "campaign",
    }
    made: dict[str, dict[str, Any]] = {
        WORKFLOW_STEP_KEYED: {
            "description": f"A charge, at most {STEP_KEY_LIMIT} calls in flight per account.",
            "steps": [
                {
                    **charge,
                    "concurrency": {"key": "input.account", "limit": STEP_KEY_LIMIT},
                    "rate": {"key": "input.account", "per_second": 50, "burst": 10},
                }
            ],
        },
        WORKFLOW_DEBOUNCED: {
            "description": "A reservation, debounced by document: the newest input wins.",
            "steps": [reserve],
            "debounce": {"key": "input.document", "seconds": DEBOUNCE_SECONDS},
        },
        WORKFLOW_THROTTLED: {
            "description": f"A reservation, at most {THROTTLE_LIMIT} starts per {THROTTLE_PER_SECONDS:g}s.",
            "steps": [reserve],
            "throttle": {
                "key": "input.account",
                "per_seconds": THROTTLE_PER_SECONDS,
                "limit": THROTTLE_LIMIT,
            },
        },
        WORKFLOW_CANCELLABLE: {
            "description": "A slow charge its remote can be told to cancel.",
            "steps": [{**charge, "cancel_path": CANCEL_PATH, "policy": "campaign-patient"}],
        },
    }
    for name, spec in made.items():
        if workflow_latest(name) is None:
            workflow_create(name=name, **spec)


# --- the driver -------------------------------------------------------------------------------


@dataclass
class FlowLog:
    """What the driver did: the jobs it submitted by workflow, the bursts, the cancels."""

    jobs: dict[str, list[str]] = field(default_factory=lambda: {name: [] for name in ALL_WORKFLOWS})
    submit_errors: int = 0
    rounds: int = 0
    #: Cancel requests sent, by the API's answer ("200", "409", "error").
    cancel_answers: Counter[str] = field(default_factory=Counter)
    #: Cancellable jobs the driver meant to cancel but whose call it never saw in flight.
    cancels_not_sent: int = 0
    notes: list[str] = field(default_factory=list)

    def all_jobs(self) -> list[str]:
        return [job for ids in self.jobs.values() for job in ids]


@dataclass
class _Watched:
    job_id: str
    since: float
    done: bool = False


class FlowDriver:
    """Submits the flow jobs over the REST API in rounds, from a thread of its own, and cancels
    the cancellable ones (as an operator) once their call is in flight (read from the database
    every 0.1 s). Requests that fail are sent again (a submission under the same key)."""

    def __init__(
        self,
        *,
        submit: Callable[[str, dict[str, Any], str], str],
        url: str,
        operator_token: str,
        rounds_at: list[float],
        run_id: str,
        seed: int,
    ) -> None:
        self.submit = submit
        headers = {"Authorization": f"Token {operator_token}", "Content-Type": "application/json"}
        self.operator = httpx.Client(base_url=url, headers=headers, timeout=30, trust_env=False)
        self.rounds_at = sorted(rounds_at)
        self.run_id = run_id
        self.rng = random.Random(seed)
        self.log = FlowLog()
        self._sent = 0
        self._watched: list[_Watched] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="campaign-flow", daemon=True)

    def start(self) -> FlowDriver:
        self._thread.start()
        return self

    def finish(self, timeout: float) -> FlowLog:
        """Play the rounds still due, wait (up to `timeout` s) for the cancels still to send,
        then stop."""
        deadline = time.monotonic() + timeout
        while (
            time.monotonic() < deadline
            and self._thread.is_alive()
            and (self.rounds_at or any(not w.done for w in self._watched))
        ):
            time.sleep(0.2)
        self._stop.set()
        self._thread.join(60)
        self.operator.close()
        return self.log

    def close(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self.operator.close()

    # --- the loop -----------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                close_old_connections()
                if self.rounds_at and time.monotonic() >= self.rounds_at[0]:
                    self.rounds_at.pop(0)
                    self._round()
                try:
                    self._watch()
                except (OperationalError, InterfaceError):
                    connection.close()
                    time.sleep(0.5)
                time.sleep(0.1)
        except Exception as exc:  # noqa: BLE001 - reported: the checks then show what is missing
            self.log.notes.append(f"flow driver stopped: {exc!r}"[:300])
        finally:
            connection.close()

    def _submit(self, workflow: str, payload: dict[str, Any]) -> str | None:
        self._sent += 1
        try:
            job_id = self.submit(workflow, payload, f"{self.run_id}-flow-{self._sent}")
        except RuntimeError as exc:
            self.log.submit_errors += 1
            self.log.notes.append(str(exc)[:300])
            return None
        self.log.jobs[workflow].append(job_id)
        return job_id

    def _round(self) -> None:
        number = self.log.rounds
        self.log.rounds += 1
        tag = f"{self.run_id}-{number}"
        for account in range(STEP_ACCOUNTS):
            for _ in range(STEP_JOBS_PER_ACCOUNT):
                self._submit(
                    WORKFLOW_STEP_KEYED,
                    {
                        "account": f"step-{self.run_id}-{account}",
                        "amount": self.rng.randint(1, 900),
                        "sku": f"F{tag}",
                        "hold_ms": STEP_KEYED_HOLD_MS,
                    },
                )
        for document in range(DEBOUNCE_DOCUMENTS):
            for n in range(DEBOUNCE_BURST):
                self._submit(
                    WORKFLOW_DEBOUNCED,
                    {"document": f"doc-{self.run_id}-{document}", "burst": tag, "n": n, "sku": f"D{tag}"},
                )
                time.sleep(DEBOUNCE_PAUSE)
        for _ in range(THROTTLE_BURST):
            self._submit(WORKFLOW_THROTTLED, {"account": f"thr-{self.run_id}-{number % 2}", "sku": f"T{tag}"})
        for n in range(CANCELLABLE_JOBS):
            job_id = self._submit(
                WORKFLOW_CANCELLABLE,
                {"amount": self.rng.randint(1, 900), "sku": f"C{tag}", "hold_ms": CANCELLABLE_HOLD_MS},
            )
            if job_id is not None and n < CANCELLED_JOBS:
                self._watched.append(_Watched(job_id=job_id, since=time.monotonic()))

    def _watch(self) -> None:
        """Cancel each watched job whose charge a worker has claimed and not yet answered."""
        waiting = [w for w in self._watched if not w.done]
        if not waiting:
            return
        live = set(
            Attempt.objects.filter(
                step__job_id__in=[w.job_id for w in waiting],
                number__gt=0,
                started_at__isnull=False,
                finished_at__isnull=True,
            ).values_list("step__job_id", flat=True)
        )
        for watched in waiting:
            if any(str(job) == watched.job_id for job in live):
                self.log.cancel_answers[self._cancel(watched.job_id)] += 1
                watched.done = True
            elif time.monotonic() - watched.since > WATCH_SECONDS:
                self.log.cancels_not_sent += 1
                watched.done = True

    def _cancel(self, job_id: str) -> str:
        """POST the job's cancel, again after a 5xx or a lost connection; the last answer."""
        sent = post_until_answered(
            self.operator, f"/api/v1/jobs/{job_id}/cancel/", {"reason": "campaign: cancelled during its call"}
        )
        if sent.response is not None:
            return str(sent.response.status_code)
        return str(sent.status) if sent.status else "error"


# --- the checks -------------------------------------------------------------------------------


def flow_jobs(log: FlowLog, since: dt.datetime) -> dict[str, list[Job]]:
    """The jobs of each flow workflow created since `since`: the driver's, and any whose
    submission's answer it never got."""
    rows = Job.objects.filter(workflow__name__in=ALL_WORKFLOWS, created_at__gte=since).select_related(
        "workflow"
    )
    found = {str(j.pk): j for j in rows}
    missed = [j for j in log.all_jobs() if j not in found]
    for job in Job.objects.filter(pk__in=missed).select_related("workflow"):
        found[str(job.pk)] = job
    by_workflow: dict[str, list[Job]] = {name: [] for name in ALL_WORKFLOWS}
    for job in sorted(found.values(), key=lambda j: (j.created_at, str(j.pk))):
        by_workflow[job.workflow.name].append(job)
    return by_workflow


def check_flow(log: FlowLog, stats: dict[str, Any], *, since: dt.datetime) -> dict[str, Any]:
    """The figures of docs/reliability.md ("Flow control"), from the database and the sandbox's
    own counts."""
    by_workflow = flow_jobs(log, since)
    every = [j for jobs in by_workflow.values() for j in jobs]
    events: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in (
        Event.objects.filter(job_id__in=[j.pk for j in every], step__isnull=True)
        .order_by("id")
        .values("id", "job_id", "kind", "from_status", "to_status", "actor_id", "data", "created_at")
    ):
        events[str(e["job_id"])].append(dict(e))
    called = {
        str(job)
        for job in Attempt.objects.filter(step__job_id__in=[j.pk for j in every], number__gt=0).values_list(
            "step__job_id", flat=True
        )
    }

    def started(job: Job) -> dict[str, Any] | None:
        """The event that started the job (the first that made it running)."""
        return next((e for e in events[str(job.pk)] if e["to_status"] == JobStatus.RUNNING), None)

    def ran(job: Job) -> bool:
        return started(job) is not None or str(job.pk) in called

    figures: dict[str, Any] = {"flow_rounds": log.rounds, "flow_submit_errors": log.submit_errors}
    examples: dict[str, list[str]] = defaultdict(list)
    figures |= _step_keys(by_workflow[WORKFLOW_STEP_KEYED], stats, examples)
    figures |= _debounce(by_workflow[WORKFLOW_DEBOUNCED], events, ran, examples)
    figures |= _throttle(by_workflow[WORKFLOW_THROTTLED], started, examples)
    figures |= _cancels(by_workflow[WORKFLOW_CANCELLABLE], events, stats, log, examples)
    violations = {name: figures[name] for name in MUST_BE_ZERO if figures[name]}
    return {
        "figures": figures,
        "violations": violations,
        "examples": {k: v[:5] for k, v in examples.items()},
        "job_ids": [str(j.pk) for j in every],
        "notes": log.notes[:10],
    }


def _step_keys(jobs: list[Job], stats: dict[str, Any], examples: dict[str, list[str]]) -> dict[str, Any]:
    accounts = {str(j.input.get("account")) for j in jobs}
    seen = stats.get("max_concurrent_by_route_account", {}).get(CHARGE_PATH, {})
    most = {account: seen.get(account, 0) for account in sorted(accounts)}
    over = [account for account, n in most.items() if n > STEP_KEY_LIMIT]
    examples["step_keys_over_their_limit"] += [f"{a}: {most[a]} calls in flight" for a in over]
    return {
        "step_keyed_jobs": len(jobs),
        "step_keyed_jobs_by_status": dict(Counter(j.status for j in jobs)),
        "step_key_max_in_flight": most,
        "step_keys_over_their_limit": len(over),
    }


def _debounce(
    jobs: list[Job],
    events: dict[str, list[dict[str, Any]]],
    ran: Callable[[Job], bool],
    examples: dict[str, list[str]],
) -> dict[str, Any]:
    """Per document, the jobs in submission order split into chains where one came at least the
    quiet period after the one before (a newer job replaces one still in its quiet period, which
    began at its submission): of each chain exactly the newest job runs, with the newest input,
    and each other ends cancelled naming the next as `replaced_by`."""
    quiet = dt.timedelta(seconds=DEBOUNCE_SECONDS)
    by_key: dict[str, list[Job]] = defaultdict(list)
    for job in jobs:
        by_key[job.debounce_key].append(job)
    chains: list[list[Job]] = []
    for keyed in by_key.values():
        for job in keyed:
            if chains and chains[-1][0].debounce_key == job.debounce_key:
                last = chains[-1][-1]
                if job.created_at - last.created_at < quiet:
                    chains[-1].append(job)
                    continue
            chains.append([job])
    not_one = not_newest = not_naming = replaced_ran = 0
    for chain in chains:
        running = [j for j in chain if ran(j)]
        if len(running) != 1:
            not_one += 1
            examples["debounce_chains_not_running_one_job"].append(
                f"{chain[0].debounce_key}: {len(running)} of {len(chain)} ran"
            )
        newest = chain[-1]
        if running and (running[-1].pk != newest.pk or running[-1].input != newest.input):
            not_newest += 1
            examples["debounce_survivors_not_newest"].append(str(running[-1].pk))
        for older, successor in itertools.pairwise(chain):
            cancelled = [e for e in events[str(older.pk)] if e["to_status"] == JobStatus.CANCELLED]
            named = cancelled[0]["data"].get("replaced_by") if cancelled else None
            if older.status != JobStatus.CANCELLED or named != str(successor.pk):
                not_naming += 1
                examples["debounce_replacements_not_naming_their_successor"].append(
                    f"{older.pk} ({older.status}) replaced_by {named}, next {successor.pk}"
                )
    known = {str(j.pk) for j in jobs}
    for job in jobs:
        cancelled = [e for e in events[str(job.pk)] if e["to_status"] == JobStatus.CANCELLED]
        named = cancelled[0]["data"].get("replaced_by") if cancelled else None
        if named is not None and (ran(job) or named not in known):
            replaced_ran += 1
            examples["debounce_replaced_jobs_that_ran"].append(f"{job.pk} replaced by {named}")
    left = [j for j in jobs if j.status == JobStatus.WAITING]
    examples["debounced_jobs_left_waiting"] += [str(j.pk) for j in left]
    return {
        "debounced_jobs": len(jobs),
        "debounced_jobs_by_status": dict(Counter(j.status for j in jobs)),
        "debounce_bursts": len({(j.debounce_key, j.input.get("burst")) for j in jobs}),
        "debounce_chains": len(chains),
        "debounce_chains_not_running_one_job": not_one,
        "debounce_survivors_not_newest": not_newest,
        "debounce_replacements_not_naming_their_successor": not_naming,
        "debounce_replaced_jobs_that_ran": replaced_ran,
        "debounced_jobs_left_waiting": len(left),
    }


def _throttle(
    jobs: list[Job], started: Callable[[Job], dict[str, Any] | None], examples: dict[str, list[str]]
) -> dict[str, Any]:
    """Per key, no THROTTLE_PER_SECONDS hold more than THROTTLE_LIMIT starts (the times of the
    events that started the jobs), and each job's counted start is its start."""
    window = dt.timedelta(seconds=THROTTLE_PER_SECONDS)
    starts: dict[str, list[dt.datetime]] = defaultdict(list)
    slots_off = 0
    for job in jobs:
        event = started(job)
        if event is None:
            continue
        starts[job.throttle_key].append(event["created_at"])
        if job.throttle_slot != event["created_at"]:
            slots_off += 1
            examples["throttle_slots_not_the_start"].append(
                f"{job.pk}: slot {job.throttle_slot}, started {event['created_at']}"
            )
    over = 0
    tightest: float | None = None
    for key, times in starts.items():
        times.sort()
        for first, after in zip(times, times[THROTTLE_LIMIT:], strict=False):
            span = (after - first).total_seconds()
            tightest = span if tightest is None else min(tightest, span)
            if after - first < window:
                over += 1
                examples["throttle_windows_over_limit"].append(
                    f"{key}: {THROTTLE_LIMIT + 1} starts within {span:.3f}s from {first}"
                )
    left = [j for j in jobs if j.status == JobStatus.WAITING]
    examples["throttled_jobs_left_waiting"] += [str(j.pk) for j in left]
    return {
        "throttled_jobs": len(jobs),
        "throttled_jobs_by_status": dict(Counter(j.status for j in jobs)),
        "throttle_starts": sum(len(t) for t in starts.values()),
        "throttle_tightest_window_s": None if tightest is None else round(tightest, 3),
        "throttle_windows_over_limit": over,
        "throttle_slots_not_the_start": slots_off,
        "throttled_jobs_left_waiting": len(left),
    }


def _cancels(
    jobs: list[Job],
    events: dict[str, list[dict[str, Any]]],
    stats: dict[str, Any],
    log: FlowLog,
    examples: dict[str, list[str]],
) -> dict[str, Any]:
    """A job an operator stopped while its charge's call was in flight (claimed before the stop,
    answered after it, or not at all) has one RemoteCancel; the remote saw each operation
    cancelled once (twice only when a try was taken again after a lost task: the remote
    de-duplicates such a one), and only operations the service meant to cancel; every cancel
    finished, and every job the campaign cancelled settled (cancelled or compensated; one whose
    step is held, the hostile mode's success that cannot be stored, is counted apart)."""
    ids = [j.pk for j in jobs]
    attempts: dict[str, list[Attempt]] = defaultdict(list)
    for attempt in Attempt.objects.filter(step__job_id__in=ids, number__gt=0).select_related("step"):
        attempts[str(attempt.step.job_id)].append(attempt)
    intents = {
        str(c.step.job_id): c
        for c in RemoteCancel.objects.filter(step__job_id__in=ids).select_related("step")
    }
    at_remote = Counter(op for op, path, _ in stats.get("cancels", []) if path == CANCEL_PATH)
    by_operation = {c.step.operation_id: c for c in intents.values()}
    # A success whose answer cannot be stored (the hostile mode's) is held for an operator.
    held = {
        str(j)
        for j in Step.objects.filter(job_id__in=ids, status=StepStatus.HELD).values_list("job_id", flat=True)
    }
    stopped = in_flight = unclear = without_one = not_settled = held_for_operator = 0
    for job in jobs:
        stop = next(
            (
                e
                for e in events[str(job.pk)]
                if e["actor_id"] is not None
                and e["to_status"] in (JobStatus.COMPENSATING, JobStatus.CANCELLED)
            ),
            None,
        )
        if stop is None:
            continue
        stopped += 1
        if job.status == JobStatus.NEEDS_ATTENTION and str(job.pk) in held:
            held_for_operator += 1
        elif job.status not in CANCELLED_ENDS:
            not_settled += 1
            examples["cancelled_jobs_not_settled"].append(f"{job.pk}: {job.status}")
        at = stop["created_at"]
        claimed = [a for a in attempts[str(job.pk)] if a.started_at is not None and a.started_at < at]
        if any(a.finished_at is None or a.finished_at > at + IN_FLIGHT_MARGIN for a in claimed):
            in_flight += 1
            if str(job.pk) not in intents:
                without_one += 1
                examples["cancelled_in_flight_without_one_remote_cancel"].append(str(job.pk))
        elif any(a.finished_at is not None and a.finished_at >= at for a in claimed):
            unclear += 1
    twice = [
        op for op, n in at_remote.items() if n > 1 and (op not in by_operation or by_operation[op].tries < n)
    ]
    again = [op for op, n in at_remote.items() if n > 1 and op not in twice]
    examples["operations_cancelled_more_than_once"] += [f"{op}: {at_remote[op]}" for op in twice]
    # Only the cancellable jobs' steps name the cancel path; the cancels of other calls' paths
    # are no concern here.
    stray = [op for op in at_remote if op not in by_operation]
    examples["cancels_at_remote_without_intent"] += stray
    unfinished = [c for c in intents.values() if c.finished_at is None]
    examples["remote_cancels_unfinished"] += [str(c.step.operation_id) for c in unfinished]
    return {
        "cancellable_jobs": len(jobs),
        "cancellable_jobs_by_status": dict(Counter(j.status for j in jobs)),
        "cancel_requests_by_answer": dict(log.cancel_answers),
        "cancels_not_sent_never_in_flight": log.cancels_not_sent,
        "jobs_cancelled_by_the_campaign": stopped,
        "cancelled_in_flight": in_flight,
        "cancelled_answered_about_the_stop": unclear,
        "remote_cancels": len(intents),
        "cancels_at_remote": sum(at_remote.values()),
        "cancelled_in_flight_without_one_remote_cancel": without_one,
        "operations_cancelled_more_than_once": len(twice),
        "operations_cancelled_again_after_a_lost_try": len(again),
        "cancels_at_remote_without_intent": len(stray),
        "remote_cancels_unfinished": len(unfinished),
        "cancelled_jobs_not_settled": not_settled,
        "cancelled_jobs_held_for_an_operator": held_for_operator,
    }


def wait_for_cancels(job_ids: list[str], *, slack: float, most: float) -> None:
    """Wait for the cancels of the flow jobs to finish, as long as they may still finish: each
    unfinished cancel is answered or sent again by the scan once its `due_at` passes (a try's
    task lost with a killed worker waits out its task's whole room, the policy's timeout and 30 s,
    before the scan sends it again), so the wait lasts until `slack` s past the latest `due_at`
    of those unfinished, read again each pass, and never more than `most` s."""
    started = time.monotonic()
    while time.monotonic() - started < most:
        try:
            due = list(
                RemoteCancel.objects.filter(step__job_id__in=job_ids, finished_at__isnull=True).values_list(
                    "due_at", flat=True
                )
            )
            if not due:
                return
            now = db_now()
            latest = max((d for d in due if d is not None), default=now)
            if now > latest + dt.timedelta(seconds=slack):
                return
        except (OperationalError, InterfaceError):
            connection.close()
        time.sleep(0.5)


def table_rows(flow: dict[str, Any]) -> list[tuple[str, Any]]:
    f = flow["figures"]

    def of(*names: str) -> str:
        return " / ".join(str(f[n]) for n in names)

    return [
        ("flow rounds / submissions failed", of("flow_rounds", "flow_submit_errors")),
        (
            "step-keyed jobs / most calls in flight per account",
            f"{f['step_keyed_jobs']} / {f['step_key_max_in_flight']}",
        ),
        (
            f"step keys over their limit of {STEP_KEY_LIMIT} at the remote (must be 0)",
            f["step_keys_over_their_limit"],
        ),
        ("debounced jobs / bursts / chains", of("debounced_jobs", "debounce_bursts", "debounce_chains")),
        *((f"debounced jobs {status}", n) for status, n in sorted(f["debounced_jobs_by_status"].items())),
        ("debounce chains not running exactly one job (must be 0)", f["debounce_chains_not_running_one_job"]),
        ("debounce survivors not the newest input (must be 0)", f["debounce_survivors_not_newest"]),
        (
            "replaced jobs not naming their successor (must be 0)",
            f["debounce_replacements_not_naming_their_successor"],
        ),
        ("replaced jobs that ran, or naming no job (must be 0)", f["debounce_replaced_jobs_that_ran"]),
        ("debounced jobs left waiting (must be 0)", f["debounced_jobs_left_waiting"]),
        (
            "throttled jobs / starts / tightest window of limit+1 starts s",
            of("throttled_jobs", "throttle_starts", "throttle_tightest_window_s"),
        ),
        (
            f"throttle windows of {THROTTLE_PER_SECONDS:g}s over {THROTTLE_LIMIT} starts (must be 0)",
            f["throttle_windows_over_limit"],
        ),
        ("throttle slots not the start made (must be 0)", f["throttle_slots_not_the_start"]),
        ("throttled jobs left waiting (must be 0)", f["throttled_jobs_left_waiting"]),
        (
            "cancellable jobs / cancelled by the campaign / in flight then / answered about the stop",
            of(
                "cancellable_jobs",
                "jobs_cancelled_by_the_campaign",
                "cancelled_in_flight",
                "cancelled_answered_about_the_stop",
            ),
        ),
        (
            "cancel requests by answer; not sent (call never seen in flight)",
            f"{f['cancel_requests_by_answer']}; {f['cancels_not_sent_never_in_flight']}",
        ),
        ("remote cancels / cancels at the remote", of("remote_cancels", "cancels_at_remote")),
        (
            "cancelled in flight without exactly one remote cancel (must be 0)",
            f["cancelled_in_flight_without_one_remote_cancel"],
        ),
        (
            "operations cancelled more than once at the remote (must be 0)",
            f["operations_cancelled_more_than_once"],
        ),
        ("operations cancelled again after a lost try", f["operations_cancelled_again_after_a_lost_try"]),
        ("cancels at the remote without an intent (must be 0)", f["cancels_at_remote_without_intent"]),
        ("remote cancels unfinished (must be 0)", f["remote_cancels_unfinished"]),
        ("cancelled jobs not cancelled or compensated (must be 0)", f["cancelled_jobs_not_settled"]),
        ("cancelled jobs held for an operator (a held step)", f["cancelled_jobs_held_for_an_operator"]),
    ]
