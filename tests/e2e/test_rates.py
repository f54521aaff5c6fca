"""End to end: the API's request rates across real web processes (sas_project.throttling).

The buckets are rows in the database, so two web servers on one database count one client's
requests together (with counts in each process's memory, a client reaching two processes got
twice the rate); and the default rates let a client system submit as fast as the service takes
jobs without a single 429."""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from testbed.processes import WebProcess
from tests.api.support import make_user, token_for
from tests.factories import chain
from tests.processes import ARTIFACTS, child_env, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_two_web_processes_on_one_database_let_one_burst_through_between_them() -> None:
    authorization = token_for(make_user("client", "submitters"))
    env = child_env(SAS_THROTTLE_USER="1/min", SAS_THROTTLE_USER_BURST="10")
    webs = [
        WebProcess(port=free_port(), env=env, log=ARTIFACTS / f"web-rates-{n}.log").start() for n in (1, 2)
    ]
    try:
        codes = []
        for n in range(20):
            response = httpx.get(
                f"{webs[n % 2].url}/api/v1/jobs/", headers={"Authorization": authorization}, timeout=30
            )
            codes.append(response.status_code)
        assert codes == [200] * 10 + [429] * 10
        assert response.headers["RateLimit-Remaining"] == "0" and int(response.headers["Retry-After"]) > 0
    finally:
        for web in webs:
            web.stop()


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("gunicorn", [False, True], ids=["runserver", "gunicorn-3-workers"])
def test_a_client_submitting_1500_jobs_from_4_threads_as_fast_as_it_can_gets_no_429(gunicorn: bool) -> None:
    """The default rates, under `runserver` (what `make run` serves: one process, so before the
    buckets its one count refused everything past 1,200 a minute) and under gunicorn with the
    production configuration and three workers (counted together in the database), no cluster:
    the submissions are only recorded, as fast as the API takes them."""
    chain()
    authorization = token_for(make_user("client", "submitters"))
    env = child_env(DJANGO_DEBUG=0, SAS_WEB_WORKERS=3) if gunicorn else child_env()
    name = "gunicorn" if gunicorn else "runserver"
    web = WebProcess(
        port=free_port(), env=env, log=ARTIFACTS / f"web-rates-{name}.log", gunicorn=gunicorn
    ).start()

    def submit_share(count: int) -> Counter[int]:
        codes: Counter[int] = Counter()
        with httpx.Client(base_url=web.url, headers={"Authorization": authorization}, timeout=60) as client:
            for _ in range(count):
                codes[client.post("/api/v1/jobs/", json={"workflow": "chain", "input": {}}).status_code] += 1
        return codes

    started = time.monotonic()
    try:
        with ThreadPoolExecutor(4) as pool:
            shares = list(pool.map(submit_share, [375] * 4))
    finally:
        web.stop()
    took = time.monotonic() - started
    # The pace the API took them at, for the capacity model (docs/capacity.md).
    print(f"{name}: 1,500 submissions in {took:.1f} s, {1500 / took:.0f} a second")
    assert sum(shares, Counter()) == Counter({201: 1500})
