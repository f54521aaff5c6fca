"""Capacity: pools that limit how many calls they take (`max_in_flight`) and how fast
(`max_per_second`).

A call for a limited pool is never dispatched where it becomes ready: the step moves to
`waiting` (event `step_waiting`; no attempt, no task, no deadline, no worker held), and the pump
dispatches waiting steps as capacity frees, highest job priority first, then round-robin across
the jobs' concurrency keys (one step of every waiting key in turn, the key served longest ago
first: `round_robin`), then oldest. The pump
takes the pool's row lock (`FOR NO KEY UPDATE SKIP LOCKED`: one pump per pool at a time, the
others skip it; the weaker `NO KEY` lock still lets other transactions insert steps and attempts
that refer to the pool, whose foreign keys take a key-share lock on its row), counts the calls
in flight (the pool's dispatched steps) and the calls started in the rate window, and dispatches
that many, each under its job's row lock (skipped when another writer holds it: that writer
pumps again after it commits). Since only the pump dispatches into a limited pool, and one pump
at a time per pool, the limits hold across every process.

The pump runs after every transaction that parks a step and after every call to a limited pool
finishes (on commit, for the pools concerned only, once per pool and transaction), and in every
`qcluster` every half second (a thread; one query while no step waits), which is what releases
rate-limited steps on time, and steps left waiting in a pool whose limits were removed (an
unlimited pool's waiting steps go out a batch at a time). Status queries (reconcile) are not
limited: they are cheap reads that decide what a stuck call did.

The pump dispatches through the dispatcher its caller passes in (`step_dispatch`, from
scheduler.services.dispatch): dispatch parks steps and asks for the pump, so it imports this
module, and this one never imports it.

Restated in SQL (keep both in step; the equivalence tests compare them):
`scheduler/sql/postgresql/sas_dispatch_ready.sql`.
"""

from __future__ import annotations

import collections
import datetime as dt
import hashlib
import itertools
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from django.db import close_old_connections, connection, transaction
from django.db.models import CharField, Count, F, Min, Q, Subquery, Value, Window
from django.db.models.functions import Cast, Coalesce, Now, NullIf, RowNumber
from django.utils import timezone
from jmespath.exceptions import JMESPathError

from agents.health import pool_asked_until
from agents.models import AgentPool
from agents.outcome import AttemptKind, Outcome
from sas_project import database
from sas_project.throttling import RatePolicy, rate_bucket_take
from scheduler import expressions
from scheduler.models import Attempt, Step, StepDefinition, StepStatus
from scheduler.services.locking import JOB_FORWARD, JobState, ancestor_outputs, lock_job, step_input
from scheduler.unit import Unit, db_now, unit_of_work

logger = logging.getLogger("scheduler.capacity")

S = StepStatus
SOURCE = "capacity"
#: Seconds a process trusts its answer to "is any pool limited?".
LIMITED_CACHE_SECONDS = 5.0
#: Waiting steps one pump looks at per pool.
BATCH = 200

#: A row whose pool has a limit (attempts, steps).
LIMITED_POOL = (
    Q(pool__max_in_flight__isnull=False) | Q(pool__max_per_second__isnull=False) | Q(pool__rate__isnull=False)
)
#: A call that got no answer keeps its key's place while its step waits (to be retried, decided,
#: or for an operator; among the waiting calls, the retries that keep theirs): it may still be
#: running at its remote, until its step settles or calls again.
NO_ANSWER_YET = Q(last_outcome=Outcome.NO_ANSWER)
#: What holds a step's key: its call is in flight, or may still be: no answer yet (`unknown`),
#: or none ever (NO_ANSWER_YET) while its step waits.
KEY_IN_FLIGHT = Q(status__in=(S.DISPATCHED, S.UNKNOWN)) | (
    NO_ANSWER_YET & Q(status__in=(S.ATTEMPT_FAILED, S.RETRY_WAIT, S.HELD, S.WAITING))
)
#: The same, less the calls waiting for the pump themselves: what makes a key full for every
#: waiting call (a waiting retry holds the key against the others, never against itself).
KEY_HELD_OUTSIDE = KEY_IN_FLIGHT & ~Q(status=S.WAITING)
#: The statuses of a step with a key in use (holding it, or waiting for it).
LIVE_STEP_KEY_STATUSES = (S.DISPATCHED, S.UNKNOWN, S.ATTEMPT_FAILED, S.RETRY_WAIT, S.HELD, S.WAITING)
#: The longest key value kept as it reads (longer ones are kept as their digest).
MAX_KEY = 200
#: Waiting steps of one key (concurrency or rate) one pump looks at: a key held back cannot
#: fill the batch ahead of the others.
PER_KEY = 10
#: The key of a call whose key expression cannot be evaluated: such calls share one key (held
#: to the limit together) rather than escape it.
UNREADABLE = "<unreadable>"

_limited_at = 0.0
_limited = False


class StepDispatcher(Protocol):
    """What dispatches a waiting step once its pool has room: `step_dispatch` (with
    `capacity_checked=True`, so the step is not parked again)."""

    def __call__(
        self, unit: Unit, /, *, state: JobState, step: Step, source: str, reason: str, capacity_checked: bool
    ) -> Attempt | None: ...


def any_pool_limited() -> bool:
    """Whether some calls wait for the pump: a pool has a limit, or a step definition has a
    concurrency or a rate (cached for a few seconds per process)."""
    global _limited_at, _limited
    if time.monotonic() - _limited_at > LIMITED_CACHE_SECONDS:
        _limited = (
            AgentPool.objects.filter(
                Q(max_in_flight__isnull=False) | Q(max_per_second__isnull=False) | Q(rate__isnull=False)
            ).exists()
            or StepDefinition.objects.filter(Q(concurrency__isnull=False) | Q(rate__isnull=False)).exists()
        )
        _limited_at = time.monotonic()
    return _limited


def forget_limits_cache() -> None:
    global _limited_at
    _limited_at = 0.0


@dataclass
class _PoolPump:
    """One pool's pump, to run when the transaction that registered it commits."""

    pool_id: int
    dispatch: StepDispatcher
    ran: bool = False

    def __call__(self) -> None:
        self.ran = True
        pump([self.pool_id], dispatch=self.dispatch)


def pump_after_commit(pool_id: int, *, dispatch: StepDispatcher) -> None:
    """Pump the pool once the current transaction commits (at once outside one): once per
    transaction, however many of the pool's steps it parks or frees.

    The pumps already due are read from the connection's own list of on-commit callbacks, which
    a rolled-back savepoint leaves without its registrations: a pool whose pump was registered
    only there is registered again. A pump that has run no longer counts (a test that runs the
    callbacks in place keeps them listed)."""
    if connection.in_atomic_block and any(
        isinstance(entry[1], _PoolPump) and entry[1].pool_id == pool_id and not entry[1].ran
        for entry in connection.run_on_commit
    ):
        return
    transaction.on_commit(_PoolPump(pool_id, dispatch))


def pump_job_after_commit(job_id: Any, *, dispatch: StepDispatcher) -> None:
    """Pump, once this commits, the pools where the job's steps wait (what a submission parked)."""
    pools = Step.objects.filter(job_id=job_id, status=S.WAITING).order_by().values_list("pool_id", flat=True)
    for pool_id in sorted(set(pools)):
        pump_after_commit(pool_id, dispatch=dispatch)


def pump_after_outcome(step_id: int, *, number: int, dispatch: StepDispatcher) -> None:
    """Pump, once this commits, the pools an outcome concerns: the pool of the call that ended,
    if it is limited (a slot freed), and the pools where the job's steps wait (the steps the
    outcome made ready may have been parked). Other pools are none of its business."""
    freed = (
        Attempt.objects.filter(
            LIMITED_POOL | Q(step__definition__concurrency__isnull=False), step_id=step_id, number=number
        )
        .order_by()
        .values_list("pool_id", flat=True)
    )
    parked = (
        Step.objects.filter(
            status=S.WAITING, job_id=Subquery(Step.objects.filter(pk=step_id).values("job_id")[:1])
        )
        .order_by()
        .values_list("pool_id", flat=True)
    )
    for pool_id in sorted(set(freed.union(parked))):
        pump_after_commit(pool_id, dispatch=dispatch)


def free_slots(pool: AgentPool) -> tuple[int, float | None]:
    """How many calls the pool may start now, and, when its rate (or its remote's Retry-After)
    is what stops it, in how many seconds the next slot frees."""
    slots = BATCH
    wait: float | None = None
    now = db_now()
    asked = pool_asked_until(pool, now=now)
    if asked is not None:
        # Every endpoint asked for no calls before then: none goes out, wherever it comes from.
        return 0, max((asked - now).total_seconds(), 0.01)
    if pool.max_in_flight is not None:
        in_flight = Step.objects.filter(pool_id=pool.pk, status=S.DISPATCHED).count()
        slots = min(slots, pool.max_in_flight - in_flight)
    if pool.max_per_second is not None:
        # A window of one second, or of one call's share of a second for rates below one.
        window = max(1.0, 1.0 / pool.max_per_second)
        allowed = max(1, math.floor(pool.max_per_second * window))
        ages = _recent_dispatch_ages(pool.pk, window)
        rate_slots = allowed - len(ages)
        if rate_slots <= 0:
            # The oldest call of the window leaves it first.
            wait = max(window - max(ages), 0.0)
        slots = min(slots, rate_slots)
    return max(slots, 0), wait


def _recent_dispatch_ages(pool_id: int, window: float) -> list[float]:
    """Ages in seconds (database clock) of the pool's calls dispatched within the window."""
    rows = (
        Attempt.objects.filter(
            pool_id=pool_id, kind=AttemptKind.CALL, dispatched_at__gt=Now() - dt.timedelta(seconds=window)
        )
        .annotate(now=Now())
        .values_list("now", "dispatched_at")
    )
    return [(now - at).total_seconds() for now, at in rows]


def _dispatchable_waiting() -> Any:
    """Waiting steps the pump may take. Those of a paused job stay out until it resumes: however
    many there are, they neither fill the pump's batch ahead of steps it could dispatch nor make
    it lock a pool for nothing."""
    return Step.objects.filter(status=S.WAITING, job__paused_at__isnull=True)


def _waiting_pools(pool_ids: list[int] | None) -> list[int]:
    query = _dispatchable_waiting()
    if pool_ids is not None:
        query = query.filter(pool_id__in=pool_ids)
    return list(query.order_by("pool_id").values_list("pool_id", flat=True).distinct())


def pump(pool_ids: list[int] | None = None, *, dispatch: StepDispatcher) -> tuple[int, float | None]:
    """Dispatch waiting steps of the given pools (all with waiting steps by default) as their
    capacity allows, each through `dispatch`. Returns how many were dispatched and the soonest a
    rate-limited pool frees a slot (seconds), if one is waiting on its rate."""
    dispatched = 0
    soonest: float | None = None
    for pool_id in _waiting_pools(pool_ids):
        count, wait = _pump_pool(pool_id, dispatch)
        dispatched += count
        if wait is not None:
            soonest = wait if soonest is None else min(soonest, wait)
    return dispatched, soonest


#: How far back the pump looks for which keys it served last (the pool's latest calls).
SERVED_LOOKBACK = 1000


def _recently_served(pool_id: int) -> dict[str, int]:
    """The concurrency keys of the pool's latest calls, each with how recently it was served (0:
    the latest call's key): one read of at most SERVED_LOOKBACK attempts."""
    served: dict[str, int] = {}
    keys = (
        Attempt.objects.filter(pool_id=pool_id, kind=AttemptKind.CALL)
        .order_by("-id")
        .values_list("step__job__concurrency_key", flat=True)[:SERVED_LOOKBACK]
    )
    for index, key in enumerate(keys):
        served.setdefault(key, index)
    return served


def round_robin(
    candidates: list[tuple[int, Any, int, str]], *, served: dict[str, int]
) -> list[tuple[int, Any]]:
    """Fairness across keys: the waiting steps (step, job, job priority, job's concurrency key;
    jobs without a key share the key ""), oldest first within each priority, reordered so that
    each priority level takes one step of every waiting key in turn, the key served longest ago
    (or never) first. One key's backlog then never starves another's; priority orders first."""
    ordered: list[tuple[int, Any]] = []
    for _, level in itertools.groupby(candidates, key=lambda c: c[2]):
        queues: dict[str, collections.deque[tuple[int, Any]]] = {}
        for step_id, job_id, _, key in level:
            queues.setdefault(key, collections.deque()).append((step_id, job_id))
        turn = sorted(queues, key=lambda k: -served.get(k, SERVED_LOOKBACK))
        while turn:
            for key in list(turn):
                ordered.append(queues[key].popleft())
                if not queues[key]:
                    turn.remove(key)
    return ordered


def _pump_pool(pool_id: int, dispatch: StepDispatcher) -> tuple[int, float | None]:
    dispatched = 0
    soonest: float | None = None
    with transaction.atomic():
        # NO KEY: the pump excludes other pumps only, never a submission or a dispatch inserting
        # a row that refers to the pool (FOR UPDATE would make them wait until the pump commits).
        pool = AgentPool.objects.select_for_update(skip_locked=True, no_key=True).filter(pk=pool_id).first()
        if pool is None:
            return 0, None  # another pump has it (or it is gone)
        slots, wait = free_slots(pool)
        if slots <= 0:
            return 0, wait
        candidates = round_robin(_candidates(pool_id), served=_recently_served(pool_id))
        full: set[str] = set()
        for step_id, job_id in candidates:
            if dispatched >= slots:
                break
            with unit_of_work() as unit:
                state = lock_job(unit, job_id=job_id, skip_locked=True)
                if state is None:
                    continue  # its job is being written: that writer pumps again after it commits
                step = state.step(step_id)
                if step.status != S.WAITING or not _may_dispatch(state, step):
                    continue
                held, retry_in = _held_back(state, step=step, pool=pool, full=full)
                if held:
                    if retry_in is not None:
                        soonest = retry_in if soonest is None else min(soonest, retry_in)
                    continue
                dispatch(
                    unit,
                    state=state,
                    step=step,
                    source=SOURCE,
                    reason=f"capacity free in pool {pool.name}",
                    capacity_checked=True,
                )
                dispatched += 1
    if dispatched:
        logger.info("capacity: dispatched %d waiting steps", dispatched, extra={"pool": pool_id})
    more = dispatched >= slots and len(candidates) > dispatched
    # Steps still wait and the rate stopped them: the next slot frees in about one call's share of
    # a second.
    hint = 1.0 / pool.max_per_second if more and pool.max_per_second else None
    if soonest is not None:
        hint = soonest if hint is None else min(hint, soonest)
    return dispatched, hint


def _candidates(pool_id: int) -> list[tuple[int, Any, int, str]]:
    """The pool's waiting steps the pump looks at (step, job, job priority, the key it takes
    turns by), highest priority first, then oldest. Calls that cannot go now for their
    concurrency key are left out: every call of a key whose calls in flight are at the limit, and
    the calls that hold no place of a key whose places are all taken (its waiting retries count:
    they keep their places), so that a backlog which can only wait never stands before the
    retries that may go. At most PER_KEY steps of any one key (concurrency, rate, the job's key)
    are looked at, so that one key's backlog never fills the batch ahead of another key's first
    call. The first read is the plain one (an index range, no sort of every waiting step); the
    keyed read runs only when keyed steps are among the candidates."""
    waiting = _dispatchable_waiting().filter(pool_id=pool_id)
    order = ("-job__priority", "updated_at", "id")
    columns = ("pk", "job_id", "job__priority", "concurrency_key", "rate_key", "job__concurrency_key")
    rows = list(waiting.order_by(*order).values_list(*columns)[:BATCH])
    if any(row[3] or row[4] or row[5] for row in rows):
        full, taken = _full_keys(pool_id)
        fair = Coalesce(
            NullIf(F("concurrency_key"), Value("")),
            NullIf(F("rate_key"), Value("")),
            NullIf(F("job__concurrency_key"), Value("")),
            # Unkeyed: each step its own turn (the window never holds it back).
            Cast("id", output_field=CharField()),
        )
        rows = list(
            waiting.exclude(concurrency_key__in=full)
            .exclude(Q(concurrency_key__in=taken) & ~NO_ANSWER_YET)
            .annotate(
                rank=Window(
                    RowNumber(),
                    partition_by=[fair],
                    order_by=[F("job__priority").desc(), F("updated_at").asc(), F("id").asc()],
                )
            )
            .filter(rank__lte=PER_KEY)
            .order_by(*order)
            .values_list(*columns)[:BATCH]
        )
    return [(pk, job, priority, key or rate or job_key) for pk, job, priority, key, rate, job_key in rows]


def _full_keys(pool_id: int) -> tuple[list[str], list[str]]:
    """The concurrency keys waiting in the pool that are at their limit: full for every waiting
    call (the calls in flight, or that may be, fill it), and with every place taken (those and
    the waiting retries that keep their places fill it: full for the calls without one)."""
    waiting_keys = (
        _dispatchable_waiting().filter(pool_id=pool_id).exclude(concurrency_key="").values("concurrency_key")
    )
    rows = (
        Step.objects.filter(KEY_IN_FLIGHT, concurrency_key__in=Subquery(waiting_keys))
        .exclude(concurrency_key="")
        .values("concurrency_key", "definition__concurrency")
        .annotate(n=Count("pk"), outside=Count("pk", filter=~Q(status=S.WAITING)))
        .order_by()
    )
    in_place: collections.Counter[str] = collections.Counter()
    outside: collections.Counter[str] = collections.Counter()
    limits: dict[str, int] = {}
    for row in rows:
        key = row["concurrency_key"]
        in_place[key] += row["n"]
        outside[key] += row["outside"]
        limit = (row["definition__concurrency"] or {}).get("limit")
        if limit is not None:
            limits[key] = int(limit)
    full = [key for key, limit in limits.items() if outside[key] >= limit]
    taken = [key for key, limit in limits.items() if in_place[key] >= limit]
    return full, taken


# --- keys and rates -------------------------------------------------------------------------------


def _context(state: JobState, step: Step) -> dict[str, Any]:
    """What a call's key expressions read: as its condition and its input mapping do."""
    data: dict[str, Any] = {
        "input": step_input(state, step=step),
        "results": ancestor_outputs(state, step=step),
    }
    if step.parent_id is not None:
        data["item"], data["index"] = step.item, step.item_index
    return data


def _key_text(expression: str, data: dict[str, Any]) -> str:
    """The value a key expression reads, as text ("" when it reads nothing); a value longer than
    MAX_KEY is kept as its digest, and an expression that cannot be evaluated reads UNREADABLE."""
    try:
        value = expressions.evaluate(expression, data, stored=False)
    except JMESPathError:
        return UNREADABLE
    if value is None or value == "" or value == [] or value == {}:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    if len(text) > MAX_KEY:
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    return text


def call_concurrency_key(state: JobState, *, step: Step) -> str:
    """The concurrency key a forward call of `step` holds: `<workflow>.<step>:<value>`, or ""
    when its definition has none or the key reads nothing."""
    spec = step.definition.concurrency if step.forward else None
    if not spec:
        return ""
    text = _key_text(spec["key"], _context(state, step))
    return f"{state.job.workflow.name}.{step.definition.name}:{text}" if text else ""


def key_value(scoped: str) -> str:
    """The value part of a scoped key (`<scope>:<value>`), as readers show it."""
    return scoped.split(":", 1)[1] if ":" in scoped else scoped


def rate_key_value(bucket: str) -> str:
    """The key value of a rate bucket's name (`pool:<pool>:<value>`, `step:<scope>:<value>`)."""
    parts = bucket.split(":", 2)
    return parts[2] if len(parts) == 3 else bucket


def _rate_buckets(state: JobState, *, step: Step, pool: AgentPool) -> list[tuple[str, RatePolicy]]:
    """The rate buckets a call of `step` into `pool` takes one token from: the pool's keyed rate
    (every call into it), then the step's own (forward calls)."""
    specs: list[tuple[str, dict[str, Any]]] = []
    if pool.rate:
        specs.append((f"pool:{pool.name}:", pool.rate))
    if step.forward and step.definition.rate:
        specs.append((f"step:{state.job.workflow.name}.{step.definition.name}:", step.definition.rate))
    buckets = []
    for prefix, spec in specs:
        text = _key_text(spec["key"], _context(state, step)) if spec.get("key") else ""
        name = prefix + text
        if len(name) > 200:  # the bucket table's key
            name = prefix[:100] + "sha256:" + hashlib.sha256(name.encode()).hexdigest()
        per_second = float(spec["per_second"])
        buckets.append((name, RatePolicy(interval=1.0 / per_second, burst=int(spec.get("burst") or 1))))
    return buckets


@dataclass(frozen=True)
class Park:
    """Why a call waits for the pump instead of going out where it became ready, and what the
    step keeps while it waits (its concurrency key; the time its remote asked it to wait till)."""

    reason: str
    data: dict[str, Any]
    concurrency_key: str = ""
    not_before: dt.datetime | None = None


def call_parks(state: JobState, *, step: Step, pool: AgentPool) -> Park | None:
    """Whether a call of `step` into `pool` waits for the pump: the pool has a limit, or the
    step a concurrency or a rate. None: it goes out now."""
    reasons = []
    if pool.limited:
        reasons.append(f"pool {pool.name} has a limit")
    key = call_concurrency_key(state, step=step)
    if key:
        reasons.append(f"key {key_value(key)} of step {step.definition.name} is limited")
    if step.forward and step.definition.rate:
        reasons.append(f"step {step.definition.name} has a rate")
    if not reasons:
        return None
    data: dict[str, Any] = {"pool": pool.name}
    if key:
        data["key"] = key_value(key)
    return Park(reason=", ".join(reasons) + ": waiting for capacity", data=data, concurrency_key=key)


def asked_to_wait(state: JobState, *, step: Step, pool: AgentPool, until: dt.datetime) -> Park:
    """A call whose every endpoint asked for no calls till `until` (Retry-After) waits for the
    pump, which sends it once that time has passed (free_slots)."""
    return Park(
        reason=f"every endpoint of pool {pool.name} asked for no calls before {until.isoformat()}",
        data={"pool": pool.name, "until": until.isoformat()},
        concurrency_key=call_concurrency_key(state, step=step),
        not_before=until,
    )


def _lock_key(key: str) -> None:
    """Serialize the dispatches of one concurrency key (till the transaction ends): two pumps of
    different pools, or a pump and an operator's retry, count the key's calls in turn."""
    database.lock_until_commit(f"sas_step_key:{key}")


def key_in_flight(key: str, *, besides: int | None = None) -> int:
    """The calls of a concurrency key in flight, or that may be (KEY_IN_FLIGHT), but step
    `besides`'s own: its retry takes the place of its earlier call."""
    holding = Step.objects.filter(KEY_IN_FLIGHT, concurrency_key=key).exclude(concurrency_key="")
    if besides is not None:
        holding = holding.exclude(pk=besides)
    return holding.count()


def _held_back(state: JobState, *, step: Step, pool: AgentPool, full: set[str]) -> tuple[bool, float | None]:
    """Whether the waiting call must wait still, for its concurrency key (at its limit) or a rate
    (no token: then the seconds until one comes). Takes the rate tokens when it may go."""
    key = step.concurrency_key
    spec = step.definition.concurrency if step.forward else None
    if key and spec:
        if key in full:
            return True, None
        _lock_key(key)
        limit = int(spec["limit"])
        if key_in_flight(key, besides=step.pk) >= limit:
            # Full for every waiting call when what holds it is outside the pump's reach (a call
            # in flight); a waiting retry holds it against the others only.
            if Step.objects.filter(KEY_HELD_OUTSIDE, concurrency_key=key).count() >= limit:
                full.add(key)
            return True, None
    for bucket, policy in _rate_buckets(state, step=step, pool=pool):
        decision = rate_bucket_take(key=bucket, policy=policy)
        if decision is not None and not decision.allowed:
            wait = max(decision.retry_after, 0.01)
            if step.rate_key != bucket or step.not_before is None or step.not_before <= timezone.now():
                # Not a change of state: which bucket holds it back and when it has a token next,
                # so that the pump takes its steps in turn with the others' and the API says why
                # it waits and till when (written again only once that time has passed).
                Step.objects.filter(pk=step.pk).update(
                    rate_key=bucket, not_before=Now() + dt.timedelta(seconds=wait)
                )
            return True, wait
    return False, None


def _may_dispatch(state: JobState, step: Step) -> bool:
    """What the saga allows now: forward steps of a running, unpaused job; compensations of a job
    that compensates (unpaused)."""
    job = state.job
    if job.paused_at is not None:
        return False
    if step.forward:
        return job.status in JOB_FORWARD
    return bool(job.compensation_reason)


def run_capacity(should_stop: Callable[[], bool], *, dispatch: StepDispatcher, idle: float = 0.5) -> int:
    """The pump's loop in `qcluster`: pump every `idle` seconds (sooner when a rate-limited pool
    frees a slot), one query while nothing waits. It pumps whether or not a pool is limited now:
    steps parked in a pool whose limits were since removed are dispatched too (the pumps on
    commit stop once no pool is limited). Survives database outages."""
    total = 0
    while not should_stop():
        pause = idle
        try:
            close_old_connections()
            count, soonest = pump(dispatch=dispatch)
            total += count
            if soonest is not None:
                pause = min(idle, max(soonest, 0.01))
        except Exception:
            logger.exception("capacity pump failed")
            connection.close()
        until = time.monotonic() + pause
        while not should_stop() and time.monotonic() < until:
            time.sleep(min(0.05, max(until - time.monotonic(), 0)))
    return total


@dataclass(frozen=True)
class CallKeyRow:
    """One busy key of calls, for the console's keys page: a step's concurrency key (`limit`
    set) or a rate bucket holding calls back (`limit` None)."""

    scope: str
    key: str
    pool: str
    limit: int | None
    in_flight: int
    waiting: int
    oldest_waiting: dt.datetime | None


def busiest_call_keys(*, limit: int = 100) -> list[CallKeyRow]:
    """The calls' keys in use now, most waiting first: the steps' concurrency keys with calls in
    flight or waiting (one grouped read on step_concurrency_key_idx), then the rate buckets that
    hold waiting calls back."""
    live = [*LIVE_STEP_KEY_STATUSES]
    keyed = (
        Step.objects.exclude(concurrency_key="")
        .filter(status__in=live)
        .values("concurrency_key", "pool__name", "definition__concurrency")
        .annotate(
            in_flight=Count("pk", filter=KEY_HELD_OUTSIDE),
            waiting=Count("pk", filter=Q(status=S.WAITING)),
            oldest=Min("updated_at", filter=Q(status=S.WAITING)),
        )
        .order_by("-waiting", "-in_flight", "concurrency_key")[:limit]
    )
    rows = [
        CallKeyRow(
            scope=r["concurrency_key"].split(":", 1)[0],
            key=key_value(r["concurrency_key"]),
            pool=r["pool__name"] or "",
            limit=(r["definition__concurrency"] or {}).get("limit"),
            in_flight=r["in_flight"],
            waiting=r["waiting"],
            oldest_waiting=r["oldest"],
        )
        for r in keyed
    ]
    rated = (
        Step.objects.filter(status=S.WAITING, concurrency_key="")
        .exclude(rate_key="")
        .values("rate_key", "pool__name")
        .annotate(waiting=Count("pk"), oldest=Min("updated_at"))
        .order_by("-waiting", "rate_key")[:limit]
    )
    rows += [
        CallKeyRow(
            scope=r["rate_key"].rsplit(":", 1)[0],
            key=rate_key_value(r["rate_key"]),
            pool=r["pool__name"] or "",
            limit=None,
            in_flight=0,
            waiting=r["waiting"],
            oldest_waiting=r["oldest"],
        )
        for r in rated
    ]
    return rows
