"""Database code generated from Python tables, so that the database applies them to every writer
(the unit of work, the hot path's functions, the set-wise scan, an administrator's SQL) while
Python stays their one source.

Generated, never edited: `manage.py dbcode --generate` writes
- from the state machines' tables (scheduler.transitions):
  `scheduler/sql/postgresql/sas_move_allowed.sql`, `sas_move_allowed(machine, from, to)`, which the
  `BEFORE UPDATE` triggers of `sas_status_guard.sql` call in their `WHEN` clause (so a permitted
  move costs one small function call, and no call of the trigger function), and
  `scheduler/sql/sqlite/<table>_<column>_guard.sql`, the same guard as SQLite triggers;
- from the event kinds something reacts to (scheduler.outbox.REACTION_KINDS): the trigger that
  queues those events for their reader, `sas_event_reactions.sql` and its SQLite twin.
A test regenerates them and fails when a file differs.

Enforced in the database by `scheduler/sql/postgresql/sas_status_guard.sql` (with the generated
sas_move_allowed).
"""

from __future__ import annotations

from pathlib import Path

from scheduler.outbox import REACTION_KINDS
from scheduler.transitions import (
    ATTEMPT_LATE_OUTCOMES,
    ATTEMPT_TRANSITIONS,
    IN_FLIGHT,
    JOB_TRANSITIONS,
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
        SQL_DIR / "postgresql" / "sas_event_reactions.sql": pg_event_reactions(),
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
