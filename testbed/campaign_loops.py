"""The fault campaign's language II (docs/workflow-language.md): loops, waits that escalate and
children that retry; their workflows, the driver that submits, decides and watches them, and
(testbed.campaign_loops_checks) the checks of docs/reliability.md ("Loops, ladders and children
that retry").

Each round (one per JOBS_PER_ROUND jobs of the campaign, at least one, during the faults):

* loops: `campaign_loop_<on_exhausted>` (`fail`, `continue`, `hold`): `poll`, a `repeat` step
  reserving the order's stock every LOOP_INTERVAL seconds until the answer names the order and
  `input.polls` iterations have answered (at most LOOP_MAX), then `charge`, declined for some
  jobs (the job compensates: the loop's last iteration, and only it, is released). A job whose
  `polls` is over LOOP_MAX exhausts its loop, which ends as the workflow's `on_exhausted` says.
* ladders: `campaign_ladder_<last rung>` (`fail`, `continue`, `hold`): `reserve`, then `approve`,
  an approval whose escalation reminds at RUNGS[0], reassigns to the group LEADS at RUNGS[1] and
  ends the wait at RUNGS[2]; then `schedule`. The driver decides as each job's plan says: at once,
  after the reminder, by a lead (refused before the reassignment, taken after it), rejected, by
  nobody, by the job's own submitter (refused: separation of duties) and then an operator, or by
  an operator after the ladder ended (refused).
* children: `campaign_retry_parent`: `reserve`, `invoice` (a sub-workflow step running
  `campaign_retry_child`, whose `bill` is declined by the account's first `input.declines`
  charges: each declined child compensates and a new one starts after the policy's backoff, up
  to CHILD_TRIES in all), then `ship`, refused for some jobs (a quantity over the limit: the job
  compensates, and with it the one child that succeeded).
"""

from __future__ import annotations

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
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import InterfaceError, OperationalError, close_old_connections, connection

from sas_project.permissions import role_groups_ensure
from sas_project.tokens.services import token_create
from scheduler.models import JOB_SETTLED, AlertKind, AlertSubscription, Step, StepKind, StepStatus
from testbed.definitions import ensure_policy, ensure_workflow
from testbed.resend import post_until_answered

S = StepStatus

ON_EXHAUSTED = ("fail", "continue", "hold")
LOOP_WORKFLOWS = tuple(f"campaign_loop_{action}" for action in ON_EXHAUSTED)
LADDER_WORKFLOWS = tuple(f"campaign_ladder_{action}" for action in ON_EXHAUSTED)
WORKFLOW_PARENT = "campaign_retry_parent"
WORKFLOW_CHILD = "campaign_retry_child"
ALL_WORKFLOWS = (*LOOP_WORKFLOWS, *LADDER_WORKFLOWS, WORKFLOW_PARENT, WORKFLOW_CHILD)

LOOP = "poll"
LOOP_INTERVAL = 1.0
LOOP_MAX = 4
#: The loop ends when its answer names the order and enough iterations answered.
LOOP_UNTIL = "output.sku == input.order && iteration >= input.polls"
APPROVAL = "approve"
#: When the rungs come, in seconds of waiting: remind, reassign to LEADS, end the wait (6 s after
#: the reassignment, for a lead to decide even when a blackout delayed the rungs).
RUNGS = (2.0, 4.0, 10.0)
LEADS = "campaign-leads"
#: What the last rung `continue` answers for the approval.
ESCALATED_APPROVAL = {"approved": True, "by": "escalation"}
INVOICE = "invoice"
#: Children of one sub-workflow step at most (its policy's max_attempts), and the backoff before
#: the second and the third (no jitter: the checks read the gaps).
CHILD_TRIES = 3
CHILD_BACKOFF = (1.0, 2.0)
#: Shipping refuses a quantity over this (the sandbox's decline_quantity_over, the campaign's).
QUANTITY_LIMIT = 5
#: Payments decline an amount over this (the sandbox's decline_over, the campaign's).
AMOUNT_LIMIT = 1000

LOOP_PLANS = ((1, False), (2, False), (3, True), (4, False), (LOOP_MAX + 1, False), (2, True))
LADDER_PLANS = ("early", "after_remind", "lead", "reject", "never", "self", "too_late")
#: Per child-retry job: how many charges its account declines first, and whether its shipping is
#: then refused (the parent compensates after its child succeeded).
CHILD_PLANS = ((0, False), (1, False), (2, False), (CHILD_TRIES, False), (1, True))
#: One round per this many jobs of the campaign (at least one).
JOBS_PER_ROUND = 300


def rounds_for(jobs: int) -> int:
    return max(1, round(jobs / JOBS_PER_ROUND))


# --- definitions ----------------------------------------------------------------------------------


def _call(pool: str, service_path: str, status: str, undo: str, policy: str) -> dict[str, Any]:
    return {
        "pool": pool,
        "path": service_path,
        "status_path": status,
        "compensation_path": undo,
        "policy": policy,
    }


RESERVE = _call(
    "campaign-inventory",
    "/inventory/reserve",
    "/inventory/reservations/{operation_id}",
    "/inventory/release",
    "campaign",
)
CHARGE = _call(
    "campaign-payments",
    "/payments/charge",
    "/payments/{operation_id}",
    "/payments/refund",
    "campaign-careful",
)
SHIP = _call(
    "campaign-shipping",
    "/shipping/schedule",
    "/shipping/shipments/{operation_id}",
    "/shipping/cancel",
    "campaign",
)


def ensure_loops_definitions() -> None:
    """The loops', ladders' and children's workflows, on the campaign's pools and policies
    (campaign.ensure_definitions made them), the children's policy, the leads' group, and a
    subscription to the rungs' alerts (each rung must have its alert)."""
    Group.objects.get_or_create(name=LEADS)  # before the workflows naming it
    ensure_policy(
        "campaign-children",
        timeout_seconds=60,
        max_attempts=CHILD_TRIES,
        backoff_initial_seconds=CHILD_BACKOFF[0],
        backoff_multiplier=CHILD_BACKOFF[1] / CHILD_BACKOFF[0],
        backoff_max_seconds=CHILD_BACKOFF[1],
        backoff_jitter=0,
        retry_on=["transient_failure", "no_answer", "business_failure"],
        on_exhausted="compensate",
    )
    for action, name in zip(ON_EXHAUSTED, LOOP_WORKFLOWS, strict=True):
        ensure_workflow(
            name,
            description=f"Poll the order's stock until it is there ({action} when it never is); charge.",
            steps=[
                {
                    "name": LOOP,
                    "kind": "repeat",
                    "call": {**RESERVE, "input": {"sku.$": "input.order", "quantity": 1}},
                    "until": LOOP_UNTIL,
                    "interval_seconds": LOOP_INTERVAL,
                    "max_iterations": LOOP_MAX,
                    "on_exhausted": action,
                },
                {"name": "charge", **CHARGE, "depends_on": [LOOP]},
            ],
        )
    for action, name in zip(ON_EXHAUSTED, LADDER_WORKFLOWS, strict=True):
        last: dict[str, Any] = {"after_seconds": RUNGS[2], "do": action}
        # What a `continue` rung answers for the approval (allowed with one only).
        output = {"default_output": ESCALATED_APPROVAL} if action == "continue" else {}
        ensure_workflow(
            name,
            description=f"Reserve; an operator approves (reminded, reassigned, then {action}); schedule.",
            steps=[
                {"name": "reserve", **RESERVE},
                {
                    "name": APPROVAL,
                    "kind": "approval",
                    "timeout_seconds": 120,
                    "on_timeout": "fail",
                    "escalation": [
                        {"after_seconds": RUNGS[0], "do": "remind"},
                        {"after_seconds": RUNGS[1], "do": "reassign", "group": LEADS},
                        last,
                    ],
                    "depends_on": ["reserve"],
                    **output,
                },
                {"name": "schedule", **SHIP, "depends_on": [APPROVAL]},
            ],
        )
    ensure_workflow(
        WORKFLOW_CHILD,
        description="Bill the order (its account may decline first), then print its label.",
        steps=[
            {"name": "bill", **CHARGE},
            {"name": "label", **SHIP, "depends_on": ["bill"]},
        ],
    )
    ensure_workflow(
        WORKFLOW_PARENT,
        description="Reserve; invoice in a child job, retried when it fails; ship.",
        steps=[
            {"name": "reserve", **RESERVE, "input": {"sku.$": "input.order", "quantity": 1}},
            {
                "name": INVOICE,
                "kind": "workflow",
                "workflow": WORKFLOW_CHILD,
                "depends_on": ["reserve"],
                "input": {
                    "sku.$": "input.order",
                    "account.$": "input.order",
                    "amount.$": "input.amount",
                    "declines.$": "input.declines",
                    "quantity": 1,
                },
                "policy": "campaign-children",
            },
            {"name": "ship", **SHIP, "depends_on": [INVOICE], "input": {"quantity.$": "input.quantity"}},
        ],
    )
    subscription, _ = AlertSubscription.objects.get_or_create(
        name="campaign-rungs",
        defaults={"email": "rungs@campaign.invalid"},
    )
    subscription.kinds = [AlertKind.APPROVAL_REMINDER.value, AlertKind.WAIT_ESCALATED.value]
    subscription.enabled = True
    subscription.save()


def _user_token(username: str, groups: list[str]) -> str:
    role_groups_ensure()
    user, _ = get_user_model().objects.get_or_create(username=username)
    for name in groups:
        user.groups.add(Group.objects.get(name=name))
    _, key = token_create(user=user, name="campaign")
    return key


# --- the ladders' plans ---------------------------------------------------------------------------


#: A decision to send: who sends it ("approver", "lead", "own": the job's submitter), the verb,
#: the tag its answer is counted under, and whether it must be refused.
Move = tuple[str, str, str, bool]


def ladder_move(
    plan: str, done: set[str], *, status: str, rung: int, reassigned: bool, job: str
) -> Move | None:
    """The next decision of a ladder job's `plan`, given its approval's state now (`status`, the
    rungs walked, whether it was reassigned, the job's status), or None. Marks in `done` what it
    returns, and "finished" once the plan has nothing left to do."""

    def once(what: str, move: Move) -> Move | None:
        if what in done:
            return None
        done.add(what)
        return move

    waiting = status == S.WAITING
    if not waiting and status not in ("", S.PENDING):
        # The wait ended: by a decision, or by the last rung. One plan acts after that.
        if plan == "too_late" and rung >= len(RUNGS) and "late" not in done:
            return once("late", ("approver", "approve", "too_late", True))
        if plan != "too_late" or rung >= len(RUNGS) or job in JOB_SETTLED:
            done.add("finished")
        return None
    if job in JOB_SETTLED:
        done.add("finished")
        return None
    if not waiting:
        return None
    if plan == "early":
        return once("decide", ("approver", "approve", "early", False))
    if plan == "reject" and rung >= 1:
        return once("decide", ("approver", "reject", "reject", False))
    if plan == "after_remind" and rung >= 1:
        return once("decide", ("approver", "approve", "after_remind", False))
    if plan == "self":
        if "own" not in done:
            return once("own", ("own", "approve", "self", True))
        return once("decide", ("approver", "approve", "self-other", False))
    if plan == "lead" and rung >= 1 and not reassigned:
        return once("lead-early", ("lead", "approve", "lead-early", True))
    if plan == "lead" and reassigned:
        return once("decide", ("lead", "approve", "lead", False))
    return None


# --- the driver -----------------------------------------------------------------------------------


@dataclass
class LoopsLog:
    """What the driver did and was answered."""

    loop_jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    ladder_jobs: dict[str, str] = field(default_factory=dict)
    child_jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    rounds: int = 0
    submit_errors: int = 0
    #: Decisions sent, by plan, what they were and how they were answered ("lead-early 403").
    answers: Counter[str] = field(default_factory=Counter)
    #: Decisions the plan wanted refused (403 or 409) that were taken (200).
    refused_decisions_taken: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def all_jobs(self) -> list[str]:
        return [*self.loop_jobs, *self.ladder_jobs, *self.child_jobs]


@dataclass
class _Ladder:
    job_id: str
    plan: str
    #: The steps of its plan the driver took.
    done: set[str] = field(default_factory=set)
    finished: bool = False
    task: Future[None] | None = None


class LoopsDriver:
    """Submits the loops', ladders' and children's jobs over the REST API in rounds, from a thread
    of its own, and decides the ladders' approvals as their plans say, reading each approval's
    rung from the database every 0.2 s. Requests that fail (a 5xx, a lost connection) are sent
    again as they were (a submission under the same key)."""

    def __init__(
        self,
        *,
        submit: Callable[[str, dict[str, Any], str], str],
        url: str,
        rounds_at: list[float],
        run_id: str,
        seed: int,
    ) -> None:
        self.submit = submit

        def client(token: str) -> httpx.Client:
            headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
            return httpx.Client(base_url=url, headers=headers, timeout=30, trust_env=False)

        self.approver = client(_user_token("campaign-approver", ["operators"]))
        self.lead = client(_user_token("campaign-lead", [LEADS]))
        # Submits and may operate: its own approvals are refused (separation of duties).
        self.own = client(_user_token("campaign-self", ["submitters", "operators"]))
        self.rounds_at = sorted(rounds_at)
        self.run_id = run_id
        self.rng = random.Random(seed)
        self.log = LoopsLog()
        self._sent = 0
        self._lock = threading.Lock()
        self._ladders: list[_Ladder] = []
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="campaign-loops")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="campaign-loops", daemon=True)

    def start(self) -> LoopsDriver:
        self._thread.start()
        return self

    def finish(self, timeout: float) -> LoopsLog:
        """Play the rounds still due and the ladders' decisions (up to `timeout` s), then stop."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._thread.is_alive() and (self.rounds_at or self._pending()):
            time.sleep(0.2)
        self.close()
        return self.log

    def close(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self._pool.shutdown(wait=True, cancel_futures=True)
        for client in (self.approver, self.lead, self.own):
            client.close()

    def _pending(self) -> bool:
        with self._lock:
            return any(not ladder.finished for ladder in self._ladders)

    # --- the loop ---------------------------------------------------------------------------------

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
                time.sleep(0.2)
        except Exception as exc:  # noqa: BLE001 - reported: the checks then show what is missing
            self.log.notes.append(f"loops driver stopped: {exc!r}"[:300])
        finally:
            connection.close()

    def _submit(self, workflow: str, payload: dict[str, Any], *, own: bool = False) -> str | None:
        self._sent += 1
        key = f"{self.run_id}-loops-{self._sent}"
        try:
            if own:
                job_id = _post_json(self.own, "/api/v1/jobs/", {"workflow": workflow, "input": payload}, key)
            else:
                job_id = self.submit(workflow, payload, key)
        except RuntimeError as exc:
            self.log.submit_errors += 1
            self.log.notes.append(str(exc)[:300])
            return None
        return job_id

    def _round(self) -> None:
        number = self.log.rounds
        self.log.rounds += 1
        tag = f"{self.run_id}-{number}"
        for n, (polls, declined) in enumerate(LOOP_PLANS):
            workflow = LOOP_WORKFLOWS[(number + n) % len(LOOP_WORKFLOWS)]
            order = f"L{tag}-{n}"
            amount = AMOUNT_LIMIT + 1 if declined else self.rng.randint(1, 900)
            payload = {"order": order, "sku": order, "polls": polls, "amount": amount}
            if job_id := self._submit(workflow, payload):
                self.log.loop_jobs[job_id] = {"workflow": workflow, "polls": polls, "declined": declined}
        for n, plan in enumerate(LADDER_PLANS):
            workflow = LADDER_WORKFLOWS[(number + n) % len(LADDER_WORKFLOWS)]
            payload = {"order": f"A{tag}-{n}", "sku": f"A{tag}-{n}", "quantity": 1}
            if job_id := self._submit(workflow, payload, own=plan == "self"):
                self.log.ladder_jobs[job_id] = plan
                with self._lock:
                    self._ladders.append(_Ladder(job_id=job_id, plan=plan))
        for n, (declines, refused) in enumerate(CHILD_PLANS):
            order = f"C{tag}-{n}-{uuid.uuid4().hex[:6]}"
            payload = {
                "order": order,
                "sku": order,
                "declines": declines,
                "amount": self.rng.randint(1, 900),
                "quantity": QUANTITY_LIMIT + 1 if refused else 1,
            }
            if job_id := self._submit(WORKFLOW_PARENT, payload):
                self.log.child_jobs[job_id] = {"declines": declines, "refused": refused}

    # --- the ladders' decisions -------------------------------------------------------------------

    def _watch(self) -> None:
        with self._lock:
            active = [t for t in self._ladders if not t.finished and (t.task is None or t.task.done())]
        if not active:
            return
        steps = {
            str(job_id): (status, rung, group, job_status)
            for job_id, status, rung, group, job_status in Step.objects.filter(
                job_id__in=[t.job_id for t in active], name=APPROVAL, kind=StepKind.ACTION
            ).values_list("job_id", "status", "escalation_rung", "escalation_group", "job__status")
        }
        for ladder in active:
            status, rung, group, job_status = steps.get(ladder.job_id, ("", 0, "", ""))
            action = self._next(ladder, status=status, rung=rung, reassigned=bool(group), job=job_status)
            if action is not None:
                ladder.task = self._pool.submit(self._guard, action, ladder)

    def _next(
        self, t: _Ladder, *, status: str, rung: int, reassigned: bool, job: str
    ) -> Callable[[_Ladder], None] | None:
        """The next decision to send for this ladder, given its approval's state now."""
        move = ladder_move(t.plan, t.done, status=status, rung=rung, reassigned=reassigned, job=job)
        if move is None:
            t.finished = t.finished or "finished" in t.done
            return None
        who, verb, tag, refused = move
        client = {"approver": self.approver, "lead": self.lead, "own": self.own}[who]
        return lambda x: self._decide(x, client, verb, tag=tag, want_refused=refused)

    def _guard(self, action: Callable[[_Ladder], None], t: _Ladder) -> None:
        try:
            action(t)
        except Exception as exc:  # noqa: BLE001 - the campaign goes on; the note is in the report
            with self._lock:
                self.log.notes.append(f"job {t.job_id}: {type(exc).__name__}: {exc}"[:200])

    def _decide(
        self, t: _Ladder, client: httpx.Client, verb: str, *, tag: str, want_refused: bool = False
    ) -> None:
        path = f"/api/v1/jobs/{t.job_id}/steps/{APPROVAL}/{verb}/"
        response = _post(client, path, {"comment": f"campaign: {tag}"})
        code = response.status_code if response is not None else 0
        with self._lock:
            self.log.answers[f"{tag} {code}"] += 1
            if want_refused and code == 200:
                self.log.refused_decisions_taken.append(f"{t.job_id} {tag}")


def _post(client: httpx.Client, path: str, body: dict[str, Any], key: str = "") -> httpx.Response | None:
    """POST until an answer that is not a 5xx; None when none came."""
    return post_until_answered(client, path, body, key=key).response


def _post_json(client: httpx.Client, path: str, body: dict[str, Any], key: str) -> str:
    response = _post(client, path, body, key)
    if response is None or response.status_code not in (200, 201):
        raise RuntimeError(f"submitting through the API failed: {response and response.text[:200]}")
    return str(response.json()["id"])
