"""The sandbox's durable memory (its own SQLite file): stored answers by key, effects,
deliveries and counters. Each request processes inside a `BEGIN IMMEDIATE` transaction, so
concurrent requests with one key are serialised: the first processes, the others replay."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testbed.sandbox.core import (
    FAULT_KINDS,
    HOSTILE_KINDS,
    KEY_REUSED,
    POISON_ANSWERS,
    QUANTITY_KINDS,
    REPLY_FAULTS,
    UNKNOWN_OPERATION,
    Answer,
    Caller,
    OperationRequest,
    SandboxConfig,
)

#: How long a request waits for another one's write transaction before the store answers 503.
BUSY_TIMEOUT_MS = 15_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    key TEXT PRIMARY KEY,
    method TEXT NOT NULL,
    path TEXT NOT NULL,
    service TEXT NOT NULL,
    body_hash TEXT NOT NULL,
    status INTEGER NOT NULL,
    response TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS effects (
    op_id TEXT PRIMARY KEY,
    service TEXT NOT NULL,
    kind TEXT NOT NULL,
    compensates TEXT,
    count INTEGER NOT NULL,
    first_at REAL NOT NULL,
    last_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    op_id TEXT,
    method TEXT NOT NULL,
    path TEXT NOT NULL,
    attempt INTEGER,
    at REAL NOT NULL,
    job_id TEXT,
    step TEXT,
    item_index INTEGER,
    compensates TEXT
);
CREATE INDEX IF NOT EXISTS deliveries_op_id ON deliveries (op_id);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS cancels (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    op_id TEXT NOT NULL,
    path TEXT NOT NULL,
    attempt INTEGER,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS voids (
    op_id TEXT PRIMARY KEY,
    by_op_id TEXT NOT NULL,
    at REAL NOT NULL
);
"""
_TABLES = ("requests", "effects", "deliveries", "counters", "voids", "cancels")
#: Columns added to `deliveries` since its first version: a store file made before gains them.
_DELIVERY_CALLER_COLUMNS = (
    ("job_id", "TEXT"),
    ("step", "TEXT"),
    ("item_index", "INTEGER"),
    ("compensates", "TEXT"),
)


class SandboxStore:
    """The remote's durable memory: stored answers by key, effects, deliveries and counters.

    Every method opens and closes its own connection, so the store may be used from any thread.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._anchor: sqlite3.Connection | None = None

    def connect(self) -> sqlite3.Connection:
        # isolation_level=None: transactions are begun explicitly, so their kind is under control.
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_MS)}")
        return conn

    @contextlib.contextmanager
    def transaction(self, mode: str = "IMMEDIATE") -> Iterator[sqlite3.Connection]:
        """A connection inside one transaction, committed on success and rolled back on error.

        IMMEDIATE takes the write lock up front: two requests with one key cannot both read "not
        seen" and then both process.
        """
        if mode not in ("DEFERRED", "IMMEDIATE"):
            raise ValueError(f"unsupported transaction mode {mode!r}")
        with contextlib.closing(self.connect()) as conn:
            conn.execute(f"BEGIN {mode}")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def initialise(self, *, wipe: bool = False) -> None:
        """Create the file and tables if needed and keep the store open until `close()`; with
        `wipe`, forget everything stored."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._anchor is None:
            # Never used for queries. While one connection stays open, closing a request's
            # connection is not the last close, which would checkpoint and delete the WAL each time.
            self._anchor = sqlite3.connect(self.path, check_same_thread=False)
        with contextlib.closing(self.connect()) as conn:
            # WAL lets status queries and /stats read while a request holds the write lock.
            conn.execute("PRAGMA journal_mode = WAL")
            conn.executescript(_SCHEMA)
            present = {row[1] for row in conn.execute("PRAGMA table_info(deliveries)")}
            for column, kind in _DELIVERY_CALLER_COLUMNS:
                if column not in present:
                    conn.execute(f"ALTER TABLE deliveries ADD COLUMN {column} {kind}")
        if wipe:
            self.wipe()

    def close(self) -> None:
        """Release the file: the last connection to close checkpoints the WAL into it."""
        if self._anchor is not None:
            self._anchor.close()
            self._anchor = None

    def wipe(self) -> None:
        with self.transaction() as conn:
            for table in _TABLES:
                conn.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed table names

    def log_delivery(
        self, op_id: str | None, method: str, path: str, attempt: int | None, caller: Caller | None = None
    ) -> None:
        """Record that a request arrived, whatever then happens to it, and whom it said it came
        from."""
        c = caller or Caller(job_id="", step="")
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO deliveries"
                " (op_id, method, path, attempt, at, job_id, step, item_index, compensates)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    op_id,
                    method,
                    path,
                    attempt,
                    time.time(),
                    c.job_id or None,
                    c.step or None,
                    c.item_index,
                    c.compensates,
                ),
            )

    def record_cancel(self, op_id: str, path: str, attempt: int | None) -> bool:
        """Record a cancel of operation `op_id` (every one, repeats included: a caller's duplicate
        must show); whether that operation was processed here."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO cancels (op_id, path, attempt, at) VALUES (?, ?, ?, ?)",
                (op_id, path, attempt, time.time()),
            )
            known = conn.execute("SELECT 1 FROM requests WHERE key = ?", (op_id,)).fetchone()
        return known is not None

    def counter(self, name: str) -> int:
        """A counter's value."""
        with self.transaction("DEFERRED") as conn:
            row = conn.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()
        return int(row[0]) if row else 0

    def bump(self, counter: str) -> None:
        with self.transaction() as conn:
            _bump(conn, counter)

    def take_drop(self, key: str, drops: int) -> bool:
        """Whether this delivery of operation `key` is one of the first `drops`, whose answer
        is lost (`input.drops`); counted per operation, each delivery once."""
        counter = f"dropped_op:{key}"
        with self.transaction() as conn:
            row = conn.execute("SELECT value FROM counters WHERE name = ?", (counter,)).fetchone()
            if (row[0] if row else 0) >= drops:
                return False
            _bump(conn, counter)
            return True

    def execute(self, request: OperationRequest, config: SandboxConfig, *, force_decline: bool) -> Answer:
        """Process one service POST exactly once per key (unless `config.honor_keys` is off).

        A stored answer for the key is replayed if the request is the same (path and fingerprint),
        refused with 422 if it is not; otherwise the effect is applied and the answer stored in the
        same transaction, so an answer is stored if and only if its effect happened.
        `force_decline` only matters to a request that is processed: a replay returns what was stored.
        """
        with self.transaction() as conn:
            if config.honor_keys:
                row = conn.execute(
                    "SELECT path, body_hash, status, response FROM requests WHERE key = ?", (request.key,)
                ).fetchone()
                if row is not None:
                    path, body_hash, status, response = row
                    if path != request.path or body_hash != request.fingerprint:
                        return KEY_REUSED
                    _bump(conn, "replays")
                    return Answer(status, response.encode(), replayed=True)
            status, payload = _perform(conn, request, config, force_decline=force_decline)
            response = json.dumps(payload)
            conn.execute(
                "INSERT OR REPLACE INTO requests"
                " (key, method, path, service, body_hash, status, response, created_at)"
                " VALUES (?, 'POST', ?, ?, ?, ?, ?, ?)",
                (
                    request.key,
                    request.path,
                    request.route.service,
                    request.fingerprint,
                    status,
                    response,
                    time.time(),
                ),
            )
            return Answer(status, response.encode())

    def status_of(self, service: str, op_id: str) -> Answer:
        """The stored answer of an operation of `service` that happened, else 404."""
        with contextlib.closing(self.connect()) as conn:
            row = conn.execute(
                "SELECT response FROM requests WHERE key = ? AND service = ? AND status BETWEEN 200 AND 299",
                (op_id, service),
            ).fetchone()
        return UNKNOWN_OPERATION if row is None else Answer(200, row[0].encode())

    def stats(self) -> dict[str, Any]:
        """The figures behind `GET /stats`, read in one snapshot."""
        with self.transaction("DEFERRED") as conn:
            effects = dict(conn.execute("SELECT op_id, count FROM effects ORDER BY op_id").fetchall())
            by_kind = dict(
                conn.execute("SELECT kind, SUM(count) FROM effects GROUP BY kind ORDER BY kind").fetchall()
            )
            deliveries = dict(
                conn.execute(
                    "SELECT op_id, COUNT(*) FROM deliveries WHERE method = 'POST' AND op_id IS NOT NULL"
                    " GROUP BY op_id ORDER BY op_id"
                ).fetchall()
            )
            per_method = dict(
                conn.execute("SELECT method, COUNT(*) FROM deliveries GROUP BY method").fetchall()
            )
            counters = dict(conn.execute("SELECT name, value FROM counters").fetchall())
            cancel_rows = conn.execute("SELECT op_id, path, attempt FROM cancels ORDER BY id").fetchall()
            cancels = [list(row) for row in cancel_rows]
            callers = [
                list(row)
                for row in conn.execute(
                    "SELECT job_id, step, item_index, compensates IS NOT NULL, op_id, COUNT(*)"
                    " FROM deliveries WHERE method = 'POST' AND job_id IS NOT NULL"
                    " GROUP BY job_id, step, item_index, compensates IS NOT NULL, op_id"
                    " ORDER BY job_id, step, item_index, op_id"
                ).fetchall()
            ]
        return {
            "effects": effects,
            "effects_by_kind": by_kind,
            "deliveries": deliveries,
            "requests": per_method.get("POST", 0),
            "status_queries": per_method.get("GET", 0),
            "replays": counters.get("replays", 0),
            "duplicates": sum(1 for count in effects.values() if count > 1),
            "voided": counters.get("voided", 0),
            "faults": {kind: counters.get(f"fault_{kind}", 0) for kind in (*FAULT_KINDS, *REPLY_FAULTS)},
            "hostile": {kind: counters.get(f"hostile_{kind}", 0) for kind in HOSTILE_KINDS},
            # Operations done whose answer carries poison (`input.answer_with`), by kind.
            "poison": {kind: counters.get(f"poison_{kind}", 0) for kind in POISON_ANSWERS},
            "results_reported": counters.get("results_reported", 0),
            "slow_jobs": {name: counters.get(name, 0) for name in SLOW_JOB_COUNTERS},
            # Who called under which key: [job, step, item index, an undo, key, deliveries].
            "callers": callers,
            # The cancels received (POST /cancel/<route>): [operation ID, path, attempt], in order.
            "cancels": cancels,
        }


#: What slow jobs (input.slow) count: heartbeats sent and refused (410), workers that died.
SLOW_JOB_COUNTERS = ("heartbeats_sent", "heartbeats_refused", "slow_died")


def _bump(conn: sqlite3.Connection, counter: str) -> None:
    conn.execute(
        "INSERT INTO counters (name, value) VALUES (?, 1) ON CONFLICT (name) DO UPDATE SET value = value + 1",
        (counter,),
    )


def _record_effect(
    conn: sqlite3.Connection, request: OperationRequest, compensates: str | None = None
) -> None:
    now = time.time()
    conn.execute(
        "INSERT INTO effects (op_id, service, kind, compensates, count, first_at, last_at)"
        " VALUES (?, ?, ?, ?, 1, ?, ?)"
        " ON CONFLICT (op_id) DO UPDATE SET count = count + 1, last_at = excluded.last_at",
        (request.key, request.route.service, request.route.kind, compensates, now, now),
    )


def _perform(
    conn: sqlite3.Connection, request: OperationRequest, config: SandboxConfig, *, force_decline: bool
) -> tuple[int, dict[str, Any]]:
    """Apply one request's effect inside the caller's transaction; (status, answer payload)."""
    route = request.route
    declined = (
        force_decline
        or (
            route.kind == "charge"
            and config.decline_over is not None
            and request.amount > config.decline_over
        )
        or (
            route.kind in QUANTITY_KINDS
            and config.decline_quantity_over is not None
            and request.quantity > config.decline_quantity_over
        )
    )
    if not declined and route.kind == "charge" and request.declines:
        # Counted per operation that is processed: a replay answers what was stored, so a resent
        # call is declined (or not) as its first delivery was, and the account's count holds.
        counter = f"declined_account:{request.account}"
        row = conn.execute("SELECT value FROM counters WHERE name = ?", (counter,)).fetchone()
        if (row[0] if row else 0) < request.declines:
            _bump(conn, counter)
            declined = True
    if declined:
        _bump(conn, "fault_decline")
        refusal: dict[str, Any] = {"error": route.refusal}
        if route.service == "payments":
            refusal["amount"] = request.amount
        return 402, refusal
    if route.undoes is not None:
        # A service only knows its own operations: a refund finds charges, never reservations.
        happened = (
            request.compensates is not None
            and conn.execute(
                "SELECT 1 FROM effects WHERE op_id = ? AND service = ? AND kind = ? AND count > 0",
                (request.compensates, route.service, route.undoes),
            ).fetchone()
        )
        if not happened:
            # Remember the undo: if the original is still on its way (slow network, a caller
            # that timed out), it must not happen afterwards and leave an effect nobody undoes.
            if request.compensates is not None:
                conn.execute(
                    "INSERT OR IGNORE INTO voids (op_id, by_op_id, at) VALUES (?, ?, ?)",
                    (request.compensates, request.key, time.time()),
                )
            return 200, {"noop": True, "reason": "nothing to undo"}
        _record_effect(conn, request, compensates=request.compensates)
        return 200, {"undone": request.compensates}
    if conn.execute("SELECT 1 FROM voids WHERE op_id = ?", (request.key,)).fetchone():
        _bump(conn, "voided")
        return 409, {"error": "operation voided by an earlier compensation", "operation_id": request.key}
    _record_effect(conn, request)
    if request.answer_with:
        _bump(conn, f"poison_{request.answer_with}")
    poison = POISON_ANSWERS.get(request.answer_with, {})
    if route.kind == "reserve":
        return 200, {
            "reservation_id": str(uuid.uuid4()),
            "sku": request.sku,
            "quantity": request.quantity,
            **poison,
        }
    if route.kind == "charge":
        return 200, {"charge_id": str(uuid.uuid4()), "amount": request.amount, **poison}
    return 200, {"shipment_id": str(uuid.uuid4()), **poison}
