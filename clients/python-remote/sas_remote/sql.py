"""`SqlStore`: the records in one table of any DB-API database (sqlite3 and psycopg are tested).

One row per operation ID, its primary key: the first `INSERT ... ON CONFLICT DO NOTHING` wins,
and every later write is an `UPDATE`/`DELETE ... WHERE operation_id = ? AND version = ?` whose
row count says whether it won. Both PostgreSQL and SQLite (3.24 and later) speak this SQL. Each
call takes a connection from `connect`, runs one statement, commits and gives the connection
back with `release` (closes it by default): no transaction is held while a handler runs. Where
connecting costs too much (PostgreSQL over a network), take them from a pool:
`SqlStore(pool.getconn, release=pool.putconn)` with psycopg_pool.
"""

from __future__ import annotations

import contextlib
import queue
import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sas_remote.store import Record

#: The columns, in the order every statement below names them.
COLUMNS = (
    "operation_id",
    "fingerprint",
    "state",
    "version",
    "status",
    "body",
    "token",
    "lease_until",
    "accepted",
    "callback_url",
)

# The statements, `{t}` standing for the table (a checked identifier, _TABLE_NAME) and `?` for each
# value, which always goes as a parameter.
_SELECT = (
    "SELECT operation_id, fingerprint, state, version, status, body, token, lease_until, accepted,"
    " callback_url FROM {t} WHERE operation_id = ?"
)
_INSERT = (
    "INSERT INTO {t} (operation_id, fingerprint, state, version, status, body, token, lease_until,"
    " accepted, callback_url) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (operation_id) DO NOTHING"
)
_UPDATE = (
    "UPDATE {t} SET fingerprint = ?, state = ?, version = ?, status = ?, body = ?, token = ?,"
    " lease_until = ?, accepted = ?, callback_url = ? WHERE operation_id = ? AND version = ?"
)
_DELETE = "DELETE FROM {t} WHERE operation_id = ? AND version = ?"

_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


class SqlStore:
    """The records in table `table` (created if missing) of the database `connect()` opens.

    `paramstyle` is the driver's: "qmark" (`?`, sqlite3) or "format" (`%s`, psycopg); it is
    guessed from the first connection when not given.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        *,
        release: Callable[[Any], Any] | None = None,
        table: str = "sas_remote_operations",
        paramstyle: str | None = None,
    ) -> None:
        if not _TABLE_NAME.fullmatch(table):
            raise ValueError(f"table name {table!r} is not a plain SQL identifier")
        self._connect = connect
        self._release = release or _close
        self._close_idle: Callable[[], None] = _nothing
        self._table = table
        self._paramstyle = paramstyle
        self._create()

    @classmethod
    def sqlite(cls, path: str | Path, *, table: str = "sas_remote_operations") -> SqlStore:
        """A store in the SQLite file `path`, in WAL mode, waiting up to 30 s for a lock.

        Its connections are kept and reused (one per thread at a time): opening one per call
        costs more than the statement it runs.
        """
        idle: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()

        def connect() -> sqlite3.Connection:
            try:
                return idle.get_nowait()
            except queue.Empty:
                # Handed from thread to thread, never used by two at once (the pool's rule).
                connection = sqlite3.connect(str(path), timeout=30, check_same_thread=False)
                connection.execute("PRAGMA journal_mode=WAL")
                return connection

        def close() -> None:
            while True:
                try:
                    idle.get_nowait().close()
                except queue.Empty:
                    return

        store = cls(connect, release=idle.put, table=table, paramstyle="qmark")
        store._close_idle = close
        return store

    def close(self) -> None:
        """Close the connections kept for reuse (SqlStore.sqlite's); a pool passed in is the
        caller's to close."""
        self._close_idle()

    # --- plumbing

    @contextlib.contextmanager
    def _cursor(self) -> Iterator[Any]:
        connection = self._connect()
        try:
            if self._paramstyle is None:
                self._paramstyle = "qmark" if isinstance(connection, sqlite3.Connection) else "format"
            cursor = connection.cursor()
            try:
                yield cursor
                connection.commit()
            except BaseException:
                connection.rollback()
                raise
            finally:
                cursor.close()
        finally:
            self._release(connection)

    def _sql(self, text: str) -> str:
        """`text` with `?` placeholders in the driver's style and `{t}` the table."""
        text = text.replace("{t}", self._table)
        return text if self._paramstyle == "qmark" else text.replace("?", "%s")

    def _create(self) -> None:
        try:
            self._create_table()
        except Exception:  # noqa: BLE001 - each driver has its own exception family
            # Two processes creating the table at once: PostgreSQL may refuse the second's
            # CREATE TABLE IF NOT EXISTS (a unique violation in its catalogue) while the table is
            # there all the same. Reading it says whether it is; if not, this raises.
            self.get("")

    def _create_table(self) -> None:
        with self._cursor() as cursor:
            cursor.execute(
                self._sql(
                    "CREATE TABLE IF NOT EXISTS {t} ("
                    " operation_id VARCHAR(255) PRIMARY KEY,"
                    " fingerprint VARCHAR(64) NOT NULL,"
                    " state VARCHAR(16) NOT NULL,"
                    " version INTEGER NOT NULL,"
                    " status INTEGER NOT NULL,"
                    " body TEXT NOT NULL,"
                    " token VARCHAR(64) NOT NULL,"
                    " lease_until DOUBLE PRECISION NOT NULL,"
                    " accepted INTEGER NOT NULL,"
                    " callback_url TEXT NOT NULL)"
                )
            )

    @staticmethod
    def _row(record: Record) -> Sequence[Any]:
        return (
            record.key,
            record.fingerprint,
            record.state,
            record.version,
            record.status,
            record.body,
            record.token,
            record.lease_until,
            int(record.accepted),
            record.callback_url,
        )

    # --- the store protocol

    def get(self, key: str) -> Record | None:
        with self._cursor() as cursor:
            cursor.execute(self._sql(_SELECT), (key,))
            row = cursor.fetchone()
        if row is None:
            return None
        values = dict(zip(COLUMNS, row, strict=True))
        return Record(
            key=values["operation_id"],
            fingerprint=values["fingerprint"],
            state=values["state"],
            version=int(values["version"]),
            status=int(values["status"]),
            body=values["body"],
            token=values["token"],
            lease_until=float(values["lease_until"]),
            accepted=bool(values["accepted"]),
            callback_url=values["callback_url"],
        )

    def add(self, record: Record) -> bool:
        with self._cursor() as cursor:
            cursor.execute(self._sql(_INSERT), self._row(record))
            return bool(cursor.rowcount == 1)

    def swap(self, old: Record, new: Record) -> bool:
        with self._cursor() as cursor:
            cursor.execute(self._sql(_UPDATE), (*self._row(new)[1:], old.key, old.version))
            return bool(cursor.rowcount == 1)

    def remove(self, old: Record) -> bool:
        with self._cursor() as cursor:
            cursor.execute(self._sql(_DELETE), (old.key, old.version))
            return bool(cursor.rowcount == 1)


def _close(connection: Any) -> None:
    connection.close()


def _nothing() -> None:
    """No connections kept: nothing to close."""
