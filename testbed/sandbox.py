"""The sandbox remote: three independently owned services behind one HTTP server, with faults on tap.

It plays inventory, payments and shipping, each with an action, its compensation and a status
query, so that the whole system can be driven against something that behaves like a real remote:

* it honours `Idempotency-Key` like Stripe does: the first request with a key is processed and its
  answer stored (business failures included); a repeat with the same request gets the stored answer
  back with `Idempotent-Replayed: true` and causes no second effect; a repeat with a different
  request is refused with 422;
* it fails on demand: a 503 without processing, a late answer, or the effect committed and the
  answer lost (the connection closed with nothing written), by rate or by a per-path script;
* it keeps count of every effect per operation, so a duplicate effect anywhere is visible in
  `GET /stats`.

Its memory is its own SQLite file (WAL, busy timeout). Each request processes inside a
`BEGIN IMMEDIATE` transaction, so concurrent requests with one key are serialised: the first
processes, the others replay. Connections are opened per request because sqlite3 connections must
not be shared between the server's threads.

Routes (JSON in and out; every service POST needs an `Idempotency-Key` header):

    POST /inventory/reserve   POST /inventory/release   GET /inventory/reservations/{operation_id}
    POST /payments/charge     POST /payments/refund     GET /payments/{operation_id}
    POST /shipping/schedule   POST /shipping/cancel     GET /shipping/shipments/{operation_id}
    GET /health   GET /stats   GET /config   POST /config (merge)   POST /reset ({"config": true})

and the asynchronous variant of every service POST, `POST /async/<route>` (202 now, the result
POSTed to `X-SAS-Callback-URL` later), and a queue consumer with `--broker` (testbed.sandbox_async,
testbed.sandbox_queue).

A compensation (release, refund, cancel) names the operation it undoes in `compensates`; if that
operation never happened at this service it answers `{"noop": true, ...}` and changes nothing.

Only the standard library is used, so the remote stays independent of the system it tests;
the queue consumer alone uses kombu, as a real consumer of those queues would.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
import signal
import socket
import sqlite3
import sys
import threading
import time
import traceback
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import unquote, urlsplit

#: Request bodies above this are refused with 413 before being read.
MAX_BODY_BYTES = 1024 * 1024
#: How long a request waits for another one's write transaction before the store answers 503.
BUSY_TIMEOUT_MS = 15_000
#: Upper bound for any configured delay, so a typo cannot park a server thread for hours.
MAX_DELAY_MS = 600_000
MAX_KEY_LENGTH = 255
#: Body fields left out of the request fingerprint: they legitimately change across retries of
#: one operation, and a retry must still count as the same request.
VOLATILE_FIELDS = frozenset({"attempt"})
FAULT_KINDS = ("error", "drop", "slow", "decline")
SCRIPT_ACTIONS = ("ok", "error", "drop", "decline", "slow:<ms>")
RATE_FIELDS = (
    "error_rate",
    "latency_rate",
    "drop_rate",
    "reply_loss_rate",
    "reply_duplicate_rate",
    "reply_late_rate",
    "reply_unknown_rate",
)
DELAY_FIELDS = ("latency_ms", "drop_hold_ms", "async_delay_ms", "reply_late_ms")
#: Faults of the asynchronous modes (a result reported later, by callback or reply message).
REPLY_FAULTS = ("reply_lost", "reply_duplicate", "reply_late", "reply_unknown")


class ConfigError(ValueError):
    """A configuration value or script outside what the sandbox accepts; the message names it."""


class BadRequest(ValueError):
    """A request the sandbox refuses with 400 before processing it; nothing is stored."""


# --- configuration ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SandboxConfig:
    """The live fault and behaviour settings. Immutable: a change replaces the whole value, so a
    request always sees one consistent configuration."""

    #: Share of POSTs answered 503 without processing.
    error_rate: float = 0.0
    #: Delay before processing, applied to a `latency_rate` share of POSTs (0 = none).
    latency_ms: int = 0
    latency_rate: float = 1.0
    #: Share of POSTs processed and committed whose answer is then never sent.
    drop_rate: float = 0.0
    #: How long a dropped request holds the connection open before closing it.
    drop_hold_ms: int = 0
    #: Payments decline charges whose amount is above this; None = no limit.
    decline_over: float | None = None
    #: False = process every request anew, ignoring stored keys (duplicates become visible).
    honor_keys: bool = True
    #: Asynchronous modes (POST /async/<route> answers 202 and calls back; the queue consumer
    #: replies on the reply queue): how long the work takes before its result is reported.
    async_delay_ms: int = 0
    #: Share of results never reported (the work is done; the caller must ask or retry).
    reply_loss_rate: float = 0.0
    #: Share of results reported twice.
    reply_duplicate_rate: float = 0.0
    #: Share of results reported `reply_late_ms` later than the work finished.
    reply_late_rate: float = 0.0
    reply_late_ms: int = 0
    #: Share of results followed by a result for an operation nobody asked for.
    reply_unknown_rate: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def merged(self, patch: Mapping[str, Any]) -> SandboxConfig:
        """A copy with `patch` applied, all fields validated.

        Raises ConfigError naming the first bad field. Unknown fields are refused rather than
        ignored, so that a misspelt fault cannot silently stay switched off.
        """
        known = {f.name for f in fields(self)}
        values = self.to_dict()
        for name, value in patch.items():
            if name not in known:
                raise ConfigError(f"unknown config field {name!r}")
            values[name] = _validated_field(name, value)
        return SandboxConfig(**values)


def _is_number(value: object) -> bool:
    # bool is an int subclass, but `true` is never meant as a number here.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _validated_field(name: str, value: Any) -> Any:
    if name in RATE_FIELDS:
        if not _is_number(value) or not 0.0 <= value <= 1.0:
            raise ConfigError(f"{name} must be a number between 0 and 1")
        return float(value)
    if name in DELAY_FIELDS:
        if not _is_number(value) or not 0 <= value <= MAX_DELAY_MS:
            raise ConfigError(f"{name} must be a number of milliseconds between 0 and {MAX_DELAY_MS}")
        return int(value)
    if name == "decline_over":
        if value is not None and (not _is_number(value) or not math.isfinite(value)):
            raise ConfigError("decline_over must be a finite number or null")
        return value
    if name == "honor_keys":
        if not isinstance(value, bool):
            raise ConfigError("honor_keys must be true or false")
        return value
    raise ConfigError(f"unknown config field {name!r}")


@dataclass(frozen=True)
class FaultPlan:
    """What happens to one POST besides being processed."""

    #: Answer 503 and do nothing else.
    error: bool = False
    #: Sleep this long before processing.
    delay_ms: int = 0
    #: Commit, then hold the connection this long and close it without answering.
    drop: bool = False
    hold_ms: int = 0
    #: Refuse with the route's stored business failure (402) whatever the input.
    decline: bool = False


def parse_script_action(action: object) -> str:
    """Validate one script entry ("ok", "error", "drop", "decline" or "slow:<ms>") and return it."""
    if action in ("ok", "error", "drop", "decline"):
        return str(action)
    if isinstance(action, str) and action.startswith("slow:"):
        digits = action.removeprefix("slow:")
        if digits.isascii() and digits.isdigit() and int(digits) <= MAX_DELAY_MS:
            return action
    raise ConfigError(f"script action {action!r} is not one of {', '.join(SCRIPT_ACTIONS)}")


def parse_script(script: object) -> dict[str, list[str]]:
    """Validate a `script` config value: an object mapping a path to a list of actions."""
    if not isinstance(script, dict):
        raise ConfigError("script must be an object mapping a path to a list of actions")
    parsed: dict[str, list[str]] = {}
    for path, actions in script.items():
        if not path.startswith("/"):
            raise ConfigError(f"script path {path!r} must start with '/'")
        if not isinstance(actions, list):
            raise ConfigError(f"script for {path!r} must be a list of actions")
        parsed[path] = [parse_script_action(a) for a in actions]
    return parsed


def _plan_for_action(action: str, config: SandboxConfig) -> FaultPlan:
    if action == "error":
        return FaultPlan(error=True)
    if action == "drop":
        return FaultPlan(drop=True, hold_ms=config.drop_hold_ms)
    if action == "decline":
        return FaultPlan(decline=True)
    if action.startswith("slow:"):
        return FaultPlan(delay_ms=int(action.removeprefix("slow:")))
    return FaultPlan()


# --- routes -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    """One POST route of one service: an action, or the compensation of one (`undoes` set)."""

    service: str
    kind: str
    #: The business failure a declined request answers with.
    refusal: str
    #: For a compensation, the kind of the action it undoes.
    undoes: str | None = None


ROUTES: dict[str, Route] = {
    "/inventory/reserve": Route("inventory", "reserve", refusal="out of stock"),
    "/inventory/release": Route("inventory", "release", refusal="release refused", undoes="reserve"),
    "/payments/charge": Route("payments", "charge", refusal="card declined"),
    "/payments/refund": Route("payments", "refund", refusal="refund refused", undoes="charge"),
    "/shipping/schedule": Route("shipping", "schedule", refusal="no shipping slot available"),
    "/shipping/cancel": Route("shipping", "cancel", refusal="cancellation refused", undoes="schedule"),
}

#: GET `<prefix><operation_id>` asks a service about one of its operations.
STATUS_PREFIXES: tuple[tuple[str, str], ...] = (
    ("/inventory/reservations/", "inventory"),
    ("/shipping/shipments/", "shipping"),
    ("/payments/", "payments"),
)


def status_route(path: str) -> tuple[str, str] | None:
    """(service, operation id) for a status query path, or None if `path` is not one."""
    for prefix, service in STATUS_PREFIXES:
        if path.startswith(prefix):
            op_id = unquote(path.removeprefix(prefix))
            if op_id and "/" not in op_id:
                return service, op_id
    return None


def request_fingerprint(body: Mapping[str, Any]) -> str:
    """Hash of a request body that is equal for every retry of one request (see VOLATILE_FIELDS)."""
    stable = {k: v for k, v in body.items() if k not in VOLATILE_FIELDS}
    canonical = json.dumps(stable, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(raw: bytes) -> Any:
    """Strict JSON (no NaN or Infinity, which would make amount comparisons meaningless).

    Raises BadRequest.
    """
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise BadRequest("body is not valid JSON") from exc


@dataclass(frozen=True)
class OperationRequest:
    """A validated POST to a service route."""

    route: Route
    path: str
    key: str
    fingerprint: str
    sku: str
    quantity: int
    amount: float
    #: For a compensation: the operation it undoes (None = nothing identified, so nothing to undo).
    compensates: str | None


def read_operation_request(route: Route, path: str, key: str, body: object) -> OperationRequest:
    """Validate a service POST body. Missing fields take defaults; wrong types raise BadRequest."""
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    job_input = body.get("input")
    if job_input is None:
        job_input = {}
    if not isinstance(job_input, dict):
        raise BadRequest("input must be a JSON object")
    sku = job_input.get("sku", "unknown")
    if not isinstance(sku, str):
        raise BadRequest("input.sku must be a string")
    quantity = job_input.get("quantity", 1)
    if not isinstance(quantity, int) or isinstance(quantity, bool):
        raise BadRequest("input.quantity must be an integer")
    amount = job_input.get("amount", 0)
    if not _is_number(amount):
        raise BadRequest("input.amount must be a number")
    compensates = body.get("compensates")
    if compensates is not None and not isinstance(compensates, str):
        raise BadRequest("compensates must be an operation id")
    return OperationRequest(
        route=route,
        path=path,
        key=key,
        fingerprint=request_fingerprint(body),
        sku=sku,
        quantity=quantity,
        amount=amount,
        compensates=compensates or None,
    )


# --- durable store ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: status, JSON body bytes, and whether it is a stored one replayed."""

    status: int
    body: bytes
    replayed: bool = False

    @classmethod
    def json(cls, status: int, payload: Any) -> Answer:
        return cls(status, json.dumps(payload).encode())


KEY_REUSED = Answer.json(422, {"error": "idempotency key reused with a different request"})
UNKNOWN_OPERATION = Answer.json(404, {"error": "unknown operation"})

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
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS deliveries_op_id ON deliveries (op_id);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS voids (
    op_id TEXT PRIMARY KEY,
    by_op_id TEXT NOT NULL,
    at REAL NOT NULL
);
"""
_TABLES = ("requests", "effects", "deliveries", "counters", "voids")


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

    def log_delivery(self, op_id: str | None, method: str, path: str, attempt: int | None) -> None:
        """Record that a request arrived, whatever then happens to it."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO deliveries (op_id, method, path, attempt, at) VALUES (?, ?, ?, ?, ?)",
                (op_id, method, path, attempt, time.time()),
            )

    def bump(self, counter: str) -> None:
        with self.transaction() as conn:
            _bump(conn, counter)

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
            "results_reported": counters.get("results_reported", 0),
        }


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
    declined = force_decline or (
        route.kind == "charge" and config.decline_over is not None and request.amount > config.decline_over
    )
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
    if route.kind == "reserve":
        return 200, {"reservation_id": str(uuid.uuid4()), "sku": request.sku, "quantity": request.quantity}
    if route.kind == "charge":
        return 200, {"charge_id": str(uuid.uuid4()), "amount": request.amount}
    return 200, {"shipment_id": str(uuid.uuid4())}


# --- server -------------------------------------------------------------------------------------


class SandboxRemote:
    """The sandbox server: its store, live config, scripts and fault RNG.

    `start()` serves in a background thread and returns the base URL; `stop()` shuts it down.
    Config, scripts and the RNG are shared by the request threads and guarded by one lock.
    """

    def __init__(
        self,
        db_path: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        config: SandboxConfig | None = None,
        seed: int = 0,
        reset: bool = False,
        access_log: bool = False,
    ) -> None:
        self.store = SandboxStore(db_path)
        self.initial_config = config or SandboxConfig()
        self.seed = seed
        self.access_log = access_log
        self._config = self.initial_config
        self._scripts: dict[str, deque[str]] = {}
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._in_progress: dict[str, int] = {}
        #: Requests being processed now, and the most at once, per path.
        self._concurrent: dict[str, int] = {}
        self.max_concurrent: dict[str, int] = {}
        self.store.initialise(wipe=reset)
        try:
            self._server = _Server((host, port), _Handler, self)
        except OSError:
            self.store.close()
            raise
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.socket.getsockname()[:2]
        return f"http://{host}:{port}"

    @property
    def config(self) -> SandboxConfig:
        return self._config

    def start(self) -> str:
        """Serve in a daemon thread; return the base URL."""
        self._thread = threading.Thread(
            # A short poll keeps stop() quick: shutdown() waits for the loop to notice.
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="sandbox-remote",
            daemon=True,
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop accepting requests and close the listening socket. Requests in flight are abandoned."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
        self.store.close()

    @contextlib.contextmanager
    def in_progress(self, key: str) -> Iterator[None]:
        """Mark `key` as being processed (status queries answer 409 meanwhile)."""
        with self._lock:
            self._in_progress[key] = self._in_progress.get(key, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._in_progress[key] -= 1
                if not self._in_progress[key]:
                    del self._in_progress[key]

    @contextlib.contextmanager
    def concurrent(self, path: str) -> Iterator[None]:
        """Count the requests to `path` being processed at once (GET /stats: max_concurrent)."""
        with self._lock:
            self._concurrent[path] = self._concurrent.get(path, 0) + 1
            self.max_concurrent[path] = max(self.max_concurrent.get(path, 0), self._concurrent[path])
        try:
            yield
        finally:
            with self._lock:
                self._concurrent[path] -= 1

    def is_in_progress(self, key: str) -> bool:
        with self._lock:
            return key in self._in_progress

    def config_snapshot(self) -> dict[str, Any]:
        """The full live config, including what remains of each script."""
        with self._lock:
            return {**self._config.to_dict(), "script": {p: list(q) for p, q in self._scripts.items()}}

    def configure(self, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge `patch` into the live config; `script` replaces the scripts of the paths it names.

        All or nothing: raises ConfigError and changes nothing if any part is invalid.
        """
        settings = dict(patch)
        scripts = parse_script(settings.pop("script")) if "script" in settings else {}
        with self._lock:
            self._config = self._config.merged(settings)
            for path, actions in scripts.items():
                self._scripts[path] = deque(actions)
        return self.config_snapshot()

    def reset(self, *, config: bool = False) -> None:
        """Forget all stored requests, effects, deliveries, counters and scripts; reseed the RNG so a
        run after a reset is as reproducible as one after a start. With `config`, also return to
        the configuration the server started with."""
        with self._lock:
            self._scripts.clear()
            self._rng.seed(self.seed)
            self.max_concurrent.clear()
            if config:
                self._config = self.initial_config
        self.store.wipe()

    def plan_faults(self, path: str) -> tuple[FaultPlan, SandboxConfig]:
        """Decide what happens to one POST to `path`: its script's next action if any, else the
        rates. Returns the config it was decided under, for processing to use the same one."""
        with self._lock:
            config = self._config
            script = self._scripts.get(path)
            if script:
                return _plan_for_action(script.popleft(), config), config
            if config.error_rate and self._rng.random() < config.error_rate:
                return FaultPlan(error=True), config
            slow = config.latency_ms > 0 and self._rng.random() < config.latency_rate
            drop = config.drop_rate > 0 and self._rng.random() < config.drop_rate
        return (
            FaultPlan(
                delay_ms=config.latency_ms if slow else 0,
                drop=drop,
                hold_ms=config.drop_hold_ms,
            ),
            config,
        )


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[_Handler], remote: SandboxRemote) -> None:
        self.remote = remote
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "SandboxRemote/1"
    # An idle keep-alive connection (or a client that sent less than its Content-Length) must not
    # hold a thread forever.
    timeout = 30
    # Headers and body are written separately; with Nagle on, the body waits for a delayed ACK.
    disable_nagle_algorithm = True

    @property
    def remote(self) -> SandboxRemote:
        return self.server.remote

    # -- plumbing

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if self.remote.access_log:
            super().log_request(code, size)

    def _send(self, answer: Answer, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(answer.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer.body)))
        if answer.replayed:
            self.send_header("Idempotent-Replayed", "true")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(answer.body)

    def _send_json(self, status: int, payload: Any) -> None:
        self._send(Answer.json(status, payload))

    def _guarded(self, handle: Callable[[], None]) -> None:
        try:
            handle()
        except sqlite3.OperationalError as exc:
            # The store stayed locked past the busy timeout: a transient failure, as a real remote's.
            self.log_error("store unavailable: %s", exc)
            self.close_connection = True
            self._send_json(503, {"error": "store unavailable"})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:  # noqa: BLE001 - one request's bug must not kill the server thread silently
            traceback.print_exc(file=sys.stderr)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self._send_json(500, {"error": "internal error"})

    def _read_body(self) -> bytes | None:
        """The request body, or None once a 4xx has been sent for it."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            self._send_json(411, {"error": "Content-Length required"})
            return None
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if length < 0:
            self.close_connection = True
            self._send_json(400, {"error": "invalid Content-Length"})
            return None
        if length > MAX_BODY_BYTES:
            # The body is not read, so the connection cannot carry another request.
            self.close_connection = True
            self._send_json(413, {"error": f"body larger than {MAX_BODY_BYTES} bytes"})
            return None
        return self.rfile.read(length)

    def _drop(self, hold_ms: int) -> None:
        """Close the connection having written nothing: the caller cannot know what happened."""
        if hold_ms:
            time.sleep(hold_ms / 1000)
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    # -- routes

    def do_GET(self) -> None:
        self._guarded(self._get)

    def do_POST(self) -> None:
        self._guarded(self._post)

    def _get(self) -> None:
        path = urlsplit(self.path).path
        if path == "/health":
            self._send_json(200, {"ok": True})
        elif path == "/stats":
            with self.remote._lock:
                most = dict(self.remote.max_concurrent)
            self._send_json(200, {**self.remote.store.stats(), "max_concurrent": most})
        elif path == "/config":
            self._send_json(200, self.remote.config_snapshot())
        elif (found := status_route(path)) is not None:
            service, op_id = found
            self.remote.store.log_delivery(
                op_id, "GET", path, _int_or_none(self.headers.get("X-SAS-Attempt"))
            )
            if self.remote.is_in_progress(op_id):
                # Neither "it happened" nor "it did not": a request with this key is being processed.
                self._send_json(409, {"error": "operation in progress", "operation_id": op_id})
            else:
                self._send(self.remote.store.status_of(service, op_id))
        else:
            self._send_json(404, {"error": "not found"})

    def _post(self) -> None:
        raw = self._read_body()
        if raw is None:
            return
        path = urlsplit(self.path).path
        if path == "/config":
            self._post_config(raw)
        elif path == "/reset":
            self._post_reset(raw)
        elif path in ROUTES:
            self._post_operation(ROUTES[path], path, raw)
        elif path.startswith("/async/") and path.removeprefix("/async") in ROUTES:
            self._post_operation(ROUTES[path.removeprefix("/async")], path, raw, later=True)
        else:
            self._send_json(404, {"error": "not found"})

    def _post_config(self, raw: bytes) -> None:
        try:
            patch = parse_json(raw) if raw.strip() else {}
            if not isinstance(patch, dict):
                raise ConfigError("config must be a JSON object")
            self._send_json(200, self.remote.configure(patch))
        except (BadRequest, ConfigError) as exc:
            self._send_json(400, {"error": str(exc)})

    def _post_reset(self, raw: bytes) -> None:
        try:
            options = parse_json(raw) if raw.strip() else {}
        except BadRequest as exc:
            self._send_json(400, {"error": str(exc)})
            return
        if not isinstance(options, dict) or not isinstance(options.get("config", False), bool):
            self._send_json(400, {"error": 'body must be {"config": true|false} or empty'})
            return
        self.remote.reset(config=options.get("config", False))
        self._send_json(200, {"reset": True, "config": self.remote.config_snapshot()})

    def _post_operation(self, route: Route, path: str, raw: bytes, *, later: bool = False) -> None:
        key = self.headers.get("Idempotency-Key", "").strip()
        body: object = None
        parse_error: BadRequest | None = None
        try:
            body = parse_json(raw)
        except BadRequest as exc:
            parse_error = exc
        attempt = _int_or_none(self.headers.get("X-SAS-Attempt"))
        if attempt is None and isinstance(body, dict):
            attempt = _int_or_none(body.get("attempt"))
        # Logged before validation: a malformed or faulted request was still delivered.
        self.remote.store.log_delivery(key or None, "POST", path, attempt)
        try:
            if not key:
                raise BadRequest("Idempotency-Key header required")
            if len(key) > MAX_KEY_LENGTH:
                raise BadRequest(f"Idempotency-Key longer than {MAX_KEY_LENGTH} characters")
            if parse_error is not None:
                raise parse_error
            request = read_operation_request(route, path, key, body)
        except BadRequest as exc:
            self._send_json(400, {"error": str(exc)})
            return

        plan, config = self.remote.plan_faults(path)
        if plan.error:
            self.remote.store.bump("fault_error")
            self._send_json(503, {"error": "injected failure"})
            return
        if later:
            self._accept(request, config, plan)
            return
        with self.remote.in_progress(key), self.remote.concurrent(path):
            if plan.delay_ms:
                self.remote.store.bump("fault_slow")
                time.sleep(plan.delay_ms / 1000)
            answer = self.remote.store.execute(request, config, force_decline=plan.decline)
        if plan.drop:
            self.remote.store.bump("fault_drop")
            self._drop(plan.hold_ms)
            return
        self._send(answer)

    def _accept(self, request: OperationRequest, config: SandboxConfig, plan: FaultPlan) -> None:
        """The asynchronous mode: 202 now, the work and its callback later (sandbox_async)."""
        from testbed.sandbox_async import callback_reporters, perform_later

        callback = self.headers.get("X-SAS-Callback-URL", "").strip()
        report, report_unknown = callback_reporters(callback) if callback else (_nothing, _nothing)
        # The slowness fault delays the work, not the 202: what is slow is the remote's work.
        perform_later(self.remote, request, config, plan, report=report, report_unknown=report_unknown)
        if plan.drop:
            self.remote.store.bump("fault_drop")
            self._drop(plan.hold_ms)
            return
        self._send_json(202, {"accepted": True, "operation_id": request.key})


def _nothing(*args: Any) -> None:
    """A report with nowhere to go: the request carried no callback URL."""


def _int_or_none(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value)
    return None


def serve_until_signalled(remote: SandboxRemote, on_ready: Callable[[str], None]) -> None:
    """Serve until SIGTERM or SIGINT, then shut down cleanly. Must run in the main thread.

    `on_ready(url)` is called once the socket is listening and requests are being served.
    """
    stopping: list[int] = []

    def request_stop(signum: int, frame: FrameType | None) -> None:
        # Only a plain append: taking a lock here could deadlock with the main thread holding it.
        stopping.append(signum)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        on_ready(remote.start())
        while not stopping:
            time.sleep(0.1)
    finally:
        remote.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
