"""The database's own code is source: one file per function, installed by `migrate`, refused when it
differs; the state machines are enforced by the database for every writer; what reacts to events
sees them whoever wrote them."""

from __future__ import annotations

import ast
import datetime as dt
import io
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ

from agents.outcome import AttemptKind, CallResult, Outcome
from sas_project import dbcode
from sas_project.database import is_postgresql
from scheduler import sqlgen
from scheduler.models import (
    Attempt,
    Event,
    EventKind,
    EventReaction,
    Job,
    JobStatus,
    Step,
    StepKind,
    StepStatus,
)
from scheduler.services import hotpath, job_submit
from scheduler.transitions import OUTCOME_MOVES
from supervisor.alerts import reactions_handle
from supervisor.scan import ScanReport
from supervisor.subscriptions import subscription_create
from testbed.processes import ROOT
from tests.factories import chain, make_policy, make_workflow, step

PRODUCT = ("sas_project", "agents", "scheduler", "supervisor")
REQUIRED = ["c", "{}", None, None, "h", "test", "default", "scheduler.tasks.run_attempt", 60, False]
#: The arguments the previous release passed after the required ones (callback, trace, key, priority).
PREVIOUS = ["", "", "", 0]
FIXTURE = ROOT / "tests" / "fixtures" / "database-0.1-bf9f712.sql.gz"

Supervise = Callable[..., ScanReport]

postgresql = pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "").startswith("postgres"), reason="PostgreSQL's functions"
)


# --- source files -----------------------------------------------------------------------------------


def _strings(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


@pytest.mark.sqlite
def test_no_function_or_trigger_body_is_held_in_a_python_string() -> None:
    body = re.compile(r"CREATE\s+(OR\s+REPLACE\s+)?(FUNCTION|(CONSTRAINT\s+)?TRIGGER)|\bplpgsql\b", re.I)
    found = [
        str(path.relative_to(ROOT))
        for package in (*PRODUCT, "testbed")
        for path in (ROOT / package).rglob("*.py")
        if any(body.search(text) for text in _strings(path))
        # The generator writes the generated files' text; the files are the source it is installed from.
        and path != ROOT / "scheduler" / "sqlgen.py"
    ]
    assert found == []


@pytest.mark.sqlite
def test_each_postgresql_file_defines_the_one_function_it_is_named_after() -> None:
    files = dbcode.sources("postgresql")
    assert files
    for source in files:
        defined = re.findall(r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(\w+)\s*\(", source.text, re.I)
        assert defined == [source.name], source.path


@pytest.mark.sqlite
def test_each_sqlite_file_defines_the_one_trigger_it_is_named_after() -> None:
    for source in dbcode.sources("sqlite"):
        assert [name for name, _ in source.triggers] == [source.name], source.path


@pytest.mark.sqlite
def test_the_generated_files_are_what_the_tables_generate() -> None:
    stale = [str(path) for path, text in sqlgen.generated().items() if path.read_text() != text]
    assert stale == [], "run `manage.py dbcode --generate`"


@pytest.mark.sqlite
def test_no_hand_written_file_chooses_an_event_kind_a_python_table_defines() -> None:
    """The events of the state machines' moves and of a call's outcomes come from their tables
    (scheduler.transitions), through the generated sas_event_kind."""
    chosen = {kind for kinds in sqlgen.EVENT_TABLES.values() for kind in kinds.values()}
    generated = set(sqlgen.generated())
    found = {
        f"{source.app}/{source.path.name}: {literal}"
        for vendor in ("postgresql", "sqlite")
        for source in dbcode.sources(vendor)
        if source.path not in generated
        for literal in re.findall(r"'(\w+)'", source.text)
        if literal in chosen
    }
    assert found == set()


@postgresql
@pytest.mark.django_db
def test_the_generated_event_functions_answer_as_the_python_tables() -> None:
    with connection.cursor() as cursor:
        for table, kinds in sqlgen.EVENT_TABLES.items():
            for key, kind in kinds.items():
                cursor.execute("SELECT sas_event_kind(%s, %s)", [table, key])
                assert cursor.fetchone() == (kind,), (table, key)
        for outcome, (to, _) in OUTCOME_MOVES.items():
            cursor.execute("SELECT sas_outcome_status(%s)", [outcome])
            assert cursor.fetchone() == (to,), outcome
        cursor.execute("SELECT sas_event_kind('step', 'no_such_status'), sas_outcome_status('succeeded')")
        assert cursor.fetchone() == (None, None)


@postgresql
@pytest.mark.django_db
def test_the_agents_pool_function_is_inlined_as_the_join_it_replaces() -> None:
    """The scheduler's SQL reads pools through sas_agent_pool (tests/structure/test_database_layers.py)
    at no cost: the planner inlines the function, and the plan joins the pools' table."""
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN SELECT s.id, ap.name FROM scheduler_step s "
            "CROSS JOIN LATERAL sas_agent_pool(s.pool_id) ap"
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Function Scan" not in plan and "agents_agentpool" in plan, plan


@pytest.mark.sqlite
def test_each_file_and_the_python_it_mirrors_name_each_other() -> None:
    """A hand-written `.sql` file says which Python it restates (`-- Mirrors: module, ...`), and
    each of those modules names the file."""
    generated = set(sqlgen.generated())
    for vendor in ("postgresql", "sqlite"):
        for source in dbcode.sources(vendor):
            if source.path in generated:
                continue  # generated: its header names its tables, and the test above holds it
            declared = re.findall(r"^-- Mirrors: (.+)\.$", source.text, re.M)
            assert declared, f"{source.path} names no Python it mirrors"
            modules = [name.strip() for line in declared for name in line.split(",")]
            for module in modules:
                # A package names it in one of its modules.
                path = ROOT / module.replace(".", "/")
                files = sorted(path.glob("*.py")) if path.is_dir() else [path.with_suffix(".py")]
                text = "".join(file.read_text() for file in files)
                relative = f"{source.app}/sql/{vendor}/{source.path.name}"
                assert relative in text, f"{module} does not name {relative}"


@pytest.mark.sqlite
def test_the_vocabulary_constraints_are_read_from_the_models_check_constraints() -> None:
    expected = {
        "event_kind_valid": ("scheduler_event", "kind", EventKind.values),
        "step_status_valid": ("scheduler_step", "status", StepStatus.values),
        "step_kind_valid": ("scheduler_step", "kind", StepKind.values),
        "job_status_valid": ("scheduler_job", "status", JobStatus.values),
        "attempt_outcome_valid": ("scheduler_attempt", "outcome", ["", *Outcome.values]),
        "attempt_kind_valid": ("scheduler_attempt", "kind", AttemptKind.values),
    }
    read = {name: sqlgen.vocabulary(app, model, name) for app, model, name in sqlgen.VOCABULARIES}
    assert read == {
        name: (table, column, sorted(values)) for name, (table, column, values) in expected.items()
    }


@pytest.mark.sqlite
@pytest.mark.parametrize(
    "condition",
    [Q(attempt__gte=0), ~Q(kind__in=["a"]), Q(kind__in=["a"]) | Q(status="b"), Q(kind="a") & Q(kind="b")],
)
def test_a_condition_that_is_not_one_columns_vocabulary_is_not_restated(condition: Q) -> None:
    with pytest.raises(ValueError, match="not a vocabulary"):
        sqlgen._allowed(condition)


@postgresql
@pytest.mark.django_db
def test_on_postgresql_each_vocabulary_constraint_is_one_call_and_refuses_what_the_model_refuses() -> None:
    """The constraints keep their names and their rule, as a call of sas_value_allowed (a long
    IN list is parsed again at every statement that writes the table)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conname = ANY(%s) AND conrelid = ANY(%s::regclass[])",
            [
                [name for _, _, name in sqlgen.VOCABULARIES],
                ["scheduler_event", "scheduler_step", "scheduler_job", "scheduler_attempt"],
            ],
        )
        found = dict(cursor.fetchall())
        assert set(found) == {name for _, _, name in sqlgen.VOCABULARIES}
        assert all("sas_value_allowed(" in definition for definition in found.values()), found
        for app, model, name in sqlgen.VOCABULARIES:
            _, _, values = sqlgen.vocabulary(app, model, name)
            cursor.execute(
                "SELECT bool_and(sas_value_allowed(%s, v)), sas_value_allowed(%s, 'no-such-value') "
                "FROM unnest(%s::text[]) v",
                [name, name, values],
            )
            assert cursor.fetchone() == (True, False), name
    chain("c", n=1)
    job = job_submit(workflow="c", input={}).job
    with _refused("event_kind_valid"), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO scheduler_event (job_id, kind, from_status, to_status, source, reason, data, "
            "created_at) VALUES (%s, 'no_such_kind', '', '', 'test', '', '{}', now())",
            [job.pk],
        )
    with _refused("attempt_kind_valid"):
        Attempt.objects.filter(step__job=job).update(kind="no_such_kind")
    with _refused("step_kind_valid"):
        Step.objects.filter(job=job).update(kind="no_such_kind")


# --- installed, stamped, refused when it differs --------------------------------------------------


@pytest.mark.sqlite
@pytest.mark.django_db
def test_a_migrated_database_holds_exactly_the_files() -> None:
    assert dbcode.drift(connection) == []


@postgresql
@pytest.mark.django_db
def test_no_function_of_the_service_has_a_second_overload() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT proname, count(*) FROM pg_proc WHERE proname LIKE 'sas\\_%%' GROUP BY proname")
        counts = dict(cursor.fetchall())
    assert counts == {source.name: 1 for source in dbcode.sources("postgresql")}


@contextmanager
def _rolled_back() -> Iterator[None]:
    """A savepoint rolled back at the end of the block, whatever the block did."""
    try:
        with transaction.atomic():
            yield
            raise _Rollback
    except _Rollback:
        pass


@contextmanager
def _function_replaced(name: str, text: str) -> Iterator[None]:
    """Replace one function's text inside a savepoint that is rolled back."""
    with _rolled_back():
        with connection.cursor() as cursor:
            cursor.execute(text)
        yield


class _Rollback(Exception):
    pass


@postgresql
@pytest.mark.django_db
def test_the_check_and_readyz_refuse_a_database_whose_function_differs_from_its_file(
    settings: Any,
) -> None:
    source = dbcode.source("scheduler", "sas_move_allowed")
    changed = source.text.replace("'step:pending>dispatched',", "")
    with _function_replaced("sas_move_allowed", changed):
        with pytest.raises(SystemCheckError, match=r"sas\.E010.*sas_move_allowed differs"):
            call_command("check", databases=["default"])
        answer = Client().get("/readyz")
        assert answer.status_code == 503
        assert "the database code differs from its files" in answer.json()["reasons"]
    call_command("check", databases=["default"])  # as installed again


@postgresql
@pytest.mark.django_db
def test_a_function_left_without_a_file_is_reported() -> None:
    extra = "CREATE FUNCTION sas_left_behind() RETURNS int LANGUAGE sql AS 'SELECT 1'"
    with _function_replaced("sas_left_behind", extra):
        assert dbcode.drift(connection) == ["function sas_left_behind() has no source file"]


@postgresql
@pytest.mark.django_db
def test_readyz_accepts_the_next_releases_code_but_not_a_later_one_nor_a_hand_edit() -> None:
    """A rolling deploy: the next release's migrate replaces the code under this release's
    processes, which stay ready; the release after that, or a hand edit, is refused."""
    this = dbcode.sources("postgresql")

    def release(tag: str) -> list[dbcode.Source]:
        changed = [
            dbcode.Source(s.app, s.path, s.name, f"-- {tag}\n{s.text}") if s.name == "sas_move_allowed" else s
            for s in this
        ]
        added = dbcode.Source(
            "scheduler",
            this[0].path,
            "sas_added",
            f"CREATE FUNCTION sas_added() RETURNS int LANGUAGE sql AS 'SELECT 1'; -- {tag}",
        )
        return [added, *changed]

    with _rolled_back():
        assert dbcode._pg_install(connection, release("next"))
        assert dbcode._pg_drift(connection, this, lenient=True) == []
        strict = dbcode._pg_drift(connection, this)
        assert "function sas_move_allowed differs from its file" in " ".join(strict)
        assert "function sas_added() has no source file" in strict
        assert Client().get("/readyz").json()["checks"]["database_code"] == "ok"
        assert dbcode._pg_install(connection, release("after next"))
        assert dbcode._pg_drift(connection, this, lenient=True) == [
            "function sas_move_allowed differs from its file scheduler/sql/postgresql/sas_move_allowed.sql",
            "function sas_added() has no source file",  # two releases old by now
        ]
        assert dbcode._pg_install(connection, release("next"))
        with connection.cursor() as cursor:  # a hand edit keeps the comment, not the definition
            cursor.execute(release("edited")[1 + [s.name for s in this].index("sas_move_allowed")].text)
        assert dbcode._pg_drift(connection, this, lenient=True) != []
        assert Client().get("/readyz").status_code == 503


@pytest.mark.sqlite
@pytest.mark.django_db
def test_migrate_installs_nothing_when_the_database_matches() -> None:
    assert dbcode.install(connection) == []


@pytest.mark.sqlite
@pytest.mark.django_db(transaction=True)
def test_migrate_with_nothing_to_apply_drops_and_installs_no_database_code() -> None:
    """A start that runs `migrate` (compose, an init container) leaves the code as it is."""
    out = io.StringIO()
    with CaptureQueriesContext(connection) as queries:
        call_command("migrate", "--noinput", stdout=out)
    assert "Installed the database code" not in out.getvalue()
    changes = [q["sql"] for q in queries if re.match(r"\s*(DROP|CREATE|COMMENT)\b", q["sql"], re.IGNORECASE)]
    assert changes == []
    assert dbcode.drift(connection) == []


@postgresql
@pytest.mark.django_db(transaction=True)
def test_two_migrates_at_once_take_turns_under_one_lock() -> None:
    """Each pod's init container runs `migrate` at a release: the second waits for the first."""
    server = os.environ["DATABASE_URL"].rsplit("/", 1)[0]
    url = f"{server}/{connection.settings_dict['NAME']}"
    with psycopg.connect(url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(hashtext('sas_migrate'))")
        process = subprocess.Popen(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": url},
        )
        try:
            waiting = False
            for _ in range(600):  # until the other process waits on the lock (at most 60 s)
                waiting = bool(
                    holder.execute(
                        "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                        " AND objid = hashtext('sas_migrate')::oid"
                    ).fetchone()
                )
                if waiting or process.poll() is not None:
                    break
                time.sleep(0.1)
            assert waiting, "the second migrate did not wait for the lock"
            assert process.poll() is None
        finally:
            holder.execute("SELECT pg_advisory_unlock(hashtext('sas_migrate'))")
        assert process.wait(timeout=120) == 0


@postgresql
@pytest.mark.slow
def test_upgrading_a_database_of_the_previous_release_equals_migrating_an_empty_one(tmp_path: Path) -> None:
    """The previous release's database (pg_dump of a database migrated on it, in tests/fixtures)
    and an empty one, both migrated with this code, hold the same functions and triggers."""
    server = os.environ["DATABASE_URL"].rsplit("/", 1)[0]
    psql = Path(os.environ.get("SAS_PG_BINDIR", "/usr/lib/postgresql/15/bin")) / "psql"
    names = {"upgraded": f"sas_upgrade_{os.getpid()}", "fresh": f"sas_fresh_{os.getpid()}"}
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        for name in names.values():
            admin.execute(f"DROP DATABASE IF EXISTS {name}")
            admin.execute(f"CREATE DATABASE {name}")
    try:
        dump = subprocess.run(["gzip", "-dc", str(FIXTURE)], check=True, capture_output=True).stdout
        subprocess.run(
            [str(psql), "-q", "-v", "ON_ERROR_STOP=1", f"{server}/{names['upgraded']}"],
            input=dump,
            check=True,
            capture_output=True,
        )
        definitions = {}
        for role, name in names.items():
            env = {**os.environ, "DATABASE_URL": f"{server}/{name}"}
            subprocess.run(
                [sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True
            )
            with psycopg.connect(f"{server}/{name}") as conn:
                definitions[role] = conn.execute(
                    """
                    SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid),
                           obj_description(p.oid, 'pg_proc')
                    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                    WHERE n.nspname = 'public' AND p.proname LIKE 'sas\\_%%'
                    UNION ALL
                    SELECT t.tgname || ' ON ' || t.tgrelid::regclass::text, pg_get_triggerdef(t.oid), ''
                    FROM pg_trigger t WHERE NOT t.tgisinternal AND t.tgparentid = 0
                    ORDER BY 1
                    """
                ).fetchall()
        assert definitions["upgraded"] == definitions["fresh"]
        assert len(definitions["fresh"]) >= len(dbcode.sources("postgresql"))
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            for name in names.values():
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@postgresql
@pytest.mark.django_db
def test_the_previous_releases_positional_call_of_sas_submit_still_works() -> None:
    """A rolling deploy: a process of the previous release calls with 14 positional arguments."""
    chain("c", n=1)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sas_submit(%s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [*REQUIRED, *PREVIOUS],
        )
        job_id = cursor.fetchone()[0]
        # The required parameters alone, by name: the later ones take their defaults.
        cursor.execute(
            "SELECT sas_submit(p_workflow => 'c', p_input => '{}', p_submitter => NULL, p_key => NULL,"
            " p_hash => 'h', p_source => 'test', p_queue_key => 'default',"
            " p_task_func => 'scheduler.tasks.run_attempt', p_task_floor => 60, p_notify => false)"
        )
        assert cursor.fetchone()[0] is not None
    assert Job.objects.get(pk=job_id).status == JobStatus.RUNNING


# --- the state machines, for every writer ---------------------------------------------------------


def _table_without(*moves: tuple[str, str, str]) -> str:
    """sas_move_allowed's text with some moves left out of its table."""
    text = sqlgen.pg_move_allowed()
    for machine, frm, to in moves:
        line = f"        '{machine}:{frm}>{to}',\n"
        assert line in text or line.rstrip(",\n") in text, (machine, frm, to)
        text = text.replace(line, "").replace(f",\n        '{machine}:{frm}>{to}'\n", "\n")
    return text


@contextmanager
def _refused(pattern: str) -> Iterator[None]:
    """The block's write is refused by the database (and rolled back)."""
    with pytest.raises(IntegrityError, match=pattern), transaction.atomic():
        yield


@postgresql
@pytest.mark.django_db
def test_a_status_write_outside_the_table_fails_for_plain_sql() -> None:
    chain("c", n=1)
    job = job_submit(workflow="c", input={}).job
    with _refused(r'step scheduler_step cannot go from "dispatched" to "pending"'):
        Step.objects.filter(job=job).update(status=StepStatus.PENDING)
    with _refused(r"job scheduler_job cannot go"):
        Job.objects.filter(pk=job.pk).update(status=JobStatus.PENDING)
    Attempt.objects.filter(step__job=job).update(outcome=Outcome.SUCCEEDED)  # in flight -> an outcome
    with _refused(r'attempt scheduler_attempt cannot go from "succeeded" to "no_answer"'):
        Attempt.objects.filter(step__job=job).update(outcome=Outcome.NO_ANSWER)


@postgresql
@pytest.mark.django_db
def test_a_move_the_database_table_lacks_fails_when_the_unit_of_work_makes_it(settings: Any) -> None:
    settings.SAS_FAST_PATH = False  # submission through the Python services and their unit of work
    chain("c", n=1)
    with _function_replaced("sas_move_allowed", _table_without(("step", "pending", "dispatched"))):
        with _refused(r'"pending" to "dispatched"'):
            job_submit(workflow="c", input={})
        assert not Job.objects.exists()
    assert Step.objects.get(job=job_submit(workflow="c", input={}).job).status == StepStatus.DISPATCHED


@postgresql
@pytest.mark.django_db
def test_a_move_the_database_table_lacks_fails_when_the_hot_path_function_makes_it() -> None:
    chain("c", n=1)
    job = job_submit(workflow="c", input={}).job
    one = Step.objects.get(job=job)
    assert one.status == StepStatus.DISPATCHED  # by sas_submit's dispatch
    success = CallResult(outcome=Outcome.SUCCEEDED, output={})
    table = _table_without(("step", "dispatched", "succeeded"))
    with _function_replaced("sas_move_allowed", table), _refused(r'"dispatched" to "succeeded"'):
        hotpath.record_outcome(one.pk, number=one.attempt, result=success, source="test")


@postgresql
@pytest.mark.django_db
def test_a_move_the_database_table_lacks_is_refused_when_the_set_wise_scan_makes_it(
    settings: Any, supervise: Supervise
) -> None:
    settings.SAS_FAST_PATH = True
    make_policy("patient", backoff_initial_seconds=30, backoff_max_seconds=60, max_attempts=4)
    make_workflow("w", step("a", policy="patient"))
    job = job_submit(workflow="w", input={}).job
    steps = Step.objects.filter(job=job, status="dispatched")
    OrmQ.objects.filter(pk__in=Attempt.objects.filter(step__in=steps).values("queue_row")).delete()
    Attempt.objects.filter(step__in=steps).update(deadline=F("deadline") - dt.timedelta(hours=1))
    steps.update(deadline=F("deadline") - dt.timedelta(hours=1))
    table = _table_without(("step", "unknown", "retry_wait"))
    with _function_replaced("sas_move_allowed", table):
        # Refused: the batch rolls back, the step alone is refused again, and it is set aside
        # for an operator (scheduler.services.quarantine) rather than stopping the scan.
        assert supervise().quarantined == 1
        held = Step.objects.get(job=job)
        assert held.status == StepStatus.HELD
        assert re.search(r'"unknown" to "retry_wait"', held.status_reason), held.status_reason
    supervise()  # with the real table (and no quarantine: it went with the block), the retry
    assert Step.objects.get(job=job).status == StepStatus.RETRY_WAIT


@pytest.mark.sqlite
@pytest.mark.django_db
def test_a_status_write_outside_the_table_fails_on_sqlite_too() -> None:
    if is_postgresql():
        pytest.skip("the SQLite triggers")
    chain("c", n=1)
    job = job_submit(workflow="c", input={}).job
    with _refused(r"a move not in scheduler\.transitions"):
        Step.objects.filter(job=job).update(status=StepStatus.COMPENSATED)


# --- reactions to events, whoever wrote them --------------------------------------------------------


def _alerts_for(job: Job) -> list[str]:
    from scheduler.models import Delivery

    return sorted(d.payload["event"] for d in Delivery.objects.filter(payload__job_id=str(job.pk)))


@pytest.mark.sqlite
@pytest.mark.django_db
def test_an_alerting_event_written_by_the_unit_of_work_is_alerted(
    drain: Any, fake_remote: Any, supervise: Supervise
) -> None:
    subscription_create(name="ops", actor=None, email="ops@example.com", kinds=["step_needs_attention"])
    make_policy("hold", max_attempts=1, on_exhausted="hold")
    make_workflow("held", step("only", policy="hold"))
    fake_remote.script("only", Outcome.TRANSIENT_FAILURE)
    job = job_submit(workflow="held", input={}).job
    drain()
    supervise()
    assert Event.objects.filter(job=job, kind=EventKind.STEP_HELD).exists()
    assert reactions_handle() >= 1
    assert _alerts_for(job) == ["step_held"]


@pytest.mark.sqlite
@pytest.mark.django_db
def test_an_alerting_event_written_by_sql_is_alerted_as_one_written_by_python() -> None:
    subscription_create(name="ops", actor=None, email="ops@example.com", kinds=["job_failed"])
    chain("c", n=1)
    job = job_submit(workflow="c", input={}).job
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO scheduler_event"
            " (job_id, kind, from_status, to_status, source, reason, data, created_at)"
            " VALUES (%s, 'job_failed', 'running', 'failed', 'sql', 'by hand', '{}', %s)",
            [job.pk if is_postgresql() else job.pk.hex, dt.datetime.now(dt.UTC)],
        )
    assert EventReaction.objects.filter(kind="job_failed").count() == 1
    assert reactions_handle() == 1
    assert _alerts_for(job) == ["job_failed"]
    assert reactions_handle() == 0  # taken once


@postgresql
@pytest.mark.django_db
def test_the_reaction_queue_takes_every_kind_an_alert_is_made_of() -> None:
    from scheduler.outbox import REACTION_KINDS
    from supervisor.alerts import EVENT_ALERTS

    assert set(EVENT_ALERTS) <= REACTION_KINDS


@postgresql
@pytest.mark.django_db
def test_events_written_by_the_functions_and_the_set_wise_scan_reach_the_reaction_queue_by_kind(
    settings: Any, supervise: Supervise
) -> None:
    """The hot path's and the set-wise scan's events pass the same trigger: with their kinds made
    reacting (the generated trigger, for a test's transaction), they are queued like any other."""
    settings.SAS_FAST_PATH = True
    make_policy("patient", backoff_initial_seconds=30, backoff_max_seconds=60, max_attempts=4)
    make_workflow("w", step("a", policy="patient"))
    text = sqlgen.pg_event_reactions().replace(
        "'job_compensated', 'job_failed', 'step_held'",
        "'job_submitted', 'step_dispatched', 'step_timed_out', 'retry_scheduled'",
    )
    drop = "DROP TRIGGER scheduler_event_reactions ON scheduler_event;\n"
    text = text.replace("CREATE TRIGGER", drop + "CREATE TRIGGER")
    with _function_replaced("sas_event_reactions", text):
        job = job_submit(workflow="w", input={}).job  # sas_submit and sas_dispatch_ready
        assert sorted(EventReaction.objects.filter(job_id=job.pk).values_list("kind", flat=True)) == [
            "job_submitted",
            "step_dispatched",
        ]
        steps = Step.objects.filter(job=job)
        OrmQ.objects.all().delete()
        Attempt.objects.filter(step__in=steps).update(deadline=F("deadline") - dt.timedelta(hours=1))
        steps.update(deadline=F("deadline") - dt.timedelta(hours=1))
        supervise()  # the set-wise path
        assert sorted(EventReaction.objects.filter(job_id=job.pk).values_list("kind", flat=True)) == [
            "job_submitted",
            "retry_scheduled",
            "step_dispatched",
            "step_timed_out",
        ]


@postgresql
@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/done",
        "HTTPS://Hooks.Example.COM./done?x=1",
        "http://h.example.com:8080",
        "http://h.example.com:/x",
        "http://h.example.com:0443/x",
        "http://user:pw@h.example.com:81/x",
        "http://a@b@h.example.com/x",
        "http://[::1]:9000/x",
        "https://[2001:DB8::1]/x",
        "http://203.0.113.7#frag",
        "ftp://h.example.com/x",
        "http:///x",
        "http://h.example.com:99999/x",
        "http://h.example.com:ab/x",
        "ops@example.com",
        "",
    ],
)
def test_the_database_names_a_urls_receiver_as_python_does(url: str) -> None:
    from scheduler.outbox import receiver_of

    with connection.cursor() as cursor:
        cursor.execute("SELECT sas_url_receiver(%s)", [url])
        assert cursor.fetchone()[0] == receiver_of(url)
