"""What the `sas` command's modules share: exit statuses, tables and JSON on stdout, and the
reading of JSON arguments and files."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from sas_client.calls import Json
from sas_client.errors import SasApiError

EXIT_OK, EXIT_API, EXIT_USAGE, EXIT_NOT_SUCCEEDED, EXIT_TIMEOUT = 0, 1, 2, 3, 4


class UsageError(Exception):
    """Arguments argparse accepted but that say nothing usable (a bad JSON value, a missing file)."""


# --- output --------------------------------------------------------------------------------------


def table(rows: Iterable[Sequence[Any]], headers: Sequence[str], out: TextIO) -> None:
    """Plain columns, aligned to their widest cell, one header line."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[n]) for r in cells]) for n, h in enumerate(headers)]
    for row in [list(headers), *cells]:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value).replace("\n", " ")


def emit_json(value: Any, out: TextIO) -> None:
    out.write(json.dumps(value, indent=2, sort_keys=False) + "\n")


def show_job(job: Json, out: TextIO) -> None:
    fields = ["id", "workflow", "workflow_version", "status", "business_key", "created_at", "finished_at"]
    table([(name, job.get(name)) for name in fields], ("FIELD", "VALUE"), out)
    if job.get("result") is not None:
        out.write(f"result  {_cell(job['result'])}\n")
    steps = job.get("steps") or []
    if steps:
        out.write("\n")
        table(
            [(s["id"], s["name"], s["status"], s.get("attempt_count"), s.get("last_outcome")) for s in steps],
            ("STEP ID", "NAME", "STATUS", "ATTEMPTS", "LAST OUTCOME"),
            out,
        )


JOB_COLUMNS = ("ID", "WORKFLOW", "STATUS", "CREATED", "BUSINESS KEY")


def job_row(job: Json) -> tuple[Any, ...]:
    return (job["id"], job["workflow"], job["status"], job.get("created_at"), job.get("business_key"))


# --- arguments -------------------------------------------------------------------------------------


def json_argument(value: str) -> Any:
    """A JSON value given inline, or `@path` to read it from a file (`@-`: stdin)."""
    text = value
    if value.startswith("@"):
        name = value[1:]
        try:
            text = sys.stdin.read() if name == "-" else Path(name).read_text()
        except OSError as exc:
            raise UsageError(f"cannot read {name}: {exc.strerror}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UsageError(f"not JSON: {exc}") from exc


def json_object(value: str) -> dict[str, Any]:
    parsed = json_argument(value)
    if not isinstance(parsed, dict):
        raise UsageError("the input must be a JSON object")
    return parsed


def batch_items(path: str) -> list[dict[str, Any]]:
    """A batch file: a JSON list of submissions, or one JSON object per line (`-`: stdin)."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from exc
    stripped = text.strip()
    try:
        if stripped.startswith("["):
            items = json.loads(stripped)
        else:
            items = [json.loads(line) for line in stripped.splitlines() if line.strip()]
    except ValueError as exc:
        raise UsageError(f"{path}: not a JSON list nor JSON lines: {exc}") from exc
    if not items or not all(isinstance(i, dict) and "workflow" in i for i in items):
        raise UsageError(f"{path}: every item must be an object with a workflow")
    return list(items)


def show_step(step: Json, args: argparse.Namespace, out: TextIO) -> None:
    if args.json:
        emit_json(step, out)
    else:
        table([(step.get("id"), step["name"], step["status"])], ("STEP ID", "NAME", "STATUS"), out)


def error_json(error: SasApiError) -> dict[str, Any]:
    return {"status": error.status, "code": error.code, "detail": error.detail, "field": error.field}
