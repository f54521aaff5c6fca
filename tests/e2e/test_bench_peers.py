"""`bench --peers` runs the same chains on Temporal, procrastinate and DBOS, each in a virtualenv
of its own under var/peers/ (built on the first run, from PyPI), beside one short round of the
service, and leaves nothing running or created behind it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from testbed.bench.definitions import HTTP_PATHS
from testbed.bench.peerbench import PEERS, WORKS
from testbed.processes import ROOT
from tests.processes import ARTIFACTS, child_env

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.serial,
    pytest.mark.django_db(transaction=True),
]

JOBS = 6
STEPS = len(HTTP_PATHS)


@pytest.mark.timeout(1500)
def test_every_peer_runs_every_chain_and_calls_the_remote_once_per_http_step(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "bench",
            "--peers",
            "--peers-only",
            "--jobs",
            str(JOBS),
            "--steps",
            str(STEPS),
            "--web",
            "gunicorn",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=1400,
        check=False,
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "bench-peers.txt").write_text(done.stdout + "\n" + done.stderr[-20000:])
    assert done.returncode == 0, done.stderr[-3000:]
    peers = json.loads(out.read_text())["peers"]

    runs = {(r["peer"], r["work"]): r for r in peers["runs"]}
    assert set(runs) == {(p, w) for p in PEERS for w in WORKS}
    for (peer, work), r in runs.items():
        assert (r["ended"], r["failed"]) == (JOBS, 0), (peer, work, r)
        assert r["steps_per_s"] > 0 and r["p50_ms"] is not None, (peer, work, r)
        if work == "http":
            # Each step of every chain (the warm-up's included) reached the remote, once each.
            expected = (JOBS + r["warmup"]) * STEPS
            assert (r["remote_unique_keys"], r["remote_calls"]) == (expected, expected), (peer, r)
        else:
            assert "remote_calls" not in r

    # The service's figures of the same run are beside them, in the table too.
    service = {(s["system"], s["work"]): s for s in peers["service"]}
    assert service[("service, API under gunicorn", "http")]["steps_per_s"] > 0
    assert service[("service, python workload (in-process submit)", "noop")]["steps_per_s"] > 0
    for peer in PEERS:
        assert f"| {peer} | http |" in done.stdout and f"| {peer} | noop |" in done.stdout

    # Nothing left behind: the peers' databases dropped, the Temporal dev server stopped.
    with connection.cursor() as cursor:
        cursor.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", ["%\\_peer\\_%"])
        assert cursor.fetchall() == []
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert str(ROOT / "var" / "peers" / "temporal") not in ps
