"""The job and step state machines: the only code that writes a `status` field.

Each transition is a guarded write (`UPDATE ... WHERE id = .. AND status = <expected> [AND attempt
= <expected>]`) whose row count is checked, and it adds its Event to the current unit of work, so
the change and its history commit together. The allowed transitions are data (below); a pair
that is not listed raises InvalidTransition, and a pair listed as operator-only needs an actor.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection, transaction
from django.utils import timezone

from scheduler.errors import InvalidTransition, StaleWrite
from scheduler.models import Event, Job, JobStatus, Step, StepStatus

S = StepStatus
J = JobStatus

STEP_TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.DISPATCHED, S.SKIPPED}),
    S.DISPATCHED: frozenset({S.SUCCEEDED, S.ATTEMPT_FAILED, S.UNKNOWN}),
    S.ATTEMPT_FAILED: frozenset({S.DISPATCHED, S.RETRY_WAIT, S.FAILED, S.HELD, S.SUCCEEDED}),
    S.UNKNOWN: frozenset({S.DISPATCHED, S.RETRY_WAIT, S.FAILED, S.HELD, S.SUCCEEDED}),
    S.RETRY_WAIT: frozenset({S.DISPATCHED, S.FAILED, S.HELD, S.SUCCEEDED}),
    S.HELD: frozenset({S.DISPATCHED, S.SUCCEEDED, S.FAILED}),
    S.SUCCEEDED: frozenset({S.COMPENSATED}),
    S.FAILED: frozenset({S.DISPATCHED, S.SUCCEEDED, S.COMPENSATED}),
    S.SKIPPED: frozenset(),
    S.COMPENSATED: frozenset(),
}

#: Moves that reopen settled work: only an operator may make them, and the event names them.
STEP_OPERATOR_ONLY: frozenset[tuple[str, str]] = frozenset(
    {(S.HELD, S.DISPATCHED), (S.FAILED, S.DISPATCHED), (S.FAILED, S.SUCCEEDED)}
)

STEP_TERMINAL = frozenset({S.SUCCEEDED, S.FAILED, S.SKIPPED, S.COMPENSATED})

JOB_TRANSITIONS: dict[str, frozenset[str]] = {
    J.PENDING: frozenset({J.RUNNING, J.COMPENSATING, J.CANCELLED, J.FAILED}),
    J.RUNNING: frozenset({J.SUCCEEDED, J.COMPENSATING, J.FAILED, J.NEEDS_ATTENTION, J.CANCELLED}),
    J.NEEDS_ATTENTION: frozenset({J.RUNNING, J.SUCCEEDED, J.COMPENSATING, J.FAILED, J.CANCELLED}),
    J.COMPENSATING: frozenset({J.COMPENSATED, J.CANCELLED, J.NEEDS_ATTENTION}),
    J.FAILED: frozenset({J.COMPENSATING, J.RUNNING}),
    J.SUCCEEDED: frozenset(),
    J.COMPENSATED: frozenset(),
    J.CANCELLED: frozenset(),
}

JOB_OPERATOR_ONLY: frozenset[tuple[str, str]] = frozenset({(J.FAILED, J.COMPENSATING), (J.FAILED, J.RUNNING)})

User = AbstractBaseUser | AnonymousUser


def db_now() -> dt.datetime:
    """The database's clock. Deadlines and leases never use a worker's clock."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")
            value: dt.datetime = cursor.fetchone()[0]
            return value
    # SQLite is embedded: its clock is this host's clock.
    return timezone.now()


class Unit:
    """One transaction of state changes: its clock reading and the events it will write.

    `now` is the database's clock at the start of the transaction (PostgreSQL's now() is fixed
    for a transaction), so every timestamp a unit writes agrees with every other.
    """

    def __init__(self) -> None:
        self._now: dt.datetime | None = None
        self.events: list[Event] = []

    @property
    def now(self) -> dt.datetime:
        if self._now is None:
            self._now = db_now()
        return self._now

    @now.setter
    def now(self, value: dt.datetime) -> None:
        self._now = value

    def event(
        self,
        *,
        job_id: Any,
        kind: str,
        source: str,
        step: Step | None = None,
        from_status: str = "",
        to_status: str = "",
        attempt: int | None = None,
        actor: User | None = None,
        reason: str = "",
        data: dict[str, Any] | None = None,
    ) -> Event:
        event = Event(
            job_id=job_id,
            step=step,
            kind=kind,
            from_status=from_status,
            to_status=to_status,
            attempt=attempt,
            actor=actor if actor is not None and actor.is_authenticated else None,
            source=source,
            reason=reason,
            data=data or {},
            created_at=self.now,
        )
        self.events.append(event)
        return event

    def flush(self) -> None:
        if self.events:
            Event.objects.bulk_create(self.events)
            self.events = []


@contextmanager
def unit_of_work() -> Iterator[Unit]:
    """A transaction whose events are written (in one INSERT) just before it commits."""
    with transaction.atomic():
        unit = Unit()
        yield unit
        unit.flush()


def _check(
    table: dict[str, frozenset[str]],
    operator_only: frozenset[tuple[str, str]],
    what: str,
    frm: str,
    to: str,
    actor: User | None,
) -> None:
    if to not in table[frm]:
        raise InvalidTransition(f"{what} cannot go from {frm} to {to}", frm=frm, to=to)
    if (frm, to) in operator_only and (actor is None or not actor.is_authenticated):
        raise InvalidTransition(f"only an operator may move a {what} from {frm} to {to}", frm=frm, to=to)


def step_transition(
    unit: Unit,
    step: Step,
    to: str,
    *,
    source: str,
    kind: str | None = None,
    reason: str = "",
    actor: User | None = None,
    data: dict[str, Any] | None = None,
    **fields: Any,
) -> None:
    """Move `step` to `to`, fenced on its current status and attempt number.

    `fields` are written in the same UPDATE. Raises InvalidTransition for a move not in the
    table and StaleWrite when the row no longer has the status and attempt this process read.
    """
    frm = step.status
    _check(STEP_TRANSITIONS, STEP_OPERATOR_ONLY, "step", frm, to, actor)
    updates: dict[str, Any] = {"status": to, "updated_at": unit.now, **fields}
    if to in STEP_TERMINAL:
        updates.setdefault("finished_at", unit.now)
    elif "finished_at" not in updates and step.finished_at is not None:
        updates["finished_at"] = None
    changed = Step.objects.filter(pk=step.pk, status=frm, attempt=step.attempt).update(**updates)
    if changed != 1:
        raise StaleWrite(f"step {step.pk} changed under us (expected {frm}, attempt {step.attempt})")
    for name, value in updates.items():
        setattr(step, name, value)
    unit.event(
        job_id=step.job_id,
        step=step,
        kind=kind or f"step_{to}",
        source=source,
        from_status=frm,
        to_status=to,
        attempt=step.attempt or None,
        actor=actor,
        reason=reason,
        data=data,
    )


def job_transition(
    unit: Unit,
    job: Job,
    to: str,
    *,
    source: str,
    kind: str | None = None,
    reason: str = "",
    actor: User | None = None,
    data: dict[str, Any] | None = None,
    **fields: Any,
) -> None:
    """Move `job` to `to`, fenced on its current status. Same contract as step_transition."""
    frm = job.status
    _check(JOB_TRANSITIONS, JOB_OPERATOR_ONLY, "job", frm, to, actor)
    updates: dict[str, Any] = {"status": to, "updated_at": unit.now, **fields}
    if not JOB_TRANSITIONS[to]:
        updates.setdefault("finished_at", unit.now)
    elif job.finished_at is not None:
        updates.setdefault("finished_at", None)
    changed = Job.objects.filter(pk=job.pk, status=frm).update(**updates)
    if changed != 1:
        raise StaleWrite(f"job {job.pk} changed under us (expected {frm})")
    for name, value in updates.items():
        setattr(job, name, value)
    unit.event(
        job_id=job.pk,
        kind=kind or f"job_{to}",
        source=source,
        from_status=frm,
        to_status=to,
        actor=actor,
        reason=reason,
        data=data,
    )


def job_set_paused(
    unit: Unit, job: Job, *, paused: bool, source: str, actor: User | None, reason: str = ""
) -> None:
    """Pause (no new dispatches) or resume a job. Pausing is orthogonal to the job's status."""
    value = unit.now if paused else None
    changed = Job.objects.filter(pk=job.pk, paused_at__isnull=paused).update(
        paused_at=value, updated_at=unit.now
    )
    if changed != 1:
        raise StaleWrite(f"job {job.pk} is already {'paused' if paused else 'running'}")
    job.paused_at = value
    job.updated_at = unit.now
    unit.event(
        job_id=job.pk,
        kind="job_paused" if paused else "job_resumed",
        source=source,
        actor=actor,
        reason=reason,
    )
