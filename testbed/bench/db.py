"""The database's own counters, read by the benchmark: commits and top-level statements of every
session (pg_stat_database, pg_stat_statements)."""

from __future__ import annotations

import time

from django.db import connection

#: Marks the benchmark's own queries, so that statement counts can leave them out.
MARK = "/* bench */"


def xact_commit() -> int:
    """Commits of this database so far, after asking every backend's pending stats to land."""
    time.sleep(1.2)  # backends flush their statistics at most once a second
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot() /* bench */")
        cursor.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database() /* bench */"
        )
        return int(cursor.fetchone()[0])


def statements_available() -> bool:
    """Whether pg_stat_statements is loaded (scripts/with_postgres.py preloads it)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('shared_preload_libraries') /* bench */")
        if "pg_stat_statements" not in cursor.fetchone()[0]:
            return False
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return True


def statements_reset() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_statements_reset() /* bench */")


#: The foreign-key checks PostgreSQL runs itself (deferred ones fire at COMMIT, at the top level,
#: where pg_stat_statements counts them): no client sends them, so they are counted apart. The
#: event trigger's check of the event's job (migration 0015, deferred too) is the same kind of
#: statement, in place of the event table's foreign keys: it is counted with them.
FK_CHECK = "%FOR KEY SHARE OF x%"
EVENT_GUARD = "%FROM scheduler_job WHERE id = NEW.job_id FOR KEY SHARE%"


def statements_by_kind() -> dict[str, int]:
    """Statements clients sent to this database since the last reset, by first word, leaving out
    the benchmark's own and PostgreSQL's foreign-key checks and the event trigger's (under "FK
    checks")."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT CASE WHEN query LIKE %s OR query LIKE %s THEN 'FK checks' "
            "ELSE upper(split_part(ltrim(query), ' ', 1)) END, sum(calls) FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database() "
            "AND query NOT LIKE %s GROUP BY 1 /* bench */",
            [FK_CHECK, EVENT_GUARD, f"%{MARK}%"],
        )
        return {kind or "?": int(calls) for kind, calls in cursor.fetchall()}


def top_statements(limit: int = 12) -> list[tuple[int, str]]:
    """The most frequent statements since the last reset (calls, text), for the profile."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sum(calls)::bigint, left(regexp_replace(query, '\\s+', ' ', 'g'), 160) "
            "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
            "WHERE d.datname = current_database() AND query NOT LIKE %s GROUP BY 2 ORDER BY 1 DESC LIMIT %s "
            "/* bench */",
            [f"%{MARK}%", limit],
        )
        return [(int(calls), text) for calls, text in cursor.fetchall()]
