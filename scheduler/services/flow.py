"""Flow control by key: at most `limit` live jobs of a workflow per value of its concurrency key.

A workflow may declare `concurrency: {"key": "<JMESPath over the input>", "limit": N, "on_limit":
"queue" | "cancel_newest" | "cancel_in_progress"}` (scheduler.definitions). A job's key is read
from its input when it is created and kept on its row (`Job.concurrency_key`; an expression that
reads nothing leaves the job unkeyed, as a workflow without the field). A job *holds* its key
while it is live (HOLDING: running, needing attention, compensating); settled, it frees it.

Admission, under the key's lock (a transaction-scoped advisory lock on PostgreSQL, so that two
submissions on one key at the same moment take turns; SQLite has one writer). On PostgreSQL the
fast path admits a job whose key is an input field holding a string, when the key has room and
nobody waits (`scheduler/sql/postgresql/sas_submit.sql`, under the same lock); every other case
comes here:
- room under the limit and nobody waiting ahead: the job starts, as any job;
- otherwise by `on_limit`: `queue` creates the job `waiting` (no step dispatched, no worker, no
  queue row, no deadline: its deadline starts when it does); `cancel_newest` refuses it (409
  naming the job that holds the key); `cancel_in_progress` starts the compensation of the oldest
  holders (as an operator's cancel does) and queues the newcomer behind them.

Release: a job leaving HOLDING asks, once its transaction commits, for its key's waiting jobs to
start (`jobs_release`: as many as the limit has room for, in arrival order); the supervisor's
scan does the same for every key with waiting jobs, so a release lost in a crash waits one scan
at most. Keys are released independently of one another: one key's backlog never delays another
key's start (fairness across keys is by construction: nothing they share is queued).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Count, Min, Q
from django.utils import timezone

from sas_project import database
from sas_project.errors import InvalidInput, KeyBusy, StaleWrite
from scheduler import expressions
from scheduler.models import EventKind, Job, JobStatus, QuarantineLoop, Workflow
from scheduler.services.locking import JobState, lock_job
from scheduler.services.quarantine import not_quarantined
from scheduler.services.saga import job_advance, job_start_compensation
from scheduler.transitions import KEY_HOLDING, job_transition
from scheduler.unit import Unit, User, db_now, unit_of_work

logger = logging.getLogger("scheduler.flow")

J = JobStatus
SOURCE = "concurrency"
#: Statuses in which a job holds its key (the transitions send key_freed when a job leaves them).
HOLDING = KEY_HOLDING
#: The longest key value kept (the column's width).
MAX_KEY = 200


@dataclass(frozen=True)
class Concurrency:
    key: str
    limit: int
    on_limit: str = "queue"

    @classmethod
    def of(cls, workflow: Workflow) -> Concurrency | None:
        spec = workflow.concurrency
        if not spec:
            return None
        return cls(key=spec["key"], limit=int(spec["limit"]), on_limit=spec.get("on_limit") or "queue")


def key_value(concurrency: Concurrency, *, payload: Any) -> str:
    """The key a job with input `payload` holds: "" when the expression reads nothing."""
    return expression_key(concurrency.key, payload=payload, what="concurrency")


def expression_key(expression: str, *, payload: Any, what: str) -> str:
    """The value of the `what` key (concurrency, debounce, throttle) read by `expression` from
    the input `payload`: "" when it reads nothing; a list or an object as its compact JSON."""
    value = expressions.evaluate(expression, {"input": payload}, stored=False)
    if value is None or value == "" or value == [] or value == {}:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    if len(text) > MAX_KEY:
        raise InvalidInput(
            f"the {what} key read from the input is longer than {MAX_KEY} characters", field="input"
        )
    return text


#: The gates a waiting job may wait at before its concurrency key (scheduler.services.gates).
DEBOUNCE = "debounce"
THROTTLE = "throttle"


def _api_time(value: dt.datetime | None) -> str | None:
    """A time as the API writes one (scheduler.serializers.rendering.drf_datetime, which imports
    this module; sas_drf_time in SQL)."""
    if value is None:
        return None
    text = value.astimezone(timezone.get_current_timezone()).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def waiting_for(job: Job) -> dict[str, Any] | None:
    """Why a waiting job waits, for its readers: {"kind": "debounce" | "throttle", "key",
    "until"} at a start gate (scheduler.services.gates), or {"kind": "concurrency", "key",
    "limit"}. Restated in `scheduler/sql/postgresql/sas_job_document.sql`."""
    if job.status != J.WAITING:
        return None
    if job.start_gate == DEBOUNCE:
        return {"kind": DEBOUNCE, "key": job.debounce_key, "until": _api_time(job.start_at)}
    if job.start_gate == THROTTLE:
        return {"kind": THROTTLE, "key": job.throttle_key, "until": _api_time(job.start_at)}
    if not job.concurrency_key:
        return None
    concurrency = Concurrency.of(job.workflow)
    return {
        "kind": "concurrency",
        "key": job.concurrency_key,
        "limit": concurrency.limit if concurrency else None,
    }


@dataclass(frozen=True)
class KeyWait:
    """Why a waiting job waits, for the console: its key, the limit, who holds the key and how
    many jobs wait ahead of it."""

    key: str
    limit: int
    holders: list[Any]
    ahead: int


def key_wait(job: Job) -> KeyWait | None:
    """What a waiting job waits behind (None when it does not wait for a key)."""
    concurrency = Concurrency.of(job.workflow)
    if job.status != J.WAITING or not job.concurrency_key or concurrency is None:
        return None
    name, key = job.workflow.name, job.concurrency_key
    ahead = (
        _waiting(name, key)
        .filter(Q(created_at__lt=job.created_at) | Q(created_at=job.created_at, id__lt=job.pk))
        .count()
    )
    return KeyWait(key=key, limit=concurrency.limit, holders=_holders(name, key), ahead=ahead)


def _lock_key(workflow: str, key: str) -> None:
    """Serialize the admissions and releases of one key (till the transaction ends)."""
    database.lock_until_commit(f"sas_concurrency:{workflow}:{key}")


def _holders(workflow: str, key: str) -> list[Any]:
    """The jobs holding `key`, oldest first."""
    return list(
        Job.objects.filter(workflow__name=workflow, concurrency_key=key, status__in=HOLDING)
        .order_by("created_at", "id")
        .values_list("id", flat=True)
    )


def _waiting(workflow: str, key: str) -> Any:
    return Job.objects.filter(workflow__name=workflow, concurrency_key=key, status=J.WAITING)


@dataclass(frozen=True)
class Admission:
    key: str = ""
    start: bool = True
    reason: str = ""


def job_admission(
    unit: Unit, *, workflow: Workflow, payload: Any, actor: User | None, source: str
) -> Admission:
    """Whether a new job of `workflow` with input `payload` starts now or waits for its key (in
    the caller's transaction, which then creates the job). Raises KeyBusy for `cancel_newest`."""
    concurrency = Concurrency.of(workflow)
    if concurrency is None:
        return Admission()
    key = key_value(concurrency, payload=payload)
    if not key:
        return Admission()
    _lock_key(workflow.name, key)
    holders = _holders(workflow.name, key)
    queued = _waiting(workflow.name, key).exists()
    if len(holders) < concurrency.limit and not queued:
        return Admission(key=key)
    busy = f"key {key}: {len(holders)} of {concurrency.limit} running"
    if concurrency.on_limit == "cancel_newest":
        raise KeyBusy(
            f"workflow {workflow.name!r} allows {concurrency.limit} job(s) at once per key; {busy}"
            f" (job {holders[0]} holds it)"
            if holders
            else f"{busy}, and jobs wait for it",
            running=[str(h) for h in holders],
            key=key,
        )
    if concurrency.on_limit == "cancel_in_progress":
        _cancel_holders(unit, holders, limit=concurrency.limit, key=key, actor=actor, source=source)
    return Admission(key=key, start=False, reason=f"{busy}: waiting for the key")


def _cancel_holders(
    unit: Unit, holders: list[Any], *, limit: int, key: str, actor: User | None, source: str
) -> None:
    """Compensate the oldest holders, so that the newest `limit - 1` and the newcomer remain."""
    for job_id in holders[: len(holders) - limit + 1]:
        state = lock_job(unit, job_id=job_id)
        if state.job.status not in HOLDING or state.job.compensation_reason:
            continue  # compensating already: it frees the key when it ends
        job_start_compensation(
            unit,
            state=state,
            reason_code="cancel",
            source=source,
            actor=actor,
            reason=f"key {key}: cancelled in progress by a newer job (on_limit cancel_in_progress)",
        )


def job_wait(unit: Unit, *, job: Job, admission: Admission, source: str, actor: User | None) -> None:
    """The event of a job created waiting for its key."""
    # A note: the job_submitted event beside it already moved the job to waiting.
    unit.event(
        job_id=job.pk,
        kind=EventKind.JOB_WAITING,
        source=source,
        actor=actor,
        reason=admission.reason,
        data={"waiting_for": waiting_for(job)},
    )
    # A holder that settled while this admission ran found nobody waiting yet (on_key_freed's
    # read): once this commits, look again, so the place it freed is not left to the sweep.
    workflow, key = job.workflow.name, job.concurrency_key
    transaction.on_commit(lambda: on_key_freed(workflow=workflow, key=key))


class StartFailed(Exception):
    """Starting waiting job `job_id` raised (the cause): its release rolled back."""

    def __init__(self, job_id: Any) -> None:
        super().__init__(f"job {job_id} could not start")
        self.job_id = job_id


def jobs_release(workflow: str, *, key: str) -> list[Any]:
    """Start as many of `key`'s waiting jobs as its limit has room for, oldest first, each in a
    transaction of its own; returns the ids started. A job whose start raises stops the release
    with StartFailed (the scan's sweep quarantines it, and the next oldest goes on)."""
    started: list[Any] = []
    while True:
        with unit_of_work() as unit:
            _lock_key(workflow, key)
            job_id = (
                _waiting(workflow, key)
                .filter(not_quarantined(QuarantineLoop.CONCURRENCY, now=db_now()))
                .order_by("created_at", "id")
                .values_list("id", flat=True)
                .first()
            )
            if job_id is None:
                return started
            holders = len(_holders(workflow, key))
            state = lock_job(unit, job_id=job_id)
            concurrency = Concurrency.of(state.job.workflow)
            limit = concurrency.limit if concurrency else holders + 1
            if holders >= limit:
                return started
            try:
                _start(unit, state, reason=f"key {key}: {holders} of {limit} running, a place freed")
            except Exception as exc:
                raise StartFailed(job_id) from exc
        started.append(job_id)


def _start(unit: Unit, state: JobState, *, reason: str, source: str = SOURCE, **fields: Any) -> None:
    """A waiting job starts: running, its deadline counted from now, its first steps dispatched
    (`fields` written with the move)."""
    job = state.job
    seconds = job.workflow.deadline_seconds
    job_transition(
        unit,
        job,
        J.RUNNING,
        source=source,
        reason=reason,
        deadline=unit.now + dt.timedelta(seconds=seconds) if seconds else None,
        **fields,
    )
    job_advance(unit, state=state, source=source)


def job_admit_waiting(
    unit: Unit, *, state: JobState, source: str, reason: str, fields: dict[str, Any] | None = None
) -> str:
    """A waiting job that passed its start gates (scheduler.services.gates; the caller holds its
    lock) meets its concurrency key, read from its input now, as a new job would at submission:
    it starts ("started"), or waits for its key ("waiting_for_key"). `fields` are written with
    it. `cancel_newest` never gets here: a workflow with gates cannot have it
    (scheduler.flow_definitions.gates_combination_check); were it there, the job would queue."""
    job = state.job
    fields = {**(fields or {}), "start_gate": "", "start_at": None}
    concurrency = Concurrency.of(job.workflow)
    key = key_value(concurrency, payload=job.input) if concurrency else ""
    if concurrency is not None and key:
        name = job.workflow.name
        _lock_key(name, key)
        holders = _holders(name, key)
        if len(holders) >= concurrency.limit or _waiting(name, key).exists():
            busy = f"key {key}: {len(holders)} of {concurrency.limit} running"
            if concurrency.on_limit == "cancel_in_progress":
                _cancel_holders(unit, holders, limit=concurrency.limit, key=key, actor=None, source=source)
            updates = {**fields, "concurrency_key": key, "updated_at": unit.now}
            if Job.objects.filter(pk=job.pk, status=J.WAITING).update(**updates) != 1:
                raise StaleWrite(f"job {job.pk} changed under us (expected waiting)")
            for name_, value in updates.items():
                setattr(job, name_, value)
            job_wait(
                unit,
                job=job,
                admission=Admission(key=key, start=False, reason=f"{reason}; {busy}: waiting for the key"),
                source=source,
                actor=None,
            )
            return "waiting_for_key"
    _start(unit, state, reason=reason, source=source, concurrency_key=key, **fields)
    return "started"


def on_key_freed(*, workflow: str, key: str, **_: Any) -> None:
    """Receiver of scheduler.transitions.key_freed (sent after the commit of a transaction in
    which a job left HOLDING): start what waits for the key. One read first, outside any lock:
    most keys have nobody waiting. A job made to wait by an admission that had not committed yet
    when this read ran looks again once it commits (job_wait); the scan's sweep is the backstop."""
    if not _waiting(workflow, key).exists():
        return
    try:
        jobs_release(workflow, key=key)
    except Exception:
        # The scan's sweep releases it at its next pass.
        logger.warning("concurrency key %s of %s: release failed", key, workflow, exc_info=True)


@dataclass(frozen=True)
class KeyRow:
    """One busy key, for the console's keys page."""

    workflow: str
    key: str
    limit: int | None
    holding: int
    waiting: int
    oldest_waiting: dt.datetime | None


def busiest_keys(*, limit: int = 100) -> list[KeyRow]:
    """The keys held or waited for now, most waiting first (then most held): one grouped read on
    job_concurrency_key_idx, and the latest versions' limits."""
    rows = (
        Job.objects.exclude(concurrency_key="")
        .filter(status__in=[*HOLDING, J.WAITING])
        .values("workflow__name", "concurrency_key")
        .annotate(
            holding=Count("pk", filter=Q(status__in=HOLDING)),
            waiting=Count("pk", filter=Q(status=J.WAITING)),
            oldest_waiting=Min("created_at", filter=Q(status=J.WAITING)),
        )
        .order_by("-waiting", "-holding", "workflow__name", "concurrency_key")[:limit]
    )
    limits: dict[str, int | None] = {}
    for name, spec in (
        Workflow.objects.filter(name__in={r["workflow__name"] for r in rows})
        .order_by("name", "-version")
        .values_list("name", "concurrency")
    ):
        limits.setdefault(name, (spec or {}).get("limit"))
    return [
        KeyRow(
            workflow=r["workflow__name"],
            key=r["concurrency_key"],
            limit=limits.get(r["workflow__name"]),
            holding=r["holding"],
            waiting=r["waiting"],
            oldest_waiting=r["oldest_waiting"],
        )
        for r in rows
    ]


def waiting_keys(*, limit: int = 500) -> list[tuple[str, str]]:
    """The (workflow, key) pairs that have waiting jobs, for the scan's sweep."""
    rows = (
        Job.objects.filter(status=J.WAITING)
        .exclude(concurrency_key="")
        .order_by()
        .values_list("workflow__name", "concurrency_key")
        .distinct()[:limit]
    )
    return list(rows)
