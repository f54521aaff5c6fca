"""The fault campaign's events and correlation (docs/events.md): inbound events that start jobs
and reach the jobs waiting for them, signals by business key, and signal-with-start; their
jobs, and the driver that plays the shop, the payment provider and the client over the REST API
(their checks, docs/reliability.md "Events and correlation": testbed.campaign_events_checks).

Three workflows, a few jobs each per round (a round every 300 jobs, at least one, during the
faults):

* `campaign_events_order`: started by an `order.placed` event (its trigger, business key the
  order's id); `reserve`, then `paid` waits for an `order.paid` event whose `data.order_id` is
  its order's. The order's events come in turn: placed, and paid once the job waits; paid right
  after placed (the step still pending: kept for it); paid before placed (it reaches no job, and
  the job's wait times out); both at once. Every placed event is posted twice at once from two
  clients and once more after, a waited-for payment twice at once and once more, and a payment
  for an order that has no job is posted beside it.
* `campaign_events_keyed`: `go` waits for signal `go`, then `reserve`. Signals by business key:
  sent early (before the job exists: kept, then claimed by the job submitted with the key), on
  time (the job waits), and late (once the job ended: kept until it expires).
* `campaign_events_with_start`: `first` and `second` each wait for a `go`, then `reserve`. Two
  clients submit with the same business key and a signal at the same moment (signal-with-start),
  each under its own Idempotency-Key: one job, both signals taken.

A request answered 5xx or not at all is sent again as it was. The first answer to the events of
an order paid while pending or before it was placed, to each signal by key and to each keyed
job's submission is lost on purpose (the client gives up at once, the service has done it), so
that the same event and the same keys come again. Every wait has a timeout (WAIT_TIMEOUT, then
the job is compensated), so every job settles.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from django.db import InterfaceError, OperationalError, close_old_connections, connection

from scheduler.definitions import workflow_create, workflow_latest
from scheduler.models import JOB_SETTLED, Job, JobStatus, KeyedSignal, Step, StepKind, StepStatus
from scheduler.unit import db_now
from testbed.resend import post_until_answered

WORKFLOW_ORDER = "campaign_events_order"
WORKFLOW_KEYED = "campaign_events_keyed"
WORKFLOW_WITH_START = "campaign_events_with_start"
ALL_WORKFLOWS = (WORKFLOW_ORDER, WORKFLOW_KEYED, WORKFLOW_WITH_START)
PLACED, PAID = "order.placed", "order.paid"
SHOP, PAYMENTS = "campaign-shop", "campaign-payments"
#: The name of the signal the keyed and signal-with-start jobs wait for, and their steps.
GO = "go"
PAID_STEP, GO_STEPS = "paid", ("go", "first", "second")
#: Seconds each wait of these jobs waits before it fails (and its job is compensated).
WAIT_TIMEOUT = 8.0
#: SAS_SIGNAL_LOOKBACK_SECONDS of the campaign's web processes and clusters: a late signal by key
#: expires while the campaign runs.
LOOKBACK_SECONDS = 20.0
#: Per round: the orders, by how their events come; signals by key, by when they are sent (each
#: job also gets a late one once it ended); racing pairs of signal-with-start.
ORDER_MODES = ("after_wait", "after_wait", "while_pending", "paid_first", "together")
KEYED_MODES = ("early", "early", "on_time")
RACES = 2
JOBS_PER_ROUND = 300
#: How long the driver watches a job for the moment to send what it waits for before giving up.
WATCH_SECONDS = 60.0
#: Tries of a request answered 5xx or not at all (0.5 s apart), as the other drivers.
TRIES = 20
#: How long a client waits for the answer to a request whose first answer it loses (seconds):
#: the request is sent whole and the service does it, the client has given up by then.
CUT_AFTER = 0.01
#: What the campaign counts as settled (its drain waits for these).
SETTLED = JOB_SETTLED | {JobStatus.NEEDS_ATTENTION}

T = TypeVar("T")


def rounds_for(jobs: int) -> int:
    return max(1, round(jobs / JOBS_PER_ROUND))


def ensure_events_definitions() -> None:
    """The three workflows, on the campaign's pools and policy (campaign.ensure_definitions)."""
    reserve = {
        "name": "reserve",
        "pool": "campaign-inventory",
        "path": "/inventory/reserve",
        "status_path": "/inventory/reservations/{operation_id}",
        "compensation_path": "/inventory/release",
        "policy": "campaign",
    }
    wait = {"kind": "signal", "timeout_seconds": WAIT_TIMEOUT, "on_timeout": "fail"}
    made: dict[str, dict[str, Any]] = {
        WORKFLOW_ORDER: {
            "description": "An order placed by an event: reserve, then wait for its payment's event.",
            "steps": [
                reserve,
                {
                    **wait,
                    "name": PAID_STEP,
                    "event": PAID,
                    "match": "event.data.order_id == input.order_id",
                    "depends_on": ["reserve"],
                },
            ],
            "triggers": [
                {
                    "event": PLACED,
                    "input": {"order_id.$": "event.data.order_id", "sku.$": "event.data.sku"},
                    "business_key": "event.data.order_id",
                }
            ],
        },
        WORKFLOW_KEYED: {
            "description": "Wait for signal go (sent by business key), then reserve.",
            "steps": [{**wait, "name": "go", "signal": GO}, {**reserve, "depends_on": ["go"]}],
        },
        WORKFLOW_WITH_START: {
            "description": "Wait for two go signals (signal-with-start), then reserve.",
            "steps": [
                {**wait, "name": "first", "signal": GO},
                {**wait, "name": "second", "signal": GO, "depends_on": ["first"]},
                {**reserve, "depends_on": ["second"]},
            ],
        },
    }
    for name, spec in made.items():
        if workflow_latest(name) is None:
            workflow_create(name=name, **spec)


# --- the driver -------------------------------------------------------------------------------


@dataclass
class Order:
    order_id: str
    mode: str
    placed_id: str
    paid_id: str
    job_id: str | None = None


@dataclass
class Keyed:
    business_key: str
    mode: str
    job_id: str | None = None
    #: The Idempotency-Key of each signal sent by key ("early", "on_time", "late").
    keys: dict[str, str] = field(default_factory=dict)
    #: Its answer's `buffered`, per signal sent.
    buffered: dict[str, bool] = field(default_factory=dict)


@dataclass
class Race:
    business_key: str
    keys: tuple[str, str]
    #: Per request: its final answer's status (0: none came) and the job it named.
    answers: list[tuple[int, str | None]] = field(default_factory=list)


@dataclass
class EventLog:
    """What the driver sent and was answered."""

    rounds: int = 0
    orders: list[Order] = field(default_factory=list)
    keyed: list[Keyed] = field(default_factory=list)
    races: list[Race] = field(default_factory=list)
    #: The payments for orders that have no job.
    ghosts: list[str] = field(default_factory=list)
    #: Every answer to an event, by "<source>/<id>" (the body, with its `status`).
    answers: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    #: Requests by kind; posts of one event at once from two clients.
    requests: Counter[str] = field(default_factory=Counter)
    posts_at_once: int = 0
    #: Requests sent again after a 5xx or a lost connection; first answers the client lost.
    sent_again: int = 0
    answers_cut: int = 0
    #: Actions given up: the job never came to the state they wait for (by kind).
    not_sent: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    def all_jobs(self) -> list[str]:
        ids = [o.job_id for o in self.orders] + [k.job_id for k in self.keyed]
        ids += [job for race in self.races for _, job in race.answers]
        return sorted({j for j in ids if j})


@dataclass
class _Watch:
    """Something to send once a job is in a given state."""

    kind: str
    job_id: str
    since: float
    act: Callable[[], None]
    done: bool = False


class EventDriver:
    """Plays the shop, the payment provider and the client system over the REST API in rounds,
    from a thread of its own, with two clients (two connections, to two web processes when there
    are); what waits for a job's state reads it from the database every 0.2 s. A request that
    fails is sent again as it was: an event under its id, anything else under its key."""

    def __init__(
        self, *, urls: list[str], token: str, rounds_at: list[float], run_id: str, seed: int
    ) -> None:
        headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        self.clients = [
            httpx.Client(base_url=url, headers=headers, timeout=30, trust_env=False)
            for url in (urls[0], urls[-1])
        ]
        self.rounds_at = sorted(rounds_at)
        #: Rounds not played to their end yet.
        self._rounds_left = len(rounds_at)
        self.run_id = run_id
        self.rng = random.Random(seed)
        self.log = EventLog()
        self._lock = threading.Lock()
        self._watches: list[_Watch] = []
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="campaign-events")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="campaign-events", daemon=True)

    def start(self) -> EventDriver:
        self._thread.start()
        return self

    def wait_for_rounds(self, timeout: float) -> None:
        """Wait (up to `timeout` s) until every round was played: its jobs are all known."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._thread.is_alive() and self._rounds_left:
            time.sleep(0.2)

    def finish(self, timeout: float) -> EventLog:
        """Send what is still due (the late signals of jobs that ended), up to `timeout` s; stop."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._thread.is_alive() and self._due():
            time.sleep(0.2)
        self.close()
        return self.log

    def close(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self._pool.shutdown(wait=True, cancel_futures=True)
        for client in self.clients:
            client.close()

    def _due(self) -> bool:
        return bool(self._rounds_left) or any(not w.done for w in self._watches)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                close_old_connections()
                try:
                    if self.rounds_at and time.monotonic() >= self.rounds_at[0]:
                        self.rounds_at.pop(0)
                        try:
                            self._round()
                        finally:
                            self._rounds_left -= 1
                    self._watch()
                except (OperationalError, InterfaceError):
                    connection.close()
                    time.sleep(0.5)
                time.sleep(0.2)
        except Exception as exc:  # noqa: BLE001 - reported: the checks then show what is missing
            self.log.notes.append(f"events driver stopped: {exc!r}"[:300])
        finally:
            connection.close()

    # --- requests -----------------------------------------------------------------------------

    def _post(
        self, client: int, path: str, body: dict[str, Any], key: str = "", *, cut: bool = False
    ) -> httpx.Response | None:
        """POST until an answer that is not a 5xx (TRIES tries); None when none came. `cut`: the
        client gives up on the first answer (a client's timeout: the service did the request)."""
        sent = post_until_answered(
            self.clients[client], path, body, key=key, cut_after=CUT_AFTER if cut else None, tries=TRIES
        )
        with self._lock:
            self.log.sent_again += sent.resent
            self.log.answers_cut += int(sent.cut)
        if sent.response is None:
            self._note(f"{path} {key or body.get('id')}: no answer but 5xx or errors ({sent.error})")
        return sent.response

    def _note(self, text: str) -> None:
        with self._lock:
            self.log.notes.append(text[:300])

    def _event(
        self, client: int, kind: str, source: str, event_id: str, data: dict[str, Any], *, cut: bool = False
    ) -> list[str]:
        """Post an event (`cut`: its first answer lost); the jobs it started."""
        with self._lock:
            self.log.requests[f"event {kind}"] += 1
        body = {"type": kind, "id": event_id, "source": source, "data": data}
        response = self._post(client, "/api/v1/events/", body, cut=cut)
        if response is None or response.status_code not in (200, 202):
            if response is not None:
                self._note(f"event {source}/{event_id}: {response.status_code} {response.text[:200]}")
            return []
        answer = {**response.json(), "status": response.status_code}
        with self._lock:
            self.log.answers[f"{source}/{event_id}"].append(answer)
        return [str(j) for j in answer["started"]]

    def _at_once(self, *calls: Callable[[], T]) -> list[T]:
        """Run the calls at the same moment, each on a thread of its own."""
        barrier = threading.Barrier(len(calls))

        def run(call: Callable[[], T]) -> T:
            # A thread that could not start in time sends all the same, a little later.
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(10)
            try:
                return call()
            finally:
                connection.close()

        return [f.result() for f in [self._pool.submit(run, call) for call in calls]]

    def _submit(
        self, client: int, body: dict[str, Any], key: str, *, cut: bool = False
    ) -> tuple[int, str | None]:
        """Submit a job (under `key`; `cut`: its first answer lost): the final answer's status
        (0: none) and the job's id."""
        with self._lock:
            self.log.requests["submission"] += 1
        response = self._post(client, "/api/v1/jobs/", body, key, cut=cut)
        if response is None:
            return 0, None
        if response.status_code not in (200, 201):
            self._note(f"submission {key}: {response.status_code} {response.text[:200]}")
            return response.status_code, None
        return response.status_code, str(response.json()["id"])

    def _by_key(self, keyed: Keyed, when: str) -> None:
        """Send signal go by the job's business key, under a key of its own, its first answer
        lost."""
        key = keyed.keys[when] = f"{keyed.business_key}-{when}"
        with self._lock:
            self.log.requests[f"signal by key {when}"] += 1
        body = {
            "business_key": keyed.business_key,
            "workflow": WORKFLOW_KEYED,
            "name": GO,
            "payload": {when: 1},
        }
        response = self._post(0, "/api/v1/signals/", body, key, cut=True)
        if response is None or response.status_code not in (200, 202):
            if response is not None:
                self._note(f"signal {key}: {response.status_code} {response.text[:200]}")
            return
        keyed.buffered[when] = bool(response.json()["buffered"])

    # --- a round ------------------------------------------------------------------------------

    def _round(self) -> None:
        tag = f"{self.run_id}-{self.log.rounds}"
        self.log.rounds += 1
        for i, mode in enumerate(ORDER_MODES):
            order = Order(
                order_id=f"{tag}-order-{i}",
                mode=mode,
                placed_id=f"{tag}-placed-{i}",
                paid_id=f"{tag}-paid-{i}",
            )
            self.log.orders.append(order)
            self._place(order)
        for i, mode in enumerate(KEYED_MODES):
            keyed = Keyed(business_key=f"{tag}-keyed-{i}", mode=mode)
            self.log.keyed.append(keyed)
            if mode == "early":
                self._by_key(keyed, "early")
            body = {
                "workflow": WORKFLOW_KEYED,
                "input": {"sku": f"K{tag}"},
                "business_key": keyed.business_key,
            }
            _, keyed.job_id = self._submit(0, body, f"{keyed.business_key}-job", cut=True)
            if keyed.job_id is None:
                continue
            if mode == "on_time":
                self._when("on_time", keyed.job_id, functools.partial(self._by_key, keyed, "on_time"))
            self._when("late", keyed.job_id, functools.partial(self._by_key, keyed, "late"))
        for i in range(RACES):
            self._race(Race(business_key=f"{tag}-race-{i}", keys=(f"{tag}-race-{i}-a", f"{tag}-race-{i}-b")))

    def _place(self, order: Order) -> None:
        placed = {"order_id": order.order_id, "sku": f"E{order.order_id}"}

        def place(client: int = 0, cut: bool = False) -> list[str]:
            return self._event(client, PLACED, SHOP, order.placed_id, placed, cut=cut)

        def pay(client: int = 0, cut: bool = False) -> list[str]:
            return self._event(client, PAID, PAYMENTS, order.paid_id, self._payment(order.order_id), cut=cut)

        started: list[str] = []
        if order.mode == "after_wait":
            # The shop's post twice at once from two clients, and its retry after the answer.
            started = [j for jobs in self._at_once(lambda: place(0), lambda: place(1)) for j in jobs]
            started += place(1)
            with self._lock:
                self.log.posts_at_once += 1
        elif order.mode == "while_pending":
            # Each first answer lost: the service's answer to the event sent again is the first's.
            started = place(cut=True)
            if started:
                pay(cut=True)
        elif order.mode == "paid_first":
            pay(cut=True)
            started = place(cut=True)
        else:
            started = self._at_once(lambda: place(0), lambda: pay(1))[0]
        order.job_id = started[0] if started else None
        if order.mode == "after_wait" and order.job_id is not None:
            self._when(PAID_STEP, order.job_id, lambda: self._pay_waiting(order))

    def _payment(self, order_id: str) -> dict[str, Any]:
        return {"order_id": order_id, "amount": self.rng.randint(1, 900)}

    def _pay_waiting(self, order: Order) -> None:
        """The payment of an order whose job waits: twice at once, its retry after the answer,
        and beside it a payment for an order that has no job."""
        data = self._payment(order.order_id)
        self._at_once(*(lambda c=c: self._event(c, PAID, PAYMENTS, order.paid_id, data) for c in (0, 1)))
        self._event(1, PAID, PAYMENTS, order.paid_id, data)
        ghost = f"{order.paid_id}-ghost"
        self.log.ghosts.append(ghost)
        self._event(0, PAID, PAYMENTS, ghost, self._payment(f"{order.order_id}-ghost"))
        with self._lock:
            self.log.posts_at_once += 1

    def _race(self, race: Race) -> None:
        """Two clients submit with one business key and a signal at the same moment."""
        self.log.races.append(race)

        def submit(client: int) -> tuple[int, str | None]:
            body = {
                "workflow": WORKFLOW_WITH_START,
                "input": {"sku": f"R{race.business_key}"},
                "business_key": race.business_key,
                "signal": {"name": GO, "payload": {"from": client}},
            }
            # The second client's first answer is lost: its request comes again under its key.
            return self._submit(client, body, race.keys[client], cut=client == 1)

        race.answers = self._at_once(lambda: submit(0), lambda: submit(1))

    # --- what waits for a job's state -----------------------------------------------------------

    def _when(self, kind: str, job_id: str, act: Callable[[], None]) -> None:
        self._watches.append(_Watch(kind=kind, job_id=job_id, since=time.monotonic(), act=act))

    def _watch(self) -> None:
        """Act for each watched job now in its state: a step of it waiting (the payment, the
        signal on time), or the job ended (the late signal); give up on one that never comes."""
        waiting = [w for w in self._watches if not w.done]
        if not waiting:
            return
        ids = [w.job_id for w in waiting]
        jobs = dict(Job.objects.filter(pk__in=ids).values_list("pk", "status"))
        steps = {
            (str(job), name): status
            for job, name, status in Step.objects.filter(
                job_id__in=ids, kind=StepKind.ACTION, name__in=[PAID_STEP, "go"]
            ).values_list("job_id", "name", "status")
        }
        status = {str(pk): s for pk, s in jobs.items()}
        for w in waiting:
            job = status.get(w.job_id, "")
            if w.kind == "late":
                # A job needing attention still takes signals: only an ended job gets a late one.
                ready = job in JOB_SETTLED
                gone = job == JobStatus.NEEDS_ATTENTION
            else:
                ready = (
                    steps.get((w.job_id, PAID_STEP if w.kind == PAID_STEP else "go")) == StepStatus.WAITING
                )
                gone = job in SETTLED
            if ready:
                w.done = True
                w.act()
            elif gone or time.monotonic() - w.since > WATCH_SECONDS:
                w.done = True
                self.log.not_sent[w.kind] += 1


def wait_for_expiry(run_id: str, *, slack: float, most: float) -> None:
    """Wait until every signal by key of this run that is still kept has expired: each expires
    at the supervisor's first pass after its `expires_at`, so until `slack` s past the latest of
    them, at most `most` s."""
    started = time.monotonic()
    while time.monotonic() - started < most:
        try:
            kept = list(
                KeyedSignal.objects.filter(
                    business_key__startswith=f"{run_id}-",
                    buffered=True,
                    consumed_at__isnull=True,
                    expired_at__isnull=True,
                ).values_list("expires_at", flat=True)
            )
            if not kept or db_now() > max(e for e in kept if e is not None) + dt.timedelta(seconds=slack):
                return
        except (OperationalError, InterfaceError):
            connection.close()
        time.sleep(0.5)
