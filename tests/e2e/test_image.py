"""The container image, built with podman (testbed/image.py) and run as a deployment runs it:
a one-shot migrate container on an empty database, then a web and a cluster container, a job
submitted through the API against the sandbox remote, and SIGTERM to both within their grace
periods. PostgreSQL and the sandbox run on this machine; the containers share its network."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from django.db import connection

from testbed.image import PODMAN_RUN_OPTIONS
from testbed.processes import SandboxProcess, free_port, wait_until
from tests.processes import ARTIFACTS

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.serial,
    pytest.mark.image,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(1500),
]

ROOT = Path(__file__).resolve().parents[2]
TAG = "localhost/sas:test"
#: Shorter than the defaults, so that the test's stops are quick; the grace periods below follow.
STOP_SECONDS = 20
WEB_GRACE = 30


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0 or not check, (args[:2], result.stdout[-2000:], result.stderr[-2000:])
    return result


@pytest.fixture(scope="module")
def image() -> str:
    result = subprocess.run(
        [sys.executable, "-m", "testbed.image", "--tag", TAG],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "image-build.txt").write_text(result.stdout + result.stderr)
    assert result.returncode == 0, result.stderr[-3000:]
    return TAG


@pytest.fixture
def empty_database() -> Iterator[str]:
    """A database of its own on the test server, created empty and dropped after."""
    s = connection.settings_dict
    name = f"sas_image_{uuid.uuid4().hex[:8]}"
    host, port, user = s["HOST"] or "127.0.0.1", s["PORT"] or 5432, s["USER"] or "postgres"
    admin = f"host={host} port={port} user={user} dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"postgres://{user}@{host}:{port}/{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_image_migrates_serves_runs_a_job_and_stops_cleanly_on_sigterm(
    image: str, empty_database: str, tmp_path: Path
) -> None:
    sandbox = SandboxProcess(port=free_port(), db=tmp_path / "sandbox.sqlite3", log=tmp_path / "sandbox.log")
    web_port = free_port()
    run_id = uuid.uuid4().hex[:6]
    env = {
        "DATABASE_URL": empty_database,
        "DJANGO_SECRET_KEY": f"image-test-{uuid.uuid4().hex}{uuid.uuid4().hex}",
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "SAS_OUTBOUND_INTERNAL_HOSTS": f"127.0.0.1:{sandbox.port},localhost:{sandbox.port}",
        "SAS_PUBLIC_URL": f"http://127.0.0.1:{web_port}",
        "SAS_WEB_BIND": f"127.0.0.1:{web_port}",
        "SAS_SUPERVISOR_INTERVAL": "1",
        "SAS_Q_STOP_SECONDS": str(STOP_SECONDS),
        "SAS_WEB_GRACEFUL_TIMEOUT": str(STOP_SECONDS),
    }
    options = [*PODMAN_RUN_OPTIONS, "--network", "host", *(f"--env={k}={v}" for k, v in env.items())]
    names = {"web": f"sas-web-{run_id}", "cluster": f"sas-cluster-{run_id}"}
    sandbox.start()
    try:
        # The one-shot jobs: migrate an empty database, load the demo's definitions, a token.
        migrate = podman("run", "--rm", *options, image, "migrate", timeout=300)
        assert migrate.returncode == 0
        assert "Installed the database code" in migrate.stdout + migrate.stderr
        podman(
            *("run", "--rm", *options, image, "manage", "load_demo", "--admin"),
            *("--sandbox-url", sandbox.url, "--backup-url", sandbox.url.replace("127.0.0.1", "localhost")),
        )
        token = podman("run", "--rm", *options, image, "manage", "drf_create_token", "admin").stdout.split()[
            2
        ]

        # The service: a web and a cluster container, the processes as the image runs them.
        for role, name in names.items():
            podman("run", "-d", "--name", name, *options, image, role)
        base = f"http://127.0.0.1:{web_port}"
        wait_until(lambda: _status(f"{base}/readyz") == 200, timeout=120, interval=0.5, message="/readyz 200")
        # The cluster beats; its liveness probe, run inside its container, finds it.
        wait_until(
            lambda: (
                podman(
                    "exec", names["cluster"], "/app/docker/entrypoint", "manage", "cluster_check", check=False
                ).returncode
                == 0
            ),
            timeout=60,
            interval=1,
            message="cluster_check passes in the cluster's container",
        )
        user = podman("exec", names["web"], "id", "-u").stdout.strip()
        assert user == "10001"  # not root
        # Closed before the web server stops: its workers keep idle connections alive.
        with httpx.Client(base_url=base, headers={"Authorization": f"Token {token}"}, timeout=10) as client:
            submitted = client.post(
                "/api/v1/jobs/",
                json={"workflow": "order_fulfilment", "input": {"sku": "A1", "quantity": 1, "amount": 20}},
            )
            assert submitted.status_code == 201, submitted.text
            job_url = f"/api/v1/jobs/{submitted.json()['id']}/"
            wait_until(
                lambda: client.get(job_url).json()["status"] == "succeeded",
                timeout=90,
                interval=0.5,
                message="the job succeeded",
            )
        assert sandbox.stats()["effects_by_kind"] == {"charge": 1, "reserve": 1, "schedule": 1}

        # SIGTERM (podman stop), each stopped within its grace period, cleanly.
        for role, grace in (("web", WEB_GRACE), ("cluster", STOP_SECONDS + 15)):
            started = time.monotonic()
            podman("stop", "-t", str(grace + 30), names[role], timeout=grace + 60)
            took = time.monotonic() - started
            state = podman("inspect", "--format", "{{.State.ExitCode}}", names[role]).stdout.strip()
            logs = podman("logs", names[role]).stdout + podman("logs", names[role]).stderr
            (ARTIFACTS / f"image-{role}.log").write_text(logs)
            assert took < grace, (role, took)
            assert state == "0", (role, state, logs[-2000:])
            assert "Traceback" not in logs, logs[-2000:]
    finally:
        for name in names.values():
            podman("rm", "-f", name, check=False)
        sandbox.stop()


def _status(url: str) -> int:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return 0
