"""`sas`, the service's command line: jobs, steps and tokens through `sas_client.Client`.

Tables for people, `--json` for programs. Exit status: 0 done; 1 the API refused or could not be
reached (its `detail` on stderr); 2 bad usage; for `jobs wait` (and `jobs submit --wait`), 3 when
the job settled without succeeding and 4 when the wait timed out.

argparse (the standard library) rather than click or typer: the client then needs nothing beyond
what the generated code needs (httpx, attrs, python-dateutil), and argparse already exits 2 on
bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any, TextIO

from sas_client.client import (
    TOKEN_ENV,
    TOKEN_FILE_ENV,
    URL_ENV,
    BatchResult,
    Client,
    Json,
    SasInsecureURLWarning,
    SasWaitTimeout,
)
from sas_client.errors import SasApiError, SasError

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


def progress_line(err: TextIO) -> Callable[[Json], None]:
    """A line on stderr whenever the job's status or its steps' statuses change."""
    last: list[str] = []

    def report(job: Json) -> None:
        steps = " ".join(f"{s['name']}={s['status']}" for s in job.get("steps") or [])
        line = f"{job['id']} {job['status']} {steps}".rstrip()
        if [line] != last:
            last[:] = [line]
            err.write(line + "\n")
            err.flush()

    return report


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


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: an option given before the command is not reset by the command's own default.
    common.add_argument("--url", default=argparse.SUPPRESS, help=f"the service (default ${URL_ENV})")
    common.add_argument(
        "--token",
        default=argparse.SUPPRESS,
        help=f"an API token: shows in ps and the shell's history, prefer ${TOKEN_ENV} or --token-file",
    )
    common.add_argument(
        "--token-file",
        default=argparse.SUPPRESS,
        help=f"a file whose first line is the API token (default ${TOKEN_ENV}, then ${TOKEN_FILE_ENV})",
    )
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")

    top = argparse.ArgumentParser(
        prog="sas",
        description="The Scheduler Agent Supervisor's API from the command line.",
        parents=[common],
    )
    groups = top.add_subparsers(dest="group", required=True, metavar="{jobs,steps,tokens}")

    def command(sub: Any, name: str, run: Callable[..., int], help_text: str) -> argparse.ArgumentParser:
        found: argparse.ArgumentParser = sub.add_parser(name, parents=[common], help=help_text)
        found.set_defaults(run=run)
        return found

    jobs = groups.add_parser("jobs", help="submit, read, wait for and act on jobs").add_subparsers(
        dest="command", required=True
    )
    p = command(jobs, "submit", cmd_submit, "submit a job")
    p.add_argument("workflow")
    p.add_argument("--input", type=str, default="{}", help="a JSON object, or @file (@- for stdin)")
    p.add_argument("--key", help="the idempotency key (default: a new one)")
    p.add_argument("--business-key")
    p.add_argument("--priority", type=int)
    p.add_argument("-q", "--quiet", action="store_true", help="print only the job's id")
    p.add_argument("--wait", action="store_true", help="wait until the job settles")
    p.add_argument("--timeout", type=float, help="with --wait: give up after this many seconds")
    p = command(jobs, "submit-batch", cmd_submit_batch, "submit jobs from a file (JSON list or JSON lines)")
    p.add_argument("file", help="the file, or - for stdin")
    p.add_argument("--chunk-size", type=int, default=100, help="jobs a request (the service's limit)")
    p = command(jobs, "get", cmd_get, "a job with its steps")
    p.add_argument("id")
    p = command(jobs, "list", cmd_list, "jobs, newest first")
    p.add_argument("--status")
    p.add_argument("--workflow")
    p.add_argument("--business-key")
    p.add_argument("--limit", type=int, default=50, help="at most this many (0: all)")
    p = command(jobs, "wait", cmd_wait, "wait until a job settles (progress on stderr)")
    p.add_argument("id")
    p.add_argument("--timeout", type=float)
    p = command(jobs, "events", cmd_events, "a job's history")
    p.add_argument("id")
    p = command(jobs, "rerun", cmd_rerun, "run a job again as a new job")
    p.add_argument("id")
    p.add_argument("--from-step", help="run this step and every step after it (default: the first step)")
    p.add_argument("--input", help="a new input: a JSON object, or @file")
    p.add_argument("--reason")
    p = command(jobs, "signal", cmd_signal, "send a signal to a job")
    p.add_argument("id")
    p.add_argument("name")
    p.add_argument("--payload", help="JSON, or @file")
    p = command(jobs, "cancel", cmd_cancel, "cancel a job")
    p.add_argument("id")
    p.add_argument("--reason")

    steps = groups.add_parser("steps", help="operator actions on steps").add_subparsers(
        dest="command", required=True
    )
    p = command(steps, "retry", cmd_retry, "dispatch a held or failed step again")
    p.add_argument("step_id", type=int)
    p.add_argument("--reason")
    p.add_argument("--pool")
    p.add_argument("--input", help="call the step with this input: a JSON object, or @file")
    for decision in ("approve", "reject"):
        p = command(steps, decision, cmd_decide, f"{decision} a step waiting for an approval")
        p.add_argument("job")
        p.add_argument("step")
        p.add_argument("--comment")
        p.set_defaults(decision=decision)

    tokens = groups.add_parser("tokens", help="your API tokens").add_subparsers(dest="command", required=True)
    p = command(tokens, "list", cmd_tokens, "your tokens (keys are never shown again)")
    p.add_argument("--user", help="another user's (administrators)")
    p = command(tokens, "create", cmd_token_create, "a new token: its key is printed this once")
    p.add_argument("name")
    p.add_argument("--lifetime-days", type=float, help="days until it expires (default: the longest)")
    p = command(tokens, "revoke", cmd_token_revoke, "revoke a token")
    p.add_argument("id", type=int)
    return top


# --- commands --------------------------------------------------------------------------------------


def wait_exit(job: Json) -> int:
    return EXIT_OK if job["status"] == "succeeded" else EXIT_NOT_SUCCEEDED


def cmd_submit(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    job = client.submit(
        args.workflow,
        json_object(args.input),
        idempotency_key=args.key,
        business_key=args.business_key,
        priority=args.priority,
    )
    if args.quiet:
        out.write(f"{job['id']}\n")
        out.flush()
    if args.wait:
        if not args.json:
            err.write(f"submitted {job['id']}\n")
        return _wait(client, job["id"], args, out, err)
    if args.quiet:
        return EXIT_OK
    if args.json:
        emit_json(job, out)
    else:
        show_job(job, out)
    return EXIT_OK


def cmd_submit_batch(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    result: BatchResult = client.submit_batch(batch_items(args.file), chunk_size=args.chunk_size)
    rows: list[dict[str, Any]] = [
        {
            "index": item.index,
            "id": item.id,
            "created": item.created,
            "idempotency_key": item.idempotency_key,
            "error": None if item.error is None else {**_error_json(item.error), "at_fault": item.at_fault},
        }
        for item in result.items
    ]
    if args.json:
        emit_json({"ok": result.ok, "jobs": rows}, out)
    else:
        table(
            [
                (r["index"], r["id"], r["created"], "" if r["error"] is None else _error_cell(r["error"]))
                for r in rows
            ],
            ("INDEX", "ID", "CREATED", "ERROR"),
            out,
        )
    for item in result.items:
        if item.at_fault and item.error is not None:
            err.write(f"sas: item {item.index}: {item.error.detail}\n")
    return EXIT_OK if result.ok else EXIT_API


def _error_cell(error: dict[str, Any]) -> str:
    return f"{error['code']}: {error['detail']}" if error["at_fault"] else f"not submitted ({error['code']})"


def cmd_get(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    job = client.get(args.id)
    emit_json(job, out) if args.json else show_job(job, out)
    return EXIT_OK


def cmd_list(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    found: Iterator[Json] = client.jobs(
        status=args.status,
        workflow=args.workflow,
        business_key=args.business_key,
        # One request when the limit fits in a page (a page_size over the service's largest is cut to it).
        page_size=min(args.limit, 100) if args.limit > 0 else None,
    )
    jobs = list(islice(found, args.limit) if args.limit > 0 else found)
    if args.json:
        emit_json(jobs, out)
    else:
        table([job_row(j) for j in jobs], JOB_COLUMNS, out)
    return EXIT_OK


def _wait(client: Client, job_id: str, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        job = client.wait(job_id, timeout=args.timeout, progress=progress_line(err))
    except SasWaitTimeout as timeout:
        err.write(f"sas: {timeout}\n")
        if args.json:
            emit_json(timeout.job, out)
        return EXIT_TIMEOUT
    if args.json:
        emit_json(job, out)
    elif not getattr(args, "quiet", False):
        show_job(job, out)
    return wait_exit(job)


def cmd_wait(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return _wait(client, args.id, args, out, err)


def cmd_events(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    events = list(client.events(args.id))
    if args.json:
        emit_json(events, out)
    else:
        table(
            [
                (
                    e["created_at"],
                    e["kind"],
                    e.get("step"),
                    e.get("from_status"),
                    e.get("to_status"),
                    e.get("actor"),
                    e.get("reason"),
                )
                for e in events
            ],
            ("CREATED", "KIND", "STEP", "FROM", "TO", "ACTOR", "REASON"),
            out,
        )
    return EXIT_OK


def cmd_rerun(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from_step = args.from_step or client.get(args.id)["steps"][0]["name"]
    job = client.rerun(
        args.id,
        from_step=from_step,
        input=json_object(args.input) if args.input else None,
        reason=args.reason,
    )
    emit_json(job, out) if args.json else show_job(job, out)
    return EXIT_OK


def cmd_signal(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    signal = client.signal(args.id, args.name, json_argument(args.payload) if args.payload else None)
    if args.json:
        emit_json(signal, out)
    else:
        table(
            [(signal["id"], signal["name"], signal.get("consumed_by"))],
            ("SIGNAL ID", "NAME", "CONSUMED BY"),
            out,
        )
    return EXIT_OK


def cmd_cancel(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    answer = client.cancel(args.id, reason=args.reason)
    emit_json(answer, out) if args.json else show_job(answer, out)
    return EXIT_OK


def _show_step(step: Json, args: argparse.Namespace, out: TextIO) -> None:
    if args.json:
        emit_json(step, out)
    else:
        table([(step.get("id"), step["name"], step["status"])], ("STEP ID", "NAME", "STATUS"), out)


def cmd_retry(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    step = client.retry_step(
        args.step_id,
        reason=args.reason,
        pool=args.pool,
        input=json_object(args.input) if args.input else None,
    )
    _show_step(step, args, out)
    return EXIT_OK


def cmd_decide(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    decide = client.approve if args.decision == "approve" else client.reject
    _show_step(decide(args.job, args.step, comment=args.comment), args, out)
    return EXIT_OK


TOKEN_COLUMNS = ("ID", "NAME", "PREFIX", "STATUS", "EXPIRES", "LAST USED")


def token_row(token: Json) -> tuple[Any, ...]:
    return (
        token["id"],
        token["name"],
        token.get("prefix"),
        token.get("status"),
        token.get("expires_at"),
        token.get("last_used_at"),
    )


def cmd_tokens(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    tokens = list(client.tokens(user=args.user))
    emit_json(tokens, out) if args.json else table([token_row(t) for t in tokens], TOKEN_COLUMNS, out)
    return EXIT_OK


def cmd_token_create(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    token = client.create_token(args.name, lifetime_days=args.lifetime_days)
    if args.json:
        emit_json(token, out)
    else:
        table([token_row(token)], TOKEN_COLUMNS, out)
        out.write(f"\nkey: {token['key']}\n")
        err.write("sas: the key is shown this once: keep it now\n")
    return EXIT_OK


def cmd_token_revoke(client: Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    token = client.revoke_token(args.id)
    emit_json(token, out) if args.json else table([token_row(token)], TOKEN_COLUMNS, out)
    return EXIT_OK


def _error_json(error: SasApiError) -> dict[str, Any]:
    return {"status": error.status, "code": error.code, "detail": error.detail, "field": error.field}


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    args = parser().parse_args(argv)
    # The shared options are suppressed when absent (so that one given before the command
    # survives the command's parser): their defaults are set here, once.
    for name, default in (("url", None), ("token", None), ("token_file", None), ("json", False)):
        if not hasattr(args, name):
            setattr(args, name, default)
    if args.token:
        err.write(
            f"sas: warning: a token on the command line shows in ps and the shell's history; "
            f"use ${TOKEN_ENV} or --token-file\n"
        )
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SasInsecureURLWarning)
            client = Client(args.url, args.token, token_file=args.token_file)
        for warning in caught:
            err.write(f"sas: warning: {warning.message}\n")
        with client:
            code: int = args.run(client, args, out, err)
            return code
    except UsageError as exc:
        err.write(f"sas: {exc}\n")
        return EXIT_USAGE
    except SasApiError as exc:
        err.write(f"sas: {exc.detail} ({exc.status} {exc.code})\n")
        for problem in exc.errors:
            err.write(f"sas:   {problem.field or '-'}: {problem.detail}\n")
        if args.json:
            emit_json({"error": _error_json(exc), "body": exc.body}, out)
        return EXIT_API
    except SasError as exc:
        err.write(f"sas: {exc}\n")
        return EXIT_API


def run() -> None:
    """The `sas` console script."""
    sys.exit(main())
