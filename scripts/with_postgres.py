"""Run a command against a throwaway PostgreSQL cluster, then remove the cluster.

    python scripts/with_postgres.py -- <command> [args...]

initdb in a temporary folder, start the server on a free loopback port (as the `postgres` user
when run as root: the server refuses to run as root), export DATABASE_URL (and SAS_PG_* for the
fault campaign, which may restart this server), run the command, stop the server, delete the
folder, and exit with the command's status.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path


def find_bindir() -> Path:
    explicit = os.environ.get("SAS_PG_BINDIR")
    if explicit:
        return Path(explicit)
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    if candidates:
        return Path(candidates[0]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    sys.exit(
        "with_postgres: no PostgreSQL server binaries found (initdb); run scripts/ensure-system-packages"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> int:
    args = sys.argv[1:]
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        sys.exit("usage: with_postgres.py -- <command> [args...]")
    bindir = find_bindir()
    as_root = os.geteuid() == 0
    workdir = Path(tempfile.mkdtemp(prefix="sas-pg-"))
    datadir = workdir / "data"
    port = free_port()
    runas: list[str] = ["runuser", "-u", "postgres", "--"] if as_root else []
    if as_root:
        shutil.chown(workdir, user="postgres")
        workdir.chmod(0o755)
    env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}

    def pg(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([*runas, *cmd], check=check, env=env, stdout=subprocess.DEVNULL)

    pg(str(bindir / "initdb"), "-D", str(datadir), "-U", "postgres", "--auth=trust", "-E", "UTF8")
    # fsync and full-page writes only matter when the machine itself crashes: the suite kills
    # processes (PostgreSQL's included, in the fault campaign), never the machine. A commit still
    # waits for its WAL to reach the kernel (synchronous_commit stays on), so an immediate-mode
    # restart loses no committed transaction.
    options = (
        f"-p {port} -k {workdir} -c listen_addresses=127.0.0.1 -c max_connections=300 "
        "-c fsync=off -c full_page_writes=off "
        # Statement counts for the benchmark (top-level statements of every session).
        "-c shared_preload_libraries=pg_stat_statements"
    )
    pg(
        str(bindir / "pg_ctl"),
        "-D",
        str(datadir),
        "-o",
        options,
        "-l",
        str(workdir / "server.log"),
        "-w",
        "-t",
        "60",
        "start",
    )
    pg(str(bindir / "createdb"), "-h", str(workdir), "-p", str(port), "-U", "postgres", "sas")
    child_env = {
        **os.environ,
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:{port}/sas",
        "SAS_PG_BINDIR": str(bindir),
        "SAS_PG_DATADIR": str(datadir),
        "SAS_PG_OPTIONS": options,
        "SAS_PG_LOG": str(workdir / "server.log"),
        "SAS_PG_RUNAS": " ".join(runas),
    }
    status = 1
    try:
        proc = subprocess.Popen(args, env=child_env)
        try:
            status = proc.wait()
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            status = proc.wait()
    finally:
        pg(str(bindir / "pg_ctl"), "-D", str(datadir), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(workdir, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
