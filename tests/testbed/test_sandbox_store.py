"""The sandbox's memory keeps working on a file made by an earlier version of it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from testbed.sandbox.core import Caller
from testbed.sandbox.store import SandboxStore


def test_a_store_file_without_the_callers_columns_gains_them_and_keeps_its_deliveries(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE deliveries (id INTEGER PRIMARY KEY AUTOINCREMENT, op_id TEXT,"
            " method TEXT NOT NULL, path TEXT NOT NULL, attempt INTEGER, at REAL NOT NULL)"
        )
        conn.execute(
            "INSERT INTO deliveries (op_id, method, path, attempt, at) VALUES ('a', 'POST', '/x', 1, 0)"
        )
    conn.close()
    store = SandboxStore(path)
    store.initialise()
    try:
        store.log_delivery(
            "b", "POST", "/shipping/schedule", 1, Caller(job_id="j", step="ship", item_index=2)
        )
        stats = store.stats()
    finally:
        store.close()
    assert stats["deliveries"] == {"a": 1, "b": 1}
    assert stats["callers"] == [["j", "ship", 2, 0, "b", 1]]
