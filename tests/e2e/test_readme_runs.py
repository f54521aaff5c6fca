"""The READMEs' commands run as a reader runs them: `make run`, then every ```sh block of README.md
and clients/python/README.md, in order, against it.

A copy of the checkout (its `.venv` linked, not installed again) runs `make run` on free ports
with a `var/` of its own, as on a fresh machine: a new SQLite database, a new demo key. The blocks
then run in bash with `set -euo pipefail` (and `inherit_errexit`), in the copy's root, where a
reader's terminal is. The conventions (docs/testing.md lists them too):

- Consecutive blocks share one shell session: variables (exported or not) and the working
  directory carry from one block to the next. Each document, and each block whose paragraph says
  "in a new terminal" (or "in another terminal"), starts a new one with only what a new terminal
  has (HOME, a PATH without the virtualenv, the locale...).
- `<!-- readme-test: skip (reason) -->` on the line before a block leaves it out: `make run`
  itself, `make test`, installs into the reader's environment. The reason is required.
- curl fails a block on an HTTP error (a curlrc with `--fail-with-body`), so an example that
  answers 400 fails as a command does.
- The demo's ports in the text (web 8000, sandbox 8100, the reader's own service 9000) are replaced
  by the run's free ports; the README's `SAS_OUTBOUND_INTERNAL_HOSTS=... make run` line names the
  hosts the run's `make run` allows, as a reader restarts it so before saving that pool.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.conftest import on_sqlite
from tests.processes import ARTIFACTS, ROOT, free_port

pytestmark = pytest.mark.sqlite

DOCUMENTS = (ROOT / "README.md", ROOT / "clients" / "python" / "README.md")

#: What a new terminal has: the login's variables, none of the test run's settings or keys.
TERMINAL_VARIABLES = (
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "SHELL",
    "TMPDIR",
    "TZ",
)

#: A marker comment on the line before a block: `<!-- readme-test: skip (why) -->`.
MARKER = re.compile(r"<!--\s*readme-test:\s*(?P<directive>[a-z-]+)\s*(?:\((?P<reason>[^)]*)\))?\s*-->")
NEW_TERMINAL = re.compile(r"\bin (?:a new|another) terminal\b", re.IGNORECASE)
#: The README's restart of the demo naming the reader's own internal hosts.
RESTART = re.compile(r"^SAS_OUTBOUND_INTERNAL_HOSTS=(?P<hosts>\S+) make run$", re.MULTILINE)

#: Each block's time limit: above the longest wait a block asks for (`--timeout 120`).
BLOCK_TIMEOUT = 150
#: `make run` on a fresh database: migrations, the demo, four processes.
START_TIMEOUT = 180


@dataclass(frozen=True)
class Block:
    """One ```sh block: where it is, what it says, how it runs."""

    document: str
    #: The line of its opening fence (1-based), as an editor shows it.
    line: int
    text: str
    new_terminal: bool
    skip: str | None = None

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"


def shell_blocks(text: str, document: str) -> list[Block]:
    """The ```sh blocks of a Markdown `text`, in order, with their conventions read. A marker that
    is unknown, has no reason or does not stand right before a ```sh block is an error: a misspelt
    skip must not run its block, nor a stray one go unnoticed."""
    lines = text.splitlines()
    blocks: list[Block] = []
    prose: list[str] = []
    fence: str | None = None
    body: list[str] = []
    start = 0
    for number, line in enumerate(lines, start=1):
        if fence is not None:
            if line.strip() == "```":
                if fence == "sh":
                    blocks.append(_block(document, start, body, prose))
                prose, fence, body = [], None, []
            else:
                body.append(line)
            continue
        if line.startswith("```"):
            fence, start = line[3:].strip(), number
            continue
        prose.append(line)
        for marker in MARKER.finditer(line):
            if marker.group("directive") != "skip" or not (marker.group("reason") or "").strip():
                raise AssertionError(f"{document}:{number}: unknown marker {marker.group(0)!r}")
            if number == len(lines) or lines[number].strip() != "```sh":
                raise AssertionError(f"{document}:{number}: {marker.group(0)!r} must precede a ```sh block")
    assert fence is None, f"{document}: a block is not closed"
    return blocks


def _block(document: str, start: int, body: list[str], prose: list[str]) -> Block:
    marker = MARKER.search(prose[-1]) if prose else None
    return Block(
        document=document,
        line=start,
        text="\n".join(body) + "\n",
        new_terminal=bool(NEW_TERMINAL.search(" ".join(prose))),
        skip=(marker.group("reason") or "").strip() if marker else None,
    )


def terminal_environment(curl_home: Path) -> dict[str, str]:
    """What a new terminal has: the login's variables and a PATH without the virtualenv (which a
    reader has not activated), plus the curlrc that turns HTTP errors into failures."""
    env = {name: os.environ[name] for name in TERMINAL_VARIABLES if name in os.environ}
    venvs = {(ROOT / ".venv" / "bin").resolve(), (Path(sys.prefix) / "bin").resolve()}
    path = os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in path if p and Path(p).resolve() not in venvs)
    curl_home.mkdir(parents=True, exist_ok=True)
    (curl_home / ".curlrc").write_text("--fail-with-body\n--silent\n--show-error\n")
    env["CURL_HOME"] = str(curl_home)
    return env


# --- the shell ---------------------------------------------------------------------------------------

#: Runs one block and keeps its shell's state (variables and directory) for the next one. The
#: variables a bare bash already has are not carried, unless exported (PATH).
WRAPPER = """\
__readme_test_state={state}
__readme_test_baseline={baseline}
__readme_test_save() {{
  local __readme_test_name __readme_test_decl __readme_test_flags
  for __readme_test_name in $(compgen -v); do
    case "$__readme_test_name" in
      __readme_test_*|BASH*|FUNCNAME|PIPESTATUS|SHLVL|_) continue ;;
      PWD|OLDPWD|LINENO|RANDOM|SRANDOM|SECONDS|EPOCH*) continue ;;
    esac
    __readme_test_decl=$(declare -p "$__readme_test_name" 2>/dev/null) || continue
    __readme_test_flags=${{__readme_test_decl#declare -}}
    case "${{__readme_test_flags%% *}}" in
      *x*) ;;
      *) grep -qxF -- "$__readme_test_name" "$__readme_test_baseline" && continue ;;
    esac
    printf '%s\\n' "$__readme_test_decl"
  done > "$__readme_test_state"
  printf 'cd -- %q\\n' "$PWD" >> "$__readme_test_state"
}}
if [ -n "${{__readme_test_restore:-}}" ]; then source "$__readme_test_restore"; fi
unset __readme_test_restore
trap __readme_test_save EXIT
trap 'echo "readme-test: line $((LINENO + {offset})) failed ($?): $BASH_COMMAND" >&2' ERR
set -euo pipefail
shopt -s inherit_errexit
"""


@dataclass
class Shell:
    """A reader's terminal: blocks run one after the other, each in a bash that starts with the
    state the previous one left, or with none after `new_terminal`."""

    cwd: Path
    env: dict[str, str]
    scratch: Path
    state: Path | None = None
    runs: int = 0

    def new_terminal(self) -> None:
        self.state = None

    def run(self, block: Block, text: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run `block` (as `text`, when given: its ports replaced); its output is stdout and
        stderr together, as a terminal shows them."""
        self.runs += 1
        script = self.scratch / f"block-{self.runs:02d}.sh"
        saved = self.scratch / f"state-{self.runs:02d}.sh"
        # The block's first line is the line after its fence: the ERR trap names README lines.
        offset = block.line - WRAPPER.count("\n")
        header = WRAPPER.format(state=_quoted(saved), baseline=_quoted(self._baseline()), offset=offset)
        script.write_text(header + (block.text if text is None else text))
        env = dict(self.env)
        if self.state is not None:
            env["__readme_test_restore"] = str(self.state)
        proc = subprocess.Popen(
            ["bash", str(script)],
            cwd=self.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = proc.communicate(timeout=BLOCK_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            output += f"\nreadme-test: still running after {BLOCK_TIMEOUT} s, killed"
        if saved.exists():
            self.state = saved
        return subprocess.CompletedProcess(proc.args, proc.returncode, output)

    def _baseline(self) -> Path:
        """The variables a bare bash has (listed once): not the reader's, so not carried."""
        path = self.scratch / "baseline.txt"
        if not path.exists():
            names = subprocess.run(
                ["bash", "-c", "compgen -v"], env=self.env, capture_output=True, text=True, check=True
            ).stdout
            path.write_text(names)
        return path


def _quoted(path: Path) -> str:
    return "'" + str(path).replace("'", "'\\''") + "'"


# --- the services ------------------------------------------------------------------------------------


@dataclass
class Demo:
    """`make run` in a copy of the checkout, on free ports."""

    copy: Path
    log: Path
    web_port: int = field(default_factory=free_port)
    sandbox_port: int = field(default_factory=free_port)
    #: The reader's own HTTP service of "Point it at your own HTTP service": nothing listens there.
    service_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def ports(self, text: str) -> str:
        """`text` with the README's ports replaced by this run's."""
        for port, ours in ((8000, self.web_port), (8100, self.sandbox_port), (9000, self.service_port)):
            text = re.sub(rf"\b(127\.0\.0\.1|localhost):{port}\b", rf"\g<1>:{ours}", text)
        return text

    def start(self, env: dict[str, str], internal_hosts: str) -> None:
        # make test installed the virtualenv: `-o` keeps `make run` from installing into it again,
        # whatever the copy's timestamps say.
        args = ["make", "-o", ".venv/.run-installed", "run"]
        args += [f"DEMO_WEB_PORT={self.web_port}", f"DEMO_SANDBOX_PORT={self.sandbox_port}"]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                args,
                cwd=self.copy,
                env={**env, "SAS_OUTBOUND_INTERNAL_HOSTS": internal_hosts, "PYTHONUNBUFFERED": "1"},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_until_ready()

    def _wait_until_ready(self) -> None:
        """Until the web server is ready, the sandbox answers and a supervisor scans (so the
        cluster runs): what a reader sees in `make run`'s output before turning to the README."""
        probes = (
            f"http://127.0.0.1:{self.web_port}/readyz",
            f"http://127.0.0.1:{self.sandbox_port}/health",
            f"http://127.0.0.1:{self.web_port}/supervisorz",
        )
        deadline = time.monotonic() + START_TIMEOUT
        with httpx.Client(trust_env=False, timeout=5) as client:
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise AssertionError(f"make run exited ({self.proc.returncode}):\n{self.logs()}")
                with contextlib.suppress(httpx.HTTPError):
                    if all(client.get(url).status_code == 200 for url in probes):
                        return
                time.sleep(0.5)
        raise AssertionError(f"make run not ready within {START_TIMEOUT} s:\n{self.logs()}")

    def logs(self, lines: int = 120) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Ctrl-C's way: honcho stops its processes (each in a session of its own); then whatever
        is left of them, and of make, is killed by process group."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        groups = {self.proc.pid, *map(int, re.findall(r"started \(pid=(\d+)\)", self.log.read_text()))}
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


def copy_checkout(destination: Path) -> None:
    """The checkout's files as a fresh clone has them, with the changes not yet committed (tracked
    and new files, nothing ignored: no var/, no database), and the virtualenv linked."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet committed is listed too
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    (destination / ".venv").symlink_to((ROOT / ".venv").resolve())


# --- the conventions ---------------------------------------------------------------------------------

EXAMPLE = """\
Set it up:

```sh
TOKEN=abc
export URL=http://127.0.0.1:8000
cd sub
```

```python
print("not a shell block")
```

Then, in the same terminal:

```sh
test "$TOKEN" = abc && test "$URL" = http://127.0.0.1:8000 && test "$(basename "$PWD")" = sub
```

<!-- readme-test: skip (the demo itself) -->
```sh
make run
```

Then, in a new terminal:

```sh
test -z "${TOKEN:-}" && test -z "${URL:-}" && test "$(basename "$PWD")" != sub
```

```sh
true
false
```
"""


@pytest.fixture
def shell(tmp_path: Path) -> Shell:
    (tmp_path / "sub").mkdir()
    return Shell(cwd=tmp_path, env=terminal_environment(tmp_path / "curl"), scratch=tmp_path)


def test_only_shell_blocks_are_read_with_their_line_terminal_and_skip() -> None:
    blocks = shell_blocks(EXAMPLE, "EXAMPLE.md")
    assert [(b.line, b.new_terminal, b.skip) for b in blocks] == [
        (3, False, None),
        (15, False, None),
        (20, False, "the demo itself"),
        (26, True, None),
        (30, False, None),
    ]
    assert blocks[3].where == "EXAMPLE.md:26"


@pytest.mark.parametrize(
    "marker",
    ["<!-- readme-test: skip -->", "<!-- readme-test: skip () -->", "<!-- readme-test: expect-fail -->"],
)
def test_a_marker_without_a_reason_or_unknown_is_an_error(marker: str) -> None:
    with pytest.raises(AssertionError, match="unknown marker"):
        shell_blocks(f"{marker}\n```sh\ntrue\n```\n", "EXAMPLE.md")


def test_a_marker_that_does_not_stand_right_before_a_shell_block_is_an_error() -> None:
    with pytest.raises(AssertionError, match="must precede"):
        shell_blocks("<!-- readme-test: skip (why) -->\n\n```sh\ntrue\n```\n", "EXAMPLE.md")


def test_blocks_share_a_session_until_a_new_terminal_and_a_failure_names_its_readme_line(
    shell: Shell,
) -> None:
    results = []
    for block in shell_blocks(EXAMPLE, "EXAMPLE.md"):
        if block.skip is None:
            if block.new_terminal:
                shell.new_terminal()
            results.append(shell.run(block))
    assert [r.returncode for r in results[:3]] == [0, 0, 0], [r.stdout for r in results]
    assert results[3].returncode == 1
    assert "readme-test: line 32 failed (1): false" in results[3].stdout


def test_a_new_terminal_has_neither_the_virtualenv_nor_the_runs_settings(shell: Shell) -> None:
    assert os.environ["DJANGO_SECRET_KEY"]  # the run's own (tests/secret_key.py), for its processes
    text = 'test -z "${DJANGO_SECRET_KEY:-}${DATABASE_URL:-}${SAS_VAR_DIR:-}${VIRTUAL_ENV:-}"\n'
    text += f'case ":$PATH:" in *":{(ROOT / ".venv" / "bin").resolve()}:"*) exit 3 ;; esac\n'
    block = Block(document="EXAMPLE.md", line=1, text=text, new_terminal=True)
    result = shell.run(block)
    assert result.returncode == 0, result.stdout


def test_the_readme_ports_become_the_runs_own(tmp_path: Path) -> None:
    demo = Demo(copy=tmp_path, log=tmp_path / "log", web_port=1, sandbox_port=2, service_port=3)
    assert demo.ports("http://127.0.0.1:8000/api localhost:8100/config 127.0.0.1:9000 :80001") == (
        "http://127.0.0.1:1/api localhost:2/config 127.0.0.1:3 :80001"
    )


# --- the READMEs ------------------------------------------------------------------------------------


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[Demo, dict[str, str]]]:
    if not on_sqlite():
        pytest.skip("the README follows `make run`'s SQLite default: make test's SQLite phase runs it")
    for tool in ("make", "bash", "curl", "jq", "redis-server"):
        assert shutil.which(tool), (
            f"{tool} is missing: make test-sqlite installs it (scripts/ensure-system-packages)"
        )
    copy = tmp_path / "checkout"
    copy_checkout(copy)
    env = terminal_environment(tmp_path / "curl")
    artifacts = ARTIFACTS / "readme"
    shutil.rmtree(artifacts, ignore_errors=True)
    artifacts.mkdir(parents=True)
    service = Demo(copy=copy, log=artifacts / "make-run.log")
    restart = RESTART.search(service.ports(DOCUMENTS[0].read_text()))
    assert restart, "README.md: the `SAS_OUTBOUND_INTERNAL_HOSTS=... make run` line is gone"
    try:
        service.start(env, restart.group("hosts"))
        yield service, env
    finally:
        service.stop()


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_shell_block_of_the_readmes_runs_against_make_run(demo: tuple[Demo, dict[str, str]]) -> None:
    service, env = demo
    artifacts = ARTIFACTS / "readme"
    shell = Shell(cwd=service.copy, env=env, scratch=artifacts)
    failures: list[str] = []
    for document in DOCUMENTS:
        shell.new_terminal()  # a reader comes to each document from a terminal of their own
        for block in shell_blocks(document.read_text(), str(document.relative_to(ROOT))):
            if block.skip is not None:
                continue
            if block.new_terminal:
                shell.new_terminal()
            started = time.monotonic()
            result = shell.run(block, service.ports(block.text))
            took = time.monotonic() - started
            (artifacts / f"block-{shell.runs:02d}.out").write_text(
                f"{block.where} ({took:.1f} s)\n{result.stdout}"
            )
            if result.returncode != 0:
                failures.append(
                    f"--- {block.where}: exit {result.returncode} after {took:.1f} s\n{block.text}"
                    f"--- its output:\n{result.stdout[-4000:]}"
                )
    assert not failures, "\n\n".join(
        [*failures, f"--- make run's output (its last lines; all of it in {service.log}):\n{service.logs()}"]
    )
