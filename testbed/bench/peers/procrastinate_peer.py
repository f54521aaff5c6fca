"""procrastinate as a peer of the benchmark: chains of `--steps` tasks, each deferring the next,
on the PostgreSQL database `--database` (the benchmark creates it empty; the schema is applied
here), one worker in this process running `--workers` jobs at once (procrastinate's
`concurrency`). Prints one JSON line (peerlib.report).

    python procrastinate_peer.py --database postgresql://... --work noop --jobs 300 --run r1
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

import peerlib
import procrastinate

PEER = "procrastinate"


class State:
    http: peerlib.AsyncHttp | None = None
    paths: list[str] = []
    clock = peerlib.Clock()


def make_app(database: str) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=database))

    @app.task(name="chain_step", queue="sas-bench")
    async def chain_step(run: str, chain: int, index: int, total: int, work: str) -> None:
        if work == "http":
            assert State.http is not None
            await State.http.step(PEER, run, chain, index, State.paths)
        if index < total:
            await chain_step.defer_async(run=run, chain=chain, index=index + 1, total=total, work=work)
        else:
            State.clock.finish(chain)

    return app


async def main() -> int:
    p = peerlib.parser(__doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--database", required=True, help="a PostgreSQL URL, an empty database")
    args = p.parse_args()
    State.paths = args.paths.split(",")
    if args.work == "http":
        State.http = peerlib.AsyncHttp(args.remote, args.workers)
    app = make_app(args.database)

    async def failed() -> int:
        rows = await app.connector.execute_query_all_async(
            "SELECT count(*) AS n FROM procrastinate_jobs WHERE status = 'failed'"
        )
        return int(rows[0]["n"])

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        worker = asyncio.create_task(
            app.run_worker_async(
                concurrency=args.workers, wait=True, install_signal_handlers=False, queues=["sas-bench"]
            )
        )
        task = app.tasks["chain_step"]
        for run, count in ((f"{args.run}w", args.warmup), (args.run, args.jobs)):
            State.clock = clock = peerlib.Clock()
            for n in range(count):
                clock.submit(n)
                await task.defer_async(run=run, chain=n, index=1, total=args.steps, work=args.work)
            await clock.wait(count, args.timeout, failed)
        failures = await failed()
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker
    peerlib.report(PEER, args, clock, failed=failures, packages=["procrastinate", "psycopg", "httpx"])
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
