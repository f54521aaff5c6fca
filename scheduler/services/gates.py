"""Debounce and throttle of job starts by key: the gates a new job passes before its concurrency
key (scheduler.services.flow), in this order: debounce, throttle, concurrency.

A workflow may declare (scheduler.flow_definitions.debounce_check, throttle_check):
- `debounce: {"key": "<expression over the input>", "seconds": S, "max_seconds": M}`: a job
  waits S seconds after its submission before it starts; a newer job of the same key value
  submitted meanwhile replaces it (the newest input wins): the older ends `cancelled`, its event
  naming its successor, and the quiet period starts again from the newest submission. With
  `max_seconds`, the chain of replacements waits at most M seconds from its first submission.
- `throttle: {"key": "<expression over the input>", "per_seconds": P, "limit": L}`: at most L
  starts per P seconds per key value; the others wait, and start in arrival order as the window
  allows.

A job at a gate is `waiting` (no step dispatched, no worker, no queue row, no deadline) with
`start_gate` naming the gate and `start_at` the time it opens. Its key values are read from the
input when it is created and kept on its row (`debounce_key`, `throttle_key`); an expression that
reads nothing leaves the job out of that gate. Its concurrency key is read when it leaves the
gates (flow.job_admit_waiting): a job at a gate never counts as waiting for its key.

The throttle counts starts in the database: each job that passes it keeps the time it did
(`throttle_slot`), and the newest `limit` of a key (on job_throttle_slot_idx) say whether the
window has room. A job that finds none waits for its place: the first time the window allows
after the starts made and the places of the jobs waiting ahead of it, so that the waiting jobs
start in arrival order. When its place comes it starts only if the window has room then (a start
ahead of it may have come late): otherwise its place and those behind it move as late.

Every decision is made under an advisory lock of its gate and key (`sas_debounce:<workflow>:<key>`,
`sas_throttle:<workflow>:<key>`; SQLite has one writer), so two submissions on one key take
turns, and every move of a job under its row lock. The jobs whose gate opened are passed by the
supervisor: its loop's tick between scans (a fraction of a second after their time, while a
supervisor holds the lease) and the scan's sweep (the backstop), each job in a transaction of its
own (`job_pass`), one that raises quarantined without stopping the others. The SQL fast path
(`scheduler/sql/postgresql/sas_submit.sql`) leaves every job of a workflow with a gate to the
Python path.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db.models import F

from sas_project import database
from sas_project.errors import StaleWrite
from scheduler.models import EventKind, Job, JobStatus, QuarantineLoop, StepStatus, Workflow
from scheduler.services.flow import (
    DEBOUNCE,
    THROTTLE,
    expression_key,
    job_admit_waiting,
    waiting_for,
)
from scheduler.services.locking import JobState, lock_job
from scheduler.services.quarantine import not_quarantined
from scheduler.transitions import job_transition, step_transition
from scheduler.unit import Unit, User, unit_of_work

J = JobStatus
S = StepStatus


@dataclass(frozen=True)
class Debounce:
    key: str
    seconds: float
    max_seconds: float | None = None

    @classmethod
    def of(cls, workflow: Workflow) -> Debounce | None:
        spec = workflow.debounce
        if not spec:
            return None
        bound = spec.get("max_seconds")
        return cls(
            key=spec["key"], seconds=float(spec["seconds"]), max_seconds=float(bound) if bound else None
        )


@dataclass(frozen=True)
class Throttle:
    key: str
    per_seconds: float
    limit: int

    @classmethod
    def of(cls, workflow: Workflow) -> Throttle | None:
        spec = workflow.throttle
        if not spec:
            return None
        return cls(key=spec["key"], per_seconds=float(spec["per_seconds"]), limit=int(spec["limit"]))


@dataclass(frozen=True)
class Gate:
    """Where a new job stops before its concurrency key: at no gate (`kind` empty: it goes on to
    its key), or at the debounce or the throttle until `until`. The fields are the job's columns
    of the same names; `replaces` is the locked job it replaces (debounce)."""

    kind: str = ""
    until: dt.datetime | None = None
    debounce_key: str = ""
    debounce_since: dt.datetime | None = None
    throttle_key: str = ""
    throttle_slot: dt.datetime | None = None
    replaces: JobState | None = None
    reason: str = ""

    def columns(self) -> dict[str, Any]:
        """The job's columns this gate sets when the job is created."""
        return {
            "start_gate": self.kind,
            "start_at": self.until,
            "debounce_key": self.debounce_key,
            "debounce_since": self.debounce_since,
            "throttle_key": self.throttle_key,
            "throttle_slot": self.throttle_slot,
        }


def _lock(gate: str, workflow: str, key: str) -> None:
    """Serialize the decisions of one gate on one key (till the transaction ends)."""
    database.lock_until_commit(f"sas_{gate}:{workflow}:{key}")


def job_gate(unit: Unit, *, workflow: Workflow, payload: Any) -> Gate:
    """The gate a new job of `workflow` with input `payload` stops at (in the caller's
    transaction, which then creates the job and calls `job_gated`). A job it replaces is locked
    here, before anything is written."""
    debounce, throttle = Debounce.of(workflow), Throttle.of(workflow)
    throttle_key = expression_key(throttle.key, payload=payload, what="throttle") if throttle else ""
    if debounce is not None:
        key = expression_key(debounce.key, payload=payload, what="debounce")
        if key:
            return _debounce_gate(unit, workflow.name, debounce, key, throttle_key=throttle_key)
    if throttle is not None and throttle_key:
        return _throttle_gate(unit, workflow.name, throttle, throttle_key)
    return Gate()


def _debounce_gate(unit: Unit, workflow: str, debounce: Debounce, key: str, *, throttle_key: str) -> Gate:
    _lock(DEBOUNCE, workflow, key)
    now = unit.now
    replaced = _replaceable(unit, workflow, key)
    since = (replaced.job.debounce_since or replaced.job.created_at) if replaced is not None else now
    until = now + dt.timedelta(seconds=debounce.seconds)
    bounded = ""
    if debounce.max_seconds is not None and since + dt.timedelta(seconds=debounce.max_seconds) < until:
        # The replaced job's own start_at never passes this bound, and it was still ahead: so
        # is this one.
        until = since + dt.timedelta(seconds=debounce.max_seconds)
        bounded = f", at most {debounce.max_seconds:g}s after the first submission it replaced"
    reason = f"debounce key {key}: starts {debounce.seconds:g}s after its submission unless replaced{bounded}"
    if replaced is not None:
        reason += f"; it replaces job {replaced.job.pk}"
    return Gate(
        kind=DEBOUNCE,
        until=until,
        debounce_key=key,
        debounce_since=since,
        throttle_key=throttle_key,
        replaces=replaced,
        reason=reason,
    )


def _replaceable(unit: Unit, workflow: str, key: str) -> JobState | None:
    """The job of `key` still in its quiet period (at most one: each newcomer replaces it),
    locked. One whose quiet period is over is not replaced even if it has not passed the gate
    yet: its time came, and a chain's max_seconds would otherwise not hold."""
    job_id = (
        Job.objects.filter(
            workflow__name=workflow,
            debounce_key=key,
            status=J.WAITING,
            start_gate=DEBOUNCE,
            start_at__gt=unit.now,
        )
        .order_by("-created_at")
        .values_list("id", flat=True)
        .first()
    )
    if job_id is None:
        return None
    state = lock_job(unit, job_id=job_id)
    job = state.job
    if (
        job.status != J.WAITING
        or job.start_gate != DEBOUNCE
        or job.start_at is None
        or job.start_at <= unit.now
    ):
        return None  # an operator cancelled it, or its time came, while this waited for its lock
    return state


def _ahead(at: dt.datetime | None, now: dt.datetime) -> bool:
    return at is not None and at > now


def _throttle_gate(unit: Unit, workflow: str, throttle: Throttle, key: str) -> Gate:
    """A job arriving at `key`'s throttle: it passes now when the window has room and nobody
    waits ahead of it, else it waits for the first place the window allows after the starts
    made and the places of the jobs waiting ahead."""
    _lock(THROTTLE, workflow, key)
    now = unit.now
    # Read on job_start_gate_idx (the jobs waiting at a gate).
    planned = [
        at
        for at in Job.objects.filter(
            workflow__name=workflow, status=J.WAITING, start_gate=THROTTLE, throttle_key=key
        )
        .order_by("-start_at")
        .values_list("start_at", flat=True)[: throttle.limit]
        if at is not None
    ]
    taken = sorted([*_starts(workflow, key, throttle), *planned], reverse=True)[: throttle.limit]
    slot = max([now, *taken[:1]])
    if len(taken) >= throttle.limit:
        slot = max(slot, taken[-1] + dt.timedelta(seconds=throttle.per_seconds))
    window = f"throttle key {key}: {throttle.limit} per {throttle.per_seconds:g}s"
    if slot <= now and not planned:
        return Gate(throttle_key=key, throttle_slot=now, reason=window)
    return Gate(
        kind=THROTTLE,
        until=slot,
        throttle_key=key,
        reason=f"{window}: its place in the window is at {slot.isoformat()}",
    )


def _starts(workflow: str, key: str, throttle: Throttle) -> list[dt.datetime]:
    """The newest `limit` starts counted on `key`'s throttle, newest first (on
    job_throttle_slot_idx)."""
    rows = (
        Job.objects.filter(workflow__name=workflow, throttle_key=key, throttle_slot__isnull=False)
        .order_by("-throttle_slot")
        .values_list("throttle_slot", flat=True)[: throttle.limit]
    )
    return [at for at in rows if at is not None]


def _throttle_room(unit: Unit, job: Job, throttle: Throttle) -> bool:
    """Whether the throttled job whose place came may start now: the window holds fewer than
    `limit` starts. A start ahead of it that came late (a pass is a fraction of a second after
    its place) moves its place and those of the jobs waiting behind it as late, in order."""
    name, key = job.workflow.name, job.throttle_key
    _lock(THROTTLE, name, key)
    starts = _starts(name, key, throttle)
    if len(starts) < throttle.limit or job.start_at is None:
        return True
    opens = starts[-1] + dt.timedelta(seconds=throttle.per_seconds)
    if opens <= unit.now:
        return True
    # Not a new wait (no event): the same wait, ending as much later as the start ahead was late.
    Job.objects.filter(
        workflow__name=name,
        status=J.WAITING,
        start_gate=THROTTLE,
        throttle_key=key,
        start_at__gte=job.start_at,
    ).update(start_at=F("start_at") + (opens - job.start_at))
    return False


def job_gated(unit: Unit, *, job: Job, gate: Gate, source: str, actor: User | None) -> None:
    """A job created at `gate` (after its `job_submitted` event): the job it replaces ends
    cancelled, naming it, and its own event says where it waits and whom it replaced."""
    replaced = gate.replaces
    if replaced is not None:
        job_cancel_unstarted(
            unit,
            state=replaced,
            source=source,
            actor=actor,
            reason=f"replaced by job {job.pk} (debounce key {gate.debounce_key}): the newest input wins",
            data={"replaced_by": str(job.pk), "debounce_key": gate.debounce_key},
        )
    unit.event(
        job_id=job.pk,
        kind=EventKind.JOB_WAITING,
        source=source,
        actor=actor,
        reason=gate.reason,
        data={
            "waiting_for": waiting_for(job),
            **({"replaced": str(replaced.job.pk)} if replaced is not None else {}),
        },
    )


def job_cancel_unstarted(
    unit: Unit, *, state: JobState, source: str, actor: User | None, reason: str, data: dict[str, Any]
) -> None:
    """A waiting job that never started ends cancelled (the caller holds its lock): nothing was
    called, so there is nothing to compensate; its steps are skipped."""
    job_transition(
        unit,
        state.job,
        J.CANCELLED,
        source=source,
        reason=reason,
        actor=actor,
        data=data,
        start_gate="",
        start_at=None,
    )
    for step in state.actions:
        if step.status == S.PENDING:
            step_transition(unit, step, S.SKIPPED, source=source, reason="job is cancelled: never started")


def job_pass(job_id: Any, *, source: str) -> str:
    """Pass the gate of waiting job `job_id` if it opened, in a transaction of its own: a
    debounced job goes on to the throttle (and may wait there), then to its concurrency key
    (scheduler.services.flow.job_admit_waiting). Returns what happened: "started", "throttled",
    "waiting_for_key", or "" (the job is not at an open gate, or another transaction holds it:
    the next pass looks again)."""
    with unit_of_work() as unit:
        state = lock_job(unit, job_id=job_id, skip_locked=True)
        if state is None:
            return ""
        job = state.job
        if job.status != J.WAITING or not job.start_gate or job.start_at is None or job.start_at > unit.now:
            return ""
        fields: dict[str, Any] = {}
        if job.start_gate == DEBOUNCE:
            reason = f"debounce key {job.debounce_key}: quiet since its submission"
            throttle = Throttle.of(job.workflow)
            if throttle is not None and job.throttle_key:
                gate = _throttle_gate(unit, job.workflow.name, throttle, job.throttle_key)
                if gate.kind:
                    _wait_again(unit, job=job, gate=gate, source=source, reason=f"{reason}; {gate.reason}")
                    return "throttled"
                fields["throttle_slot"] = gate.throttle_slot
                reason = f"{reason}; {gate.reason}"
        else:
            throttle = Throttle.of(job.workflow)
            if throttle is not None and not _throttle_room(unit, job, throttle):
                return ""
            fields["throttle_slot"] = unit.now
            reason = f"throttle key {job.throttle_key}: its place in the window came"
        return job_admit_waiting(unit, state=state, source=source, reason=reason, fields=fields)


def _wait_again(unit: Unit, *, job: Job, gate: Gate, source: str, reason: str) -> None:
    """A debounced job whose quiet period ended waits for its place in the throttle's window."""
    updates = {"start_gate": gate.kind, "start_at": gate.until, "updated_at": unit.now}
    if Job.objects.filter(pk=job.pk, status=J.WAITING, start_gate=DEBOUNCE).update(**updates) != 1:
        raise StaleWrite(f"job {job.pk} changed under us (expected waiting at its debounce)")
    for name, value in updates.items():
        setattr(job, name, value)
    unit.event(
        job_id=job.pk,
        kind=EventKind.JOB_WAITING,
        source=source,
        reason=reason,
        data={"waiting_for": waiting_for(job)},
    )


def gates_due(now: dt.datetime, *, limit: int, exclude: set[Any] | None = None) -> list[Any]:
    """Up to `limit` waiting jobs whose gate opened, earliest first, then in arrival order (on
    job_start_gate_idx), but those in `exclude` and those quarantined lately (the concurrency
    loop's quarantine: the one that starts waiting jobs)."""
    return list(
        Job.objects.filter(status=J.WAITING, start_at__lte=now)
        .exclude(start_gate="")
        .filter(not_quarantined(QuarantineLoop.CONCURRENCY, now=now))
        .exclude(pk__in=list(exclude or ()))
        .order_by("start_at", "created_at", "id")
        .values_list("id", flat=True)[:limit]
    )


@dataclass(frozen=True)
class GateWait:
    """Why a waiting job waits at a gate, for the console."""

    kind: str
    key: str
    until: dt.datetime
    #: The throttle's limit and window (throttle only).
    limit: int | None = None
    per_seconds: float | None = None


def gate_wait(job: Job) -> GateWait | None:
    """The gate a waiting job waits at (None when it waits at none)."""
    if job.status != J.WAITING or not job.start_gate or job.start_at is None:
        return None
    if job.start_gate == DEBOUNCE:
        return GateWait(kind=DEBOUNCE, key=job.debounce_key, until=job.start_at)
    throttle = Throttle.of(job.workflow)
    return GateWait(
        kind=THROTTLE,
        key=job.throttle_key,
        until=job.start_at,
        limit=throttle.limit if throttle else None,
        per_seconds=throttle.per_seconds if throttle else None,
    )
