"""Real subprocesses for the tests, the fault campaign and the benchmark: the sandbox remote,
`qcluster`, the web tier, Redis and PgBouncer, each in its own session (process group), plus the
small helpers they share.

Stopping sends SIGTERM to the main process only (django-q2's sentinel dies at once on a
group-wide SIGTERM and would orphan its workers), waits, then SIGKILLs whatever is left of the
group; killing SIGKILLs the whole group, never only the main PID (django-q2 leaves orphans that
keep taking tasks otherwise).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent

#: Where the tools' remotes (sandbox, webhook receiver, the tests' fake servers) listen.
LOOPBACK_REMOTES = ("127.0.0.1", "localhost")


#: The lists naming internal hosts, one per kind of outbound URL (agents.validation).
INTERNAL_HOSTS_SETTINGS = (
    "SAS_OUTBOUND_INTERNAL_HOSTS",
    "SAS_CALLBACK_INTERNAL_HOSTS",
    "SAS_WEBHOOK_INTERNAL_HOSTS",
)


def allow_loopback_remotes() -> None:
    """Outbound requests reach internal addresses only when the list of their kind names them
    (agent endpoints, callbacks, webhooks); the tools (and the test suite) name loopback, where
    their own remotes and receivers listen, in each list, for this process and for every process
    it starts (which inherit the environment)."""
    from django.conf import settings

    for setting in INTERNAL_HOSTS_SETTINGS:
        names = [n for n in os.environ.get(setting, "").split(",") if n.strip()]
        names += [n for n in LOOPBACK_REMOTES if n not in names]
        os.environ[setting] = ",".join(names)
        setattr(settings, setting, names)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_group(proc: subprocess.Popen[Any] | None, timeout: float = 20) -> None:
    """SIGTERM the main process, wait up to `timeout`, then SIGKILL the rest of its group."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
    kill_group(proc)


def kill_group(proc: subprocess.Popen[Any] | None) -> None:
    if proc is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


def wait_until(
    predicate: Callable[[], Any], *, timeout: float, interval: float = 0.1, message: str = ""
) -> Any:
    """Poll `predicate` until it returns something true; its value is returned."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message or predicate}")


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank `q`th percentile (0-100) of `values`, or None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))]


def wait_for_line(proc: subprocess.Popen[bytes], needle: str, *, timeout: float, log: Path) -> None:
    """Read the child's output until `needle` appears; then keep copying it to `log`."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    seen = b""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited early: {seen.decode(errors='replace')[-2000:]}")
        if sel.select(timeout=0.2):
            # Read the pipe itself, not a buffered line: two lines that arrive together would
            # leave the second in a buffer the selector cannot see.
            chunk = os.read(proc.stdout.fileno(), 65536)
            seen += chunk
            if needle.encode() in seen:
                log.write_bytes(seen)
                _copy_to(proc, log)
                return
    raise RuntimeError(f"no {needle!r} within {timeout}s: {seen.decode(errors='replace')[-2000:]}")


def _copy_to(proc: subprocess.Popen[bytes], log: Path) -> None:
    def copy() -> None:
        assert proc.stdout is not None
        with log.open("ab") as out:
            for line in proc.stdout:
                out.write(line)
                out.flush()

    threading.Thread(target=copy, daemon=True).start()


def spawn_listening(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start `args` in its own session and wait until it says it is listening; its output goes
    on to `log`."""
    proc = subprocess.Popen(
        args,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    wait_for_line(proc, "listening", timeout=30, log=log)
    return proc


def stop_piped(proc: subprocess.Popen[bytes] | None) -> None:
    """`stop_group`, then close the pipe its output was read from."""
    stop_group(proc)
    if proc is not None and proc.stdout is not None:
        proc.stdout.close()


@dataclass
class SandboxProcess:
    """`manage.py sandbox_remote` on `port`, keeping its state in the SQLite file `db`."""

    port: int
    db: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *extra: str, reset: bool = True, seed: int | None = None) -> SandboxProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        args = [
            sys.executable,
            "manage.py",
            "sandbox_remote",
            "--port",
            str(self.port),
            "--db",
            str(self.db),
            *(["--reset"] if reset else []),
            *(["--seed", str(seed)] if seed is not None else []),
            *extra,
        ]
        self.proc = spawn_listening(args, self.log)
        return self

    def stop(self) -> None:
        stop_piped(self.proc)

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = httpx.get(f"{self.url}/stats", timeout=30).json()
        return result

    def config(self, **values: Any) -> dict[str, Any]:
        result: dict[str, Any] = httpx.post(f"{self.url}/config", json=values, timeout=10).json()
        return result


@dataclass
class FastRemoteProcess:
    """`python -m testbed.fastremote` on `port`: the benchmark's remote, answering from memory
    (with `nagle`, leaving Nagle's algorithm on and writing headers and body apart)."""

    port: int
    log: Path
    nagle: bool = False
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FastRemoteProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "testbed.fastremote", "--port", str(self.port)]
        self.proc = spawn_listening([*args, *(["--nagle"] if self.nagle else [])], self.log)
        return self

    def stop(self) -> None:
        stop_piped(self.proc)


@dataclass
class ClusterProcess:
    """One `manage.py qcluster` (django-q2 cluster + supervisor loop) with environment `env`."""

    name: str
    env: Mapping[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    extra_args: list[str] = field(default_factory=list)

    def start(self) -> ClusterProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "qcluster", *self.extra_args],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=dict(self.env),
            )
        return self

    def stop(self, timeout: float = 20) -> None:
        stop_group(self.proc, timeout)

    def kill(self) -> None:
        kill_group(self.proc)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def redis_server_binary() -> str:
    found = shutil.which("redis-server") or next(
        (p for p in ("/usr/bin/redis-server", "/usr/sbin/redis-server") if Path(p).exists()), None
    )
    if found is None:
        raise RuntimeError("redis-server is not installed: run scripts/ensure-system-packages")
    return found


@dataclass
class RedisProcess:
    """A throwaway `redis-server` on `port` (no persistence: a restart loses what it held, as a
    broker crash without durable storage does)."""

    port: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    redis_server_binary(),
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def answers() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    return sock.recv(16).startswith(b"+PONG")
            except OSError:
                return False

        wait_until(answers, timeout=30, interval=0.05, message="redis-server")
        return self

    def stop(self) -> None:
        stop_group(self.proc)

    def restart(self, down_seconds: float = 0.0) -> None:
        """Kill it (everything it held is lost) and start it again on the same port."""
        kill_group(self.proc)
        time.sleep(down_seconds)
        self.start()


@dataclass
class ReceiverProcess:
    """`manage.py webhook_receiver` on `port`, refusing the first `fail_first` tries of each key."""

    port: int
    log: Path
    fail_first: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ReceiverProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "manage.py", "webhook_receiver", "--port", str(self.port)]
        self.proc = spawn_listening([*args, "--fail-first", str(self.fail_first)], self.log)
        return self

    def received(self) -> dict[str, Any]:
        result: dict[str, Any] = httpx.get(f"{self.url}/received", timeout=10).json()
        return result

    def stop(self) -> None:
        stop_piped(self.proc)


@dataclass
class WebProcess:
    """The web tier on `port` with environment `env`: `manage.py runserver` (threaded, no
    autoreload), or gunicorn with the production configuration when `gunicorn` is set."""

    port: int
    env: Mapping[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    gunicorn: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> WebProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "manage.py", "runserver", f"127.0.0.1:{self.port}", "--noreload"]
        env = dict(self.env)
        if self.gunicorn:
            command = [
                sys.executable,
                "-m",
                "gunicorn",
                "-c",
                "python:sas_project.gunicorn_conf",
                "sas_project.wsgi",
            ]
            env["SAS_WEB_BIND"] = f"127.0.0.1:{self.port}"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                command,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )

        def answers() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"the web server exited; see {self.log}")
            try:
                httpx.get(f"{self.url}/api/v1/", timeout=1)
            except httpx.HTTPError:
                return False
            return True

        wait_until(answers, timeout=60, interval=0.1, message="the web server")
        return self

    def stop(self) -> None:
        stop_group(self.proc)


def pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if Path(p).exists()), None
    )
    if found is None:
        raise RuntimeError("pgbouncer is not installed: run scripts/ensure-system-packages")
    return found


#: Session settings a direct connection passes as startup options (sas_project/settings.py);
#: behind PgBouncer each server connection runs them once, when PgBouncer opens it.
PGBOUNCER_CONNECT_QUERY = "SET idle_in_transaction_session_timeout = 60000; SET lock_timeout = 30000"


@dataclass
class PgBouncerProcess:
    """A throwaway PgBouncer in transaction pooling mode on `port`, in front of the PostgreSQL
    server at `server_host:server_port` (every database name passes through), trusting its
    clients as the throwaway server does. Its ini, user list and log live in `workdir`.

    PgBouncer refuses to run as root: as root it is started as `run_as` (the server's user)."""

    port: int
    server_host: str
    server_port: int
    workdir: Path
    user: str = "postgres"
    pool_size: int = 20
    max_client_conn: int = 500
    run_as: str = "postgres"
    proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def in_front_of(cls, database_url: str, workdir: Path, **options: Any) -> PgBouncerProcess:
        """One in front of the server `database_url` names, on a free port."""
        parts = urlsplit(database_url)
        return cls(
            port=free_port(),
            server_host=parts.hostname or "127.0.0.1",
            server_port=parts.port or 5432,
            workdir=workdir,
            user=parts.username or "postgres",
            **options,
        )

    def url_for(self, database_url: str) -> str:
        """`database_url` with its host and port replaced by this PgBouncer's."""
        parts = urlsplit(database_url)
        credentials = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
        return urlunsplit(parts._replace(netloc=f"{credentials}127.0.0.1:{self.port}"))

    @property
    def log(self) -> Path:
        return self.workdir / "pgbouncer.log"

    def ini(self) -> str:
        return "\n".join(
            [
                "[databases]",
                # Every database name goes to the same server, as the same user; the session
                # settings run once per server connection.
                f"* = host={self.server_host} port={self.server_port} "
                f"connect_query='{PGBOUNCER_CONNECT_QUERY}'",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {self.port}",
                f"unix_socket_dir = {self.workdir}",
                "auth_type = trust",
                f"auth_file = {self.workdir / 'userlist.txt'}",
                "pool_mode = transaction",
                f"default_pool_size = {self.pool_size}",
                f"max_client_conn = {self.max_client_conn}",
                # The service's sessions name themselves; PgBouncer passes the name on.
                "application_name_add_host = 0",
                "server_login_retry = 1",
                "idle_transaction_timeout = 60",
                f"logfile = {self.log}",
                f"pidfile = {self.workdir / 'pgbouncer.pid'}",
                "log_connections = 0",
                "log_disconnections = 0",
                "",
            ]
        )

    def start(self) -> PgBouncerProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "pgbouncer.ini").write_text(self.ini())
        (self.workdir / "userlist.txt").write_text(f'"{self.user}" ""\n')
        command = [pgbouncer_binary(), str(self.workdir / "pgbouncer.ini")]
        if os.geteuid() == 0:
            shutil.chown(self.workdir, user=self.run_as)
            for name in ("pgbouncer.ini", "userlist.txt"):
                shutil.chown(self.workdir / name, user=self.run_as)
            command[1:1] = ["-u", self.run_as]
        with (self.workdir / "pgbouncer.out").open("ab") as out:
            self.proc = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

        def answers() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited; see {self.log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return True
            except OSError:
                return False

        wait_until(answers, timeout=30, interval=0.05, message="pgbouncer")
        return self

    def stop(self) -> None:
        stop_group(self.proc, timeout=10)
