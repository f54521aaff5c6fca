"""The unit of work: one transaction's clock reading, its pending guarded writes and its events.

The state machines (scheduler.transitions) change steps and attempts in memory and register the
change here; when the unit ends, every step it changed is written in one statement guarded on
what each row looked like when read, every attempt write in one statement guarded on the
attempt's phase, the new attempts in one INSERT and the events in one INSERT, all before the
transaction commits. A row that another writer changed meanwhile fails the unit with StaleWrite,
and the whole transaction rolls back.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Any, cast

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection, transaction
from django.db.models import Field
from django.utils import timezone

from sas_project.database import is_postgresql
from sas_project.errors import StaleWrite
from scheduler.faults import maybe_fail_after_commit
from scheduler.models import EVENT_KINDS, Attempt, Event, EventKind, Step

User = AbstractBaseUser | AnonymousUser


def db_now() -> dt.datetime:
    """The database's clock. Deadlines and leases never use a worker's clock."""
    if is_postgresql():
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement_timestamp()")
            value: dt.datetime = cursor.fetchone()[0]
            return value
    # SQLite is embedded: its clock is this host's clock.
    return timezone.now()


#: The columns a step transition may change; a flush writes them all from the in-memory step,
#: which is authoritative: it was read under the job's lock by the unit that changed it.
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
    "status_reason",
    "input_override",
    "operation_id",
    "concurrency_key",
    "rate_key",
    "waiting_since",
    "escalation_rung",
    "escalation_group",
    "updated_at",
    "finished_at",
)

#: The columns an attempt's moves may change once the attempt exists.
ATTEMPT_WRITABLE = (
    "started_at",
    "deadline",
    "finished_at",
    "outcome",
    "decided_by",
    "status_code",
    "latency_ms",
    "response_excerpt",
    "error",
    "late_outcome",
    "late_at",
    "heartbeat_at",
    "heartbeat_details",
    "retry_after_seconds",
)


class AttemptGuard(Enum):
    """Which phase an attempt write expects the row in."""

    #: In flight (`finished_at IS NULL`); a miss fails the unit.
    LIVE = "live"
    #: In flight if there is one; a miss changes nothing (closing whatever is still open).
    LIVE_IF_ANY = "live_if_any"
    #: Finished and no late outcome noted yet; a miss fails the unit.
    FINISHED_UNNOTED = "finished_unnoted"


@dataclass(frozen=True)
class AttemptWrite:
    step_id: int
    number: int
    fields: dict[str, Any]
    guard: AttemptGuard


class Unit:
    """One transaction of state changes: its clock reading and the writes it will make.

    `now` is the database's clock at the start of the transaction (PostgreSQL's now() is fixed
    for a transaction), so every timestamp a unit writes agrees with every other.
    """

    def __init__(self) -> None:
        self._now: dt.datetime | None = None
        self.events: list[Event] = []
        #: Steps changed in this unit, with the (status, attempt) they had when read.
        self._steps: dict[int, tuple[Step, str, int]] = {}
        #: The statuses each step moved through in this unit, in order.
        self._paths: dict[int, list[str]] = {}
        self._attempt_writes: list[AttemptWrite] = []
        self._new_attempts: list[Attempt] = []

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
        kind: EventKind,
        source: str,
        step: Step | None = None,
        from_status: str = "",
        to_status: str = "",
        attempt: int | None = None,
        actor: User | None = None,
        reason: str = "",
        data: dict[str, Any] | None = None,
    ) -> Event:
        if kind not in EVENT_KINDS:
            raise ValueError(f"{kind!r} is not an EventKind")
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

    def step_changed(self, step: Step, to: str | None = None) -> None:
        """Remember `step` (and what it looked like before its first change in this unit), and
        the status it moves `to`, if it moves."""
        if step.pk not in self._steps:
            self._steps[step.pk] = (step, step.status, step.attempt)
        if to is not None:
            self._paths.setdefault(step.pk, []).append(to)

    def attempt_write(self, write: AttemptWrite) -> None:
        """Register a guarded write of one attempt. Two moves of one attempt in one unit are
        merged into one write, guarded on the phase the row had when the unit read it."""
        unknown = set(write.fields) - set(ATTEMPT_WRITABLE)
        if unknown:
            raise ValueError(f"an attempt move cannot write {sorted(unknown)}")
        for index, pending in enumerate(self._attempt_writes):
            if (pending.step_id, pending.number) == (write.step_id, write.number):
                merged = AttemptWrite(
                    write.step_id, write.number, {**pending.fields, **write.fields}, pending.guard
                )
                self._attempt_writes[index] = merged
                return
        self._attempt_writes.append(write)

    def pending_attempt_writes(self) -> list[AttemptWrite]:
        """The attempt writes this unit will make (a reader inside the unit must see them)."""
        return list(self._attempt_writes)

    def attempt_insert(self, attempt: Attempt) -> None:
        self._new_attempts.append(attempt)

    def _write_intermediate_moves(self) -> None:
        """A step that moved more than once in this unit (dispatched -> unknown -> retry_wait)
        passes through each status in the database too, one fenced write per move before the
        last, so that the database's guard of the state machine (scheduler/sql/) sees every move
        and not a shortcut the table does not allow."""
        for step_id, path in self._paths.items():
            if len(path) < 2:
                continue
            step, status, attempt = self._steps[step_id]
            for to in path[:-1]:
                if Step.objects.filter(pk=step_id, status=status, attempt=attempt).update(status=to) != 1:
                    raise StaleWrite(f"step {step_id} changed under us (expected {status}, {attempt})")
                status = to
            self._steps[step_id] = (step, status, attempt)

    def flush(self) -> None:
        """Write everything pending: attempts' moves, steps, then new attempts (a new attempt may
        only exist once the one before it is closed), then the events."""
        if self._steps or self._attempt_writes:
            self._write_intermediate_moves()
            if is_postgresql():
                _write_pg(list(self._steps.values()), self._attempt_writes)
            else:
                _write_rows(list(self._steps.values()), self._attempt_writes)
            self._steps = {}
            self._paths = {}
            self._attempt_writes = []
        if self._new_attempts:
            Attempt.objects.bulk_create(self._new_attempts)
            self._new_attempts = []
        if self.events:
            # What reacts to events (alerts) hears of them from the database, as of the events
            # any other writer makes (scheduler.outbox.REACTION_KINDS).
            if is_postgresql():
                insert_events_pg(self.events)
            else:
                Event.objects.bulk_create(self.events)
            self.events = []


@contextmanager
def unit_of_work() -> Iterator[Unit]:
    """A transaction whose writes and events are made just before it commits (a savepoint inside
    a caller's transaction)."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        unit = Unit()
        yield unit
        unit.flush()
    if outermost:
        maybe_fail_after_commit("a unit of work")


# --- writers ----------------------------------------------------------------------------------

_GUARD_SQL = {
    AttemptGuard.LIVE: "a.finished_at IS NULL",
    AttemptGuard.LIVE_IF_ANY: "a.finished_at IS NULL",
    AttemptGuard.FINISHED_UNNOTED: "a.finished_at IS NOT NULL AND a.late_outcome = ''",
}


def _fields(model: Any, names: tuple[str, ...] | list[str]) -> list[Field[Any, Any]]:
    return [cast("Field[Any, Any]", model._meta.get_field(name)) for name in names]


def _groups(writes: list[AttemptWrite]) -> dict[tuple[AttemptGuard, tuple[str, ...]], list[AttemptWrite]]:
    groups: dict[tuple[AttemptGuard, tuple[str, ...]], list[AttemptWrite]] = {}
    for write in writes:
        key = (write.guard, tuple(sorted(write.fields)))
        groups.setdefault(key, []).append(write)
    return groups


def _array_type(field: Field[Any, Any]) -> str:
    return f"{field.db_type(connection) or 'text'}[]"


def _unnest(columns: list[tuple[str, str, list[Any]]]) -> tuple[str, list[Any]]:
    """`unnest(%s::type[], ...) AS v(name, ...)` and its parameters: one array per column, so the
    statement has a fixed number of parameters however many rows it writes."""
    casts = ", ".join(f"%s::{sql_type}" for _, sql_type, _ in columns)
    names = ", ".join(name for name, _, _ in columns)
    return f"unnest({casts}) AS v({names})", [values for _, _, values in columns]


def _write_pg(changed: list[tuple[Step, str, int]], writes: list[AttemptWrite]) -> None:
    """One statement: each group of attempt writes (same guard, same columns) and the steps, each
    row fenced on what the unit read. Rows travel as one array per column."""
    quote = connection.ops.quote_name
    params: list[Any] = []
    parts: list[str] = []
    counts: list[tuple[str, int, bool]] = []
    for index, ((guard, names), group) in enumerate(_groups(writes).items()):
        a_fields = _fields(Attempt, list(names))
        source, values = _unnest(
            [
                ("step_id", "bigint[]", [w.step_id for w in group]),
                ("number", "integer[]", [w.number for w in group]),
                *(
                    (
                        quote(str(f.column)),
                        _array_type(f),
                        [f.get_db_prep_save(w.fields[f.attname], connection) for w in group],
                    )
                    for f in a_fields
                ),
            ]
        )
        params += values
        sets = ", ".join(f"{quote(str(f.column))} = v.{quote(str(f.column))}" for f in a_fields)
        name = f"attempts{index}"
        parts.append(
            f"{name} AS (UPDATE {quote(Attempt._meta.db_table)} AS a SET {sets} FROM {source} "  # noqa: S608
            f"WHERE a.step_id = v.step_id AND a.number = v.number AND {_GUARD_SQL[guard]} "
            "RETURNING a.id)"
        )
        counts.append((name, len(group), guard is not AttemptGuard.LIVE_IF_ANY))
    if changed:
        s_fields = _fields(Step, STEP_WRITABLE)
        source, values = _unnest(
            [
                ("id", "bigint[]", [step.pk for step, _, _ in changed]),
                ("expect_status", "varchar[]", [status for _, status, _ in changed]),
                ("expect_attempt", "integer[]", [attempt for _, _, attempt in changed]),
                *(
                    (
                        quote(str(f.column)),
                        _array_type(f),
                        [f.get_db_prep_save(getattr(step, f.attname), connection) for step, _, _ in changed],
                    )
                    for f in s_fields
                ),
            ]
        )
        params += values
        sets = ", ".join(f"{quote(str(f.column))} = v.{quote(str(f.column))}" for f in s_fields)
        parts.append(
            f"written AS (UPDATE {quote(Step._meta.db_table)} AS s SET {sets} FROM {source} "  # noqa: S608
            "WHERE s.id = v.id AND s.status = v.expect_status AND s.attempt = v.expect_attempt "
            "RETURNING s.id)"
        )
    else:
        parts.append("written AS (SELECT 1::bigint AS id WHERE false)")
    selects = [f"(SELECT count(*) FROM {name})" for name, _, _ in counts]  # noqa: S608
    # Only column and CTE names are formatted into the text; every value is a parameter.
    sql = "WITH " + ", ".join(parts) + " SELECT " + ", ".join([*selects, "ARRAY(SELECT id FROM written)"])  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row_out = cursor.fetchone()
    written = set(row_out[-1])
    stale = [step.pk for step, _, _ in changed if step.pk not in written]
    if stale:
        raise StaleWrite(f"steps {stale} changed under us")
    for (name, expected, required), got in zip(counts, row_out[:-1], strict=True):
        if required and got != expected:
            raise StaleWrite(f"an attempt was moved by another writer ({name}: {got} of {expected})")


EVENT_COLUMNS = (
    "job",
    "step",
    "kind",
    "from_status",
    "to_status",
    "attempt",
    "actor",
    "source",
    "reason",
    "data",
    "created_at",
)


def insert_events_pg(events: list[Event]) -> None:
    """The unit's events in one INSERT, one array per column."""
    quote = connection.ops.quote_name
    fields = _fields(Event, EVENT_COLUMNS)
    source, values = _unnest(
        [
            (
                quote(str(f.column)),
                _array_type(f),
                [f.get_db_prep_save(getattr(e, f.attname), connection) for e in events],
            )
            for f in fields
        ]
    )
    columns = ", ".join(quote(str(f.column)) for f in fields)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(Event._meta.db_table)} ({columns}) SELECT {columns} FROM {source}",  # noqa: S608
            values,
        )


def _write_rows(changed: list[tuple[Step, str, int]], writes: list[AttemptWrite]) -> None:
    """Row by row (SQLite): the same guards, one UPDATE each."""
    for write in writes:
        attempts = Attempt.objects.filter(step_id=write.step_id, number=write.number)
        if write.guard is AttemptGuard.FINISHED_UNNOTED:
            attempts = attempts.filter(finished_at__isnull=False, late_outcome="")
        else:
            attempts = attempts.filter(finished_at__isnull=True)
        if attempts.update(**write.fields) != 1 and write.guard is not AttemptGuard.LIVE_IF_ANY:
            raise StaleWrite("an attempt was moved by another writer")
    step_fields = _fields(Step, STEP_WRITABLE)
    for step, status, attempt in changed:
        values = {f.attname: getattr(step, f.attname) for f in step_fields}
        if Step.objects.filter(pk=step.pk, status=status, attempt=attempt).update(**values) != 1:
            raise StaleWrite(f"step {step.pk} changed under us (expected {status}, attempt {attempt})")
