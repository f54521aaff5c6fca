"""`sas`'s definitions: workflows, pools, policies and schedules (list, get, delete; schedules'
pause and resume), and `sas apply -f FILE`, which makes the service hold what a file says.

`apply` reads JSON, or YAML when PyYAML is installed (`pip install sas-client[yaml]`): one
definition, a list of them, or YAML documents, each with its `kind` (workflow, pool, policy,
schedule) and `name` beside the definition's fields, or with them under `spec` (`{"kind": "pool",
"spec": {"name": ..., "kind": "queue"}}`: a pool's own `kind` can only be given so).

Each is compared with what the service holds: a new one is created (POST),
one whose stated fields differ is changed (PATCH with the file's fields: a field the file leaves
out keeps the service's value), and one that matches is left alone, so applying a file twice
changes nothing the second time. `--dry-run` prints the same plan and sends no change.
Definitions are applied pools and policies first, then workflows, then schedules: what a
workflow names exists before it.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from sas_client.calls import KINDS, Json
from sas_client.cli_common import EXIT_OK, UsageError, emit_json, table
from sas_client.client import Client

try:  # YAML is optional: the client depends on httpx, attrs and python-dateutil only.
    import yaml
except ImportError:  # pragma: no cover - depends on the environment
    yaml = None  # type: ignore[assignment]

#: The order definitions are applied in: what a workflow names (pools, policies) before it, and
#: the workflow before the schedules that submit it.
APPLY_ORDER = ("pool", "policy", "workflow", "schedule")
COLUMNS = {
    "workflow": ("name", "version", "description", "created_at"),
    "pool": ("name", "kind", "alternate", "max_in_flight", "updated_at"),
    "policy": ("name", "version", "max_attempts", "timeout_seconds", "on_exhausted"),
    "schedule": ("name", "workflow", "cron", "run_at", "paused", "next_fire_at"),
}


def add_commands(groups: Any, command: Any) -> None:
    for kind, plural in KINDS.items():
        sub = groups.add_parser(plural, help=f"{plural}: list, get, delete (create and change: sas apply)")
        verbs = sub.add_subparsers(dest="command", required=True)
        command(verbs, "list", cmd_list, f"every {kind}").set_defaults(kind=kind)
        for verb, run in (("get", cmd_get), ("delete", cmd_delete)):
            p = command(verbs, verb, run, f"{verb} a {kind}")
            p.add_argument("name")
            p.set_defaults(kind=kind)
        if kind == "schedule":
            for verb in ("pause", "resume"):
                p = command(verbs, verb, cmd_schedule_pause, f"{verb} a schedule")
                p.add_argument("name")
                p.set_defaults(kind=kind, paused=verb == "pause")
            p = command(
                verbs,
                "backfill",
                cmd_schedule_backfill,
                "start the fire times of a past range that made no job",
            )
            p.add_argument("name")
            p.add_argument("--start", required=True, help="the range's first instant (ISO 8601)")
            p.add_argument("--end", required=True, help="the range's last instant, included (not after now)")
    p = command(groups, "apply", cmd_apply, "create or change definitions from a file (JSON or YAML)")
    p.add_argument("-f", "--file", required=True, help="the file, or - for stdin")
    p.add_argument("--dry-run", action="store_true", help="print what would change; change nothing")


def cmd_list(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    found = list(client.definitions(args.kind))
    columns = COLUMNS[args.kind]
    if args.json:
        emit_json(found, out)
    else:
        table(
            [[d.get(c) for c in columns] for d in found], [c.upper().replace("_", " ") for c in columns], out
        )
    return EXIT_OK


def cmd_get(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    found = client.definition(args.kind, args.name)
    if found is None:
        raise UsageError(f"no {args.kind} {args.name}")
    emit_json(found, out)  # a definition is nested JSON: printed as such, --json or not
    return EXIT_OK


def cmd_delete(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    client.delete_definition(args.kind, args.name)
    err.write(f"sas: deleted {args.kind} {args.name}\n")
    return EXIT_OK


def cmd_schedule_pause(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    schedule = client.pause_schedule(args.name, paused=args.paused)
    emit_json(schedule, out) if args.json else table(
        [[schedule["name"], schedule["paused"]]], ("NAME", "PAUSED"), out
    )
    return EXIT_OK


def cmd_schedule_backfill(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    answer = client.backfill_schedule(args.name, start=args.start, end=args.end)
    if args.json:
        emit_json(answer, out)
        return EXIT_OK
    rows = [
        [f["fire_at"], f["job"], "started" if f["started"] else "had fired"] for f in answer["fire_times"]
    ]
    table(rows, ("FIRE AT", "JOB", "BACKFILL"), out)
    err.write(
        f"sas: {answer['started']} jobs started, {answer['already_fired']} fire times had fired already\n"
    )
    return EXIT_OK


# --- apply -------------------------------------------------------------------------------------------


@dataclass
class Step:
    """What `apply` does with one definition: `create`, `change` (with its `changes`) or
    `unchanged`."""

    kind: str
    name: str
    action: str
    body: Json
    changes: list[tuple[str, Any, Any]] = field(default_factory=list)

    def as_json(self) -> Json:
        changes = [{"field": path, "from": old, "to": new} for path, old, new in self.changes]
        return {"kind": self.kind, "name": self.name, "action": self.action, "changes": changes}

    def describe(self) -> list[str]:
        lines = [f"{self.action} {self.kind} {self.name}"]
        lines += [f"  {path}: {json.dumps(old)} -> {json.dumps(new)}" for path, old, new in self.changes]
        return lines


def load_definitions(path: str) -> list[tuple[str, Json]]:
    """The definitions of the file at `path` (`-`: stdin), each as its kind and its body: JSON,
    or YAML when PyYAML is here."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        documents: list[Any] = [json.loads(text)]
    except ValueError as not_json:
        if yaml is None:
            raise UsageError(
                f"{path}: not JSON ({not_json}), and YAML needs PyYAML (pip install pyyaml)"
            ) from None
        try:
            documents = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as exc:
            raise UsageError(f"{path}: neither JSON nor YAML: {exc}") from None
    found = []
    for n, item in enumerate(item for doc in documents for item in (doc if isinstance(doc, list) else [doc])):
        if not isinstance(item, dict) or item.get("kind") not in KINDS:
            raise UsageError(f"{path}: definition {n + 1} needs a kind ({', '.join(KINDS)})")
        spec = item.get("spec")
        body = dict(spec) if isinstance(spec, dict) else {k: v for k, v in item.items() if k != "kind"}
        body.setdefault("name", item.get("name"))
        if not body["name"]:
            raise UsageError(f"{path}: definition {n + 1} needs a name")
        found.append((item["kind"], body))
    return found


def plan(client: Client, definitions: list[tuple[str, Json]]) -> list[Step]:
    """What applying `definitions` does, compared with what the service holds now."""
    steps = []
    for kind, body in sorted(definitions, key=lambda d: APPLY_ORDER.index(d[0])):
        held = client.definition(kind, body["name"])
        if held is None:
            steps.append(Step(kind, body["name"], "create", body))
            continue
        changes = differences(body, held)
        steps.append(Step(kind, body["name"], "change" if changes else "unchanged", body, changes))
    return steps


def differences(want: Any, have: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Where `want` (the file's) differs from `have` (the service's): only the fields `want`
    states count; a secret the service does not show back (`secret_header_value`, shown as
    `secret_header_set`) counts as the same when the service says one is set."""
    if isinstance(want, dict) and isinstance(have, dict):
        found = []
        for key, value in want.items():
            if key.endswith("_value") and key not in have and have.get(key[: -len("_value")] + "_set"):
                continue
            found += differences(value, have.get(key), f"{path}.{key}" if path else key)
        return found
    if isinstance(want, list) and isinstance(have, list) and len(want) == len(have):
        return [
            d
            for n, (w, h) in enumerate(zip(want, have, strict=True))
            for d in differences(w, h, f"{path}[{n}]")
        ]
    if isinstance(want, str) and isinstance(have, dict) and "url" in have:  # an endpoint given by its URL
        return differences(want, have["url"], path)
    return [] if same(want, have) else [(path, have, want)]


def same(want: Any, have: Any) -> bool:
    """Equal as the service means them: null and an empty value alike, numbers by value
    (`0.5` and `"0.50"`), times by the instant they name."""
    if want == have:
        return True
    if want is None:
        return have in ("", [], {})
    if isinstance(want, int | float) and not isinstance(want, bool) and isinstance(have, int | float | str):
        try:
            return float(want) == float(have)
        except ValueError:
            return False
    if isinstance(want, str) and isinstance(have, str):
        try:
            return datetime.fromisoformat(want) == datetime.fromisoformat(have)
        except ValueError:
            return False
    return False


def cmd_apply(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    steps = plan(client, load_definitions(args.file))
    done = []
    for step in steps:
        if not args.dry_run and step.action == "create":
            client.create_definition(step.kind, step.body)
        elif not args.dry_run and step.action == "change":
            changed = {k: v for k, v in step.body.items() if k != "name"}
            client.change_definition(step.kind, step.name, changed)
        done.append(step)
        if not args.json:
            out.write("\n".join(step.describe()) + "\n")
            out.flush()
    if args.json:
        emit_json({"dry_run": args.dry_run, "definitions": [s.as_json() for s in done]}, out)
    counts = {a: sum(1 for s in steps if s.action == a) for a in ("create", "change", "unchanged")}
    tense = "would be " if args.dry_run else ""
    err.write(
        f"sas: {counts['create']} {tense}created, {counts['change']} {tense}changed, "
        f"{counts['unchanged']} unchanged\n"
    )
    return EXIT_OK
