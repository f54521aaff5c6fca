"""The API's request rates (sas_project.throttling): a bucket per client in the database, taken
by one statement per request, so every web process counts the same requests; the headers that
say where a client stands; a failed store letting requests through.

Across real processes: tests/e2e/test_rates.py."""

from __future__ import annotations

import logging
import math
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from sas_project import throttling
from sas_project.database import is_postgresql
from sas_project.throttling import (
    RatePolicy,
    parse_rate,
    rate_bucket_take,
    rate_buckets_prune,
    rate_policy,
)
from sas_project.tokens.models import RateBucket
from tests.api.support import V1, client_for, make_user
from tests.security.test_secret_key import manage_check

pytestmark = pytest.mark.sqlite

NOW = 1_800_000_000.0


# --- the policy ----------------------------------------------------------------------------------


def test_the_defaults_are_200_a_second_with_a_burst_of_400_per_user_and_5_a_second_per_address() -> None:
    assert rate_policy("user") == RatePolicy(interval=0.005, burst=1200)
    assert rate_policy("anon") == RatePolicy(interval=0.2, burst=60)


@pytest.mark.parametrize(
    ("rate", "parsed"),
    [
        ("100/s", (100, 1.0)),
        ("100/sec", (100, 1.0)),
        ("1200/min", (1200, 60.0)),
        ("300/m", (300, 60.0)),
        ("50/hour", (50, 3600.0)),
        ("1000/day", (1000, 86400.0)),
        ("off", None),
        ("", None),
    ],
)
def test_rates_written_per_second_or_in_drfs_notation_parse(rate: str, parsed: Any) -> None:
    assert parse_rate(rate) == parsed


def test_a_process_refuses_to_start_with_a_rate_it_cannot_read(tmp_path: Path) -> None:
    result = manage_check(
        tmp_path, DJANGO_DEBUG="1", SAS_THROTTLE_USER="100 per second", SAS_THROTTLE_USER_BURST="0"
    )
    assert result.returncode != 0
    assert "SAS_THROTTLE_USER='100 per second': write a rate as 100/s, 1200/min or off" in result.stderr
    assert "SAS_THROTTLE_USER_BURST='0': Must be greater than or equal to 1." in result.stderr


# --- the bucket ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_burst_is_let_through_then_refused_then_let_through_at_the_sustained_rate() -> None:
    policy = RatePolicy(interval=1.0, burst=3)

    def take(at: float) -> tuple[bool, int, float]:
        decision = rate_bucket_take(key="user:1", policy=policy, now=at)
        assert decision is not None
        return decision.allowed, decision.remaining, decision.retry_after

    assert [take(NOW) for _ in range(3)] == [(True, 2, 0.0), (True, 1, 0.0), (True, 0, 0.0)]
    # Refused, told to come back when one request's worth has dripped out; refusals take nothing.
    assert take(NOW + 0.25) == (False, 0, 0.75)
    assert take(NOW + 0.5) == (False, 0, 0.5)
    assert take(NOW + 1.0) == (True, 0, 0.0)
    assert take(NOW + 1.0)[0] is False
    # After a quiet spell the bucket is full again, and no fuller.
    assert take(NOW + 100) == (True, 2, 0.0)


@pytest.mark.django_db
def test_each_client_has_a_bucket_of_its_own() -> None:
    policy = RatePolicy(interval=10.0, burst=1)
    assert [
        decision.allowed
        for key in ("user:1", "user:1", "user:2", "anon:203.0.113.5")
        if (decision := rate_bucket_take(key=key, policy=policy, now=NOW)) is not None
    ] == [True, False, True, True]


@pytest.mark.django_db
def test_full_buckets_idle_for_a_minute_are_pruned_and_the_others_kept() -> None:
    policy = RatePolicy(interval=1.0, burst=5)
    rate_bucket_take(key="user:idle", policy=policy, now=NOW)
    rate_bucket_take(key="user:busy", policy=policy, now=NOW + 100)
    assert rate_buckets_prune(now=NOW + 100) == 1
    assert list(RateBucket.objects.values_list("key", flat=True)) == ["user:busy"]


@pytest.mark.django_db(transaction=True)
def test_requests_taken_at_once_from_many_connections_are_each_counted_once() -> None:
    """No read-modify-write race: 8 threads (each with its own database connection, as separate
    web processes have) take 40 requests each from a bucket of 100 at one instant; exactly 100
    are let through."""
    if not is_postgresql():
        pytest.skip("SQLite has one writer at a time: nothing to race")
    policy = RatePolicy(interval=60.0, burst=100)
    allowed: list[bool] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def client() -> None:
        try:
            start.wait()
            for _ in range(40):
                decision = rate_bucket_take(key="user:race", policy=policy, now=NOW)
                assert decision is not None
                with lock:
                    allowed.append(decision.allowed)
        finally:
            connection.close()

    threads = [threading.Thread(target=client) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (allowed.count(True), allowed.count(False)) == (100, 220)


# --- through the API -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_api_answer_says_the_limit_what_remains_and_when_the_bucket_is_full() -> None:
    client = client_for(make_user("sam", "submitters"))
    first = client.get(f"{V1}/jobs/")
    assert first.status_code == 200
    assert (first["RateLimit-Limit"], first["RateLimit-Remaining"], first["RateLimit-Reset"]) == (
        "1200",
        "1199",
        "1",
    )
    assert int(client.get(f"{V1}/jobs/")["RateLimit-Remaining"]) in (1198, 1199)


@pytest.mark.django_db
def test_a_refused_request_gets_429_in_the_error_shape_with_retry_after_and_nothing_remaining(
    settings: Any,
) -> None:
    settings.SAS_THROTTLE_USER = "1/min"
    settings.SAS_THROTTLE_USER_BURST = 2
    client = client_for(make_user("sam", "submitters"))
    assert [client.get(f"{V1}/jobs/").status_code for _ in range(2)] == [200, 200]
    refused = client.get(f"{V1}/jobs/")
    assert refused.status_code == 429
    body = refused.json()
    assert body["code"] == "throttled" and "throttled" in body["detail"]
    assert 58 <= int(refused["Retry-After"]) <= 60
    assert refused["RateLimit-Limit"] == "2" and refused["RateLimit-Remaining"] == "0"
    assert 118 <= int(refused["RateLimit-Reset"]) <= 120


@pytest.mark.django_db
def test_a_rate_set_to_off_counts_nothing_and_sends_no_rate_headers(settings: Any) -> None:
    settings.SAS_THROTTLE_USER = "off"
    response = client_for(make_user("sam", "submitters")).get(f"{V1}/jobs/")
    assert response.status_code == 200 and "RateLimit-Limit" not in response
    assert not RateBucket.objects.exists()


@pytest.mark.django_db
def test_remote_callbacks_and_heartbeats_are_not_counted(settings: Any) -> None:
    settings.SAS_THROTTLE_ANON = "1/min"
    settings.SAS_THROTTLE_ANON_BURST = 1
    client = APIClient()
    for path in ("forged-token/", "forged-token/heartbeat/"):
        codes = {client.post(f"{V1}/callbacks/{path}", {}, format="json").status_code for _ in range(3)}
        assert len(codes) == 1 and 429 not in codes  # refused for its token or body, never its rate
    assert not RateBucket.objects.exists()


@pytest.mark.django_db
def test_a_failing_store_lets_requests_through_and_says_so_in_the_log(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(throttling._failures, "last_logged", -math.inf)
    client = client_for(make_user("sam", "submitters"))
    with connection.cursor() as cursor:
        # A real failure of the store's statement: its table is gone (until the test's rollback).
        cursor.execute("ALTER TABLE api_rate_bucket RENAME TO api_rate_bucket_away")
    with caplog.at_level(logging.WARNING, logger="sas_project.throttling"):
        responses = [client.get(f"{V1}/jobs/") for _ in range(3)]
    assert [response.status_code for response in responses] == [200, 200, 200]
    assert "RateLimit-Limit" not in responses[0]
    warnings = [r for r in caplog.records if "rate limiter could not count" in r.getMessage()]
    assert len(warnings) == 1  # once a minute at most, not once a request


@pytest.mark.django_db(transaction=True)  # the loop closes and reopens its connection
def test_the_supervisors_lease_holder_prunes_the_idle_buckets() -> None:
    from supervisor.loop import run_loop

    an_hour_ago = time.time() - 3600
    rate_bucket_take(key="anon:198.51.100.1", policy=RatePolicy(interval=1.0, burst=5), now=an_hour_ago)
    run_loop(holder="loop-1", should_stop=lambda: False, interval=0, max_scans=1)
    assert not RateBucket.objects.exists()


@pytest.mark.django_db(transaction=True)  # the submission's connection and a second one
@pytest.mark.parametrize("batch", [False, True])
def test_a_submission_holds_no_lock_on_its_clients_rate_bucket(
    monkeypatch: pytest.MonkeyPatch, batch: bool
) -> None:
    """The bucket is taken before the submission's transaction opens: inside it, the bucket's
    row lock would last until the submission commits, and one client's submissions would run
    one at a time whatever the web server's workers."""
    import psycopg
    from django.db import connection as django_connection

    from scheduler.services import submission as submission_service
    from tests.factories import chain

    if not is_postgresql():
        pytest.skip("row locks")
    chain(n=1)
    user = make_user("client", "submitters")
    seen: list[str] = []
    params = django_connection.get_connection_params()
    dsn = {k: v for k, v in params.items() if k in ("host", "port", "dbname", "user", "password") and v}

    def probe() -> None:
        """From another connection, while the submission's transaction is open."""
        with psycopg.connect(**dsn, autocommit=True) as other:
            try:
                other.execute(
                    "SELECT 1 FROM api_rate_bucket WHERE key = %s FOR UPDATE NOWAIT", [f"user:{user.pk}"]
                )
                seen.append("free")
            except psycopg.errors.LockNotAvailable:
                seen.append("locked")

    name = "_submit_prepared" if not batch else "jobs_submit_batch"
    real = getattr(submission_service, name)

    def probing(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        probe()  # the submission's rows are written, its transaction not yet committed
        return result

    client = client_for(user)
    assert client.get(f"{V1}/jobs/").status_code == 200  # the bucket's row exists from now on
    assert RateBucket.objects.filter(key=f"user:{user.pk}").exists()
    monkeypatch.setattr(submission_service, name, probing)
    if batch:
        from scheduler import api as scheduler_api

        monkeypatch.setattr(scheduler_api, "jobs_submit_batch", probing)
        answer = client.post(
            f"{V1}/jobs/batch/", {"jobs": [{"workflow": "chain", "input": {}}]}, format="json"
        )
    else:
        answer = client.post(f"{V1}/jobs/", {"workflow": "chain", "input": {}}, format="json")
    assert answer.status_code == 201, answer.content
    assert seen == ["free"]


@pytest.mark.django_db
@pytest.mark.parametrize("scope", ["user", "anon"])
def test_the_first_request_of_a_default_bucket_leaves_all_but_one_remaining(scope: str) -> None:
    """At the epoch's magnitude a float comes out a hair short of a whole number of requests:
    the header must still say burst - 1, not burst - 2."""
    policy = rate_policy(scope)
    assert policy is not None
    decision = rate_bucket_take(key=f"{scope}:fresh", policy=policy, now=NOW + 0.123456)
    assert decision is not None and decision.allowed
    assert decision.remaining == policy.burst - 1
