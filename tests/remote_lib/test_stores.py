"""The store protocol, kept by every store for real (memory, SQLite file, PostgreSQL, Redis): the
first writer of an operation ID wins, and a swap or removal of a version someone else changed
writes nothing."""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sas_remote import Record, SqlStore, Store
from sas_remote.store import DONE, PENDING


def pending(key: str = "op-1", **fields: Any) -> Record:
    return Record(key=key, fingerprint="f" * 64, state=PENDING, token="t1", lease_until=1000.5, **fields)


def test_a_record_reads_back_as_written(store: Store) -> None:
    record = pending(accepted=True, callback_url="http://scheduler/api/v1/callbacks/abc/")
    assert store.add(record)
    assert store.get("op-1") == record
    assert store.get("op-2") is None


def test_the_first_add_of_an_operation_id_wins(store: Store) -> None:
    assert store.add(pending())
    assert not store.add(pending().but(token="t2"))
    found = store.get("op-1")
    assert found is not None and found.token == "t1"


def test_a_swap_writes_only_over_the_version_it_read(store: Store) -> None:
    first = pending()
    store.add(first)
    done = first.but(state=DONE, status=200, body='{"ok":true}')
    assert store.swap(first, done)
    assert store.get("op-1") == done
    # A second writer that read the first version loses and changes nothing.
    assert not store.swap(first, first.but(token="t2"))
    assert store.get("op-1") == done


def test_a_removal_of_a_changed_record_removes_nothing(store: Store) -> None:
    first = pending()
    store.add(first)
    renewed = first.but(lease_until=2000.0)
    store.swap(first, renewed)
    assert not store.remove(first)
    assert store.get("op-1") == renewed
    assert store.remove(renewed)
    assert store.get("op-1") is None
    assert not store.swap(renewed, renewed.but())  # nothing left to swap


def test_of_many_concurrent_adds_of_one_operation_id_one_wins(store: Store) -> None:
    start = threading.Barrier(8)

    def add(n: int) -> bool:
        start.wait()
        return store.add(pending().but(token=f"t{n}"))

    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(add, range(8)))
    assert won.count(True) == 1
    found = store.get("op-1")
    assert found is not None and found.token == f"t{won.index(True)}"


def test_of_many_concurrent_swaps_of_one_version_one_wins(store: Store) -> None:
    first = pending()
    store.add(first)
    start = threading.Barrier(8)

    def swap(n: int) -> bool:
        start.wait()
        return store.swap(first, first.but(token=f"t{n}"))

    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(swap, range(8)))
    assert won.count(True) == 1


def test_the_sqlite_store_keeps_its_records_across_instances(tmp_path: Path) -> None:
    path = tmp_path / "remote.sqlite3"
    SqlStore.sqlite(path).add(pending())
    assert SqlStore.sqlite(path).get("op-1") == pending()


def test_a_table_name_that_is_not_a_plain_identifier_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="plain SQL identifier"):
        SqlStore.sqlite(tmp_path / "x.sqlite3", table="ops; DROP TABLE users")


def test_the_sql_store_gives_its_connections_back_to_the_pool_they_came_from(tmp_path: Path) -> None:
    path = tmp_path / "pooled.sqlite3"
    idle = [sqlite3.connect(path, check_same_thread=False)]
    taken: list[sqlite3.Connection] = []

    def getconn() -> sqlite3.Connection:
        taken.append(idle.pop() if idle else sqlite3.connect(path, check_same_thread=False))
        return taken[-1]

    store = SqlStore(getconn, release=idle.append)
    store.add(pending())
    assert store.get("op-1") == pending()
    assert len(set(map(id, taken))) == 1 and len(taken) == 3  # created the table, added, read: one connection
    idle[0].execute("SELECT 1")  # given back open


def test_processes_creating_the_postgres_table_at_once_all_start(django_db_setup: None) -> None:
    import psycopg
    from django.db import connection

    from tests.remote_lib.conftest import postgres_params

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    params = postgres_params()
    table = "sas_remote_race"
    start = threading.Barrier(6)

    def create(n: int) -> SqlStore:
        start.wait()
        return SqlStore(lambda: psycopg.connect(**params), table=table)

    try:
        with ThreadPoolExecutor(6) as pool:
            stores = list(pool.map(create, range(6)))
        assert stores[0].add(pending()) and not stores[5].add(pending())
    finally:
        with psycopg.connect(**params, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
