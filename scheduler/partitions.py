"""The event history's monthly partitions on PostgreSQL (migration 0014): created ahead of need,
dropped once retention has emptied them. Elsewhere (SQLite) the table is plain and these do
nothing.

Partitions are monthly (`scheduler_event_yYYYYmMM`, UTC months): with the default 30 days of
retention the tables hold two or three of them, so a job's timeline (by job id, not by time)
probes a few small indexes, and the current month's indexes, which every insert touches, stay
small. Rows leave by job (the archive is per job, and a job's events may span two months);
a month whose every row has gone is dropped whole, which returns its space at once instead of
leaving it to VACUUM. The DEFAULT partition catches rows outside every month (a clock far off,
history loaded back from an archive after its month was dropped).

Restated in SQL (keep both in step; the equivalence tests compare them):
`scheduler/sql/postgresql/sas_event_partitions_ensure.sql`.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import time

from django.db import DatabaseError, connection, transaction

from sas_project.database import is_postgresql

logger = logging.getLogger("scheduler.retention")

#: How far ahead partitions exist: inserts never depend on the chore having run this month.
MONTHS_AHEAD = 2
#: How long dropping a partition may wait for its lock before giving up until the next run: the
#: drop needs an exclusive lock on the table, which must never hold the hot path up for long.
LOCK_TIMEOUT = "500ms"

PARTITION_NAME = re.compile(r"^scheduler_event_y(\d{4})m(\d{2})$")

PARTITIONS_SQL = """
SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'scheduler_event'::regclass ORDER BY c.relname
"""


def partitioned() -> bool:
    """Is the event table partitioned here (PostgreSQL after migration 0014)?"""
    if not is_postgresql():
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = 'scheduler_event'::regclass")
        row = cursor.fetchone()
    return row is not None and row[0] == "p"


def event_partitions() -> list[str]:
    """The event table's partitions, by name (months in order, then the default)."""
    if not partitioned():
        return []
    with connection.cursor() as cursor:
        cursor.execute(PARTITIONS_SQL)
        return [row[0] for row in cursor.fetchall()]


def ensure(*, months_ahead: int = MONTHS_AHEAD) -> list[str]:
    """Create the partitions from this month to `months_ahead` months ahead; returns the new ones."""
    if not partitioned():
        return []
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cursor.execute(
            "SELECT * FROM sas_event_partitions_ensure(now(), now() + make_interval(months => %s))",
            [months_ahead],
        )
        created = [row[0] for row in cursor.fetchall()]
    if created:
        logger.info("event partitions created: %s", created)
    return created


def month_end(name: str) -> dt.datetime | None:
    """The end (exclusive) of a monthly partition's range; None for the default partition."""
    match = PARTITION_NAME.match(name)
    if match is None:
        return None
    year, month = int(match[1]), int(match[2])
    return dt.datetime(year + month // 12, month % 12 + 1, 1, tzinfo=dt.UTC)


def drop_emptied(*, before: dt.datetime) -> list[str]:
    """Drop the monthly partitions that end before `before` and hold no row; returns their names.

    Each drop is its own short transaction with a lock timeout: a drop that cannot have its lock
    at once is left for the next run."""
    dropped: list[str] = []
    # Only names of the form scheduler_event_yYYYYmMM reach the statements below: they come from
    # the catalogue and match PARTITION_NAME, so formatting them into SQL is safe.
    for name in event_partitions():
        end = month_end(name)
        if end is None or end > before:
            continue
        if _drop_if_empty(name):
            dropped.append(name)
    if dropped:
        logger.info("event partitions dropped: %s", dropped)
    return dropped


def _drop_if_empty(name: str, tries: int = 3) -> bool:
    """Drop one partition if it holds no row; a few short tries for its lock, then leave it.

    A first look without a lock passes over the months still in use. The drop then locks the
    table and the partition in that order, the order every insert takes them (locking the
    partition first deadlocks with inserts), looks again (nothing may have arrived meanwhile),
    detaches and drops: an exclusive lock held for milliseconds, once a month."""
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT EXISTS (SELECT 1 FROM "{name}")')  # noqa: S608
        row = cursor.fetchone()
    if row is None or row[0]:
        return False
    for attempt in range(1, tries + 1):
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                cursor.execute(f'LOCK TABLE scheduler_event, "{name}" IN ACCESS EXCLUSIVE MODE')
                cursor.execute(f'SELECT EXISTS (SELECT 1 FROM "{name}")')  # noqa: S608
                row = cursor.fetchone()
                if row is None or row[0]:
                    return False
                cursor.execute(f'ALTER TABLE scheduler_event DETACH PARTITION "{name}"')
                cursor.execute(f'DROP TABLE "{name}"')
        except DatabaseError as exc:
            logger.warning("event partition %s: not dropped (try %s of %s): %s", name, attempt, tries, exc)
            time.sleep(0.2 * attempt)
            continue
        return True
    return False
