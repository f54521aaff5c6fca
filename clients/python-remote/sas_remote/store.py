"""What a remote remembers per operation ID, and the store protocol every backend implements.

A store holds one `Record` per operation ID and offers three guarded writes, each a
compare-and-set: `add` (only if the operation ID is new: the first writer wins), `swap` and
`remove` (only if the record is still the version the caller read). The rules (who runs the
handler, what a repeat gets, when a crashed run may be taken over) live once, in
`sas_remote.core`, over these primitives; a backend only has to make each one atomic. That is
why a new backend is a few dozen lines: `MemoryStore` here, `SqlStore` (sas_remote.sql) on any
DB-API connection, `RedisStore` (sas_remote.redis_store).
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Any, Protocol

#: A record whose handler is running (or whose work, accepted with 202, is in progress).
PENDING = "pending"
#: A record with its answer: replayed to every later delivery of the operation.
DONE = "done"


@dataclass(frozen=True)
class Record:
    """One operation as the remote knows it."""

    #: The operation ID (the request's `Idempotency-Key`).
    key: str
    #: Hash of the request (its path and body without the fields that change between attempts):
    #: the same key with another request is refused.
    fingerprint: str
    #: PENDING or DONE.
    state: str
    #: Bumped by every swap: what `swap` and `remove` compare.
    version: int = 1
    #: The answer's HTTP status (0 while pending).
    status: int = 0
    #: The answer's body, JSON text ("" while pending).
    body: str = ""
    #: Who holds the pending run (a random token per run).
    token: str = ""
    #: Until when (Unix seconds, the remote's clock) the pending run holds the operation: after
    #: that, a delivery takes it over (its runner is taken for dead).
    lease_until: float = 0.0
    #: Whether the pending run answered 202 and works in the background.
    accepted: bool = False
    #: Where the result of accepted work goes: the callback URL of the latest delivery.
    callback_url: str = ""

    def but(self, **changes: Any) -> Record:
        """A copy with `changes` and the next version: what a swap writes."""
        return dataclasses.replace(self, version=self.version + 1, **changes)


class Store(Protocol):
    """The records of one remote. Every method is atomic on its own; none holds a lock between
    calls. Implementations must be safe to call from several threads at once."""

    def get(self, key: str) -> Record | None:
        """The record of `key`, or None."""
        ...

    def add(self, record: Record) -> bool:
        """Store `record` if its key has none; False if it had one (nothing written)."""
        ...

    def swap(self, old: Record, new: Record) -> bool:
        """Replace `old` by `new` if the stored record is still `old`'s version; False otherwise."""
        ...

    def remove(self, old: Record) -> bool:
        """Delete `old` if the stored record is still `old`'s version; False otherwise."""
        ...


class MemoryStore:
    """Records in this process's memory: for tests and for a remote of one process whose
    operations may be forgotten on restart (a restart then runs a repeated operation again)."""

    def __init__(self) -> None:
        self._records: dict[str, Record] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> Record | None:
        with self._lock:
            return self._records.get(key)

    def add(self, record: Record) -> bool:
        with self._lock:
            if record.key in self._records:
                return False
            self._records[record.key] = record
            return True

    def swap(self, old: Record, new: Record) -> bool:
        with self._lock:
            current = self._records.get(old.key)
            if current is None or current.version != old.version:
                return False
            self._records[old.key] = new
            return True

    def remove(self, old: Record) -> bool:
        with self._lock:
            current = self._records.get(old.key)
            if current is None or current.version != old.version:
                return False
            del self._records[old.key]
            return True
