"""The stores of sas_remote, each for real: in memory, a SQLite file, the test PostgreSQL (a table of
its own per test, dropped after), and a throwaway `redis-server`."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sas_remote import MemoryStore, SqlStore, Store
from sas_remote.redis_store import RedisStore

from testbed.processes import RedisProcess
from tests.processes import ARTIFACTS, free_port


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisProcess]:
    server = RedisProcess(port=free_port(), log=ARTIFACTS / "redis-remote-lib.log").start()
    yield server
    server.stop()


def postgres_params() -> dict[str, Any]:
    """How to reach the test database with psycopg directly (not through Django)."""
    from django.db import connection

    settings = connection.settings_dict
    return {
        "dbname": settings["NAME"],
        "user": settings.get("USER") or "postgres",
        "password": settings.get("PASSWORD") or None,
        "host": settings.get("HOST") or "127.0.0.1",
        "port": settings.get("PORT") or 5432,
    }


@pytest.fixture
def postgres_store(django_db_setup: None) -> Iterator[SqlStore]:
    import psycopg
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the PostgreSQL store needs the PostgreSQL test database")
    params = postgres_params()
    table = f"sas_remote_test_{secrets.token_hex(4)}"
    store = SqlStore(lambda: psycopg.connect(**params), table=table)
    yield store
    with psycopg.connect(**params, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqlStore]:
    store = SqlStore.sqlite(tmp_path / "remote.sqlite3")
    yield store
    store.close()


@pytest.fixture
def redis_store(redis_server: RedisProcess) -> RedisStore:
    import redis

    return RedisStore(redis.Redis.from_url(redis_server.url), prefix=f"test-{secrets.token_hex(4)}:")


STORE_KINDS = ["memory", "sqlite", "postgres", "redis"]


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest) -> Store:
    """Each store in turn."""
    if request.param == "memory":
        return MemoryStore()
    made: Store = request.getfixturevalue(f"{request.param}_store")
    return made


StoreFactory = Callable[[], Store]
