"""A remote built on sas_remote for the end-to-end tests, run as its own process:
`python -m tests.remote_lib.remote_app --port N --db FILE`.

Routes (every POST through sas_remote, its operations in a SQLite store):

* `POST /sync`: sleeps `input.sleep_ms` on the attempts `input.slow_attempts` names (default: the
  first), then performs the effect and answers `{"done": <operation ID>}`;
* `POST /later`: answers 202; the work heartbeats `input.beats` times, `input.beat_ms` apart
  (details `{"beat": n}`), then performs the effect and reports `{"beats": n}`;
* `POST /refuse`: refuses (422), no effect;
* `GET /stats` (answered beside the library, without the secret header):
  `{"effects": {op: count}, "deliveries": {op: count}}`.

An effect is a row counted per operation ID in the same SQLite file, so a test can tell one
effect from two whatever the deliveries.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterable
from typing import Any

from sas_remote import Heartbeat, Refused, Request, SqlStore, later, make_wsgi_app, serve


class Effects:
    def __init__(self, path: str) -> None:
        self.path = path
        with contextlib.closing(self._connect()) as conn, conn:
            conn.execute("CREATE TABLE IF NOT EXISTS effects (op TEXT PRIMARY KEY, count INTEGER NOT NULL)")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS deliveries (op TEXT PRIMARY KEY, count INTEGER NOT NULL)"
            )

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        return conn

    def bump(self, table: str, op: str) -> None:
        with contextlib.closing(self._connect()) as conn, conn:
            conn.execute(
                f"INSERT INTO {table} (op, count) VALUES (?, 1)"  # noqa: S608 - two fixed table names
                " ON CONFLICT (op) DO UPDATE SET count = count + 1",
                (op,),
            )

    def stats(self) -> dict[str, Any]:
        with contextlib.closing(self._connect()) as conn:
            return {
                "effects": dict(conn.execute("SELECT op, count FROM effects").fetchall()),
                "deliveries": dict(conn.execute("SELECT op, count FROM deliveries").fetchall()),
            }


def make_handler(effects: Effects) -> Callable[[Request], Any]:
    def handle(request: Request) -> Any:
        options = request.input if isinstance(request.input, dict) else {}
        if request.path == "/refuse":
            raise Refused("refused by the remote", code="no")
        if request.path == "/later":

            def work(heartbeat: Heartbeat) -> Any:
                beats = int(options.get("beats", 0))
                for n in range(1, beats + 1):
                    time.sleep(int(options.get("beat_ms", 100)) / 1000)
                    heartbeat({"beat": n})
                effects.bump("effects", request.operation_id)
                return {"beats": beats}

            return later(work)
        if request.attempt in options.get("slow_attempts", [1]):
            time.sleep(int(options.get("sleep_ms", 0)) / 1000)
        effects.bump("effects", request.operation_id)
        return {"done": request.operation_id}

    return handle


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--wait-seconds", type=float, default=2.0)
    parser.add_argument("--secret-header", default="", help="NAME:VALUE, required of every caller")
    parser.add_argument("--callback-origin", action="append", default=[], help="where results may go")
    options = parser.parse_args()
    effects = Effects(options.db)
    name, _, value = options.secret_header.partition(":")
    app = make_wsgi_app(
        make_handler(effects),
        SqlStore.sqlite(options.db),
        wait_seconds=options.wait_seconds,
        secret_header=(name, value) if name else None,
        callback_origins=options.callback_origin,
    )

    def counted(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        """Every delivery counted before the library answers it; /stats beside it."""
        if environ.get("PATH_INFO") == "/stats":
            body = json.dumps(effects.stats()).encode()
            start_response(
                "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
            )
            return [body]
        if environ.get("REQUEST_METHOD") == "POST" and environ.get("HTTP_IDEMPOTENCY_KEY"):
            effects.bump("deliveries", environ["HTTP_IDEMPOTENCY_KEY"])
        return app(environ, start_response)

    counted.remote = app.remote  # type: ignore[attr-defined]  # serve() closes it on the way out
    serve(counted, port=options.port)


if __name__ == "__main__":
    main()
