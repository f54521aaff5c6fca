"""Many hosts on one PostgreSQL: the service behind PgBouncer in transaction pooling mode.

The settings send no session state a pooled server session would carry to another client, the
session limits reach every server session through PgBouncer, and the fault campaign with three
clusters and two gunicorn web processes behind a real PgBouncer (and PostgreSQL restarted
behind it)
keeps every invariant, with one acting supervisor at a time (docs/deployment.md, "Many hosts")."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import connection
from django.db.models import F

from scheduler.models import Event, EventKind, Job
from scheduler.services import job_submit
from supervisor.lease import lease_acquire
from supervisor.models import LeaseTerm, SupervisorLease
from testbed.campaign import check_lease
from testbed.processes import PgBouncerProcess
from tests.factories import chain
from tests.processes import ROOT, assert_no_job_lost_and_no_effect_doubled, database_url, run_fault_campaign


def settings_with(**env: str) -> dict[str, object]:
    """The database settings a process would use with this environment (PostgreSQL URL)."""
    script = (
        "import json, django; from django.conf import settings; django.setup(); "
        "d = settings.DATABASES['default']; "
        "print(json.dumps({'options': d['OPTIONS'], "
        "'no_server_cursors': d.get('DISABLE_SERVER_SIDE_CURSORS', False), "
        "'notify': settings.SAS_Q_NOTIFY}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "sas_project.settings",
            "DATABASE_URL": "postgres://sas@db.internal:6432/sas",
            **env,
        },
        capture_output=True,
        text=True,
        check=True,
    )
    parsed: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return parsed


def test_behind_a_transaction_pooler_no_session_state_is_sent() -> None:
    pooled = settings_with(SAS_DB_TRANSACTION_POOLING="1")
    options = pooled["options"]
    assert isinstance(options, dict)
    # PgBouncer refuses the `options` startup parameter; prepared statements and held cursors
    # live in one server session; a LISTEN would register on whichever session ran it.
    assert "options" not in options
    assert "server_side_binding" not in options
    assert "prepare_threshold" not in options
    assert pooled["no_server_cursors"] is True
    assert pooled["notify"] is False


def test_prepared_statements_can_be_turned_back_on_for_a_pooler_that_carries_them() -> None:
    pooled = settings_with(SAS_DB_TRANSACTION_POOLING="1", SAS_DB_PREPARED="1", SAS_Q_NOTIFY="1")
    options = pooled["options"]
    assert isinstance(options, dict)
    assert options["prepare_threshold"] == 5
    assert "options" not in options
    assert pooled["notify"] is False  # never through a transaction pooler


def test_a_direct_connection_keeps_its_startup_limits_prepared_statements_and_announcements() -> None:
    direct = settings_with()
    options = direct["options"]
    assert isinstance(options, dict)
    assert "lock_timeout=30000" in str(options["options"])
    assert options["server_side_binding"] is True
    assert direct["no_server_cursors"] is False
    assert direct["notify"] is True


def decisions(job: Job, *holders: str) -> None:
    """Supervisor decisions by these holders, in this (commit) order."""
    Event.objects.bulk_create(
        Event(job=job, kind=EventKind.STEP_TIMED_OUT, source=f"supervisor:{holder}") for holder in holders
    )


@pytest.mark.django_db
def test_the_lease_check_passes_holders_that_decide_in_the_order_of_their_terms() -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    assert lease_acquire("a") is not None
    first_event = Event.objects.order_by("-id").values_list("id", flat=True).first() or 0
    decisions(job, "a", "a")
    SupervisorLease.objects.update(expires_at=F("expires_at") - dt.timedelta(hours=1))
    assert lease_acquire("b") is not None
    decisions(job, "b")
    report = check_lease(first_event, first_term=0)
    assert report["violations"] == []
    assert (report["terms_finished"], report["holders_deciding"]) == (1, 2)


@pytest.mark.django_db
def test_the_lease_check_catches_a_holder_deciding_after_its_successor_took_over() -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    assert lease_acquire("a") is not None
    first_event = Event.objects.order_by("-id").values_list("id", flat=True).first() or 0
    SupervisorLease.objects.update(expires_at=F("expires_at") - dt.timedelta(hours=1))
    assert lease_acquire("b") is not None
    decisions(job, "a", "b", "a")  # "a" acted beside "b"
    report = check_lease(first_event, first_term=0)
    assert report["violations"] and "a decided outside its term" in report["violations"][0]


@pytest.mark.django_db
def test_the_lease_check_catches_a_term_that_could_act_after_the_takeover() -> None:
    assert lease_acquire("a") is not None
    SupervisorLease.objects.update(expires_at=F("expires_at") - dt.timedelta(hours=1))
    assert lease_acquire("b") is not None
    term = LeaseTerm.objects.get()
    assert term.ended_at is not None
    LeaseTerm.objects.update(expired_at=term.ended_at + dt.timedelta(seconds=1))
    report = check_lease(0, first_term=0)
    assert report["violations"] and "could act until" in report["violations"][0]


@pytest.fixture
def bouncer() -> Iterator[PgBouncerProcess]:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    # Not under pytest's tmp_path: its parents are private to this user, and PgBouncer runs as
    # the server's user when the suite runs as root.
    workdir = Path(tempfile.mkdtemp(prefix="sas-pgbouncer-"))
    process = PgBouncerProcess.in_front_of(database_url(), workdir).start()
    try:
        yield process
    finally:
        process.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.django_db
def test_server_sessions_opened_by_pgbouncer_get_the_services_session_limits(
    bouncer: PgBouncerProcess,
) -> None:
    url = bouncer.url_for(database_url())
    with psycopg.connect(url, autocommit=True, application_name="sas-probe") as conn:
        assert conn.execute("SHOW lock_timeout").fetchone() == ("30s",)
        assert conn.execute("SHOW idle_in_transaction_session_timeout").fetchone() == ("1min",)
        assert conn.execute("SELECT current_setting('application_name')").fetchone() == ("sas-probe",)
    # What the direct settings would send is refused: hence SAS_DB_TRANSACTION_POOLING.
    with pytest.raises(psycopg.OperationalError, match="unsupported startup parameter"):
        psycopg.connect(url, options="-c lock_timeout=30000").close()


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timeout(900)  # above the campaign runner's own 600 s limit
@pytest.mark.django_db(transaction=True)
def test_three_clusters_behind_pgbouncer_settle_300_faulty_jobs_once_each_under_one_supervisor() -> None:
    # PostgreSQL is restarted behind the pooler too (make test controls the server): PgBouncer
    # keeps the clients' connections and opens new server sessions.
    report = run_fault_campaign(
        "fault-campaign-pgbouncer",
        *("--pgbouncer", "--clusters", "3", "--webs", "2", "--gunicorn"),
        *("--jobs", "300", "--duration", "40", "--drain", "120"),
    )
    assert report["config"]["pgbouncer"] is True and report["config"]["gunicorn"] is True
    assert_no_job_lost_and_no_effect_doubled(report, jobs=300)
    # Exactly one supervisor acting at a time, from the durable record, across real hand-overs.
    lease = report["lease"]
    assert lease["violations"] == []
    # At least the hand-over of the drain's restarts (kills of the holder usually add more).
    assert lease["terms_finished"] >= 1
    assert lease["holders_deciding"] >= 1
    # The faults really happened.
    faults = report["faults"]
    assert faults["kills"] >= 2
    assert faults["connections_dropped"] >= 1
