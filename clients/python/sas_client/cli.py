"""`sas`, the service's command line through `sas_client.Client`: jobs and tokens here; steps,
attention, bulk actions and the supervisor in `cli_ops`; definitions and `apply` in `cli_defs`;
progress and retries on stderr in `cli_progress`; shell completion in `cli_completion`.

Tables for people, `--json` for programs. Exit status: 0 done; 1 the API refused or could not be
reached (its `detail` on stderr); 2 bad usage; for `jobs wait` (and `jobs submit --wait`), 3 when
the job settled without succeeding and 4 when the wait timed out.

argparse (the standard library) rather than click or typer: the client then needs nothing beyond
what the generated code needs (httpx, attrs, python-dateutil), and argparse already exits 2 on
bad usage.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from typing import Any, TextIO

from sas_client import cli_completion, cli_defs, cli_events, cli_ops
from sas_client.cli_common import (
    EXIT_API,
    EXIT_NOT_SUCCEEDED,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    JOB_COLUMNS,
    UsageError,
    batch_items,
    emit_json,
    error_json,
    job_row,
    json_argument,
    json_object,
    show_job,
    table,
)
from sas_client.cli_progress import Status, batch_progress, job_progress, retry_notice
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

__all__ = ["EXIT_API", "EXIT_NOT_SUCCEEDED", "EXIT_OK", "EXIT_TIMEOUT", "EXIT_USAGE", "main", "parser", "run"]

GROUPS = (
    "jobs,steps,attention,supervisor,signals,events,"
    "workflows,pools,policies,schedules,apply,tokens,completion"
)


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
    groups = top.add_subparsers(dest="group", required=True, metavar="{" + GROUPS + "}")

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
    p.add_argument("--at-risk", action="store_true", help="only the jobs at risk of their workflow's SLA")
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
    cli_ops.add_commands(groups, jobs, command)
    cli_events.add_commands(groups, command)
    cli_defs.add_commands(groups, command)

    tokens = groups.add_parser("tokens", help="your API tokens").add_subparsers(dest="command", required=True)
    p = command(tokens, "list", cmd_tokens, "your tokens (keys are never shown again)")
    p.add_argument("--user", help="another user's (administrators)")
    p = command(tokens, "create", cmd_token_create, "a new token: its key is printed this once")
    p.add_argument("name")
    p.add_argument("--lifetime-days", type=float, help="days until it expires (default: the longest)")
    p = command(tokens, "revoke", cmd_token_revoke, "revoke a token")
    p.add_argument("id", type=int)
    p = groups.add_parser("completion", help="print a shell completion script")
    p.add_argument("shell", choices=cli_completion.SHELLS)
    p.set_defaults(run=None)
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
    result: BatchResult = client.submit_batch(
        batch_items(args.file), chunk_size=args.chunk_size, progress=batch_progress(args.stderr_area)
    )
    rows: list[dict[str, Any]] = [
        {
            "index": item.index,
            "id": item.id,
            "created": item.created,
            "idempotency_key": item.idempotency_key,
            "error": None if item.error is None else {**error_json(item.error), "at_fault": item.at_fault},
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
        **({"at_risk": "true"} if args.at_risk else {}),
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
        job = client.wait(job_id, timeout=args.timeout, progress=job_progress(args.stderr_area))
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


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    top = parser()
    args = top.parse_args(argv)
    if args.group == "completion":
        out.write(cli_completion.script(top, args.shell))
        return EXIT_OK
    args.stderr_area = Status(err)
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
            client = Client(
                args.url, args.token, token_file=args.token_file, on_retry=retry_notice(args.stderr_area)
            )
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
            emit_json({"error": error_json(exc), "body": exc.body}, out)
        return EXIT_API
    except SasError as exc:
        err.write(f"sas: {exc}\n")
        return EXIT_API


def run() -> None:
    """The `sas` console script."""
    sys.exit(main())
