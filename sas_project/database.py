"""What the database in use can do: the one place that reads `connection.vendor`.

The service runs on PostgreSQL (production, the test suite) and on SQLite (the embedded default of
`make run`). Code with a PostgreSQL statement and a portable fallback asks one of these questions,
named by what it needs, and never the vendor itself (tests/structure/test_database_questions.py holds the
line; migrations may still ask the vendor, as they are frozen history). Each question takes the
connection to ask about, the default database's by default.
"""

from __future__ import annotations

from django.db import connection as default_connection
from django.db.backends.base.base import BaseDatabaseWrapper


def is_postgresql(connection: BaseDatabaseWrapper | None = None) -> bool:
    """Whether the database is PostgreSQL: the one-statement paths (PL/pgSQL functions, CTEs that
    write, `statement_timestamp()`, the catalogue, partitions) run there and nowhere else."""
    return (default_connection if connection is None else connection).vendor == "postgresql"


def lock_until_commit(name: str) -> None:
    """Serialize, till the current transaction ends, every transaction that takes the lock of
    `name` (a PostgreSQL advisory lock on its hash); SQLite has one writer: nothing to take."""
    if is_postgresql():
        with default_connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [name])


def supports_skip_locked(connection: BaseDatabaseWrapper | None = None) -> bool:
    """Whether a raw `SELECT ... FOR UPDATE SKIP LOCKED` may be written (SQLite has no row locks:
    its one writer at a time has nothing to skip)."""
    return is_postgresql(connection)


def supports_listen_notify(connection: BaseDatabaseWrapper | None = None) -> bool:
    """Whether `LISTEN` and `pg_notify()` can wake a waiting process (elsewhere it polls)."""
    return is_postgresql(connection)


def supports_json_containment(connection: BaseDatabaseWrapper | None = None) -> bool:
    """Whether a JSON field can be filtered by containment (`field__contains={...}`, `@>`)."""
    return is_postgresql(connection)


def supports_percentiles(connection: BaseDatabaseWrapper | None = None) -> bool:
    """Whether the database computes percentiles itself (`percentile_cont`); elsewhere the
    caller reads the values and computes them."""
    return is_postgresql(connection)


def code_dialect(connection: BaseDatabaseWrapper | None = None) -> str:
    """Which of `<app>/sql/<dialect>/` holds the database code this database runs
    (sas_project.dbcode): `postgresql` or `sqlite`."""
    return str((default_connection if connection is None else connection).vendor)
