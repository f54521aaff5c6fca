"""django-q2's ORM broker, claiming a task by deleting its row, draining a backlog at full speed,
and woken by NOTIFY when idle.

Claim by delete. The stock ORM broker claims a task by moving its `lock` forward and deletes the
row once the result is saved: three statements and three commits per task, and a task whose
worker died is re-delivered `retry` seconds later. This service does not need the broker to
re-deliver: every agent task belongs to a step whose deadline the supervisor watches, and a task
lost with a dead worker is retried by the supervisor with the same operation ID (usually long
before django-q2's `retry` would have). So one statement claims and removes up to `bulk` tasks:
`DELETE ... RETURNING`, with `FOR UPDATE SKIP LOCKED` on PostgreSQL so several clusters never
take the same row.

Draining. A look that returned a full batch means more may be waiting: the pusher looks again at
once, whatever it heard. Only a look that came back short lets it wait, and then announcements
merely wake it: on PostgreSQL an enqueue into an empty queue announces itself (`pg_notify` in
the same statement as the INSERT, delivered when the enqueuing transaction commits), and an idle
pusher that `LISTEN`s wakes within milliseconds; without an announcement it looks after `poll`
seconds anyway. A recycled connection (it LISTENs anew and looks at once), announcements folded
into one by PostgreSQL, or a missed one therefore cost at most one `poll` interval of latency,
never throughput. (Counting announcements instead, as this broker once did, lost track once the
count fell below the queue's length, and a backlog drained at one task per `poll`.)

Compact tasks. A task the scheduler enqueues is a function path and integer ids; it is written
as a short unsigned row, `sas1 <timeout> <func> <ids...>`, which SQL can write too (the
scheduler's PostgreSQL functions enqueue the next step in the same statement that records an
outcome). The broker turns such a row back into django-q2's task when it takes it. Only
functions registered with `register_compact_task` may be named, with integer arguments only, so
a row written by anyone with access to the table can do nothing but ask for a registered task,
which fences itself (an attempt is claimed once). Every other row is a signed package, as
django-q2 writes them.

Restated in SQL (keep both in step; the equivalence tests compare them): the compact row and
its announcement as `agents/sql/postgresql/sas_enqueue.sql`, through which the scheduler's
database code enqueues (it never names the queue's table).
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from django import db
from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.humanhash import uuid
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from sas_project.database import supports_listen_notify, supports_skip_locked

CHANNEL = "sas_tasks"
COMPACT = "sas1"

#: Functions a compact row may name, with the template of their task names.
_compact_tasks: dict[str, str] = {}


def register_compact_task(func: str, name: str) -> None:
    """Allow compact rows naming `func`; `name` is a format string over its integer arguments."""
    _compact_tasks[func] = name


def compact_row(func: str, args: tuple[int, ...], *, timeout: int) -> str:
    """The queue row of a compact task (see the module's docstring)."""
    if func not in _compact_tasks:
        raise ValueError(f"{func} is not registered as a compact task")
    return " ".join([COMPACT, str(int(timeout)), func, *(str(int(a)) for a in args)])


def task_of(payload: str) -> dict[str, Any]:
    """django-q2's task dictionary for a queue row, compact or signed. Raises ValueError for a
    compact row that names an unregistered function or carries anything but integers."""
    if not payload.startswith(COMPACT + " "):
        task: dict[str, Any] = SignedPackage.loads(payload)
        return task
    parts = payload.split(" ")
    if len(parts) < 3:
        raise ValueError("a compact task row needs a timeout and a function")
    _, timeout, func, *args = parts
    if func not in _compact_tasks:
        raise ValueError(f"{func!r} is not registered as a compact task")
    values = tuple(int(a) for a in args)
    tag = uuid()
    return {
        "id": tag[1],
        "name": _compact_tasks[func].format(*values),
        "func": func,
        "args": values,
        "kwargs": {},
        "started": timezone.now(),
        "ack_failure": Conf.ACK_FAILURES,
        "timeout": int(timeout),
    }


def _expand(payload: str) -> str:
    """A compact row as the signed package django-q2's pusher expects. A row that is not a valid
    compact task goes through unchanged: its signature check fails and the pusher drops it."""
    if not payload.startswith(COMPACT + " "):
        return payload
    try:
        return SignedPackage.dumps(task_of(payload))
    except ValueError:
        return payload


def _announce() -> bool:
    """SAS_Q_NOTIFY (on by default). Off, an idle pusher looks every `poll` seconds instead."""
    return bool(getattr(settings, "SAS_Q_NOTIFY", True))


class ClaimByDeleteORM(ORM):
    #: The database connection this broker LISTENs on. A weak reference, not the connection's
    #: id(): a recycled connection's successor can be allocated at the address of the one that
    #: was freed, and would then be taken for a listener it is not (the pusher waiting `poll`
    #: seconds each look for announcements that never come).
    _listening_on: weakref.ref[Any] | None = None
    #: The last look returned a full batch (or nothing is known yet): look again at once.
    _backlog: bool = True

    #: The queue row of the last task this broker enqueued (the scheduler records it on the
    #: attempt, to tell a task still waiting in the queue from one that was lost).
    last_enqueued: Any = None

    def enqueue(self, task: Any) -> Any:
        self.last_enqueued = self._insert(task)
        return self.last_enqueued

    def enqueue_compact(self, func: str, args: tuple[int, ...], *, timeout: int) -> int:
        """Enqueue a registered task by function path and integer ids; returns its queue row."""
        row = self._insert(compact_row(func, args, timeout=timeout))
        self.last_enqueued = row
        return int(row)

    def _insert(self, payload: str) -> Any:
        connection = connections[Conf.ORM]
        if not supports_listen_notify(connection) or not _announce():
            return super().enqueue(payload)
        self.get_connection()  # django-q2's connection housekeeping outside a transaction
        table = connection.ops.quote_name(OrmQ._meta.db_table)
        key = self.list_key or Conf.CLUSTER_NAME
        # One statement: the row, and an announcement when the queue had nothing else waiting
        # (a pusher with a backlog looks again by itself; only an idle one needs waking). The
        # look goes from the newest row down: the oldest end is the rows workers took, deleted
        # and not yet vacuumed (sas_enqueue.sql says the same).
        sql = (
            f"WITH queued AS (INSERT INTO {table} (key, payload, lock) VALUES (%s, %s, %s) "  # noqa: S608
            f"RETURNING id) SELECT id, CASE WHEN (SELECT o.id FROM {table} o WHERE o.key = %s "
            f"ORDER BY o.id DESC LIMIT 1) IS NULL THEN pg_notify('{CHANNEL}', '') END FROM queued"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [key, payload, timezone.now(), key])
            return cursor.fetchone()[0]

    def dequeue(self) -> list[tuple[Any, Any]] | None:
        if transaction.get_autocommit(using=Conf.ORM):
            db.close_old_connections()
        connection = connections[Conf.ORM]
        listening = self._listen()
        if listening and not self._backlog:
            self._wait_for_announcement(Conf.POLL)
        table = connection.ops.quote_name(OrmQ._meta.db_table)
        skip_locked = " FOR UPDATE SKIP LOCKED" if supports_skip_locked(connection) else ""
        sql = (
            f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE key = %s "  # noqa: S608
            f"ORDER BY id LIMIT %s{skip_locked}) RETURNING id, payload"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [self.list_key, Conf.BULK])
            rows = cursor.fetchall()
        self._backlog = len(rows) >= max(int(Conf.BULK or 1), 1)
        if rows:
            return [(row[0], _expand(row[1])) for row in sorted(rows)]
        if not listening:
            time.sleep(Conf.POLL)
        return None

    def _listen(self) -> bool:
        """LISTEN on this process's connection (PostgreSQL, outside a transaction)."""
        connection = connections[Conf.ORM]
        if (
            not supports_listen_notify(connection)
            or not _announce()
            or not transaction.get_autocommit(using=Conf.ORM)
        ):
            return False
        connection.ensure_connection()
        pg = connection.connection
        if self._listening_on is None or self._listening_on() is not pg:
            pg.execute(f"LISTEN {CHANNEL}")
            self._listening_on = weakref.ref(pg)
            self._backlog = True  # a new listener missed earlier announcements: look at once
        return True

    def _wait_for_announcement(self, timeout: float) -> bool:
        """Take every announcement already received; if there was none, wait up to `timeout`
        seconds for one. True if one arrived."""
        pg = connections[Conf.ORM].connection
        if any(True for _ in pg.notifies(timeout=0)):
            return True
        return any(True for _ in pg.notifies(timeout=timeout, stop_after=1))

    def acknowledge(self, task_id: Any) -> None:
        """Nothing to do: the row went when the task was claimed."""

    def fail(self, task_id: Any) -> None:
        """Nothing to do: the row went when the task was claimed."""


def tasks_still_queued(rows: list[int]) -> set[int]:
    """Of these queue rows, those still waiting in the broker's queue table (the project's broker
    deletes a row when a pusher takes its task)."""
    return set(OrmQ.objects.filter(pk__in=rows).values_list("pk", flat=True))


def queue_depth() -> int:
    """Tasks waiting in the broker's queue for a cluster's pusher to take them: one count over
    the queue table, which every cluster shares (a taken task's row is gone)."""
    return OrmQ.objects.count()
