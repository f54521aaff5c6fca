"""History retention: settled jobs are archived soon after they settle, and leave the hot tables
SAS_HISTORY_DAYS later.

Two phases, because writing the archive is most of the work (building each job's JSON line
costs more than deleting its rows) and has no reason to wait for the cutoff:

1. **Archive**, continuously: a job settled ARCHIVE_AFTER (an hour) ago or more, with no
   callback still to be sent, is written to the archive (scheduler.archive: a new object per
   batch and settle day, durable before the commit) and marked `archived_at`, with its
   ArchivedJob row (the object it is in). The supervisor does this at its passes, a budgeted
   slice at a time, once a full batch or ARCHIVE_GATHER's worth has gathered, so the archive
   trails the settled jobs by about an hour.
   Any later event on the job (an operator action, a late reply) clears `archived_at` (the
   trigger of migration 0015, at that event's commit), and the job is archived again.
2. **Delete**, daily: a job is due when it is settled before the cutoff, archived (and not
   changed since), has no rerun still in the tables (a rerun's reused steps and `rerun_of` point
   at it: the original stays until its reruns have gone, so no pointer is ever cut), and no
   callback waiting to be sent. Sub-workflows: a child job stays while any job above it (its
   parent, and theirs) is live or settled within the period, since a parent that compensates
   undoes its child; it goes before its parent, which stays until its children have gone (the
   next batch of the same run takes it), so a child never points at a parent that is gone. A
   child is archived only once every job above it has settled. Due jobs go in batches of
   `batch_size`, oldest first, each one short transaction that locks its jobs (`FOR UPDATE SKIP
   LOCKED`: a job an operator is touching is left for the next run, and nothing on the hot path
   ever waits for retention) and deletes their rows (events, attempts, deliveries, steps, the
   job), set-wise.

A write that fails (a full disk) rolls its batch back and makes the supervisor's chore back off
(ARCHIVE_HEALTH: a minute, doubling to an hour) and alert, instead of rebuilding a batch under
row locks at every pass for nothing.

Both phases lock the job rows they work on the same way, and a job an event is being written
for holds a key-share lock on its row until that commits (the trigger), so a job is never
archived or deleted under a writer's feet. A run (`history_prune`) first archives whatever is
not yet archived, then deletes; on PostgreSQL it then creates the event partitions ahead of
need and drops the old ones that pruning has emptied (scheduler.partitions). Every run is
recorded: a PruneRun row (what was archived and deleted, the objects, the partitions) and a log
line.

Restated in SQL (keep both in step; the equivalence tests compare them):
`scheduler/sql/postgresql/sas_event_job_guard.sql`, `scheduler/sql/sqlite/event_job_guard.sql`.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.files.storage import Storage
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.functions import TruncDate
from django.utils import timezone

from sas_project.conf import sas_settings
from sas_project.database import is_postgresql
from scheduler import archive, partitions
from scheduler.models import (
    CANARY_WORKFLOW,
    JOB_SETTLED,
    ArchivedJob,
    Attempt,
    Delivery,
    DeliveryStatus,
    Event,
    FiringStatus,
    Job,
    PruneRun,
    QuarantineLoop,
    RemoteCancel,
    Schedule,
    ScheduleFiring,
    Signal,
    Step,
)
from scheduler.services.quarantine import Quarantiner, error_text, is_item_fault, not_quarantined

logger = logging.getLogger("scheduler.retention")

#: Jobs per transaction: some 25,000 rows, a few tenths of a second of work.
BATCH_SIZE = 2000
#: How long after settling a job is archived: the hour in which late replies and operator
#: reruns usually come, so that few jobs are archived twice.
ARCHIVE_AFTER = dt.timedelta(hours=1)
#: Between the daily runs the chore writes an object only for a full batch, or once the oldest
#: job waiting has waited this much longer than ARCHIVE_AFTER: each write is a new object, and a
#: store of many tiny objects (one per supervisor pass) costs in requests and listings.
ARCHIVE_GATHER = dt.timedelta(minutes=10)
#: How often the supervisor's chore starts a retention run.
DAILY = dt.timedelta(days=1)
#: Seconds of retention work per supervisor loop pass: a large backlog (the first run on an old
#: database) is worked off over many passes, and the scan still runs at every interval.
CHORE_BUDGET = 1.0
#: After a failed archive write (a full disk), the chore waits this long before it tries again,
#: doubling at each failure in a row, at most ARCHIVE_BACKOFF_MAX: each try builds a batch of
#: lines under row locks, for nothing while the disk stays full.
ARCHIVE_BACKOFF_FIRST = dt.timedelta(minutes=1)
ARCHIVE_BACKOFF_MAX = dt.timedelta(hours=1)


class ArchiveUnwritable(Exception):
    """Writing the archive failed (a full or read-only disk, a lost mount): the batch was rolled
    back, nothing was marked archived, and the chore backs off until `retry_at`."""

    def __init__(
        self,
        *,
        error: BaseException,
        location: str,
        failures: int,
        failing_since: dt.datetime,
        retry_at: dt.datetime,
    ) -> None:
        super().__init__(f"the archive in {location} cannot be written: {error}")
        self.error = error
        self.location = location
        self.failures = failures
        self.failing_since = failing_since
        self.retry_at = retry_at


@dataclass
class ArchiveHealth:
    """The archive writes failed in a row, and when the chore may try again. Held by the process
    (the lease holder's loop): a new holder tries once, then backs off the same way."""

    failures: int = 0
    failing_since: dt.datetime | None = None
    retry_at: dt.datetime | None = None

    def backing_off(self, now: dt.datetime) -> bool:
        return self.retry_at is not None and now < self.retry_at

    def failed(self, error: BaseException, location: str) -> ArchiveUnwritable:
        now = timezone.now()
        self.failures += 1
        self.failing_since = self.failing_since or now
        wait = min(ARCHIVE_BACKOFF_FIRST * 2 ** (self.failures - 1), ARCHIVE_BACKOFF_MAX)
        self.retry_at = now + wait
        logger.error(
            "history archive cannot be written (%s failures in a row); archiving again after %s",
            self.failures,
            self.retry_at.isoformat(),
            extra={
                "archive": {
                    "location": location,
                    "error": f"{type(error).__name__}: {error}",
                    "errno": getattr(error, "errno", None),
                    "failures": self.failures,
                    "retry_at": self.retry_at.isoformat(),
                }
            },
        )
        return ArchiveUnwritable(
            error=error,
            location=location,
            failures=self.failures,
            failing_since=self.failing_since,
            retry_at=self.retry_at,
        )

    def written(self) -> None:
        if self.failures:
            logger.info("history archive written again after %s failures", self.failures)
        self.failures, self.failing_since, self.retry_at = 0, None, None


ARCHIVE_HEALTH = ArchiveHealth()


@dataclass
class PruneReport:
    cutoff: dt.datetime
    dry_run: bool
    #: Jobs deleted from the hot tables (with `dry_run`: due for deletion).
    jobs: int = 0
    #: Jobs written to the archive.
    archived: int = 0
    rows: Counter[str] = field(default_factory=Counter)
    files: set[str] = field(default_factory=set)
    partitions_dropped: list[str] = field(default_factory=list)
    partitions_created: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: No due job is left (false: a budgeted run stopped and stays open).
    done: bool = False

    def figures(self) -> dict[str, Any]:
        return {
            "cutoff": self.cutoff.isoformat(),
            "dry_run": self.dry_run,
            "jobs": self.jobs,
            "archived": self.archived,
            "rows": dict(self.rows),
            "files": sorted(self.files),
            "partitions_dropped": self.partitions_dropped,
            "partitions_created": self.partitions_created,
            "seconds": round(self.seconds, 3),
            "done": self.done,
        }


def _no_callback_waiting(jobs: QuerySet[Job]) -> QuerySet[Job]:
    waiting = Delivery.objects.filter(job=OuterRef("pk"), status=DeliveryStatus.PENDING)
    return jobs.exclude(Exists(waiting))


def _above_not_settled(before: dt.datetime | None, depth: int | None = None) -> Exists:
    """A job above this one (its parent, its parent's parent...) is not settled, or (with
    `before`) settled at or after `before`: it may still compensate, and so undo this job
    (scheduler.services.saga). A parent no longer in the tables holds nothing back. Looks as many
    levels up as sub-workflows nest (SAS_MAX_WORKFLOW_DEPTH)."""
    depth = settings.SAS_MAX_WORKFLOW_DEPTH if depth is None else depth
    unsettled = ~Q(status__in=sorted(JOB_SETTLED))
    if before is not None:
        unsettled |= Q(finished_at__gte=before)
    if depth > 1:
        unsettled |= Q(_above_not_settled(before, depth - 1))
    return Exists(Job.objects.filter(pk=OuterRef("parent_job_id")).filter(unsettled))


def due_jobs(cutoff: dt.datetime) -> QuerySet[Job]:
    """Jobs settled before the cutoff that retention may delete once they are archived, oldest
    settled first (served by job_settled_idx)."""
    # The rules of the pointers that are not constraints (scheduler.models, the note above Job).
    live_reruns = Job.objects.filter(rerun_of=OuterRef("pk"))
    reused_elsewhere = Step.objects.filter(reused_from__job=OuterRef("pk")).exclude(job=OuterRef("pk"))
    # Sub-workflows: a child goes only once every job above it is due too, and before its parent,
    # which stays while a child of it is in the tables (the next batch takes it).
    children = Job.objects.filter(parent_job_id=OuterRef("pk"))
    return _no_callback_waiting(
        Job.objects.filter(status__in=JOB_SETTLED, finished_at__lt=cutoff)
        .exclude(Exists(live_reruns))
        .exclude(Exists(reused_elsewhere))
        .exclude(Exists(children))
        .exclude(_above_not_settled(cutoff))
    ).order_by("finished_at", "id")


def unarchived_jobs(settled_before: dt.datetime) -> QuerySet[Job]:
    """Settled jobs to write to the archive, oldest settled first (served by job_unarchived_idx,
    which holds only jobs not yet archived). A child job waits until every job above it has
    settled: until then its parent may still undo it."""
    return _no_callback_waiting(
        Job.objects.filter(status__in=JOB_SETTLED, finished_at__lt=settled_before, archived_at__isnull=True)
        .exclude(workflow__name=CANARY_WORKFLOW)
        .exclude(_above_not_settled(None))
    ).order_by("finished_at", "id")


def canary_jobs_due(settled_before: dt.datetime) -> QuerySet[Job]:
    """The canary's settled jobs, which retention deletes without archiving them as soon as
    they would be archived (they are the service's own, not history anyone keeps), oldest
    first; served by job_unarchived_idx, which holds them until then. Reruns keep them as they
    keep any job."""
    live_reruns = Job.objects.filter(rerun_of=OuterRef("pk"))
    reused_elsewhere = Step.objects.filter(reused_from__job=OuterRef("pk")).exclude(job=OuterRef("pk"))
    return (
        Job.objects.filter(
            status__in=JOB_SETTLED,
            finished_at__lt=settled_before,
            archived_at__isnull=True,
            workflow__name=CANARY_WORKFLOW,
        )
        .exclude(Exists(live_reruns))
        .exclude(Exists(reused_elsewhere))
        .order_by("finished_at", "id")
    )


def history_prune(
    *,
    source: str,
    dry_run: bool = False,
    archive_only: bool = False,
    now: dt.datetime | None = None,
    days: float | None = None,
    batch_size: int = BATCH_SIZE,
    store: Storage | None = None,
    pause: float = 0.0,
    budget: float | None = None,
    run: PruneRun | None = None,
) -> PruneReport:
    """Archive every settled job not yet archived, then delete every due job; returns what was
    done (or, with `dry_run`, what would be deleted, changing nothing). With `archive_only`, only
    the first phase runs. `pause` seconds between batches leave the database to the hot path.

    With a `budget` (seconds), stops after the batch that spends it and leaves the run open
    (`PruneRun.finished_at` null, `report.done` false): `run` continues an open run where it
    stopped, with its cutoff. The run is finished (partitions maintained, `finished_at` set) once
    no due job is left.
    """
    started = time.monotonic()
    now = now or timezone.now()
    days = sas_settings.history_days if days is None else days
    store = store or archive.archive_storage()
    cutoff = run.cutoff if run is not None else now - dt.timedelta(days=days)
    report = PruneReport(cutoff=cutoff, dry_run=dry_run)
    if days <= 0 and run is None:
        return report
    if dry_run:
        return _dry_run(report)
    if run is None:
        run = PruneRun.objects.create(source=source, cutoff=cutoff, started_at=now)
    else:
        report.jobs = run.jobs
        report.archived = run.archived
        report.rows.update(run.rows)
        report.files.update(run.files)
    # Everything due must be archived before it may go, even with a retention under an hour.
    settled_before = max(now - ARCHIVE_AFTER, cutoff)

    def spent() -> bool:
        return budget is not None and time.monotonic() - started >= budget

    try:
        phases: list[Callable[[], int]] = [
            lambda: _delete_canary_batch(report, batch_size=batch_size, settled_before=settled_before),
            lambda: _archive_batch(report, store=store, batch_size=batch_size, settled_before=settled_before),
        ]
        if not archive_only:
            phases.append(lambda: _delete_batch(report, batch_size=batch_size))
        report.done = _run_batches(phases, started=started, budget=budget, pause=pause)
        if report.done and not archive_only:
            report.partitions_created = partitions.ensure()
            report.partitions_dropped = partitions.drop_emptied(before=cutoff)
            if firings := schedule_firings_prune(before=cutoff):
                report.rows["schedulefiring"] += firings
    except Exception as exc:
        PruneRun.objects.filter(pk=run.pk).update(
            error=f"{type(exc).__name__}: {exc}", **_figures(report, finished=True)
        )
        logger.exception("history prune failed after %s jobs", report.jobs, extra={"prune": report.figures()})
        raise
    report.seconds = time.monotonic() - started
    PruneRun.objects.filter(pk=run.pk).update(**_figures(report, finished=report.done))
    logger.info(
        "history prune%s: %s jobs archived to %s, %s jobs deleted (rows %s), partitions dropped %s (%.1fs)",
        "" if report.done else " (continues)",
        report.archived,
        sorted(report.files) or "-",
        report.jobs,
        dict(report.rows),
        report.partitions_dropped or "-",
        report.seconds,
        extra={"prune": report.figures()},
    )
    return report


def _run_batches(
    phases: list[Callable[[], int]], *, started: float, budget: float | None, pause: float
) -> bool:
    """Run each phase's batches until it has nothing left, in order; with a budget, stop after
    the batch that spends it. Returns whether every phase finished."""
    for phase in phases:
        while phase():
            if budget is not None and time.monotonic() - started >= budget:
                return False
            if pause:
                time.sleep(pause)
    return True


def _figures(report: PruneReport, *, finished: bool) -> dict[str, Any]:
    return {
        "finished_at": timezone.now() if finished else None,
        "jobs": report.jobs,
        "archived": report.archived,
        "rows": dict(report.rows),
        "files": sorted(report.files),
        "partitions_dropped": report.partitions_dropped,
    }


def _archive_batch(
    report: PruneReport, *, store: Storage, batch_size: int, settled_before: dt.datetime
) -> int:
    """One transaction: lock a batch of settled jobs not yet archived, write them to the archive
    (one new object per settle day, durable before anything else), mark them archived and record
    their objects. Returns how many were archived.

    A batch that raises with a fault of a job's own (not the storage's: that backs off) is
    archived again one job at a time, each in a savepoint, and the job that raises again is
    quarantined: it stays in the tables, unarchived, and the next runs leave it alone for
    SAS_QUARANTINE_RETRY_SECONDS (scheduler.services.quarantine)."""
    with transaction.atomic():
        jobs: list[tuple[uuid.UUID, dt.datetime, int | None]] = [
            (pk, settled_at, submitter)
            for pk, settled_at, submitter in unarchived_jobs(settled_before)
            .filter(not_quarantined(QuarantineLoop.RETENTION, now=timezone.now()))
            .select_for_update(skip_locked=True, of=("self",))
            .values_list("pk", "finished_at", "submitter_id")[:batch_size]
            if settled_at is not None  # always: settled jobs have finished
        ]
        if not jobs:
            return 0
        try:
            with transaction.atomic():
                names = _archive_jobs(jobs, store)
        except ArchiveUnwritable:
            raise
        except Exception as exc:
            if not is_item_fault(exc):
                raise
            logger.warning(
                "history archive: a batch of %d jobs raised (%s): one by one", len(jobs), error_text(exc)
            )
            names, jobs = _archive_one_by_one(jobs, store)
    report.archived += len(jobs)
    report.files.update(names.values())
    return len(jobs)


def _archive_one_by_one(
    jobs: list[tuple[uuid.UUID, dt.datetime, int | None]], store: Storage
) -> tuple[dict[dt.date, str], list[tuple[uuid.UUID, dt.datetime, int | None]]]:
    quarantine = Quarantiner(QuarantineLoop.RETENTION, source="retention")
    names: dict[dt.date, str] = {}
    archived = []
    for job in jobs:
        try:
            with transaction.atomic():
                names.update(_archive_jobs([job], store))
            archived.append(job)
        except ArchiveUnwritable:
            raise
        except Exception as exc:
            if not is_item_fault(exc):
                raise
            quarantine.other(f"job {job[0]} (archive)", exc, action="not_archived", job_id=job[0])
    return names, archived


def _archive_jobs(
    jobs: list[tuple[uuid.UUID, dt.datetime, int | None]], store: Storage
) -> dict[dt.date, str]:
    """Write these locked jobs to the archive and mark them archived; returns the objects written."""
    ids = [pk for pk, _, _ in jobs]
    lines = archive.job_records(ids)
    by_day: dict[dt.date, list[str]] = {}
    for pk, settled_at, _ in jobs:
        by_day.setdefault(archive.settle_day(settled_at), []).append(lines[pk])
    # Durable before the jobs count as archived: written (fsynced, or stored) first. A batch
    # that fails after some of its objects were written leaves them behind: its jobs are
    # written again, and a restore takes each job's latest record once.
    names: dict[dt.date, str] = {}
    try:
        for day, day_lines in sorted(by_day.items()):
            names[day] = archive.write_object(store, day, day_lines)
    except archive.storage_errors() as exc:
        raise ARCHIVE_HEALTH.failed(exc, archive.describe_storage(store)) from exc
    ARCHIVE_HEALTH.written()
    Job.objects.filter(pk__in=ids).update(archived_at=timezone.now())
    ArchivedJob.objects.bulk_create(
        [
            ArchivedJob(
                job_id=pk,
                submitter_id=submitter,
                settled_at=settled_at,
                archive=names[archive.settle_day(settled_at)],
            )
            for pk, settled_at, submitter in jobs
        ],
        # A job archived again (an event came after it was archived) may have settled anew.
        update_conflicts=True,
        unique_fields=["job_id"],
        update_fields=["submitter_id", "settled_at", "archive", "archived_at"],
    )
    return names


def _delete_canary_batch(report: PruneReport, *, batch_size: int, settled_before: dt.datetime) -> int:
    """One transaction: lock a batch of the canary's settled jobs and delete their rows, unarchived.
    Returns how many jobs went."""
    return _delete_locked(report, canary_jobs_due(settled_before), batch_size=batch_size)


def _delete_batch(report: PruneReport, *, batch_size: int) -> int:
    """One transaction: lock a batch of due, archived jobs and delete their rows. Returns how
    many jobs went."""
    return _delete_locked(
        report, due_jobs(report.cutoff).filter(archived_at__isnull=False), batch_size=batch_size
    )


def _delete_locked(report: PruneReport, jobs: QuerySet[Job], *, batch_size: int) -> int:
    """One transaction: lock up to `batch_size` of `jobs` (skipping those another writer holds)
    and delete their rows. Returns how many jobs went."""
    with transaction.atomic():
        ids = list(
            jobs.select_for_update(skip_locked=True, of=("self",)).values_list("pk", flat=True)[:batch_size]
        )
        if not ids:
            return 0
        report.rows.update(_delete(ids))
    report.jobs += len(ids)
    return len(ids)


# PostgreSQL: the batch's rows in one statement (one round trip, arrays rather than 2,000-item
# IN lists). Every part sees the same snapshot, so the attempts are found through steps that the
# same statement deletes. `= ANY(array)` keeps each part on its index (event_job_idx in every
# partition, attempt_unique_number, the foreign-key indexes).
DELETE_SQL = """
WITH schedules AS (
    UPDATE scheduler_schedule SET last_job_id = NULL WHERE last_job_id = ANY(%(ids)s::uuid[]) RETURNING 1
), events AS (
    DELETE FROM scheduler_event WHERE job_id = ANY(%(ids)s::uuid[]) RETURNING 1
), attempts AS (
    DELETE FROM scheduler_attempt a USING scheduler_step s
    WHERE a.step_id = s.id AND s.job_id = ANY(%(ids)s::uuid[]) RETURNING 1
), cancels AS (
    DELETE FROM scheduler_remotecancel c USING scheduler_step s
    WHERE c.step_id = s.id AND s.job_id = ANY(%(ids)s::uuid[]) RETURNING 1
), deliveries AS (
    DELETE FROM scheduler_delivery WHERE job_id = ANY(%(ids)s::uuid[]) RETURNING 1
), signals AS (
    DELETE FROM scheduler_signal WHERE job_id = ANY(%(ids)s::uuid[]) RETURNING 1
), steps AS (
    DELETE FROM scheduler_step WHERE job_id = ANY(%(ids)s::uuid[]) RETURNING 1
), jobs AS (
    DELETE FROM scheduler_job WHERE id = ANY(%(ids)s::uuid[]) RETURNING 1
)
SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM attempts), (SELECT count(*) FROM deliveries),
       (SELECT count(*) FROM steps), (SELECT count(*) FROM jobs), (SELECT count(*) FROM schedules),
       (SELECT count(*) FROM signals)
"""


def schedule_firings_prune(*, before: dt.datetime) -> int:
    """Delete the schedules' firings of times before `before` that wait for nothing (skipped,
    or started: their job, if any, is kept or archived as any job); a buffered firing waiting
    to start stays whatever its age. Returns how many went."""
    deleted, _ = (
        ScheduleFiring.objects.filter(fire_at__lt=before).exclude(status=FiringStatus.WAITING).delete()
    )
    return int(deleted)


def _delete(ids: list[uuid.UUID]) -> dict[str, int]:
    """Delete the jobs' rows, children first, without loading them (no cascade collection: the
    due-job rules guarantee that nothing outside the batch points at these rows, and the
    foreign keys, checked at commit, would refuse the batch if something did). Events go by
    their job id: they have no constraint to check (migration 0015)."""
    if is_postgresql():
        with connection.cursor() as cursor:
            cursor.execute(DELETE_SQL, {"ids": ids})
            event, attempt, delivery, step, job, _, signal = cursor.fetchone()
        return {
            "event": event,
            "attempt": attempt,
            "delivery": delivery,
            "signal": signal,
            "step": step,
            "job": job,
        }
    using = "default"
    Schedule.objects.filter(last_job_id__in=ids).update(last_job=None)
    # The cancels sent for the jobs' steps go with them (not counted: their answers are attempts).
    RemoteCancel.objects.filter(step__job_id__in=ids)._raw_delete(using)
    return {
        "event": Event.objects.filter(job_id__in=ids)._raw_delete(using),
        "attempt": Attempt.objects.filter(step__job_id__in=ids)._raw_delete(using),
        "delivery": Delivery.objects.filter(job_id__in=ids)._raw_delete(using),
        "signal": Signal.objects.filter(job_id__in=ids)._raw_delete(using),
        "step": Step.objects.filter(job_id__in=ids)._raw_delete(using),
        "job": Job.objects.filter(pk__in=ids)._raw_delete(using),
    }


def _dry_run(report: PruneReport) -> PruneReport:
    """What is due now. A parent whose children are due too counts only in the run that deletes
    them (it becomes due once they have gone, in that run's next batch)."""
    due = due_jobs(report.cutoff)
    ids = due.values("pk")
    report.jobs = due.count()
    report.rows.update(
        {
            "event": Event.objects.filter(job_id__in=ids).count(),
            "attempt": Attempt.objects.filter(step__job_id__in=ids).count(),
            "delivery": Delivery.objects.filter(job_id__in=ids).count(),
            "step": Step.objects.filter(job_id__in=ids).count(),
            "job": report.jobs,
        }
    )
    days = due.order_by().annotate(day=TruncDate("finished_at", tzinfo=dt.UTC)).values_list("day", flat=True)
    report.files.update(f"{archive.day_folder(day)}/" for day in days.distinct() if day is not None)
    report.done = True
    return report


def history_prune_if_due(
    *, source: str, now: dt.datetime | None = None, budget: float = CHORE_BUDGET
) -> PruneReport | None:
    """The supervisor's chore, a slice at a time: continue the open run, or start one when the
    last started a day ago or more, or else archive the jobs settled since the last pass; at
    most `budget` seconds per call, so the supervisor's scan is never held up for long.

    Called only by the lease holder, so one cluster acts at a time; the runs are PruneRun rows,
    so the next holder (another cluster, or after a restart) continues or waits just the same.
    After an archive write failed, does nothing until ARCHIVE_HEALTH's backoff has passed
    (raises ArchiveUnwritable when a write fails).
    """
    now = now or timezone.now()
    if ARCHIVE_HEALTH.backing_off(now):
        return None
    last = PruneRun.objects.filter(dry_run=False).order_by("-started_at").first()
    if last is not None and last.finished_at is None and not last.error:
        return history_prune(source=source, now=now, budget=budget, run=last)
    if sas_settings.history_days <= 0:
        return None
    if last is not None and last.started_at > now - DAILY:
        archive_settled(now=now, budget=budget)
        return None
    return history_prune(source=source, now=now, budget=budget)


def _worth_an_object(settled_before: dt.datetime, batch_size: int) -> bool:
    """A full batch is waiting to be archived, or the oldest job waiting has waited ARCHIVE_GATHER."""
    waiting = unarchived_jobs(settled_before)
    return (
        waiting.filter(finished_at__lt=settled_before - ARCHIVE_GATHER).exists()
        or waiting[batch_size - 1 : batch_size].exists()
    )


def archive_settled(
    *, now: dt.datetime | None = None, budget: float | None = None, batch_size: int = BATCH_SIZE
) -> int:
    """Archive the jobs settled ARCHIVE_AFTER ago or more and not archived yet, within `budget`
    seconds (at least one batch), once a full batch or ARCHIVE_GATHER's worth has gathered;
    returns how many. The supervisor's every pass between the daily
    runs: it keeps the archive an hour behind the settled jobs, so that the daily run finds them
    archived and only deletes. The canary's jobs due meanwhile are deleted, a batch a pass."""
    started = time.monotonic()
    now = now or timezone.now()
    report = PruneReport(cutoff=now, dry_run=False)
    _delete_canary_batch(report, batch_size=batch_size, settled_before=now - ARCHIVE_AFTER)
    if not _worth_an_object(now - ARCHIVE_AFTER, batch_size):
        return 0
    _run_batches(
        [
            lambda: _archive_batch(
                report,
                store=archive.archive_storage(),
                batch_size=batch_size,
                settled_before=now - ARCHIVE_AFTER,
            )
        ],
        started=started,
        budget=budget,
        pause=0.0,
    )
    if report.archived:
        logger.info(
            "history archive: %s jobs archived to %s (%.2fs)",
            report.archived,
            sorted(report.files),
            time.monotonic() - started,
            extra={"archive": {"jobs": report.archived, "files": sorted(report.files)}},
        )
    return report.archived
