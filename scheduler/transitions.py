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
from typing import Any, cast

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection, transaction
from django.db.models import Field
from django.utils import timezone

from scheduler.errors import InvalidTransition, StaleWrite
from scheduler.faults import maybe_fail_after_commit
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
            cursor.execute("SELECT statement_timestamp()")
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
        #: Steps changed in this unit, with the (status, attempt) they had when read: written
        #: together, guarded on those, when the unit ends.
        self._steps: dict[int, tuple[Step, str, int]] = {}
        #: Outcomes for attempts in flight, written with the steps (see close_attempt).
        self._attempts: list[tuple[int, int, dict[str, Any]]] = []

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
            actor=cast(Any, actor) if actor is not None and actor.is_authenticated else None,
            source=source,
            reason=reason,
            data=data or {},
            created_at=self.now,
        )
        self.events.append(event)
        return event

    def step_changed(self, step: Step) -> None:
        """Remember `step` (and what it looked like before its first change in this unit)."""
        if step.pk not in self._steps:
            self._steps[step.pk] = (step, step.status, step.attempt)

    def close_attempt(self, step_id: int, number: int, fields: dict[str, Any]) -> None:
        """Record the outcome of attempt `number` of a step, written when the unit ends.

        Only for the attempt in flight of a step whose job lock this unit holds: under that lock
        the attempt cannot be finished by anybody else. The write is still guarded on
        `finished_at IS NULL`, and a miss fails the unit with StaleWrite.
        """
        unknown = set(fields) - set(ATTEMPT_OUTCOME_FIELDS)
        if unknown:
            raise ValueError(f"an outcome cannot write {sorted(unknown)}")
        self._attempts.append((step_id, number, fields))

    def flush(self) -> None:
        if self._steps or self._attempts:
            _write(list(self._steps.values()), self._attempts)
            self._steps = {}
            self._attempts = []
        if self.events:
            Event.objects.bulk_create(self.events)
            self.events = []


#: The columns a transition may change; a flush writes them all from the in-memory step, which
#: is authoritative: it was read under the job's lock by the unit that changed it.
STEP_WRITABLE = (
    "status",
    "attempt",
    "calls",
    "last_outcome",
    "pool",
    "endpoint",
    "deadline",
    "not_before",
    "first_dispatched_at",
    "output",
    "error",
    "updated_at",
    "finished_at",
)


ATTEMPT_OUTCOME_FIELDS = (
    "finished_at",
    "outcome",
    "decided_by",
    "status_code",
    "latency_ms",
    "response_excerpt",
    "error",
    "late_outcome",
    "late_at",
)


def _fields(model: Any, names: tuple[str, ...]) -> list[Field[Any, Any]]:
    return [cast("Field[Any, Any]", model._meta.get_field(name)) for name in names]


def _write(changed: list[tuple[Step, str, int]], attempts: list[tuple[int, int, dict[str, Any]]]) -> None:
    """Write a unit's step changes (and outcomes of attempts in flight) in one guarded statement
    on PostgreSQL, row by row elsewhere.

    Each step row is fenced on the status and attempt it had when read, each attempt on being
    unfinished: a row that another writer changed meanwhile fails the unit with StaleWrite.
    """
    if connection.vendor != "postgresql":
        _write_rows(changed, attempts)
        return
    from scheduler.models import Attempt

    quote = connection.ops.quote_name
    params: list[Any] = []
    parts: list[str] = []
    if attempts:
        a_fields = _fields(Attempt, ATTEMPT_OUTCOME_FIELDS)
        casts = ["bigint", "integer"] + [f.db_type(connection) or "text" for f in a_fields]
        row = "(" + ", ".join(f"CAST(%s AS {sql_type})" for sql_type in casts) + ")"
        for step_id, number, fields in attempts:
            params += [step_id, number]
            params += [
                f.get_db_prep_save(fields.get(f.attname, _attempt_default(f)), connection) for f in a_fields
            ]
        names = ", ".join(["step_id", "number", *(quote(str(f.column)) for f in a_fields)])
        sets = ", ".join(f"{quote(str(f.column))} = v.{quote(str(f.column))}" for f in a_fields)
        parts.append(
            f"closed AS (UPDATE {quote(Attempt._meta.db_table)} AS a SET {sets} "  # noqa: S608
            f"FROM (VALUES {', '.join([row] * len(attempts))}) AS v({names}) "
            "WHERE a.step_id = v.step_id AND a.number = v.number AND a.finished_at IS NULL "
            "RETURNING a.id)"
        )
    else:
        parts.append("closed AS (SELECT 1 AS id WHERE false)")
    if changed:
        s_fields = _fields(Step, STEP_WRITABLE)
        casts = ["bigint", "varchar", "integer"] + [f.db_type(connection) or "text" for f in s_fields]
        row = "(" + ", ".join(f"CAST(%s AS {sql_type})" for sql_type in casts) + ")"
        for step, status, attempt in changed:
            params += [step.pk, status, attempt]
            params += [f.get_db_prep_save(getattr(step, f.attname), connection) for f in s_fields]
        names = ", ".join(
            ["id", "expect_status", "expect_attempt", *(quote(str(f.column)) for f in s_fields)]
        )
        sets = ", ".join(f"{quote(str(f.column))} = v.{quote(str(f.column))}" for f in s_fields)
        parts.append(
            f"written AS (UPDATE {quote(Step._meta.db_table)} AS s SET {sets} "  # noqa: S608
            f"FROM (VALUES {', '.join([row] * len(changed))}) AS v({names}) "
            "WHERE s.id = v.id AND s.status = v.expect_status AND s.attempt = v.expect_attempt "
            "RETURNING s.id)"
        )
    else:
        parts.append("written AS (SELECT 1::bigint AS id WHERE false)")
    sql = "WITH " + ", ".join(parts) + " SELECT (SELECT count(*) FROM closed), ARRAY(SELECT id FROM written)"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        closed, written = cursor.fetchone()
    stale = [step.pk for step, _, _ in changed if step.pk not in set(written)]
    if stale:
        raise StaleWrite(f"steps {stale} changed under us")
    if closed != len(attempts):
        raise StaleWrite("an attempt in flight was finished by another writer")


def _attempt_default(field: Any) -> Any:
    return None if field.null else field.get_default()


def _write_rows(
    changed: list[tuple[Step, str, int]], attempts: list[tuple[int, int, dict[str, Any]]]
) -> None:
    from scheduler.models import Attempt

    for step_id, number, fields in attempts:
        if not Attempt.objects.filter(step_id=step_id, number=number, finished_at__isnull=True).update(
            **fields
        ):
            raise StaleWrite("an attempt in flight was finished by another writer")
    step_fields = _fields(Step, STEP_WRITABLE)
    for step, status, attempt in changed:
        values = {f.attname: getattr(step, f.attname) for f in step_fields}
        if Step.objects.filter(pk=step.pk, status=status, attempt=attempt).update(**values) != 1:
            raise StaleWrite(f"step {step.pk} changed under us (expected {status}, attempt {attempt})")


@contextmanager
def unit_of_work() -> Iterator[Unit]:
    """A transaction whose step changes and events are written just before it commits."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        unit = Unit()
        yield unit
        unit.flush()
    if outermost:
        maybe_fail_after_commit("a unit of work")


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
    """Move `step` to `to` (with `fields`), fenced on the status and attempt it was read with.

    Raises InvalidTransition at once for a move not in the table. The row is written when the
    unit ends, together with every other step the unit changed, in one UPDATE guarded on what
    each row looked like when read; a row changed meanwhile by another writer makes the unit
    fail with StaleWrite and roll back.
    """
    frm = step.status
    _check(STEP_TRANSITIONS, STEP_OPERATOR_ONLY, "step", frm, to, actor)
    unknown = set(fields) - set(STEP_WRITABLE)
    if unknown:
        raise ValueError(f"a transition cannot write {sorted(unknown)}")
    updates: dict[str, Any] = {"status": to, "updated_at": unit.now, **fields}
    if to in STEP_TERMINAL:
        updates.setdefault("finished_at", unit.now)
    elif "finished_at" not in updates and step.finished_at is not None:
        updates["finished_at"] = None
    unit.step_changed(step)
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


def step_postpone(unit: Unit, step: Step, *, deadline: dt.datetime, source: str, reason: str) -> None:
    """Move the deadline of a dispatched step (no change of status), fenced like a transition."""
    if step.status != S.DISPATCHED:
        raise InvalidTransition(f"only a dispatched step has a deadline to move, not a {step.status} one")
    unit.step_changed(step)
    step.deadline = deadline
    step.updated_at = unit.now
    unit.event(
        job_id=step.job_id,
        step=step,
        kind="deadline_extended",
        source=source,
        attempt=step.attempt or None,
        reason=reason,
        data={"deadline": deadline.isoformat()},
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
