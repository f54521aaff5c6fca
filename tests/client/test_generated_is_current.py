"""sas_client.openapi is what openapi-python-client makes of the service's schema today: a change
to the API without `clients/python/regenerate.py` fails here, with the diff to commit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from testbed.processes import ROOT

pytestmark = pytest.mark.slow


def test_the_committed_generated_client_is_what_the_live_schema_generates() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "clients" / "python" / "regenerate.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, (result.stdout[-20000:] + result.stderr[-5000:]) or "regenerate.py failed"
