"""End to end: `manage.py runserver` (what `make run` serves) on a kept-alive connection.

Django's development server writes an answer's headers and body in two segments; with Nagle's
algorithm on, the body waited for the client's delayed acknowledgement of the headers, some 40 ms
a request on a kept-alive connection. The server sets TCP_NODELAY (supervisor.apps)."""

from __future__ import annotations

import statistics
import time

import httpx
import pytest

from testbed.processes import WebProcess
from tests.processes import ARTIFACTS, child_env, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_runserver_answers_a_kept_alive_client_without_the_delayed_ack_stall() -> None:
    web = WebProcess(port=free_port(), env=child_env(), log=ARTIFACTS / "web-runserver.log").start()
    try:
        with httpx.Client(base_url=web.url, trust_env=False) as client:
            # An API answer (a 401 here: no database work), on a connection kept alive past the
            # quick acknowledgements a new connection starts with.
            for _ in range(30):
                assert client.post("/api/v1/jobs/", json={}).status_code == 401
            took = []
            for _ in range(15):
                started = time.perf_counter()
                assert client.post("/api/v1/jobs/", json={}).status_code == 401
                took.append((time.perf_counter() - started) * 1000)
        assert statistics.median(took) < 20, took  # the stall is 40 ms or more
    finally:
        web.stop()
