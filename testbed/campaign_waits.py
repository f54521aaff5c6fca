"""The fault campaign's steps that wait: a workflow with a timer, a signal and an approval, the
client and approvers who signal and decide its jobs over the REST API (with their faults), and
the checks of docs/reliability.md ("Waits and signals").

The workflow (`campaign_order_waits`): `reserve` (a call), then in parallel `cool_off` (a timer
until the job's `input.not_before`) and `confirm` (waits for signal `confirmed`, 10 s, then
fails and the job is compensated); then `sign_off` (an approval by an operator, 10 s, then
continues as approved by the timeout); then `schedule` (a call).

The driver (`WaitDriver`) plays the client system and the operators. Each job gets a plan:
its signal sent when the step waits, sent early (right after the submission, before the step
waits: buffered), sent three times at once under one Idempotency-Key, followed by a second signal
under another key (which stays buffered), or never (the step times out; a late signal, sent
while the job is compensated, is refused); its approval approved, rejected, clicked twice at
once (two approvals, or an approval racing a rejection), or left to time out; and, for some, a
signal once the job has ended.
"""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from scheduler.models import (
    JOB_SETTLED,
    Attempt,
    Event,
    EventKind,
    Job,
    JobStatus,
    OnTimeout,
    Signal,
    Step,
    StepDefinitionKind,
    StepKind,
    StepStatus,
)
from testbed.definitions import ensure_workflow
from testbed.resend import post_until_answered

WORKFLOW_WAITS = "campaign_order_waits"
SIGNAL = "confirmed"
CONFIRM = "confirm"
SIGN_OFF = "sign_off"
TIMER = "cool_off"
#: Seconds the signal and the approval wait before their on_timeout applies.
SIGNAL_TIMEOUT = 10.0
#: How the step held on a success whose answer cannot be stored says why
#: (scheduler.services.outcomes).
UNSTORABLE_REASON = "the answer cannot be stored:"
APPROVAL_TIMEOUT = 10.0
#: What the job's sign-off says when nobody decided in time.
TIMED_OUT_APPROVAL = {"approved": True, "by": "timeout"}

SIGNAL_MODES = ("on_time", "early", "duplicate", "extra", "never")
APPROVAL_MODES = ("approve", "reject", "double", "race", "timeout")
#: Copies of a duplicated signal sent at once under one key.
DUPLICATES = 3

S = StepStatus
E = EventKind


def ensure_wait_definitions() -> None:
    """The workflow with a timer, a signal and an approval between two calls (the campaign's
    pools and policies must exist)."""
    ensure_workflow(
        WORKFLOW_WAITS,
        description="Reserve; wait for a time and a confirmation; an operator signs off; schedule.",
        steps=[
            {
                "name": "reserve",
                "pool": "campaign-inventory",
                "path": "/inventory/reserve",
                "status_path": "/inventory/reservations/{operation_id}",
                "compensation_path": "/inventory/release",
                "policy": "campaign",
            },
            {"name": TIMER, "kind": "timer", "until": "input.not_before", "depends_on": ["reserve"]},
            {
                "name": CONFIRM,
                "kind": "signal",
                "signal": SIGNAL,
                "timeout_seconds": SIGNAL_TIMEOUT,
                "on_timeout": "fail",
                "depends_on": ["reserve"],
            },
            {
                "name": SIGN_OFF,
                "kind": "approval",
                "timeout_seconds": APPROVAL_TIMEOUT,
                "on_timeout": "continue",
                "default_output": TIMED_OUT_APPROVAL,
                "depends_on": [TIMER, CONFIRM],
            },
            {
                "name": "schedule",
                "pool": "campaign-shipping",
                "path": "/shipping/schedule",
                "status_path": "/shipping/shipments/{operation_id}",
                "compensation_path": "/shipping/cancel",
                "depends_on": [SIGN_OFF],
                "policy": "campaign",
            },
        ],
    )


# --- plans ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WaitRates:
    """Shares of the wait jobs given each fault (0 turns one off)."""

    duplicate: float = 0.3
    early: float = 0.15
    late: float = 0.15
    extra: float = 0.15
    settled: float = 0.25
    approval_race: float = 0.3


@dataclass(frozen=True)
class WaitPlan:
    signal: str
    approval: str
    #: Signal the job again once it has ended (a 409 is expected).
    after_end: bool


#: Plans come from a shuffled deck of this many cards per kind, so that a short run meets every
#: fault whose share is at least 1 / DECK.
DECK = 20


def _deck(rng: random.Random, shares: dict[str, float], rest: str) -> list[str]:
    cards: list[str] = []
    for mode, share in shares.items():
        cards += [mode] * round(max(0.0, share) * DECK)
    cards = cards[:DECK]
    cards += [rest] * (DECK - len(cards))
    rng.shuffle(cards)
    return cards


class Planner:
    """Deals each wait job its plan from the rates, evenly spread over the run."""

    def __init__(self, rng: random.Random, rates: WaitRates) -> None:
        self.rng = rng
        self.signals = _deck(
            rng,
            {"duplicate": rates.duplicate, "early": rates.early, "never": rates.late, "extra": rates.extra},
            "on_time",
        )
        self.approvals = _deck(
            rng,
            {
                "double": rates.approval_race / 2,
                "race": rates.approval_race / 2,
                "reject": 0.1,
                "timeout": 0.1,
            },
            "approve",
        )
        self.after = _deck(rng, {"yes": rates.settled}, "no")
        self.dealt = 0

    def deal(self) -> WaitPlan:
        i = self.dealt
        self.dealt += 1
        if i and i % DECK == 0:
            for deck in (self.signals, self.approvals, self.after):
                self.rng.shuffle(deck)
        return WaitPlan(
            signal=self.signals[i % DECK],
            approval=self.approvals[i % DECK],
            after_end=self.after[i % DECK] == "yes",
        )


# --- the driver -----------------------------------------------------------------------------------


@dataclass
class WaitTally:
    """What the client and the operators did and were answered."""

    signals_sent: int = 0
    #: Answered 202 without a step taking it: the step did not wait yet.
    signals_early: int = 0
    #: The step had stopped waiting when its signal was due (timed out, or the job stopped).
    signals_missed: int = 0
    duplicate_groups: int = 0
    #: A key answered 202 more than once, with different signals, or both accepted and refused.
    duplicate_groups_violating: int = 0
    #: The same key sent again once the job ended: 200 with the same signal.
    replays_after_end: int = 0
    replays_after_end_violating: int = 0
    #: A second signal of the name under another key: 202, left for a step that never comes.
    extra_signals_buffered: int = 0
    extra_signals_taken_at_once: int = 0
    #: Signals with a new key to jobs going back or ended (late ones among them): 409 expected.
    signals_after_end: int = 0
    signals_after_end_refused: int = 0
    signals_after_end_accepted: int = 0
    approvals_single: int = 0
    approval_pairs: int = 0
    approval_pairs_approve_reject: int = 0
    approval_pairs_one_applied: int = 0
    approval_pairs_both_applied: int = 0
    #: Neither applied: the step had stopped waiting (its timeout) before the clicks.
    approval_pairs_none_applied: int = 0
    approvals_left_to_time_out: int = 0
    http_errors: int = 0
    unexpected_answers: int = 0


@dataclass
class _Tracked:
    job_id: str
    plan: WaitPlan
    key: str
    signal_id: int | None = None
    signal_done: bool = False
    approval_done: bool = False
    after_done: bool = False
    task: Future[None] | None = None

    @property
    def finished(self) -> bool:
        return self.signal_done and self.approval_done and self.after_done and self._idle

    @property
    def _idle(self) -> bool:
        return self.task is None or self.task.done()


class WaitDriver:
    """Signals and decides the wait jobs over the API, from a thread of its own, as their steps
    come to wait (read from the database every 0.2 s). Requests that fail (a 5xx, a dropped
    connection, a restarting database) are sent again as they were, under the same key."""

    def __init__(self, *, url: str, client_token: str, approver_token: str) -> None:
        def client(token: str) -> httpx.Client:
            headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
            return httpx.Client(base_url=url, headers=headers, timeout=30, trust_env=False)

        self.client = client(client_token)
        self.approver = client(approver_token)
        self.tally = WaitTally()
        self.extra_signal_ids: list[int] = []
        self.notes: list[str] = []
        self._lock = threading.Lock()
        self._jobs: list[_Tracked] = []
        self._pool = ThreadPoolExecutor(max_workers=6, thread_name_prefix="campaign-waits")
        self._stop = threading.Event()
        self._finish_by = 0.0
        self._thread = threading.Thread(target=self._run, name="campaign-waits", daemon=True)

    def start(self) -> WaitDriver:
        self._thread.start()
        return self

    def add(self, job_id: str, plan: WaitPlan) -> None:
        tracked = _Tracked(job_id=job_id, plan=plan, key=f"confirm-{uuid.uuid4().hex[:12]}")
        if plan.signal == "early":
            # At once, before the job's first call has answered: the step does not wait yet.
            tracked.signal_done = True
            tracked.task = self._pool.submit(self._guard, self._signal_early, tracked)
        with self._lock:
            self._jobs.append(tracked)

    def finish(self, timeout: float) -> None:
        """Do what is left for the jobs that ended (up to `timeout` seconds), then stop."""
        self._finish_by = time.monotonic() + timeout
        self._stop.set()
        self._thread.join(timeout + 35)
        self._pool.shutdown(wait=True)

    def close(self) -> None:
        if not self._stop.is_set():
            self._finish_by = time.monotonic()
            self._stop.set()
            self._thread.join(35)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()
        self.approver.close()

    # --- the loop ---------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    active = [t for t in self._jobs if not t.finished]
                if self._stop.is_set() and (not active or time.monotonic() > self._finish_by):
                    return
                if active:
                    try:
                        states = self._read([t.job_id for t in active])
                    except (OperationalError, InterfaceError):
                        connection.close()
                        time.sleep(0.5)
                        continue
                    for tracked in active:
                        if tracked.task is not None and not tracked.task.done():
                            continue
                        action = self._next(tracked, *states.get(tracked.job_id, ("", False, "", "")))
                        if action is not None:
                            tracked.task = self._pool.submit(self._guard, action, tracked)
                time.sleep(0.2)
        finally:
            connection.close()

    def _read(self, job_ids: list[str]) -> dict[str, tuple[str, bool, str, str]]:
        """Per job: its status, whether it goes back (compensation), its signal and approval
        steps' statuses."""
        jobs = {
            pk: (status, bool(reason))
            for pk, status, reason in Job.objects.filter(pk__in=job_ids).values_list(
                "pk", "status", "compensation_reason"
            )
        }
        steps: dict[tuple[str, str], str] = {
            (str(job_id), name): status
            for job_id, name, status in Step.objects.filter(
                job_id__in=job_ids, name__in=[CONFIRM, SIGN_OFF], kind=StepKind.ACTION
            ).values_list("job_id", "name", "status")
        }
        return {
            str(job_id): (
                status,
                back,
                steps.get((str(job_id), CONFIRM), ""),
                steps.get((str(job_id), SIGN_OFF), ""),
            )
            for job_id, (status, back) in jobs.items()
        }

    def _next(
        self, t: _Tracked, job: str, back: bool, confirm: str, sign_off: str
    ) -> Callable[[_Tracked], None] | None:
        """The next thing to do for this job, given what it and its steps are now (marks it as
        done). `back`: the job is being compensated, or was."""
        ended = job in JOB_SETTLED
        if not t.signal_done:
            if t.plan.signal == "never":
                if back or ended:
                    # Late: the step timed out and the job goes back (or it stopped otherwise).
                    t.signal_done = True
                    return self._signal_refused
            elif confirm == S.WAITING:
                t.signal_done = True
                return self._signal_when_waiting
            elif ended or confirm in (S.FAILED, S.SKIPPED, S.SUCCEEDED, S.HELD):
                t.signal_done = True
                self._count("signals_missed")
        if not t.approval_done:
            if sign_off == S.WAITING:
                t.approval_done = True
                if t.plan.approval == "timeout":
                    self._count("approvals_left_to_time_out")
                else:
                    return self._decide
            elif ended or sign_off in (S.FAILED, S.SKIPPED, S.SUCCEEDED, S.HELD):
                t.approval_done = True
        if not t.after_done and ended and t.signal_done and t.approval_done:
            t.after_done = True
            if t.plan.after_end or t.plan.signal == "duplicate":
                return self._after_end
        return None

    def _guard(self, action: Callable[[_Tracked], None], t: _Tracked) -> None:
        try:
            action(t)
        except Exception as exc:  # noqa: BLE001 - the campaign goes on; the note is in the report
            with self._lock:
                self.notes.append(f"job {t.job_id}: {type(exc).__name__}: {exc}"[:200])

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self.tally, name, getattr(self.tally, name) + n)

    # --- requests -------------------------------------------------------------------------------

    def _post(
        self, client: httpx.Client, path: str, body: dict[str, Any], key: str = ""
    ) -> httpx.Response | None:
        """POST until an answer that is not a 5xx; None when none came."""
        sent = post_until_answered(client, path, body, key=key)
        if sent.failures:
            self._count("http_errors", sent.failures)
        return sent.response

    def _signal(self, t: _Tracked, key: str, payload: Any) -> httpx.Response | None:
        self._count("signals_sent")
        return self._post(
            self.client, f"/api/v1/jobs/{t.job_id}/signals/", {"name": SIGNAL, "payload": payload}, key
        )

    def _signal_early(self, t: _Tracked) -> None:
        response = self._signal(t, t.key, {"confirmed": True, "early": True})
        if response is not None and response.status_code in (200, 202):
            t.signal_id = response.json()["id"]
            if response.json()["consumed_by"] is None:
                self._count("signals_early")

    def _signal_when_waiting(self, t: _Tracked) -> None:
        payload = {"confirmed": True}
        if t.plan.signal != "duplicate":
            response = self._signal(t, t.key, payload)
            if response is None or response.status_code not in (200, 202):
                return
            t.signal_id = response.json()["id"]
            if t.plan.signal == "extra" and response.json()["consumed_by"] == CONFIRM:
                self._signal_extra(t)
            return
        barrier = threading.Barrier(DUPLICATES)
        answers: list[httpx.Response | None] = [None] * DUPLICATES

        def send(i: int) -> None:
            barrier.wait(10)
            answers[i] = self._signal(t, t.key, payload)

        threads = [threading.Thread(target=send, args=(i,)) for i in range(DUPLICATES)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        codes = Counter(a.status_code for a in answers if a is not None)
        ids = {a.json()["id"] for a in answers if a is not None and a.status_code in (200, 202)}
        self._count("duplicate_groups")
        if codes[202] > 1 or len(ids) > 1 or (ids and codes[409]) or codes[422]:
            self._count("duplicate_groups_violating")
            with self._lock:
                self.notes.append(
                    f"job {t.job_id}: key {t.key} answered {dict(codes)}, signals {sorted(ids)}"
                )
        if ids:
            t.signal_id = ids.pop()

    def _signal_extra(self, t: _Tracked) -> None:
        response = self._signal(t, f"extra-{uuid.uuid4().hex[:12]}", {"confirmed": True, "again": True})
        if response is None or response.status_code not in (200, 202):
            self._count("unexpected_answers")
            return
        if response.json()["consumed_by"] is None:
            self._count("extra_signals_buffered")
        else:
            self._count("extra_signals_taken_at_once")
        with self._lock:
            self.extra_signal_ids.append(response.json()["id"])

    def _decide(self, t: _Tracked) -> None:
        path = f"/api/v1/jobs/{t.job_id}/steps/{SIGN_OFF}/"
        mode = t.plan.approval
        if mode in ("approve", "reject"):
            self._count("approvals_single")
            self._post(self.approver, path + f"{mode}/", {"comment": f"campaign: {mode}"})
            return
        verbs = ["approve", "approve"] if mode == "double" else ["approve", "reject"]
        barrier = threading.Barrier(2)
        answers: list[httpx.Response | None] = [None, None]

        def click(i: int) -> None:
            barrier.wait(10)
            answers[i] = self._post(self.approver, path + f"{verbs[i]}/", {"comment": f"campaign: {mode}"})

        threads = [threading.Thread(target=click, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        codes = [a.status_code if a is not None else 0 for a in answers]
        self._count("approval_pairs")
        if mode == "race":
            self._count("approval_pairs_approve_reject")
        applied = codes.count(200)
        if applied > 1:
            self._count("approval_pairs_both_applied")
        elif applied == 1 and codes.count(409) == 1:
            self._count("approval_pairs_one_applied")
        elif applied == 0 and codes.count(409) == 2:
            self._count("approval_pairs_none_applied")
        else:
            self._count("unexpected_answers")
            with self._lock:
                self.notes.append(f"job {t.job_id}: approval pair answered {codes}")

    def _after_end(self, t: _Tracked) -> None:
        if t.plan.signal == "duplicate" and t.signal_id is not None:
            self._count("replays_after_end")
            response = self._signal(t, t.key, {"confirmed": True})
            if response is None or response.status_code != 200 or response.json()["id"] != t.signal_id:
                self._count("replays_after_end_violating")
        if t.plan.after_end:
            self._signal_refused(t)

    def _signal_refused(self, t: _Tracked) -> None:
        """A new signal to a job that goes back or has ended: a 409 that writes nothing."""
        self._count("signals_after_end")
        response = self._signal(t, f"late-{uuid.uuid4().hex[:12]}", {"confirmed": True, "late": True})
        if response is None:
            return
        if response.status_code == 409:
            self._count("signals_after_end_refused")
        elif response.status_code in (200, 202):
            self._count("signals_after_end_accepted")
        else:
            self._count("unexpected_answers")


# --- the checks -----------------------------------------------------------------------------------


@dataclass
class Blackout:
    """A window during which every cluster was down."""

    down_at: dt.datetime
    up_at: dt.datetime | None = None


@dataclass
class _StepFacts:
    kinds: Counter[str] = field(default_factory=Counter)
    signals: list[Any] = field(default_factory=list)
    dispatched: bool = False
    timeout_to: list[str] = field(default_factory=list)
    fired_at: list[dt.datetime] = field(default_factory=list)
    waiting_since: dt.datetime | None = None


#: Figures that must be zero, in the order the report lists them.
MUST_BE_ZERO = (
    "signals_consumed_twice",
    "steps_signalled_twice",
    "signal_consumption_mismatches",
    "extra_signals_consumed",
    "timers_fired_twice",
    "wait_steps_with_attempts",
    "wait_steps_dispatched",
    "approvals_decided_twice",
    "approvals_approved_and_rejected",
    "timeouts_not_as_defined",
    "wait_jobs_ended_unexpectedly",
    "waits_overdue",
    "blackout_timers_not_fired_once",
    "duplicate_groups_violating",
    "replays_after_end_violating",
    "signals_after_end_accepted",
    "approval_pairs_both_applied",
)


def check_waits(
    job_ids: list[Any],
    wait_job_ids: list[Any],
    driver: WaitDriver | None,
    blackouts: list[Blackout],
    *,
    grace_seconds: float,
) -> dict[str, Any]:
    """The figures of the steps that wait, from the database and the driver's tally."""
    now = timezone.now()
    steps = list(
        Step.objects.filter(job_id__in=job_ids, kind=StepKind.ACTION)
        .exclude(definition__kind=StepDefinitionKind.CALL)
        .select_related("definition")
    )
    by_id = {s.pk: s for s in steps}
    facts: dict[int, _StepFacts] = {s.pk: _StepFacts() for s in steps}
    decisions = {E.STEP_APPROVED, E.STEP_REJECTED}
    signalled: Counter[Any] = Counter()
    for e in Event.objects.filter(job_id__in=job_ids, step_id__in=list(by_id)).values(
        "step_id", "kind", "to_status", "data", "created_at"
    ):
        f = facts[e["step_id"]]
        f.kinds[e["kind"]] += 1
        if e["kind"] == E.STEP_SIGNALLED:
            f.signals.append(e["data"].get("signal_id"))
            signalled[e["data"].get("signal_id")] += 1
        elif e["kind"] == E.TIMER_FIRED:
            f.fired_at.append(e["created_at"])
        elif e["kind"] == E.WAIT_TIMED_OUT:
            f.timeout_to.append(e["to_status"])
        elif e["kind"] == E.STEP_WAITING and f.waiting_since is None:
            f.waiting_since = e["created_at"]
        if e["to_status"] == S.DISPATCHED:
            f.dispatched = True
    signals = list(
        Signal.objects.filter(job_id__in=job_ids).values(
            "id", "job_id", "name", "consumed_by_id", "consumed_at"
        )
    )
    consumed = [s for s in signals if s["consumed_at"] is not None]
    mismatched = [
        s["id"]
        for s in consumed
        if s["consumed_by_id"] not in facts or s["id"] not in facts[s["consumed_by_id"]].signals
    ]
    mismatched += [sid for sid in signalled if sid not in {s["id"] for s in consumed}]
    extra_ids = set(driver.extra_signal_ids) if driver is not None else set()
    extra_consumed = [s["id"] for s in consumed if s["id"] in extra_ids]

    attempts = Attempt.objects.filter(step_id__in=list(by_id)).values_list("step_id", flat=True)
    with_attempts = sorted(set(attempts))
    dispatched = [
        pk
        for pk, f in facts.items()
        if f.dispatched or by_id[pk].status in (S.DISPATCHED, S.ATTEMPT_FAILED, S.UNKNOWN, S.RETRY_WAIT)
    ]
    expected_after_timeout: dict[str, str] = {
        OnTimeout.CONTINUE: S.SUCCEEDED,
        OnTimeout.FAIL: S.FAILED,
        OnTimeout.HOLD: S.HELD,
    }
    not_as_defined = [
        pk
        for pk, f in facts.items()
        for to in f.timeout_to
        # A failing timeout under a policy that holds is recorded beside the hold.
        if to != expected_after_timeout.get(by_id[pk].definition.on_timeout, to) and to != ""
    ]
    overdue = [
        s.pk
        for s in steps
        if s.status == S.WAITING
        and s.deadline is not None
        and s.deadline < now - dt.timedelta(seconds=grace_seconds)
    ]

    # Every wait job ends as its definitions say: succeeded, or compensated (or failed) after a
    # step of it failed (a failed call may have been compensated since); needing attention only
    # where a wait step holds for an operator.
    jobs = {j.pk: j for j in Job.objects.filter(pk__in=wait_job_ids)}
    actions: dict[Any, list[Step]] = {}
    for step in Step.objects.filter(job_id__in=wait_job_ids, kind=StepKind.ACTION).select_related(
        "definition"
    ):
        actions.setdefault(step.job_id, []).append(step)
    failed_steps = set(
        Event.objects.filter(
            job_id__in=wait_job_ids, step__kind=StepKind.ACTION, to_status=S.FAILED
        ).values_list("step_id", flat=True)
    )
    # A compensation that ran out of attempts is held for an operator (the general check admits
    # it): under the campaign's load an undo may get no answer eight times, as a call may.
    undo_held = set(
        Step.objects.filter(job_id__in=wait_job_ids, kind=StepKind.COMPENSATION, status=S.HELD).values_list(
            "job_id", flat=True
        )
    )
    # A success whose answer the database cannot store (the hostile mode's "unstorable" answers)
    # is kept and its step held for an operator, by design: its job needs attention.
    answer_held = {
        job_id
        for job_id, mine in actions.items()
        for s in mine
        if s.status == S.HELD
        and s.last_outcome == "succeeded"
        and s.status_reason.startswith(UNSTORABLE_REASON)
    }
    unexpected: list[str] = []
    for job_id, job in jobs.items():
        mine = actions.get(job_id, [])
        if job.status == JobStatus.SUCCEEDED:
            ok = all(s.status == S.SUCCEEDED for s in mine)
        elif job.status in (JobStatus.COMPENSATED, JobStatus.FAILED):
            ok = any(s.pk in failed_steps for s in mine)
        elif job.status == JobStatus.NEEDS_ATTENTION:
            ok = (
                (bool(job.compensation_reason) and job_id in undo_held)
                or job_id in answer_held
                or any(
                    s.status == S.HELD and s.definition.waits and s.definition.on_timeout == OnTimeout.HOLD
                    for s in mine
                )
            )
        else:
            ok = False
        if not ok:
            unexpected.append(f"{job_id} {job.status}")

    due_down: list[int] = []
    waiting_when_down: list[int] = []
    not_fired_once: list[int] = []
    fired_after = 0
    for s in steps:
        if s.definition.kind != StepDefinitionKind.TIMER or s.deadline is None:
            continue
        window = next(
            (b for b in blackouts if b.up_at is not None and b.down_at <= s.deadline <= b.up_at), None
        )
        if window is None:
            continue
        f = facts[s.pk]
        due_down.append(s.pk)
        if f.waiting_since is not None and f.waiting_since < window.down_at:
            waiting_when_down.append(s.pk)
        if s.status != S.SKIPPED and len(f.fired_at) != 1:
            not_fired_once.append(s.pk)
        if f.fired_at and window.up_at is not None and min(f.fired_at) >= window.up_at:
            fired_after += 1

    tally = driver.tally if driver is not None else WaitTally()
    counts = Counter(s.definition.kind for s in steps)
    figures: dict[str, Any] = {
        "wait_jobs": len(wait_job_ids),
        "wait_jobs_by_status": dict(sorted(Counter(j.status for j in jobs.values()).items())),
        "wait_steps": dict(sorted(counts.items())),
        "signals_stored": len(signals),
        "signals_consumed": len(consumed),
        "step_signalled_events": sum(signalled.values()),
        "signals_consumed_twice": sum(1 for n in signalled.values() if n > 1),
        "steps_signalled_twice": sum(1 for f in facts.values() if f.kinds[E.STEP_SIGNALLED] > 1),
        "signal_consumption_mismatches": len(mismatched) + abs(len(consumed) - sum(signalled.values())),
        "extra_signals_consumed": len(extra_consumed),
        "timers_fired": sum(f.kinds[E.TIMER_FIRED] for f in facts.values()),
        "timers_fired_twice": sum(1 for f in facts.values() if f.kinds[E.TIMER_FIRED] > 1),
        "waits_timed_out": sum(f.kinds[E.WAIT_TIMED_OUT] for f in facts.values()),
        "wait_steps_with_attempts": len(with_attempts),
        "wait_steps_dispatched": len(dispatched),
        "approvals_decided": sum(sum(f.kinds[k] for k in decisions) for f in facts.values()),
        "approvals_decided_twice": sum(1 for f in facts.values() if sum(f.kinds[k] for k in decisions) > 1),
        "approvals_approved_and_rejected": sum(
            1 for f in facts.values() if f.kinds[E.STEP_APPROVED] and f.kinds[E.STEP_REJECTED]
        ),
        "timeouts_not_as_defined": len(not_as_defined),
        "wait_jobs_ended_unexpectedly": len(unexpected),
        "wait_jobs_with_an_undo_held": len(undo_held & set(jobs)),
        "wait_jobs_with_an_unstorable_answer_held": len(answer_held & set(jobs)),
        "waits_overdue": len(overdue),
        "blackout_timers_due": len(due_down),
        "blackout_timers_waiting_when_down": len(waiting_when_down),
        "blackout_timers_fired_after_restart": fired_after,
        "blackout_timers_not_fired_once": len(not_fired_once),
        **vars(tally),
    }
    violations = {name: figures[name] for name in MUST_BE_ZERO if figures[name]}
    return {
        "figures": figures,
        "violations": violations,
        "examples": {
            "signal_mismatches": mismatched[:5],
            "extra_consumed": extra_consumed[:5],
            "with_attempts": with_attempts[:5],
            "dispatched": dispatched[:5],
            "timeouts_not_as_defined": not_as_defined[:5],
            "ended_unexpectedly": unexpected[:5],
            "overdue": overdue[:5],
            "blackout_not_fired_once": not_fired_once[:5],
        },
        "notes": (driver.notes[:20] if driver is not None else []),
        "blackouts": [
            {"down_at": b.down_at.isoformat(), "up_at": b.up_at.isoformat() if b.up_at else None}
            for b in blackouts
        ],
    }


def table_rows(waits: dict[str, Any]) -> list[tuple[str, Any]]:
    f = waits["figures"]

    def of(*names: str) -> str:
        return " / ".join(str(f[n]) for n in names)

    return [
        ("wait jobs", f["wait_jobs"]),
        *((f"wait jobs {status}", n) for status, n in f["wait_jobs_by_status"].items()),
        (
            "wait jobs ended otherwise than their definitions say (must be 0)",
            f["wait_jobs_ended_unexpectedly"],
        ),
        ("wait jobs with an undo held for an operator", f["wait_jobs_with_an_undo_held"]),
        (
            "wait jobs with a success held, its answer unstorable (hostile)",
            f["wait_jobs_with_an_unstorable_answer_held"],
        ),
        (
            "signals sent / stored / consumed / step_signalled events",
            of("signals_sent", "signals_stored", "signals_consumed", "step_signalled_events"),
        ),
        ("signals consumed by more than one step (must be 0)", f["signals_consumed_twice"]),
        ("steps signalled more than once (must be 0)", f["steps_signalled_twice"]),
        (
            "signals consumed without their event, or the reverse (must be 0)",
            f["signal_consumption_mismatches"],
        ),
        ("signals sent early (buffered, then consumed)", f["signals_early"]),
        (
            f"keys sent {DUPLICATES} times at once / answered inconsistently (must be 0)",
            of("duplicate_groups", "duplicate_groups_violating"),
        ),
        (
            "same key after the job ended: replays / not the same signal (must be 0)",
            of("replays_after_end", "replays_after_end_violating"),
        ),
        (
            "second signals under another key: buffered / consumed (must be 0)",
            of("extra_signals_buffered", "extra_signals_consumed"),
        ),
        (
            "signals to jobs compensating or ended: sent / 409 / accepted (must be 0)",
            of("signals_after_end", "signals_after_end_refused", "signals_after_end_accepted"),
        ),
        ("signals due after their step stopped waiting", f["signals_missed"]),
        ("timers fired / fired more than once (must be 0)", of("timers_fired", "timers_fired_twice")),
        (
            "waits timed out / not as on_timeout says (must be 0)",
            of("waits_timed_out", "timeouts_not_as_defined"),
        ),
        ("wait steps with attempts (must be 0)", f["wait_steps_with_attempts"]),
        ("wait steps dispatched (must be 0)", f["wait_steps_dispatched"]),
        (
            "approvals decided / single clicks / left to time out",
            of("approvals_decided", "approvals_single", "approvals_left_to_time_out"),
        ),
        (
            "approval double-clicks / approve+reject among them / one applied / none (not waiting)",
            of(
                "approval_pairs",
                "approval_pairs_approve_reject",
                "approval_pairs_one_applied",
                "approval_pairs_none_applied",
            ),
        ),
        ("approval double-clicks both applied (must be 0)", f["approval_pairs_both_applied"]),
        ("approvals decided more than once (must be 0)", f["approvals_decided_twice"]),
        ("approvals both approved and rejected (must be 0)", f["approvals_approved_and_rejected"]),
        ("waiting steps overdue at the end (must be 0)", f["waits_overdue"]),
        (
            "timers due while every cluster was down / waiting then / fired after the restart",
            of(
                "blackout_timers_due",
                "blackout_timers_waiting_when_down",
                "blackout_timers_fired_after_restart",
            ),
        ),
        (
            "timers due while every cluster was down, not fired once (must be 0)",
            f["blackout_timers_not_fired_once"],
        ),
        ("wait requests failed and sent again / unexpected answers", of("http_errors", "unexpected_answers")),
    ]
