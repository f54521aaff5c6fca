"""The sandbox remote in this process, on a free port, with a fresh store per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.sandbox import SandboxRemote


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[SandboxRemote]:
    from agents import http

    remote = SandboxRemote(tmp_path / "sandbox.sqlite3", reset=True)
    remote.start()
    yield remote
    # Hang up the agent's kept-alive connection first (a test may have called through the
    # agent), as tests/agents/test_http.py does: the server's stop waits for open connections.
    if http._client is not None:
        http._client.close()
        http._client = None
    remote.stop()
