"""DBOS as a peer of the benchmark: a workflow of `--steps` steps, its system database the
PostgreSQL database `--database` (the benchmark creates it empty; DBOS migrates it on launch),
the workflows enqueued on a queue running `--workers` of them at once in this process
(`worker_concurrency`), polled every `--poll` seconds. Prints one JSON line (peerlib.report).

    python dbos_peer.py --database postgresql://... --work noop --jobs 300 --run r1 --poll 0.2
"""

from __future__ import annotations

import asyncio
import sys
import time

import peerlib
from dbos import DBOS

PEER = "dbos"
QUEUE = "sas-bench"


class State:
    http: peerlib.ThreadHttp | None = None
    paths: list[str] = []
    clock = peerlib.Clock()


@DBOS.step()
def chain_step(run: str, chain: int, index: int, work: str) -> None:
    if work == "http":
        assert State.http is not None
        State.http.step(PEER, run, chain, index, State.paths)


@DBOS.workflow()
def chain_workflow(run: str, chain: int, total: int, work: str) -> int:
    for index in range(1, total + 1):
        chain_step(run, chain, index, work)
    State.clock.finish(chain)
    return total


def main() -> int:
    p = peerlib.parser(__doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--database", required=True, help="a PostgreSQL URL, an empty database")
    p.add_argument("--poll", type=float, default=1.0, help="the queue's polling interval, seconds")
    args = p.parse_args()
    State.paths = args.paths.split(",")
    if args.work == "http":
        State.http = peerlib.ThreadHttp(args.remote)
    DBOS(config={"name": "sas-bench-peer", "system_database_url": args.database, "log_level": "WARNING"})
    DBOS.launch()
    queue = DBOS.register_queue(QUEUE, worker_concurrency=args.workers, polling_interval_sec=args.poll)

    async def failed() -> int:
        errors = await DBOS.list_workflows_async(
            status="ERROR", queue_name=QUEUE, load_input=False, load_output=False
        )
        return len(errors)

    for run, count in ((f"{args.run}w", args.warmup), (args.run, args.jobs)):
        State.clock = clock = peerlib.Clock()
        for n in range(count):
            clock.submit(n)
            queue.enqueue(chain_workflow, run, n, args.steps, args.work)
        asyncio.run(clock.wait(count, args.timeout, failed))
    time.sleep(0.1)  # the last workflows' outcomes written
    failures = asyncio.run(failed())
    DBOS.destroy()
    peerlib.report(PEER, args, clock, failed=failures, packages=["dbos", "psycopg", "httpx"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
