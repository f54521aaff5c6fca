"""Database code generated from Python tables, so that the database applies them to every writer
(the unit of work, the hot path's functions, the set-wise scan, an administrator's SQL) while
Python stays their one source.

Generated, never edited: `manage.py dbcode --generate` writes
- from the state machines' tables (scheduler.transitions):
  `scheduler/sql/postgresql/sas_move_allowed.sql`, `sas_move_allowed(machine, from, to)`, which the
  `BEFORE UPDATE` triggers of `sas_status_guard.sql` call in their `WHEN` clause (so a permitted
  move costs one small function call, and no call of the trigger function), and
  `scheduler/sql/sqlite/<table>_<column>_guard.sql`, the same guard as SQLite triggers;
- from the events the state machines' moves write (scheduler.transitions: STEP_EVENTS, JOB_EVENTS,
  OUTCOME_MOVES): `sas_event_kind.sql`, `sas_event_kind(table, key)`, the event a step's or a
  job's move to a status writes, or a live call's outcome; and `sas_outcome_status.sql`, the
  status that outcome takes its step to. The hot path's functions choose no event by hand;
- from the statuses in which a job holds its concurrency key (scheduler.transitions.KEY_HOLDING):
  `sas_key_holding.sql`, which `sas_submit`'s admission counts the key's holders with;
- from the event kinds something reacts to (scheduler.outbox.REACTION_KINDS): the trigger that
  queues those events for their reader, `sas_event_reactions.sql` and its SQLite twin;
- from the models' vocabulary constraints (VOCABULARIES: an event's kind, a step's, a job's and an
  attempt's status, outcome and kind, as their `CheckConstraint`s list them):
  `sas_value_allowed.sql`, which puts the same constraints back on PostgreSQL as a call of one
  PL/pgSQL function (see pg_value_allowed for why).
A test regenerates them and fails when a file differs.

Enforced in the database by `scheduler/sql/postgresql/sas_status_guard.sql` (with the generated
sas_move_allowed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.apps import apps
from django.db import models

from scheduler.outbox import REACTION_KINDS
from scheduler.transitions import (
    ATTEMPT_LATE_OUTCOMES,
    ATTEMPT_TRANSITIONS,
    IN_FLIGHT,
    JOB_EVENTS,
    JOB_TRANSITIONS,
    KEY_HOLDING,
    OUTCOME_MOVES,
    STEP_EVENTS,
    STEP_TRANSITIONS,
)

SQL_DIR = Path(__file__).resolve().parent / "sql"

#: machine -> (table, column, {from: {to}}).
MACHINES: dict[str, tuple[str, str, dict[str, frozenset[str]]]] = {
    "step": ("scheduler_step", "status", STEP_TRANSITIONS),
    "job": ("scheduler_job", "status", JOB_TRANSITIONS),
    "attempt": ("scheduler_attempt", "outcome", ATTEMPT_TRANSITIONS),
    "attempt_late": ("scheduler_attempt", "late_outcome", {IN_FLIGHT: ATTEMPT_LATE_OUTCOMES}),
}

HEADER = """-- Generated from scheduler/transitions.py by scheduler/sqlgen.py
-- (`manage.py dbcode --generate`): do not edit. Mirrors STEP_TRANSITIONS, JOB_TRANSITIONS,
-- ATTEMPT_TRANSITIONS and ATTEMPT_LATE_OUTCOMES; a test fails when this file differs from them.
"""


def moves(machine: str) -> list[tuple[str, str]]:
    """Every (from, to) the machine's table allows, sorted."""
    table = MACHINES[machine][2]
    return sorted((str(frm), str(to)) for frm, tos in table.items() for to in tos)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def pg_move_allowed() -> str:
    # PL/pgSQL, not SQL: PostgreSQL would inline a SQL function into the triggers' WHEN clauses,
    # but it prepares a trigger's WHEN again for every statement, so inlining parsed this
    # function's text at every status write (some 50 us of a step's). A PL/pgSQL function is
    # compiled once per connection, its array folded to one constant: a call costs a few us.
    items = ",\n".join(
        f"        {_literal(f'{machine}:{frm}>{to}')}" for machine in MACHINES for frm, to in moves(machine)
    )
    return (
        HEADER
        + "CREATE OR REPLACE FUNCTION sas_move_allowed(p_machine text, p_from text, p_to text)\n"
        + "RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$\n"
        + "BEGIN\n"
        + "    RETURN p_machine || ':' || p_from || '>' || p_to = ANY (ARRAY[\n"
        + items
        + "\n    ]::text[]);\nEND\n$fn$;\n"
    )


EVENTS_HEADER = """-- Generated from scheduler/transitions.py by scheduler/sqlgen.py
-- (`manage.py dbcode --generate`): do not edit. Mirrors STEP_EVENTS, JOB_EVENTS and OUTCOME_MOVES;
-- a test fails when this file differs from them.
"""

#: table -> {key: event kind}: the event a move of a step or a job to a status writes, and the
#: one a live call's outcome other than a success writes.
EVENT_TABLES: dict[str, dict[str, str]] = {
    "step": {str(to): str(kind) for to, kind in STEP_EVENTS.items()},
    "job": {str(to): str(kind) for to, kind in JOB_EVENTS.items()},
    "outcome": {str(outcome): str(kind) for outcome, (_, kind) in OUTCOME_MOVES.items()},
}


def _plpgsql_case(signature: str, key: str, cases: list[tuple[str, str]]) -> str:
    # PL/pgSQL and IMMUTABLE, as sas_move_allowed: compiled once per connection, and a call with
    # constant arguments (`sas_event_kind('step', 'dispatched')`) is folded into the caller's
    # cached plan. An unknown key gives NULL, which the event's NOT NULL kind refuses.
    whens = "\n".join(f"        WHEN {_literal(value)} THEN {_literal(result)}" for value, result in cases)
    return (
        f"CREATE OR REPLACE FUNCTION {signature}\n"
        + "RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$\n"
        + "BEGIN\n"
        + f"    RETURN CASE {key}\n"
        + whens
        + "\n    END;\nEND\n$fn$;\n"
    )


def pg_event_kind() -> str:
    cases = [
        (f"{table}:{key}", kind)
        for table, kinds in EVENT_TABLES.items()
        for key, kind in sorted(kinds.items())
    ]
    return EVENTS_HEADER + _plpgsql_case(
        "sas_event_kind(p_table text, p_key text)", "p_table || ':' || p_key", cases
    )


def pg_outcome_status() -> str:
    cases = sorted((str(outcome), str(to)) for outcome, (to, _) in OUTCOME_MOVES.items())
    return EVENTS_HEADER + _plpgsql_case("sas_outcome_status(p_outcome text)", "p_outcome", cases)


KEYS_HEADER = """-- Generated from scheduler/transitions.py by scheduler/sqlgen.py
-- (`manage.py dbcode --generate`): do not edit. Mirrors KEY_HOLDING, the statuses in which a job
-- holds its concurrency key (scheduler.services.flow); a test fails when this file differs.
"""


def pg_key_holding() -> str:
    # PL/pgSQL and IMMUTABLE, as sas_event_kind: `status = ANY (sas_key_holding())` is folded
    # into the caller's cached plan.
    statuses = ", ".join(_literal(str(s)) for s in sorted(KEY_HOLDING))
    return (
        KEYS_HEADER
        + "CREATE OR REPLACE FUNCTION sas_key_holding()\n"
        + "RETURNS text[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$\n"
        + "BEGIN\n"
        + f"    RETURN ARRAY[{statuses}]::text[];\n"
        + "END\n$fn$;\n"
    )


#: The vocabulary constraints on the hot path's tables: (app, model, constraint name). Each is a
#: `CheckConstraint` of the model saying `<column> IN (...)` (or `= '' OR ... IN (...)`); the
#: model stays their one source, and SQLite keeps them as Django writes them.
VOCABULARIES: tuple[tuple[str, str, str], ...] = (
    ("scheduler", "Event", "event_kind_valid"),
    ("scheduler", "Step", "step_status_valid"),
    ("scheduler", "Step", "step_kind_valid"),
    ("scheduler", "Job", "job_status_valid"),
    ("scheduler", "Attempt", "attempt_outcome_valid"),
    ("scheduler", "Attempt", "attempt_kind_valid"),
)


def _allowed(condition: Any) -> tuple[str, list[str]]:
    """(column, values) of a `Q(column__in=values)`, or of such terms and `Q(column=value)` joined
    by OR; anything else is refused (the generated function could not restate it)."""
    if (
        not isinstance(condition, models.Q)
        or condition.negated
        or (condition.connector != models.Q.OR and len(condition.children) > 1)
    ):
        raise ValueError(f"not a vocabulary: {condition!r}")
    columns: set[str] = set()
    values: list[str] = []
    for child in condition.children:
        if isinstance(child, models.Q):
            column, more = _allowed(child)
            columns.add(column)
            values += more
            continue
        if not isinstance(child, tuple):
            raise ValueError(f"not a vocabulary: {condition!r}")
        lookup, value = child
        column, _, operator = str(lookup).partition("__")
        columns.add(column)
        if operator == "in":
            values += [str(v) for v in value]
        elif operator in ("", "exact"):
            values.append(str(value))
        else:
            raise ValueError(f"not a vocabulary: {condition!r}")
    if len(columns) != 1:
        raise ValueError(f"not a vocabulary of one column: {condition!r}")
    return columns.pop(), sorted(set(values))


def vocabulary(app: str, model: str, name: str) -> tuple[str, str, list[str]]:
    """(table, column, allowed values) of one of the models' vocabulary constraints."""
    meta = apps.get_model(app, model)._meta
    (constraint,) = [c for c in meta.constraints if c.name == name]
    if not isinstance(constraint, models.CheckConstraint):
        raise ValueError(f"{name} is not a CheckConstraint")
    field, values = _allowed(constraint.condition)
    return meta.db_table, meta.get_field(field).column, values


VALUES_HEADER = """-- Generated from the models' vocabulary constraints (scheduler.sqlgen.VOCABULARIES) by
-- scheduler/sqlgen.py (`manage.py dbcode --generate`): do not edit. The same constraints, by the
-- same names, as one call each of a compiled function (see scheduler.sqlgen.pg_value_allowed).
"""


def pg_value_allowed() -> str:
    # As Django writes them, `kind IN (...)` with the 50-odd event kinds is stored as some 12 KB of
    # node text, which PostgreSQL reads back (and plans) at every statement that writes the table:
    # some 35 us of each event's INSERT, 6 us with this function (20,000 INSERTs in a PL/pgSQL
    # loop). NOT VALID: the rows were checked by the constraint this replaces, under the same
    # name and rule, and re-adding must not scan the history under a lock at every install.
    entries = [vocabulary(*spec) for spec in VOCABULARIES]
    cases = "\n".join(
        f"        WHEN {_literal(name)} THEN p_value = ANY (ARRAY[{', '.join(map(_literal, values))}]"
        "::text[])"
        for (_, _, name), (_, _, values) in zip(VOCABULARIES, entries, strict=True)
    )
    constraints = "\n".join(
        f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {name},\n"
        f"    ADD CONSTRAINT {name} CHECK (sas_value_allowed({_literal(name)}, {column})) NOT VALID;"
        for (_, _, name), (table, column, _) in zip(VOCABULARIES, entries, strict=True)
    )
    return (
        VALUES_HEADER
        + "CREATE OR REPLACE FUNCTION sas_value_allowed(p_constraint text, p_value text)\n"
        + "RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$\n"
        + "BEGIN\n"
        + "    RETURN CASE p_constraint\n"
        + cases
        + "\n    END;\nEND\n$fn$;\n\n"
        + constraints
        + "\n"
    )


def sqlite_guard(machine: str) -> tuple[str, str]:
    """(trigger name, text) of the SQLite trigger that guards one machine's column."""
    table, column, _ = MACHINES[machine]
    name = f"{table}_{column}_guard"
    allowed = ", ".join(_literal(f"{frm}>{to}") for frm, to in moves(machine))
    text = (
        HEADER
        + f"CREATE TRIGGER {name} BEFORE UPDATE OF {column} ON {table}\n"
        + f"FOR EACH ROW WHEN OLD.{column} <> NEW.{column}\n"
        + f"    AND (OLD.{column} || '>' || NEW.{column}) NOT IN ({allowed})\n"
        + "BEGIN\n"
        + f"    SELECT RAISE(ABORT, '{machine} {column}: a move not in scheduler.transitions');\n"
        + "END;\n"
    )
    return name, text


REACTIONS_HEADER = """-- Generated from scheduler/outbox.py (REACTION_KINDS) by scheduler/sqlgen.py
-- (`manage.py dbcode --generate`): do not edit. Queues each event of those kinds, whoever writes it,
-- for the supervisor's reader (supervisor.alerts.reactions_handle), in the event's transaction.
"""
REACTION_COLUMNS = "event_id, kind, job_id, step_id, attempt, reason, data, created_at"
REACTION_VALUES = (
    "NEW.id, NEW.kind, NEW.job_id, NEW.step_id, NEW.attempt, NEW.reason, NEW.data, NEW.created_at"
)


def _reaction_kinds() -> str:
    return ", ".join(_literal(str(kind)) for kind in sorted(REACTION_KINDS))


def pg_event_reactions() -> str:
    # S608: made of the code's own constants, not of anything a user sends.
    return (
        REACTIONS_HEADER  # noqa: S608
        + "CREATE OR REPLACE FUNCTION sas_event_reactions() RETURNS trigger LANGUAGE plpgsql AS $fn$\n"
        + "BEGIN\n"
        + f"    INSERT INTO scheduler_eventreaction ({REACTION_COLUMNS})\n"
        + f"    VALUES ({REACTION_VALUES});\n"
        + "    RETURN NULL;\n"
        + "END\n"
        + "$fn$;\n\n"
        + "CREATE TRIGGER scheduler_event_reactions AFTER INSERT ON scheduler_event\n"
        + f"    FOR EACH ROW WHEN (NEW.kind IN ({_reaction_kinds()}))\n"
        + "    EXECUTE FUNCTION sas_event_reactions();\n"
    )


def sqlite_event_reactions() -> str:
    return (
        REACTIONS_HEADER  # noqa: S608
        + "CREATE TRIGGER scheduler_event_reactions AFTER INSERT ON scheduler_event\n"
        + f"FOR EACH ROW WHEN NEW.kind IN ({_reaction_kinds()})\n"
        + "BEGIN\n"
        + f"    INSERT INTO scheduler_eventreaction ({REACTION_COLUMNS})\n"
        + f"    VALUES ({REACTION_VALUES});\n"
        + "END;\n"
    )


def generated() -> dict[Path, str]:
    """Each generated file and the text it must hold."""
    files = {
        SQL_DIR / "postgresql" / "sas_move_allowed.sql": pg_move_allowed(),
        SQL_DIR / "postgresql" / "sas_event_kind.sql": pg_event_kind(),
        SQL_DIR / "postgresql" / "sas_outcome_status.sql": pg_outcome_status(),
        SQL_DIR / "postgresql" / "sas_key_holding.sql": pg_key_holding(),
        SQL_DIR / "postgresql" / "sas_event_reactions.sql": pg_event_reactions(),
        SQL_DIR / "postgresql" / "sas_value_allowed.sql": pg_value_allowed(),
        SQL_DIR / "sqlite" / "scheduler_event_reactions.sql": sqlite_event_reactions(),
    }
    for machine in MACHINES:
        name, text = sqlite_guard(machine)
        files[SQL_DIR / "sqlite" / f"{name}.sql"] = text
    return files


def write() -> list[Path]:
    """Write the generated files that differ; returns them."""
    changed = []
    for path, text in generated().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(path)
    return changed
