"""End to end: the production web configuration serves short requests beside slow ones.

gunicorn's workers are threaded (sas_project/gunicorn_conf.py): a request whose body arrives
slowly, or that takes long in the service, holds one thread of its worker, not the worker. With
the sync workers of before, a slow request held its whole worker, and the short submissions
queued behind it (docs/reliability.md, "Contract and expression bombs": a flood of large bodies
multiplied their p99 by five). The verdict here is an order, not a time: the short requests are
answered while the slow ones are still unfinished, which a sync worker cannot do at all.
"""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from testbed.processes import WebProcess
from tests.api.support import make_user, token_for
from tests.factories import chain
from tests.processes import ARTIFACTS, child_env, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

#: The slow requests one worker holds at once: fewer than its threads (4 by default).
SLOW = 2


def begin_slow_submission(port: int, authorization: str, body: bytes) -> socket.socket:
    """A submission whose headers and first bytes are sent, and the rest of its body held back."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=60)
    head = (
        "POST /api/v1/jobs/ HTTP/1.1\r\n"
        "Host: 127.0.0.1\r\n"
        f"Authorization: {authorization}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    conn.sendall(head.encode() + body[:5])
    return conn


def finish(conn: socket.socket, body: bytes) -> str:
    """Sends the rest of the body and reads the answer's status line."""
    conn.sendall(body[5:])
    answer = b""
    while b"\r\n" not in answer:
        chunk = conn.recv(4096)
        if not chunk:
            break
        answer += chunk
    conn.close()
    return answer.split(b"\r\n", 1)[0].decode()


def test_requests_whose_bodies_trickle_in_leave_one_worker_serving_the_short_ones() -> None:
    chain()
    authorization = token_for(make_user("client", "submitters"))
    env = child_env(DJANGO_DEBUG=0, SAS_WEB_WORKERS=1)
    web = WebProcess(port=free_port(), env=env, log=ARTIFACTS / "web-threads.log", gunicorn=True).start()
    body = json.dumps({"workflow": "chain", "input": {"slow": True}}).encode()
    slow = [begin_slow_submission(web.port, authorization, body) for _ in range(SLOW)]
    try:
        # The one worker has begun reading both slow bodies; each short request below is
        # answered while they are still unfinished (a sync worker would hold the next in its
        # backlog until the first slow body ended or its 30 s timeout killed the worker).
        with httpx.Client(base_url=web.url, headers={"Authorization": authorization}, timeout=20) as client:
            listed = [client.get("/api/v1/jobs/").status_code for _ in range(5)]
            submitted = [
                client.post("/api/v1/jobs/", json={"workflow": "chain", "input": {}}).status_code
                for _ in range(5)
            ]
        assert listed == [200] * 5
        assert submitted == [201] * 5
        # The slow requests were held, not dropped: each is answered once its body arrives.
        assert [finish(conn, body) for conn in slow] == ["HTTP/1.1 201 Created"] * SLOW
    finally:
        for conn in slow:
            conn.close()
        web.stop()
