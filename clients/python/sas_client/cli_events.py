"""`sas`'s commands for what other systems say: signals by business key (`sas signals send`) and
inbound events (`sas events post`, and an operator's `sas events replay`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TextIO

from sas_client.calls import Json
from sas_client.cli_common import EXIT_OK, emit_json, json_argument, table
from sas_client.client import Client

Command = Callable[..., argparse.ArgumentParser]


def add_commands(groups: Any, command: Command) -> None:
    signals = groups.add_parser("signals", help="signals by business key").add_subparsers(
        dest="command", required=True
    )
    p = command(signals, "send", cmd_signal_by_key, "signal the live jobs with a business key")
    p.add_argument("business_key")
    p.add_argument("name")
    p.add_argument("--payload", help="JSON, or @file")
    p.add_argument("--workflow", help="only the jobs of this workflow")
    p.add_argument("--key", help="the idempotency key (default: a new one)")

    events = groups.add_parser("events", help="post and replay events").add_subparsers(
        dest="command", required=True
    )
    p = command(events, "post", cmd_event_post, "post an event (starts and signals jobs)")
    p.add_argument("type")
    p.add_argument("id", help="the event's own id: posted again, it is a duplicate")
    p.add_argument("--source", required=True, help="who says it (the id is unique per source)")
    p.add_argument("--data", help="JSON, or @file")
    p = command(events, "replay", cmd_event_replay, "replay a received event (operators)")
    p.add_argument("event", type=int, help="the event's stored id (the Events page, or `event` of post)")
    p.add_argument("--reason", help="why: kept with the replay and your name")
    p.add_argument("--key", help="the idempotency key (default: a new one)")


def cmd_signal_by_key(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    answer = client.signal_by_key(
        args.business_key,
        args.name,
        json_argument(args.payload) if args.payload else None,
        workflow=args.workflow,
        idempotency_key=args.key,
    )
    if args.json:
        emit_json(answer, out)
    elif answer.get("buffered"):
        out.write(f"no live job has key {args.business_key!r}: kept until {answer.get('expires_at')}\n")
    else:
        table([(job,) for job in answer.get("jobs", [])], ("JOB REACHED",), out)
    return EXIT_OK


def _show_event(answer: Json, out: TextIO) -> None:
    rows = [("started", job) for job in answer.get("started", [])]
    rows += [("signalled", job) for job in answer.get("signalled", [])]
    rows += [
        ("refused", f"{r['workflow']} trigger {r['trigger']}: {r['reason']}")
        for r in answer.get("refused", [])
    ]
    head = f"event {answer['event']}"
    if answer.get("duplicate"):
        head += " (a duplicate: the first answer)"
    if answer.get("replay_of") is not None:
        head += f" (replay of event {answer['replay_of']} by {answer.get('replayed_by')})"
    out.write(head + "\n")
    table(rows, ("DID", "JOB"), out)


def cmd_event_post(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    answer = client.post_event(
        args.type, args.id, args.source, json_argument(args.data) if args.data else None
    )
    if args.json:
        emit_json(answer, out)
    else:
        _show_event(answer, out)
    return EXIT_OK


def cmd_event_replay(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    answer = client.replay_event(args.event, reason=args.reason, idempotency_key=args.key)
    if args.json:
        emit_json(answer, out)
    else:
        _show_event(answer, out)
    return EXIT_OK
