"""django-q2's ORM broker, claiming a task by deleting its row, and woken by NOTIFY.

The stock ORM broker claims a task by moving its `lock` forward and deletes the row once the
result is saved: three statements and three commits per task, and a task whose worker died is
re-delivered `retry` seconds later. This service does not need the broker to re-deliver: every
agent task belongs to a step whose deadline the supervisor watches, and a task lost with a dead
worker is retried by the supervisor with the same operation ID (usually long before django-q2's
`retry` would have). So one statement claims and removes the task: `DELETE ... RETURNING`, with
`FOR UPDATE SKIP LOCKED` on PostgreSQL so several clusters never take the same row.

An idle pusher sleeps `poll` seconds between looks at an empty queue, so a task enqueued just
after a look waited that long. On PostgreSQL the enqueue also announces the task (`pg_notify` in
the same statement as the INSERT, delivered when the enqueuing transaction commits, never
before), and the pusher `LISTEN`s: it looks at the queue when a task was announced and not yet
taken, waiting for an announcement otherwise, and at least every `poll` seconds. A task is then
picked up within milliseconds of its commit, and an empty queue costs no polling statements.
"""

from __future__ import annotations

import time
from typing import Any

from django import db
from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ

CHANNEL = "sas_tasks"


def _announce() -> bool:
    """SAS_Q_NOTIFY (on by default). Each announcement costs every listening pusher one small
    read-only transaction; off, an idle pusher polls every `poll` seconds instead."""
    return bool(getattr(settings, "SAS_Q_NOTIFY", True))


class ClaimByDeleteORM(ORM):
    _listening_on: int | None = None
    #: Tasks announced and not yet taken, as far as this pusher knows.
    _announced: int = 1

    #: The queue row of the last task this broker enqueued (the scheduler records it on the
    #: attempt, to tell a task still waiting in the queue from one that was lost).
    last_enqueued: Any = None

    def enqueue(self, task: Any) -> Any:
        self.last_enqueued = self._insert(task)
        return self.last_enqueued

    def _insert(self, task: Any) -> Any:
        connection = connections[Conf.ORM]
        if connection.vendor != "postgresql" or not _announce():
            return super().enqueue(task)
        self.get_connection()  # django-q2's connection housekeeping outside a transaction
        table = connection.ops.quote_name(OrmQ._meta.db_table)
        # One statement: the row and its announcement (delivered when the transaction commits).
        sql = (
            f"WITH queued AS (INSERT INTO {table} (key, payload, lock) VALUES (%s, %s, %s) "  # noqa: S608
            f"RETURNING id) SELECT id, pg_notify('{CHANNEL}', '') FROM queued"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [self.list_key or Conf.CLUSTER_NAME, task, timezone.now()])
            return cursor.fetchone()[0]

    def dequeue(self) -> list[tuple[Any, Any]] | None:
        if transaction.get_autocommit(using=Conf.ORM):
            db.close_old_connections()
        connection = connections[Conf.ORM]
        listening = self._listen()
        if listening:
            # Look only when a task may be there: one was announced and not taken yet, or `poll`
            # seconds passed (the backstop for tasks enqueued without an announcement).
            self._announced += self._announcements(timeout=0)
            if self._announced <= 0:
                self._announced += self._announcements(timeout=Conf.POLL)
        table = connection.ops.quote_name(OrmQ._meta.db_table)
        skip_locked = " FOR UPDATE SKIP LOCKED" if connection.vendor == "postgresql" else ""
        sql = (
            f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE key = %s "  # noqa: S608
            f"ORDER BY id LIMIT %s{skip_locked}) RETURNING id, payload"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [self.list_key, Conf.BULK])
            rows = cursor.fetchall()
        if rows:
            self._announced = max(self._announced - len(rows), 0)
            return [(row[0], row[1]) for row in sorted(rows)]
        self._announced = 0
        if not listening:
            time.sleep(Conf.POLL)
        return None

    def _listen(self) -> bool:
        """LISTEN on this process's connection (PostgreSQL, outside a transaction)."""
        connection = connections[Conf.ORM]
        if (
            connection.vendor != "postgresql"
            or not _announce()
            or not transaction.get_autocommit(using=Conf.ORM)
        ):
            return False
        connection.ensure_connection()
        pg = connection.connection
        if self._listening_on != id(pg):
            pg.execute(f"LISTEN {CHANNEL}")
            self._listening_on = id(pg)
            self._announced = 1  # a new listener has missed earlier announcements: look once
        return True

    def _announcements(self, *, timeout: float) -> int:
        """Announcements received (waiting up to `timeout` seconds for the first)."""
        pg = connections[Conf.ORM].connection
        received = 0
        for _ in pg.notifies(timeout=timeout, stop_after=None if timeout == 0 else 1):
            received += 1
        return received

    def acknowledge(self, task_id: Any) -> None:
        """Nothing to do: the row went when the task was claimed."""

    def fail(self, task_id: Any) -> None:
        """Nothing to do: the row went when the task was claimed."""


def tasks_still_queued(rows: list[int]) -> set[int]:
    """Of these queue rows, those still waiting in the broker's queue table (the project's broker
    deletes a row when a pusher takes its task)."""
    return set(OrmQ.objects.filter(pk__in=rows).values_list("pk", flat=True))
