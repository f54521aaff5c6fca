"""History retention: jobs settled more than SAS_HISTORY_DAYS ago leave the hot tables.

A job is due when it is settled (`finished_at` set, status in JOB_SETTLED) before the cutoff, has
no rerun still in the tables (a rerun's reused steps and `rerun_of` point at it: the original
stays until its reruns have gone, so no pointer is ever cut), and no callback still waiting to
be sent. Jobs go in batches of `batch_size` (500), oldest first, each batch one short
transaction that:

1. locks its jobs (`FOR UPDATE SKIP LOCKED`: a job an operator is touching is left for the next
   run, and nothing on the hot path ever waits for retention);
2. writes every job with all its rows to the archive (scheduler.archive), fsynced;
3. deletes the rows (events, attempts, deliveries, steps, the job) and writes one ArchivedJob
   row per job, so that the API and the console answer 410 naming the file.

On PostgreSQL the run then creates the event partitions ahead of need and drops the old ones
that pruning has emptied (scheduler.partitions). Every run is recorded: a PruneRun row (what was
archived and deleted, the files, the partitions) and a log line.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.db.models.functions import TruncDate
from django.utils import timezone

from sas_project.conf import sas_settings
from scheduler import archive, partitions
from scheduler.models import (
    JOB_SETTLED,
    ArchivedJob,
    Attempt,
    Delivery,
    DeliveryStatus,
    Event,
    Job,
    PruneRun,
    Schedule,
    Step,
)

logger = logging.getLogger("scheduler.retention")

#: Jobs per transaction: a few thousand rows, a fraction of a second of work.
BATCH_SIZE = 500
#: How often the supervisor's chore starts a retention run.
DAILY = dt.timedelta(days=1)
#: Seconds of retention work per supervisor loop pass: a large backlog (the first run on an old
#: database) is worked off over many passes, and the scan still runs at every interval.
CHORE_BUDGET = 1.0


@dataclass
class PruneReport:
    cutoff: dt.datetime
    dry_run: bool
    jobs: int = 0
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
            "rows": dict(self.rows),
            "files": sorted(self.files),
            "partitions_dropped": self.partitions_dropped,
            "partitions_created": self.partitions_created,
            "seconds": round(self.seconds, 3),
            "done": self.done,
        }


def due_jobs(cutoff: dt.datetime) -> QuerySet[Job]:
    """Jobs retention may archive, oldest settled first (served by job_settled_idx)."""
    live_reruns = Job.objects.filter(rerun_of=OuterRef("pk"))
    waiting = Delivery.objects.filter(job=OuterRef("pk"), status=DeliveryStatus.PENDING)
    return (
        Job.objects.filter(status__in=JOB_SETTLED, finished_at__lt=cutoff)
        .exclude(Exists(live_reruns))
        .exclude(Exists(waiting))
        .order_by("finished_at", "id")
    )


def history_prune(
    *,
    source: str,
    dry_run: bool = False,
    now: dt.datetime | None = None,
    days: float | None = None,
    batch_size: int = BATCH_SIZE,
    archive_dir: Path | None = None,
    pause: float = 0.0,
    budget: float | None = None,
    run: PruneRun | None = None,
) -> PruneReport:
    """Archive and delete every due job; returns what was done (or, with `dry_run`, what would be,
    changing nothing). `pause` seconds between batches leave the database to the hot path.

    With a `budget` (seconds), stops after the batch that spends it and leaves the run open
    (`PruneRun.finished_at` null, `report.done` false): `run` continues an open run where it
    stopped, with its cutoff. The run is finished (partitions maintained, `finished_at` set) once
    no due job is left.
    """
    started = time.monotonic()
    now = now or timezone.now()
    days = sas_settings.history_days if days is None else days
    directory = archive_dir or sas_settings.archive_dir
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
        report.rows.update(run.rows)
        report.files.update(run.files)
    try:
        while True:
            if not _prune_batch(report, directory=directory, batch_size=batch_size):
                report.done = True
                break
            if budget is not None and time.monotonic() - started >= budget:
                break
            if pause:
                time.sleep(pause)
        if report.done:
            report.partitions_created = partitions.ensure()
            report.partitions_dropped = partitions.drop_emptied(before=cutoff)
    except Exception as exc:
        PruneRun.objects.filter(pk=run.pk).update(
            error=f"{type(exc).__name__}: {exc}", **_figures(report, finished=True)
        )
        logger.exception("history prune failed after %s jobs", report.jobs, extra={"prune": report.figures()})
        raise
    report.seconds = time.monotonic() - started
    PruneRun.objects.filter(pk=run.pk).update(**_figures(report, finished=report.done))
    logger.info(
        "history prune%s: %s jobs archived to %s, rows deleted %s, partitions dropped %s (%.1fs)",
        "" if report.done else " (continues)",
        report.jobs,
        sorted(report.files) or "-",
        dict(report.rows),
        report.partitions_dropped or "-",
        report.seconds,
        extra={"prune": report.figures()},
    )
    return report


def _figures(report: PruneReport, *, finished: bool) -> dict[str, Any]:
    return {
        "finished_at": timezone.now() if finished else None,
        "jobs": report.jobs,
        "rows": dict(report.rows),
        "files": sorted(report.files),
        "partitions_dropped": report.partitions_dropped,
    }


def _prune_batch(report: PruneReport, *, directory: Path, batch_size: int) -> int:
    """One transaction: lock, archive, delete a batch of due jobs. Returns how many went."""
    with transaction.atomic():
        jobs: list[tuple[uuid.UUID, dt.datetime, int | None]] = [
            (pk, settled_at, submitter)
            for pk, settled_at, submitter in due_jobs(report.cutoff)
            .select_for_update(skip_locked=True, of=("self",))
            .values_list("pk", "finished_at", "submitter_id")[:batch_size]
            if settled_at is not None  # always: due jobs are settled
        ]
        if not jobs:
            return 0
        ids = [pk for pk, _, _ in jobs]
        lines = archive.job_records(ids)
        by_file: dict[str, list[str]] = {}
        for pk, settled_at, _ in jobs:
            by_file.setdefault(archive.archive_name(settled_at), []).append(lines[pk])
        # Durable before anything is deleted: the archive is written and fsynced first.
        for name, file_lines in sorted(by_file.items()):
            archive.append_member(directory / name, file_lines)
        report.rows.update(_delete(ids))
        ArchivedJob.objects.bulk_create(
            [
                ArchivedJob(
                    job_id=pk,
                    submitter_id=submitter,
                    settled_at=settled_at,
                    archive=archive.archive_name(settled_at),
                )
                for pk, settled_at, submitter in jobs
            ]
        )
    report.jobs += len(jobs)
    report.files.update(by_file)
    return len(jobs)


def _delete(ids: list[uuid.UUID]) -> dict[str, int]:
    """Delete the jobs' rows, children first, without loading them (no cascade collection: the
    due-job rules guarantee that nothing outside the batch points at these rows, and the
    foreign keys, checked at commit, would refuse the batch if something did)."""
    using = "default"
    Schedule.objects.filter(last_job_id__in=ids).update(last_job=None)
    return {
        "event": Event.objects.filter(job_id__in=ids)._raw_delete(using),
        "attempt": Attempt.objects.filter(step__job_id__in=ids)._raw_delete(using),
        "delivery": Delivery.objects.filter(job_id__in=ids)._raw_delete(using),
        "step": Step.objects.filter(job_id__in=ids)._raw_delete(using),
        "job": Job.objects.filter(pk__in=ids)._raw_delete(using),
    }


def _dry_run(report: PruneReport) -> PruneReport:
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
    report.files.update(f"jobs-{day:%Y-%m-%d}.jsonl.gz" for day in days.distinct() if day is not None)
    report.done = True
    return report


def history_prune_if_due(
    *, source: str, now: dt.datetime | None = None, budget: float = CHORE_BUDGET
) -> PruneReport | None:
    """The supervisor's daily chore, a slice at a time: continue the open run, or start one when
    the last started a day ago or more; at most `budget` seconds per call, so the supervisor's
    scan is never held up for long.

    Called only by the lease holder, so one cluster acts at a time; the runs are PruneRun rows,
    so the next holder (another cluster, or after a restart) continues or waits just the same.
    """
    now = now or timezone.now()
    last = PruneRun.objects.filter(dry_run=False).order_by("-started_at").first()
    if last is not None and last.finished_at is None and not last.error:
        return history_prune(source=source, now=now, budget=budget, run=last)
    if sas_settings.history_days <= 0:
        return None
    if last is not None and last.started_at > now - DAILY:
        return None
    return history_prune(source=source, now=now, budget=budget)
