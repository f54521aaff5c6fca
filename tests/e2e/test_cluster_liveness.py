"""End to end: a real `qcluster` touches its heartbeat file while it lives, and the image's
`entrypoint alive` (the containers' liveness probe) reads the file's age without Python."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.processes import Cluster, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

ENTRYPOINT = Path(__file__).resolve().parents[2] / "docker" / "entrypoint"


def probe(file: Path, max_age: int) -> subprocess.CompletedProcess[str]:
    # As the container runs it: no DATABASE_URL is needed for the probe.
    return subprocess.run(
        ["sh", str(ENTRYPOINT), "alive", str(max_age)],
        env={"PATH": "/usr/bin:/bin", "SAS_CLUSTER_ALIVE_FILE": str(file)},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_liveness_probe_passes_while_the_cluster_beats_and_fails_once_it_died(
    clusters: Callable[..., Cluster], tmp_path: Path
) -> None:
    file = tmp_path / "cluster-alive"
    assert probe(file, 60).returncode == 1  # no cluster yet: no file
    cluster = clusters("alive", SAS_CLUSTER_ALIVE_FILE=file, SAS_CLUSTER_HEARTBEAT_SECONDS=0.5)
    wait_until(file.exists, timeout=60)
    touched = file.stat().st_mtime
    wait_until(lambda: file.stat().st_mtime > touched, timeout=60)  # touched again: it beats
    alive = probe(file, 60)
    assert alive.returncode == 0 and "cluster alive" in alive.stdout, alive.stderr
    cluster.kill()
    wait_until(lambda: not cluster.alive, timeout=60)
    last = file.stat().st_mtime
    time.sleep(3)
    assert file.stat().st_mtime == last  # nobody touches it any more
    dead = probe(file, 2)
    assert dead.returncode == 1 and "last heartbeat" in dead.stderr
