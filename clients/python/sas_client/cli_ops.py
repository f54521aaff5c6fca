"""`sas`'s operator commands: job actions, steps (addressed as `JOB STEP_NAME`, or a step's id),
the Needs-attention list and its bulk actions, and the supervisor's status."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from itertools import islice
from typing import Any, TextIO

from sas_client.calls import BULK_ACTIONS, JOB_ACTIONS, Json
from sas_client.cli_common import (
    EXIT_API,
    EXIT_OK,
    UsageError,
    emit_json,
    json_object,
    show_job,
    show_step,
    table,
)
from sas_client.client import Client

Command = Callable[..., argparse.ArgumentParser]


def add_commands(groups: Any, jobs: Any, command: Command) -> None:
    """The operator's commands: job actions under `jobs`, and the groups steps, attention and
    supervisor."""
    for verb in JOB_ACTIONS:
        p = command(jobs, verb, cmd_job_action, f"{verb} a job (operators)")
        p.add_argument("id")
        p.add_argument("--reason", help="why: recorded in the job's history with your name")
        p.set_defaults(verb=verb)

    steps = groups.add_parser("steps", help="a job's steps: read, retry, resolve, approve, reject")
    sub = steps.add_subparsers(dest="command", required=True)
    p = command(sub, "get", cmd_step_get, "one step of a job")
    _address(p)
    p = command(sub, "retry", cmd_retry, "dispatch a held or failed step again")
    _address(p)
    p.add_argument("--reason")
    p.add_argument("--pool", help="on this pool (of the same kind) instead of the step's own")
    p.add_argument("--input", help="call the step with this input: a JSON object, or @file")
    p = command(sub, "resolve", cmd_resolve, "complete a step by hand with its output")
    _address(p)
    p.add_argument("--output", default="{}", help="the step's output: a JSON object, or @file")
    p.add_argument("--reason", help="the evidence that it happened")
    for decision in ("approve", "reject"):
        p = command(sub, decision, cmd_decide, f"{decision} a step waiting for an approval")
        _address(p)
        p.add_argument("--comment")
        p.set_defaults(decision=decision)

    attention = groups.add_parser("attention", help="the steps that need an operator, and bulk actions")
    sub = attention.add_subparsers(dest="command", required=True)
    p = command(sub, "list", cmd_attention, "held steps, unknown outcomes, failed and overdue calls")
    _filters(p)
    p.add_argument("--limit", type=int, default=50, help="at most this many (0: all)")
    p = command(sub, "bulk", cmd_bulk, "retry, compensate or cancel many at once (try --dry-run first)")
    p.add_argument("action", choices=BULK_ACTIONS)
    p.add_argument("step_ids", nargs="*", type=int, help="the steps (default: the whole list, filtered)")
    _filters(p)
    p.add_argument("--reason")
    p.add_argument("--dry-run", action="store_true", help="say what would happen to each; change nothing")

    supervisor = groups.add_parser("supervisor", help="the supervisor's health")
    sub = supervisor.add_subparsers(dest="command", required=True)
    command(sub, "status", cmd_supervisor, "the lease, the last scan and every endpoint's health")


def _address(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", metavar="JOB", help="the job's id (or, alone, a step's numeric id)")
    p.add_argument("step", metavar="STEP", nargs="?", help="the step's name (or its numeric id)")


def _filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workflow")
    p.add_argument("--step", dest="step_name", help="a step's name")
    p.add_argument("--pool")
    p.add_argument("--older-than", type=int, metavar="MINUTES", help="in its state for longer than this")


def step_id(client: Client, args: argparse.Namespace) -> int:
    """The step `JOB STEP` names (STEP a name or an id), or `STEP_ID` alone."""
    if args.step is None:
        if not args.job.isdigit():
            raise UsageError("name the step: JOB STEP_NAME, or a step's numeric id alone")
        return int(args.job)
    return int(client.step(args.job, args.step)["id"])


def cmd_job_action(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    job = client.job_action(args.verb, args.id, reason=args.reason)
    emit_json(job, out) if args.json else show_job(job, out)
    return EXIT_OK


def cmd_step_get(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.step is None:
        raise UsageError("steps get takes JOB STEP (the API reads steps through their job)")
    step = client.step(args.job, args.step)
    if args.json:
        emit_json(step, out)
    else:
        fields = ("id", "name", "kind", "status", "attempt_count", "last_outcome", "pool", "reason")
        table([(name, step.get(name)) for name in fields], ("FIELD", "VALUE"), out)
    return EXIT_OK


def cmd_retry(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    step = client.retry_step(
        step_id(client, args),
        reason=args.reason,
        pool=args.pool,
        input=json_object(args.input) if args.input else None,
    )
    show_step(step, args, out)
    return EXIT_OK


def cmd_resolve(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    step = client.resolve_step(step_id(client, args), output=json_object(args.output), reason=args.reason)
    show_step(step, args, out)
    return EXIT_OK


def cmd_decide(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.step is None:
        raise UsageError(f"{args.decision} takes JOB STEP (a name, or the step's id)")
    name = args.step if not args.step.isdigit() else client.step(args.job, args.step)["name"]
    decide = client.approve if args.decision == "approve" else client.reject
    show_step(decide(args.job, name, comment=args.comment), args, out)
    return EXIT_OK


ATTENTION_COLUMNS = ("STEP ID", "JOB", "WORKFLOW", "STEP", "STATUS", "WHY", "AGE (S)")


def _attention(client: Client, args: argparse.Namespace) -> Any:
    return client.attention(
        workflow=args.workflow, step=args.step_name, pool=args.pool, older_than_minutes=args.older_than
    )


def cmd_attention(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    found = _attention(client, args)
    items: list[Json] = list(islice(found, args.limit) if args.limit > 0 else found)
    if args.json:
        emit_json(items, out)
    else:
        rows = [
            (
                i["step"]["id"],
                i["job"],
                i["workflow"],
                i["step"]["name"],
                i["step"]["status"],
                i["why"],
                i["age_seconds"],
            )
            for i in items
        ]
        table(rows, ATTENTION_COLUMNS, out)
    return EXIT_OK


def cmd_bulk(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    ids = args.step_ids or [item["step"]["id"] for item in _attention(client, args)]
    if not ids:
        err.write("sas: nothing needs attention: no step to act on\n")
        return EXIT_OK
    result = client.bulk(args.action, ids, reason=args.reason, dry_run=args.dry_run)
    if args.json:
        emit_json(result, out)
    else:
        rows = [(i["step_id"], i["job_id"], i["step"], i["allowed"], i["detail"]) for i in result["items"]]
        table(rows, ("STEP ID", "JOB", "STEP", "WOULD" if args.dry_run else "DONE", "DETAIL"), out)
        verb = "would be done" if args.dry_run else "done"
        err.write(f"sas: {args.action}: {result['done']} {verb}, {result['refused']} refused\n")
    return EXIT_OK if args.dry_run or not result["refused"] else EXIT_API


def cmd_supervisor(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    status = client.supervisor()
    if args.json:
        emit_json(status, out)
        return EXIT_OK
    lease = status.get("lease") or {}
    rows = [
        ("lease holder", lease.get("holder")),
        ("lease valid", lease.get("valid")),
        ("lease expires", lease.get("expires_at")),
        ("last scan", status.get("last_scan_at")),
        ("scan age (s)", status.get("last_scan_age_seconds")),
        ("stale", status.get("stale")),
    ]
    table(rows, ("FIELD", "VALUE"), out)
    endpoints = [
        (p["name"], p["kind"], e["url"], e["enabled"], e["recent_calls"], e["bad_calls"], e["circuit_open"])
        for p in status.get("pools") or []
        for e in p.get("endpoints") or []
    ]
    if endpoints:
        out.write("\n")
        table(endpoints, ("POOL", "KIND", "ENDPOINT", "ENABLED", "CALLS", "BAD", "CIRCUIT OPEN"), out)
    return EXIT_OK
