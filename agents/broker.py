"""django-q2's ORM broker, claiming a task by deleting its row.

The stock ORM broker claims a task by moving its `lock` forward and deletes the row once the
result is saved: three statements and three commits per task, and a task whose worker died is
re-delivered `retry` seconds later. This service does not need the broker to re-deliver: every
agent task belongs to a step whose deadline the supervisor watches, and a task lost with a dead
worker is retried by the supervisor with the same operation ID (usually long before django-q2's
`retry` would have). So one statement claims and removes the task: `DELETE ... RETURNING`, with
`FOR UPDATE SKIP LOCKED` on PostgreSQL so several clusters never take the same row.
"""

from __future__ import annotations

from typing import Any

from django import db
from django.db import connections, transaction
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ


class ClaimByDeleteORM(ORM):
    def dequeue(self) -> list[tuple[Any, Any]] | None:
        if transaction.get_autocommit(using=Conf.ORM):
            db.close_old_connections()
        connection = connections[Conf.ORM]
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
            return [(row[0], row[1]) for row in sorted(rows)]
        self._sleep()
        return None

    def _sleep(self) -> None:
        import time

        time.sleep(Conf.POLL)

    def acknowledge(self, task_id: Any) -> None:
        """Nothing to do: the row went when the task was claimed."""

    def fail(self, task_id: Any) -> None:
        """Nothing to do: the row went when the task was claimed."""
