"""The secret key: outside debug no process starts without one of its own (sas_project/settings.py),
and `make run`, which runs with debug off, makes one and keeps it."""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import ROOT

pytestmark = pytest.mark.sqlite

DEMO_KEY = "django-insecure-local-demo-key-change-me-0123456789abcdefghijklmnop"


def manage_check(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`manage.py check` in a fresh process on the make-run default (SQLite), debug off unless
    `env` says otherwise, and no secret key unless `env` names one."""
    base = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SECRET_KEY", "DATABASE_URL")}
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**base, "DJANGO_DEBUG": "0", "SAS_VAR_DIR": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "key",
    [
        None,
        "",
        DEMO_KEY,
        "django-insecure-" + "x" * 50,
        # deploy/kubernetes/secret.example.yaml's text, a short key, a long one of one letter.
        "replace with 50 random characters",
        "s3cr3t-but-short",
        "k" * 60,
    ],
)
def test_without_a_key_of_its_own_a_process_with_debug_off_refuses_to_start_and_with_debug_on_starts(
    tmp_path: Path, key: str | None
) -> None:
    result = manage_check(tmp_path, **({} if key is None else {"DJANGO_SECRET_KEY": key}))
    assert result.returncode != 0
    assert "ImproperlyConfigured: DJANGO_SECRET_KEY is" in result.stderr, result.stderr
    assert "with DJANGO_DEBUG off the service needs a secret key of its own" in result.stderr
    # With debug on (a developer's machine) the demo key is allowed.
    debug = manage_check(tmp_path, DJANGO_DEBUG="1", **({} if key is None else {"DJANGO_SECRET_KEY": key}))
    assert debug.returncode == 0, debug.stderr


def test_make_run_makes_a_private_key_once_and_its_processes_start_with_it(tmp_path: Path) -> None:
    key_file = tmp_path / "var" / "demo-secret-key"
    make = ["make", "-s", f"DEMO_KEY={key_file}", str(key_file)]
    subprocess.run(make, cwd=ROOT, check=True, timeout=60)
    key = key_file.read_text().strip()
    assert len(key) >= 50 and not key.startswith("django-insecure-")
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    subprocess.run(make, cwd=ROOT, check=True, timeout=60)
    assert key_file.read_text().strip() == key  # kept: sessions and callback tokens survive
    result = manage_check(tmp_path, DJANGO_SECRET_KEY=key)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", ["SAS_METRICS_TOKEN", "SAS_CALLBACK_SECRET"])
@pytest.mark.parametrize(
    "value", ["replace with a random token; the ServiceMonitor sends it", "<a random string>", "changeme"]
)
def test_an_examples_placeholder_for_a_secret_refuses_to_start(tmp_path: Path, name: str, value: str) -> None:
    key = secrets.token_urlsafe(50)
    result = manage_check(tmp_path, DJANGO_SECRET_KEY=key, **{name: value})
    assert result.returncode != 0
    assert f"{name} is an example's placeholder" in result.stderr, result.stderr
    assert value not in result.stderr  # a secret's value is never echoed, not even a placeholder
    started = manage_check(tmp_path, DJANGO_SECRET_KEY=key, **{name: secrets.token_urlsafe(32)})
    assert started.returncode == 0, started.stderr
