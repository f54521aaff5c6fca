"""History retention: settled jobs archived (gzip JSON Lines) an hour after they settle, archived
again after any later event, deleted in batches once the retention period has passed, loaded back
from the archive, answered 410 by the API and the console; the daily chore in the supervisor loop;
and on PostgreSQL the event table partitioned by month, converted from a populated table."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from agents.fake import FakeRemote
from sas_project import dbcode
from scheduler import partitions
from scheduler.archive import (
    LocalArchiveStorage,
    archive_restore,
    archive_storage,
    day_folder,
    day_objects,
    gzip_member,
    read_archive,
    read_object,
    settle_day,
)
from scheduler.models import (
    ArchivedJob,
    Attempt,
    Delivery,
    DeliveryKind,
    DeliveryStatus,
    Event,
    EventKind,
    FiringStatus,
    Job,
    JobStatus,
    Outcome,
    PruneRun,
    Schedule,
    ScheduleFiring,
    Signal,
    Step,
)
from scheduler.schedules import schedule_create
from scheduler.services import job_submit
from scheduler.services.retention import archive_settled, history_prune, history_prune_if_due
from scheduler.services.wakeups import signal_send
from tests.api.support import V1, client_for, make_user
from tests.factories import chain, make_policy, make_workflow, step

pytestmark = pytest.mark.django_db

DAYS = 30
TABLES: tuple[tuple[str, Any, str], ...] = (
    ("job", Job, "id"),
    ("step", Step, "job_id"),
    ("attempt", Attempt, "step__job_id"),
    ("event", Event, "job_id"),
    ("delivery", Delivery, "job_id"),
    ("signal", Signal, "job_id"),
)


@pytest.fixture
def archive_dir(tmp_path: Path, settings: Any) -> Path:
    settings.SAS_ARCHIVE_DIR = tmp_path / "archive"
    settings.SAS_HISTORY_DAYS = DAYS
    return tmp_path / "archive"


def settled_jobs(drain: Callable[[], int], n: int, *, age_days: float, submitter: Any = None) -> list[Job]:
    """`n` jobs of a 2-step chain run to success, settled `age_days` ago."""
    chain(n=2)
    jobs = [job_submit(workflow="chain", input={"n": i}, submitter=submitter).job for i in range(n)]
    drain()
    settled = timezone.now() - dt.timedelta(days=age_days)
    Job.objects.filter(pk__in=[j.pk for j in jobs]).update(finished_at=settled)
    for job in jobs:
        job.refresh_from_db()
        assert job.status == JobStatus.SUCCEEDED
    return jobs


def day_of(job: Job) -> dt.date:
    return settle_day(job.finished_at or timezone.now())


def stored(*names: str) -> list[dict[str, Any]]:
    """Every record of these archive objects, in the order named."""
    store = archive_storage()
    return [record for name in names for record in read_object(store, name)]


def rows_of(job_ids: list[Any]) -> dict[str, list[dict[str, Any]]]:
    """Every row of these jobs, table by table, in id order."""
    return {
        name: list(model.objects.filter(**{f"{path}__in": job_ids}).order_by("pk").values())
        for name, model, path in TABLES
    }


# --- retention ------------------------------------------------------------------------------------


@pytest.mark.sqlite
def test_prune_archives_jobs_settled_before_the_retention_period_and_deletes_their_rows(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    old = settled_jobs(drain, 3, age_days=DAYS + 1)
    recent = settled_jobs(drain, 2, age_days=DAYS - 1)
    old_ids = [j.pk for j in old]
    before = rows_of(old_ids)

    report = history_prune(source="test")

    # Every settled job is archived (the recent ones ahead of their deletion); only the old go.
    assert report.jobs == 3 and report.archived == 5 and report.done
    assert all(not model.objects.filter(**{f"{path}__in": old_ids}).exists() for _, model, path in TABLES)
    assert Job.objects.filter(pk__in=[j.pk for j in recent], archived_at__isnull=False).count() == 2
    assert report.rows == {
        "job": 3,
        "step": len(before["step"]),
        "attempt": len(before["attempt"]),
        "event": len(before["event"]),
        "delivery": 0,
        "signal": 0,
    }
    # One new object per settle day, in that day's folder, named by the ArchivedJob rows.
    (name,) = day_objects(archive_storage(), day_of(old[0]))
    (recent_name,) = day_objects(archive_storage(), day_of(recent[0]))
    assert name.startswith(f"{day_folder(day_of(old[0]))}/") and name.endswith(".jsonl.gz")
    assert report.files == {name, recent_name} and (archive_dir / name).is_file()
    archived = {a.job_id: a.archive for a in ArchivedJob.objects.all()}
    assert archived == dict.fromkeys(old_ids, name) | {j.pk: recent_name for j in recent}
    run = PruneRun.objects.get()
    assert run.source == "test" and run.finished_at is not None and run.jobs == 3 and run.archived == 5
    assert run.rows == dict(report.rows) and run.files == sorted({name, recent_name}) and run.error == ""


@pytest.mark.sqlite
def test_the_archive_is_gzip_json_lines_one_job_per_line_with_all_its_rows(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    (job,) = settled_jobs(drain, 1, age_days=DAYS + 1)
    before = rows_of([job.pk])
    report = history_prune(source="test")
    (name,) = report.files
    with gzip.open(archive_dir / name, "rt") as stream:  # any gzip reader will do
        lines = stream.read().splitlines()
    (record,) = (json.loads(line) for line in lines)
    assert record["format"] == "sas-job-archive/1"
    assert record["job"]["id"] == str(job.pk) and record["job"]["status"] == "succeeded"
    assert [s["id"] for s in record["steps"]] == [s["id"] for s in before["step"]]
    assert [a["id"] for a in record["attempts"]] == [a["id"] for a in before["attempt"]]
    assert [e["kind"] for e in record["events"]] == [e["kind"] for e in before["event"]]
    assert record["deliveries"] == []


@pytest.mark.sqlite
def test_an_archived_job_loads_back_with_every_row_as_it_was(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    jobs = settled_jobs(drain, 3, age_days=DAYS + 2)
    ids = [j.pk for j in jobs]
    before = rows_of(ids)
    report = history_prune(source="test")
    assert not Job.objects.filter(pk__in=ids).exists()

    records = [r for name in sorted(report.files) for r in read_archive(archive_dir / name)]
    loaded = archive_restore(records)

    assert sorted(loaded) == sorted(str(i) for i in ids)
    assert rows_of(ids) == before
    assert not ArchivedJob.objects.filter(job_id__in=ids).exists()
    assert archive_restore(records) == []  # already there: loaded once


@pytest.mark.sqlite
def test_a_job_with_signals_is_archived_with_them_and_loads_back(
    drain: Callable[[], int], fake_remote: Any, archive_dir: Path
) -> None:
    make_workflow("order", step("a"), {"name": "go", "kind": "signal", "signal": "go", "depends_on": ["a"]})
    sam = make_user("sam")
    job = job_submit(workflow="order", input={}).job
    signal_send(job_id=job.pk, name="go", payload={"x": 1}, sender=sam, idempotency_key="k")
    signal_send(job_id=job.pk, name="go", payload={"x": 2}, sender=sam)  # never consumed
    drain()
    Job.objects.filter(pk=job.pk).update(finished_at=timezone.now() - dt.timedelta(days=DAYS + 1))
    before = rows_of([job.pk])
    assert len(before["signal"]) == 2
    report = history_prune(source="test")
    assert report.rows["signal"] == 2 and not Signal.objects.filter(job_id=job.pk).exists()
    records = [r for name in sorted(report.files) for r in read_archive(archive_dir / name)]
    assert archive_restore(records) == [str(job.pk)]
    assert rows_of([job.pk]) == before


@pytest.mark.sqlite
def test_dry_run_reports_what_would_go_and_changes_nothing(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    jobs = settled_jobs(drain, 2, age_days=DAYS + 1)
    before = rows_of([j.pk for j in jobs])
    report = history_prune(source="test", dry_run=True)
    assert report.jobs == 2 and report.rows["event"] == len(before["event"])
    assert report.files == {f"{day_folder(day_of(jobs[0]))}/"}
    assert rows_of([j.pk for j in jobs]) == before
    assert not archive_dir.exists() and not PruneRun.objects.exists() and not ArchivedJob.objects.exists()


# --- archived ahead of deletion ------------------------------------------------------------------


def late_event(job: Job) -> Event:
    """An event on a settled job (a late reply, say) that the archive does not have yet."""
    return Event.objects.create(job=job, kind=EventKind.LATE_SUCCESS, source="agent", reason="late reply")


@pytest.mark.sqlite
def test_settled_jobs_are_archived_an_hour_after_they_settle_and_only_deleted_at_the_cutoff(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    (fresh,) = settled_jobs(drain, 1, age_days=0.5 / 24)
    (older,) = settled_jobs(drain, 1, age_days=2 / 24)

    assert archive_settled() == 1  # the one settled over an hour ago
    older.refresh_from_db()
    fresh.refresh_from_db()
    assert older.archived_at is not None and fresh.archived_at is None
    name = ArchivedJob.objects.get().archive  # where it will be once deleted
    assert day_objects(archive_storage(), day_of(older)) == [name]
    assert [r["job"]["id"] for r in read_archive(archive_dir / name)] == [str(older.pk)]
    assert archive_settled() == 0  # archived once

    # Thirty days on, the run finds it archived: it only deletes.
    later = timezone.now() + dt.timedelta(days=DAYS, hours=1)
    report = history_prune(source="test", now=later)
    assert not Job.objects.filter(pk=older.pk).exists() and report.jobs == 2
    assert report.archived == 1  # only the fresh one, written now, before its deletion
    # Each once, each in an object of its own settle day.
    files = set(ArchivedJob.objects.values_list("archive", flat=True))
    assert len(files) == 2 and name in files
    ids = [r["job"]["id"] for r in stored(*sorted(files))]
    assert sorted(ids) == sorted([str(older.pk), str(fresh.pk)])


@pytest.mark.sqlite
@pytest.mark.django_db(transaction=True)  # the trigger acts when the event commits
def test_an_event_after_archiving_has_the_job_archived_again_with_that_event(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    (job,) = settled_jobs(drain, 1, age_days=DAYS + 1)
    history_prune(source="test", archive_only=True)
    job.refresh_from_db()
    assert job.archived_at is not None

    event = late_event(job)
    job.refresh_from_db()
    assert job.archived_at is None

    report = history_prune(source="test")
    assert report.archived == 1 and report.jobs == 1
    # Two objects of its day: the first write and the second, each named once.
    names = day_objects(archive_storage(), day_of(job))
    assert len(names) == 2 and set(report.files) == {names[1]}
    assert ArchivedJob.objects.get().archive == names[1]
    first, last = stored(*names)
    assert event.pk not in [e["id"] for e in first["events"]]
    assert event.pk in [e["id"] for e in last["events"]]
    # Its latest record is loaded, whichever object is read first (two hosts' clocks may differ).
    assert archive_restore([last, first]) == [str(job.pk)]
    assert Event.objects.filter(pk=event.pk).exists()


@pytest.mark.sqlite
@pytest.mark.django_db(transaction=True)  # the trigger acts when the event commits
def test_an_event_naming_a_job_that_does_not_exist_is_refused() -> None:
    from django.db import IntegrityError, transaction

    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    with pytest.raises(IntegrityError), transaction.atomic():
        Event.objects.create(job_id=uuid.uuid4(), kind=EventKind.LATE_SUCCESS, source="test")
    assert Event.objects.filter(job_id=job.pk).count() >= 1
    assert not Event.objects.exclude(job_id=job.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_an_event_being_written_while_its_job_is_archived_has_it_archived_again(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    """The race the trigger closes: a writer inserts an event, the archiver (which cannot see it
    yet) archives the job, then the writer commits. Its commit clears `archived_at`."""
    import threading

    from django.db import transaction

    (job,) = settled_jobs(drain, 1, age_days=DAYS + 1)
    inserted, archived = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with transaction.atomic():
                late_event(job)
                inserted.set()
                assert archived.wait(30)
        except BaseException as exc:  # noqa: BLE001 (reported by the main thread)
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=writer)
    thread.start()
    assert inserted.wait(30)
    assert history_prune(source="test", archive_only=True).archived == 1
    archived.set()
    thread.join(30)
    assert not errors
    job.refresh_from_db()
    assert job.archived_at is None  # archived without the late event: not deletable as it is

    report = history_prune(source="test")
    assert report.jobs == 1 and report.archived == 1
    records = [r for name in sorted(report.files) for r in read_archive(archive_dir / name)]
    assert [e["kind"] for e in records[-1]["events"]][-1] == EventKind.LATE_SUCCESS


@pytest.mark.sqlite
def test_the_chore_archives_between_its_daily_runs(drain: Callable[[], int], archive_dir: Path) -> None:
    assert history_prune_if_due(source="supervisor:a") is not None  # today's run
    (job,) = settled_jobs(drain, 1, age_days=2 / 24)
    assert history_prune_if_due(source="supervisor:a") is None  # no run, but the archive keeps up
    job.refresh_from_db()
    assert job.archived_at is not None and ArchivedJob.objects.filter(job_id=job.pk).exists()


@pytest.mark.sqlite
def test_prune_leaves_live_jobs_and_jobs_settled_within_the_period(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    make_workflow("held", step("s1", path="agents.builtin.noop"))
    live = job_submit(workflow="held", input={}).job  # dispatched, never run
    Job.objects.filter(pk=live.pk).update(created_at=timezone.now() - dt.timedelta(days=90))
    settled_jobs(drain, 1, age_days=DAYS - 1)
    assert history_prune(source="test").jobs == 0
    assert Job.objects.count() == 2


@pytest.mark.sqlite
def test_a_job_whose_callback_is_still_to_be_sent_stays_until_it_is_sent(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    (job,) = settled_jobs(drain, 1, age_days=DAYS + 1)
    Delivery.objects.create(
        kind=DeliveryKind.CALLBACK, key=f"{job.pk}:succeeded", target="https://hooks.example.com", job=job
    )
    assert history_prune(source="test").jobs == 0
    Delivery.objects.filter(job=job).update(status=DeliveryStatus.DELIVERED)
    assert history_prune(source="test").jobs == 1
    assert not Job.objects.filter(pk=job.pk).exists()


@pytest.mark.sqlite
def test_the_last_job_of_a_schedule_is_archived_and_the_schedule_kept(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    (job,) = settled_jobs(drain, 1, age_days=DAYS + 1)
    schedule = schedule_create(
        name="nightly", actor=make_user("schedule-owner", "submitters"), workflow="chain", cron="0 3 * * *"
    )
    Schedule.objects.filter(pk=schedule.pk).update(last_job=job)
    assert history_prune(source="test").jobs == 1
    assert Schedule.objects.get(pk=schedule.pk).last_job is None


@pytest.mark.sqlite
def test_prune_deletes_old_firings_that_wait_for_nothing_and_keeps_buffered_ones(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    settled_jobs(drain, 1, age_days=DAYS + 1)
    schedule = schedule_create(
        name="nightly", actor=make_user("schedule-owner", "submitters"), workflow="chain", cron="0 3 * * *"
    )
    old, recent = timezone.now() - dt.timedelta(days=DAYS + 2), timezone.now() - dt.timedelta(days=1)
    for n, status in enumerate(FiringStatus):
        ScheduleFiring.objects.create(schedule=schedule, fire_at=old + dt.timedelta(minutes=n), status=status)
        ScheduleFiring.objects.create(
            schedule=schedule, fire_at=recent + dt.timedelta(minutes=n), status=status
        )
    report = history_prune(source="test")
    assert report.rows["schedulefiring"] == 2
    left = set(ScheduleFiring.objects.values_list("fire_at", "status"))
    assert left == {(old, FiringStatus.WAITING)} | {
        (recent + dt.timedelta(minutes=n), status) for n, status in enumerate(FiringStatus)
    }


@pytest.mark.sqlite
def test_batches_go_oldest_first_and_every_batch_is_archived(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    jobs = settled_jobs(drain, 5, age_days=DAYS + 1)
    report = history_prune(source="test", batch_size=2)
    assert report.jobs == 5
    # An object per batch: 2 + 2 + 1 jobs, every one of them in the day's objects.
    names = day_objects(archive_storage(), day_of(jobs[0]))
    assert len(names) == 3 and set(report.files) == set(names)
    assert sorted(r["job"]["id"] for r in stored(*names)) == sorted(str(j.pk) for j in jobs)


@pytest.mark.sqlite
def test_retention_zero_days_keeps_everything(
    drain: Callable[[], int], archive_dir: Path, settings: Any
) -> None:
    settings.SAS_HISTORY_DAYS = 0
    settled_jobs(drain, 1, age_days=400)
    assert history_prune(source="test").jobs == 0
    assert history_prune_if_due(source="test") is None
    assert Job.objects.count() == 1


def test_the_original_of_a_rerun_stays_until_its_rerun_has_gone(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any], archive_dir: Path
) -> None:
    from supervisor.services import job_rerun

    make_policy("once", max_attempts=1, on_exhausted="fail")
    make_workflow("three", step("s1"), step("s2", "s1", policy="once"))
    fake_remote.script("s2", Outcome.BUSINESS_FAILURE)
    original = job_submit(workflow="three", input={}).job
    drain()
    supervise()
    drain()
    rerun = job_rerun(actor=make_user("olga", "operators"), job_id=original.pk, from_step="s2")
    drain()
    supervise()
    drain()
    old = timezone.now() - dt.timedelta(days=DAYS + 5)
    Job.objects.filter(pk=original.pk).update(finished_at=old)
    reused = Step.objects.get(job=rerun, reused_from__isnull=False)

    # The rerun is recent: the original it points at (rerun_of, reused_from) stays.
    assert history_prune(source="test").jobs == 0
    assert Job.objects.filter(pk=original.pk).exists()
    # Each pointer's rule holds on its own (they are not constraints): the reused step alone
    # keeps the original too.
    Job.objects.filter(pk=rerun.pk).update(rerun_of=None)
    assert history_prune(source="test").jobs == 0
    assert Job.objects.filter(pk=original.pk).exists()

    # Once the rerun is due too, both go: the rerun first, then the original it freed.
    Job.objects.filter(pk=rerun.pk).update(finished_at=old + dt.timedelta(days=1))
    report = history_prune(source="test")
    assert report.jobs == 2
    assert not Job.objects.filter(pk__in=[original.pk, rerun.pk]).exists()
    assert not Step.objects.filter(pk=reused.pk).exists()


def sub_workflow_job(drain: Callable[[], int], fake_remote: FakeRemote) -> tuple[Job, Job]:
    """A parent still running (its close step's call failed, awaiting a retry) whose child job
    succeeded DAYS + 5 days ago."""
    make_workflow("refund", step("credit"))
    make_workflow(
        "order",
        {"name": "refund", "kind": "workflow", "workflow": "refund"},
        step("close", "refund"),
    )
    fake_remote.script("close", Outcome.TRANSIENT_FAILURE)
    parent = job_submit(workflow="order", input={}).job
    drain()
    child = Job.objects.get(parent_job=parent)
    Job.objects.filter(pk=child.pk).update(finished_at=timezone.now() - dt.timedelta(days=DAYS + 5))
    parent.refresh_from_db()
    child.refresh_from_db()
    assert parent.status == JobStatus.RUNNING and child.status == JobStatus.SUCCEEDED
    return parent, child


@pytest.mark.sqlite
def test_retention_keeps_a_settled_child_while_its_parent_is_live(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any], archive_dir: Path
) -> None:
    parent, child = sub_workflow_job(drain, fake_remote)

    # The parent may still compensate, and so undo its child: neither archived nor deleted.
    report = history_prune(source="test")
    assert report.jobs == 0 and report.archived == 0
    child.refresh_from_db()
    assert child.archived_at is None

    # The parent succeeds, within the period: the child is archived, and still kept.
    supervise()
    drain()
    parent.refresh_from_db()
    assert parent.status == JobStatus.SUCCEEDED
    Job.objects.filter(pk=parent.pk).update(finished_at=timezone.now() - dt.timedelta(days=DAYS - 1))
    report = history_prune(source="test")
    assert report.jobs == 0 and report.archived == 2
    assert Job.objects.filter(pk=child.pk).exists()


@pytest.mark.sqlite
def test_a_parent_stays_until_its_children_have_gone(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any], archive_dir: Path
) -> None:
    parent, child = sub_workflow_job(drain, fake_remote)
    supervise()
    drain()
    Job.objects.filter(pk=parent.pk).update(finished_at=timezone.now() - dt.timedelta(days=DAYS + 9))
    # The child cannot go yet (a callback of its own is still to be sent): its parent stays too.
    Delivery.objects.create(
        kind=DeliveryKind.CALLBACK, key=f"{child.pk}:succeeded", target="https://hooks.example.com", job=child
    )
    assert history_prune(source="test").jobs == 0
    assert Job.objects.filter(pk=parent.pk).exists()

    # Then both go, the child first (the parent, settled earlier, waits for the next batch).
    Delivery.objects.filter(job=child).update(status=DeliveryStatus.DELIVERED)
    assert history_prune(source="test", batch_size=1).jobs == 2
    assert not Job.objects.filter(pk__in=[parent.pk, child.pk]).exists()


# --- reading an archived job -------------------------------------------------------------------------


@pytest.mark.sqlite
def test_the_api_answers_an_archived_job_410_naming_the_archive_file(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    alice = make_user("alice", "submitters")
    (job,) = settled_jobs(drain, 1, age_days=DAYS + 1, submitter=alice)
    history_prune(source="test")
    (name,) = day_objects(archive_storage(), day_of(job))

    for url in (f"{V1}/jobs/{job.pk}/", f"{V1}/jobs/{job.pk}/events/"):
        response = client_for(alice).get(url)
        assert response.status_code == 410
        body = response.json()
        assert body["code"] == "archived" and body["archive"] == name
        assert f"job {job.pk} was archived" in body["detail"] and name in body["detail"]
    assert client_for(make_user("olga", "operators")).get(f"{V1}/jobs/{job.pk}/").status_code == 410


@pytest.mark.sqlite
def test_an_operator_action_on_an_archived_job_is_a_410_naming_the_archive_file(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    (job,) = settled_jobs(drain, 1, age_days=DAYS + 1)
    history_prune(source="test")
    (name,) = day_objects(archive_storage(), day_of(job))
    ops = client_for(make_user("olga", "operators"))
    for action, body in (("rerun", {"from_step": "s1"}), ("compensate", {}), ("cancel", {})):
        response = ops.post(f"{V1}/jobs/{job.pk}/{action}/", body, format="json")
        assert response.status_code == 410, (action, response.json())
        assert response.json()["archive"] == name
    assert not Job.objects.filter(pk=job.pk).exists()


@pytest.mark.sqlite
def test_another_users_archived_job_is_still_a_404(drain: Callable[[], int], archive_dir: Path) -> None:
    (job,) = settled_jobs(drain, 1, age_days=DAYS + 1, submitter=make_user("alice", "submitters"))
    history_prune(source="test")
    response = client_for(make_user("bob", "submitters")).get(f"{V1}/jobs/{job.pk}/")
    assert response.status_code == 404
    assert client_for(make_user("bob2", "submitters")).get(f"{V1}/jobs/{uuid.uuid4()}/").status_code == 404


@pytest.mark.sqlite
def test_the_console_answers_an_archived_job_410_naming_the_archive_file(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    (job,) = settled_jobs(drain, 1, age_days=DAYS + 1)
    history_prune(source="test")
    client = Client()
    client.force_login(make_user("olga", "operators"))
    response = client.get(f"/ops/jobs/{job.pk}/")
    assert response.status_code == 410
    assert ArchivedJob.objects.get().archive in response.content.decode()
    assert client.get(f"/ops/jobs/{uuid.uuid4()}/").status_code == 404


# --- the archive file ---------------------------------------------------------------------------------


def test_a_days_file_of_several_members_written_earlier_reads_as_one(tmp_path: Path) -> None:
    path = tmp_path / "jobs-2026-10-01.jsonl.gz"
    record = {"format": "sas-job-archive/1", "job": {"id": str(uuid.uuid4())}}
    second = {**record, "job": {"id": "b"}}
    path.write_bytes(gzip_member([json.dumps(record)]) + gzip_member([json.dumps(second)]))
    assert [r["job"]["id"] for r in read_archive(path)] == [record["job"]["id"], "b"]


def test_a_member_cut_short_by_a_crash_is_skipped_and_reading_resumes_at_the_next(tmp_path: Path) -> None:
    path = tmp_path / "jobs-2026-10-01.jsonl.gz"
    line = json.dumps({"format": "sas-job-archive/1", "job": {"id": "a"}})
    cut = gzip.compress(b"x" * 1000 + b"\n")[:-12]  # a batch killed mid-write
    path.write_bytes(gzip_member([line]) + cut + gzip_member([line.replace('"a"', '"b"')]))
    assert [r["job"]["id"] for r in read_archive(path)] == ["a", "b"]


def test_a_write_that_fails_leaves_no_object_and_no_partial_file(tmp_path: Path) -> None:
    from django.core.files.base import File

    store = LocalArchiveStorage(location=tmp_path)

    class Failing(File):  # type: ignore[type-arg]
        def chunks(self, chunk_size: int | None = None) -> Any:
            yield b"half an object"
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        store.save("jobs-2026-10-01/a.jsonl.gz", Failing(None, name="a"))
    assert not store.exists("jobs-2026-10-01/a.jsonl.gz")
    assert list((tmp_path / "jobs-2026-10-01").iterdir()) == []


def test_the_local_store_never_writes_over_an_object(tmp_path: Path) -> None:
    from django.core.files.base import ContentFile

    store = LocalArchiveStorage(location=tmp_path)
    (tmp_path / "jobs-2026-10-01").mkdir()
    (tmp_path / "jobs-2026-10-01" / "a.jsonl.gz").write_bytes(b"first")
    with pytest.raises(FileExistsError):
        store._save("jobs-2026-10-01/a.jsonl.gz", ContentFile(b"second"))
    assert (tmp_path / "jobs-2026-10-01" / "a.jsonl.gz").read_bytes() == b"first"
    assert store.listdir("jobs-2026-10-01") == ([], ["a.jsonl.gz"])  # no partial left, none listed


@pytest.mark.sqlite
def test_a_day_reads_its_objects_and_the_file_written_by_earlier_versions(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    jobs = settled_jobs(drain, 3, age_days=DAYS + 1)
    history_prune(source="test", archive_only=True, batch_size=2)
    records = stored(*day_objects(archive_storage(), day_of(jobs[0])))
    # Earlier versions appended a day's batches to one file beside the day's folder.
    legacy = archive_dir / f"{day_folder(day_of(jobs[0]))}.jsonl.gz"
    legacy.write_bytes(gzip_member([json.dumps(records[0])]))
    names = day_objects(archive_storage(), day_of(jobs[0]))
    assert names[0] == legacy.name and len(names) == 3
    expected = sorted([str(j.pk) for j in jobs] + [records[0]["job"]["id"]])  # that one twice
    assert sorted(r["job"]["id"] for r in stored(*names)) == expected


# --- the daily chore -----------------------------------------------------------------------------------


@pytest.mark.sqlite
def test_the_daily_chore_runs_once_a_day(drain: Callable[[], int], archive_dir: Path) -> None:
    settled_jobs(drain, 1, age_days=DAYS + 1)
    first = history_prune_if_due(source="supervisor:a")
    assert first is not None and first.jobs == 1 and first.done
    settled_jobs(drain, 1, age_days=DAYS + 1)
    assert history_prune_if_due(source="supervisor:b") is None  # ran within the day
    tomorrow = timezone.now() + dt.timedelta(days=1, minutes=1)
    second = history_prune_if_due(source="supervisor:b", now=tomorrow)
    assert second is not None and second.jobs == 1
    assert list(PruneRun.objects.order_by("started_at").values_list("source", flat=True)) == [
        "supervisor:a",
        "supervisor:b",
    ]


@pytest.mark.sqlite
def test_the_daily_chore_works_off_a_backlog_a_slice_at_a_time(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    settled_jobs(drain, 3, age_days=DAYS + 1)
    report = history_prune(source="supervisor:a", batch_size=1, budget=0)
    assert report.archived == 1 and report.jobs == 0 and not report.done  # one batch per slice
    run = PruneRun.objects.get()
    assert run.finished_at is None and run.archived == 1
    later = history_prune_if_due(source="supervisor:a", budget=60)  # continues the open run
    assert later is not None and later.done and later.archived == 3 and later.jobs == 3
    run.refresh_from_db()
    assert run.finished_at is not None and run.jobs == 3 and PruneRun.objects.count() == 1


@pytest.mark.sqlite
@pytest.mark.django_db(transaction=True)  # the loop closes and reopens its connection
def test_the_supervisor_loop_prunes_when_it_holds_the_lease(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    from supervisor.loop import run_loop

    settled_jobs(drain, 2, age_days=DAYS + 1)
    passes = iter([False, True])
    run_loop(holder="loop-1", should_stop=lambda: next(passes, True), interval=0)
    assert Job.objects.count() == 0 and ArchivedJob.objects.count() == 2
    assert PruneRun.objects.get().source == "supervisor:loop-1"


# --- PostgreSQL: the partitioned event table -----------------------------------------------------------


def _postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("partitions are PostgreSQL's")


def test_events_are_partitioned_by_month_with_partitions_ahead_and_a_default() -> None:
    _postgresql()
    names = partitions.event_partitions()
    now = timezone.now()
    this_month = f"scheduler_event_y{now:%Y}m{now:%m}"
    assert this_month in names and "scheduler_event_default" in names
    months = [n for n in names if partitions.month_end(n) is not None]
    assert months.index(this_month) + partitions.MONTHS_AHEAD < len(months)
    assert partitions.ensure() == []  # already there


# Committed batches, as in service: a drop in the deleting transaction would find its foreign-key
# checks (deferred to the commit) still pending on the partition.
@pytest.mark.django_db(transaction=True)
def test_prune_drops_the_month_partitions_it_emptied(drain: Callable[[], int], archive_dir: Path) -> None:
    _postgresql()
    jobs = settled_jobs(drain, 2, age_days=120)
    ancient = timezone.now() - dt.timedelta(days=120)
    with connection.cursor() as cursor:
        cursor.execute("SELECT sas_event_partitions_ensure(%s, %s)", [ancient, ancient])
    Event.objects.filter(job_id__in=[j.pk for j in jobs]).update(created_at=ancient)
    month = f"scheduler_event_y{ancient:%Y}m{ancient:%m}"
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT count(*) FROM "{month}"')  # noqa: S608
        assert cursor.fetchone()[0] > 0

    this_month = timezone.now()  # read before the prune: the month may end while it runs
    report = history_prune(source="test")

    assert report.jobs == 2 and month in report.partitions_dropped
    assert month not in partitions.event_partitions()
    assert f"scheduler_event_y{this_month:%Y}m{this_month:%m}" in partitions.event_partitions()
    assert PruneRun.objects.get().partitions_dropped == report.partitions_dropped


def test_a_month_still_holding_a_live_jobs_events_is_kept(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    _postgresql()
    settled_jobs(drain, 1, age_days=120)
    ancient = timezone.now() - dt.timedelta(days=120)
    with connection.cursor() as cursor:
        cursor.execute("SELECT sas_event_partitions_ensure(%s, %s)", [ancient, ancient])
    Event.objects.update(created_at=ancient)
    Job.objects.update(finished_at=timezone.now())  # settled today: not due
    month = f"scheduler_event_y{ancient:%Y}m{ancient:%m}"
    # (Empty months other tests left behind may go; this one holds a job's events.)
    assert month not in history_prune(source="test").partitions_dropped
    assert month in partitions.event_partitions()


@pytest.mark.django_db(transaction=True)
def test_an_existing_event_table_migrates_to_partitions_without_losing_a_row(
    drain: Callable[[], int],
) -> None:
    _postgresql()
    from django.db.migrations.executor import MigrationExecutor

    before_partitioning = [("scheduler", "0013_history_retention")]
    # Jobs are made with today's models, then the schema goes back to before partitioning.
    settled_jobs(drain, 20, age_days=1)
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    executor.migrate(before_partitioning)
    try:
        assert not partitions.partitioned()
        # History over several months, as a database in service for a while holds it.
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE scheduler_event SET created_at = created_at - (id % 5) * interval '40 days'"
            )
            cursor.execute("SELECT * FROM scheduler_event ORDER BY id")
            rows_before = cursor.fetchall()
            cursor.execute("SELECT count(DISTINCT date_trunc('month', created_at)) FROM scheduler_event")
            months = cursor.fetchone()[0]
        assert len(rows_before) > 100 and months >= 4

        executor = MigrationExecutor(connection)
        executor.migrate(leaves)
        dbcode.install(connection)  # as `manage.py migrate` does after the migrations

        assert partitions.partitioned()
        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM scheduler_event ORDER BY id")
            assert cursor.fetchall() == rows_before
            cursor.execute("SELECT count(*) FROM scheduler_event_default")
            assert cursor.fetchone()[0] == 0  # every row found its month
        assert len([n for n in partitions.event_partitions() if partitions.month_end(n)]) >= months
        # New events take ids after the copied ones, and the hot path still writes its history.
        job = job_submit(workflow="chain", input={"after": True}).job
        drain()
        newest = Event.objects.filter(job=job).order_by("id").first()
        assert newest is not None and newest.pk > rows_before[-1][0]
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(leaves)
        dbcode.install(connection)
        assert dbcode.drift(connection) == []  # the later tests of this worker meet the whole code


# --- the commands ------------------------------------------------------------------------------------


@pytest.mark.sqlite
def test_history_prune_dry_run_prints_what_would_go_and_changes_nothing(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    from io import StringIO

    from django.core.management import call_command

    settled_jobs(drain, 2, age_days=DAYS + 1)
    out = StringIO()
    call_command("history_prune", "--dry-run", stdout=out)
    assert "would delete 2 jobs" in out.getvalue()
    assert Job.objects.count() == 2 and not archive_dir.exists()


@pytest.mark.sqlite
def test_history_prune_then_history_restore_brings_the_jobs_back(
    drain: Callable[[], int], archive_dir: Path
) -> None:
    from io import StringIO

    from django.core.management import CommandError, call_command

    jobs = settled_jobs(drain, 2, age_days=DAYS + 1)
    before = rows_of([j.pk for j in jobs])
    out = StringIO()
    call_command("history_prune", stdout=out)
    assert "archived 2 jobs" in out.getvalue() and Job.objects.count() == 0
    (name,) = day_objects(archive_storage(), day_of(jobs[0]))
    # An object as the API's 410 names it, a job of it.
    call_command("history_restore", name, "--job", str(jobs[0].pk), stdout=out)
    assert list(Job.objects.values_list("pk", flat=True)) == [jobs[0].pk]
    # A file on this host.
    call_command("history_restore", str(archive_dir / name), stdout=out)
    assert rows_of([j.pk for j in jobs]) == before
    # A whole day: every object of it (the jobs are back already: nothing loads twice).
    out = StringIO()
    call_command("history_restore", "--day", f"{day_of(jobs[0]):%Y-%m-%d}", stdout=out)
    assert "0 jobs loaded back from 1 archive objects" in out.getvalue()
    with pytest.raises(CommandError, match="no archive object of 1999-01-01"):
        call_command("history_restore", "--day", "1999-01-01")
    with pytest.raises(CommandError, match="not a date"):
        call_command("history_restore", "--day", "yesterday")
    with pytest.raises(CommandError, match="no archive object or file"):
        call_command("history_restore", "jobs-1999-01-01/nothing.jsonl.gz")
