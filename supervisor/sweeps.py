"""The scan's sweeps of jobs (supervisor.scan runs them each pass, after the lease check and
before the remediation of due steps): whole-job deadlines, waits whose time came, sub-workflow
steps, jobs waiting for their concurrency key or at their debounce or throttle, cancels sent to
remotes. Each item in its own transaction; one whose handling raises for its own sake is
quarantined (scheduler.services.quarantine) and the others go on."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from sas_project.conf import sas_settings
from scheduler.models import Job, QuarantineLoop
from scheduler.services import JOB_FORWARD, job_start_compensation, lock_job
from scheduler.services.cancels import cancel_resend, cancels_due
from scheduler.services.children import child_advance, children_due
from scheduler.services.flow import StartFailed, jobs_release, waiting_keys
from scheduler.services.gates import gates_due, job_pass
from scheduler.services.quarantine import LoopStopped, Quarantiner, is_item_fault, not_quarantined
from scheduler.services.wakeups import waits_due, waits_due_steps, waits_expire
from scheduler.unit import Unit, db_now, unit_of_work
from supervisor.lease import LeaseGrant, lease_progressed
from supervisor.report import ScanReport, fence, quarantined, source_of, tally

logger = logging.getLogger("supervisor.scan")


def sweep_job_deadlines(grant: LeaseGrant, report: ScanReport, size: int) -> None:
    """Jobs past their whole-job deadline stop and compensate what ran: in one transaction, or,
    when that raises, one job at a time, quarantining the job that raises again."""
    jobs: list[Any] = []
    before = report.snapshot()
    try:
        with unit_of_work() as unit:
            fence(grant)
            jobs += _deadlines_due(unit.now, size)
            for job_id in jobs:
                _deadline_pass(unit, job_id, grant, report)
            if jobs:
                lease_progressed(grant)
        return
    except Exception as exc:
        if not jobs or not is_item_fault(exc):
            raise
        report.restore(before)
    quarantine = Quarantiner(QuarantineLoop.JOB_DEADLINES, source=source_of(grant))
    for job_id in jobs:
        item = report.snapshot()
        try:
            with unit_of_work() as unit:
                fence(grant)
                if lock_job(unit, job_id=job_id, skip_locked=True) is not None:
                    _deadline_pass(unit, job_id, grant, report)
        except Exception as exc:
            if not is_item_fault(exc):
                raise
            report.restore(item)
            quarantine.job(job_id, exc)
            quarantined(report)


def _deadlines_due(now: Any, size: int) -> list[Any]:
    return list(
        Job.objects.filter(status__in=sorted(JOB_FORWARD), deadline__lte=now)
        .filter(not_quarantined(QuarantineLoop.JOB_DEADLINES, now=now))
        .select_for_update(skip_locked=True)
        .values_list("pk", flat=True)[:size]
    )


def _deadline_pass(unit: Unit, job_id: Any, grant: LeaseGrant, report: ScanReport) -> None:
    state = lock_job(unit, job_id=job_id)
    if state.job.status not in JOB_FORWARD or state.job.deadline is None or state.job.deadline > unit.now:
        return
    job_start_compensation(
        unit,
        state=state,
        reason_code="deadline",
        source=source_of(grant),
        reason="the job's deadline passed",
    )
    report.remediated += 1
    tally(report, "job_deadline")


def sweep_waits(grant: LeaseGrant, report: ScanReport, size: int) -> None:
    """Waits whose time came: timers fire, timeouts apply their on_timeout. In batches of jobs
    locked together (skipping those another transaction holds: the next scan takes them); a batch
    that raises is done again one job at a time, quarantining the job that raises again."""
    tried: set[Any] = set()
    quarantine = Quarantiner(QuarantineLoop.WAITS, source=source_of(grant))
    while True:
        job_ids: list[Any] = []
        try:
            with unit_of_work() as unit:
                # The fence only when there is something to do: no transaction of its own per scan.
                job_ids += waits_due(unit.now, limit=size, exclude=tried)
                if not job_ids:
                    return
                fence(grant)
                done = waits_expire(unit, job_ids=job_ids, source=source_of(grant))
                lease_progressed(grant)
        except Exception as exc:
            if not job_ids or not is_item_fault(exc):
                raise
            done = {}
            for job_id in job_ids:
                try:
                    with unit_of_work() as unit:
                        fence(grant)
                        ended = waits_expire(unit, job_ids=[job_id], source=source_of(grant))
                    for what, count in ended.items():
                        done[what] = done.get(what, 0) + count
                except Exception as item_exc:
                    if not is_item_fault(item_exc):
                        raise
                    quarantine.job(job_id, item_exc, steps=waits_due_steps(job_id, now=db_now()))
                    quarantined(report)
        tried.update(job_ids)
        for what, count in done.items():
            report.examined += count
            report.remediated += count
            report.decisions[what] = report.decisions.get(what, 0) + count
        if len(job_ids) < size:
            return


def sweep_children(grant: LeaseGrant, report: ScanReport, size: int) -> None:
    """Sub-workflow steps whose task was lost with its worker: start the child they lack, settle
    them from the child that settled, or let a compensating parent read its child's compensation
    (ended, or held). A step another transaction holds is left for the
    next scan; the grace (one interval) leaves the tasks the time to do it themselves. Each step
    is its own transaction: one that raises is quarantined, and the rest go on."""
    with unit_of_work() as unit:
        due = children_due(unit.now, grace=dt.timedelta(seconds=sas_settings.supervisor_interval), limit=size)
        if due:
            fence(grant)
    quarantine = Quarantiner(QuarantineLoop.CHILDREN, source=source_of(grant))
    for step_id in due:
        try:
            what = child_advance(step_id, source=source_of(grant), skip_locked=True)
        except Exception as exc:
            if not is_item_fault(exc):
                raise
            quarantine.step(step_id, exc)
            quarantined(report)
            continue
        report.examined += 1
        if what in ("started", "succeeded", "failed", "refused", "held", "compensated", "undoing"):
            report.remediated += 1
            tally(report, f"child_{what}")
    if due:
        with unit_of_work():
            fence(grant)
            lease_progressed(grant)


def sweep_waiting_keys(grant: LeaseGrant, report: ScanReport, size: int) -> None:
    """Jobs waiting for a concurrency key that has room start (a release lost with the process
    that settled the key's holder): each key on its own, each job in its own transaction; a job
    whose start raises is quarantined, and the key's next waiting job goes on."""
    quarantine = Quarantiner(QuarantineLoop.CONCURRENCY, source=source_of(grant))
    for workflow, key in waiting_keys(limit=size):
        started: list[Any] = []
        failed_jobs: set[Any] = set()
        while True:
            try:
                started += jobs_release(workflow, key=key)
            except StartFailed as failed:
                cause = failed.__cause__ or failed
                if not is_item_fault(cause):
                    raise cause from None
                if failed.job_id in failed_jobs:
                    break  # not recorded (over the pass's budget): the next pass tries again
                failed_jobs.add(failed.job_id)
                quarantine.job(failed.job_id, cause)
                quarantined(report)
                continue
            break
        if started:
            report.remediated += len(started)
            report.decisions["key_released"] = report.decisions.get("key_released", 0) + len(started)


def sweep_gates(grant: LeaseGrant, report: ScanReport, size: int) -> None:
    """Waiting jobs whose debounce or throttle opened pass it (scheduler.services.gates): each job
    in its own transaction, earliest first; one whose pass raises is quarantined (by the
    concurrency loop, which starts waiting jobs), and the others go on."""
    tried: set[Any] = set()
    quarantine = Quarantiner(QuarantineLoop.CONCURRENCY, source=source_of(grant))
    while True:
        with unit_of_work() as unit:
            due = gates_due(unit.now, limit=size, exclude=tried)
            if due:
                fence(grant)
        for job_id in due:
            tried.add(job_id)
            try:
                what = job_pass(job_id, source=source_of(grant))
            except Exception as exc:
                if not is_item_fault(exc):
                    raise
                quarantine.job(job_id, exc)
                quarantined(report)
                continue
            if what:
                report.remediated += 1
                tally(report, f"gate_{what}")
        if len(due) < size:
            return


def gates_tick(grant: LeaseGrant) -> ScanReport:
    """The gates' sweep alone, for the lease holder's loop between two scans: a debounced or
    throttled job starts a fraction of a second after its time, not at the next scan."""
    report = ScanReport(acted=True, holder=grant.holder, token=grant.token)
    try:
        sweep_gates(grant, report, sas_settings.scan_batch_size)
    except LoopStopped:
        report.lost_lease = True
    return report


def sweep_cancels(grant: LeaseGrant, report: ScanReport, size: int) -> None:
    """Cancels sent to remotes whose next try is due (a retry's time came, or a try's task was
    lost with its worker): their task again, or given up once their tries are spent. Each in its
    own transaction; one whose handling raises for its own sake is quarantined (by the remediation
    loop: it is left alone for a while, its job untouched) and the others go on."""
    with unit_of_work() as unit:
        # A cancel quarantined lately is left alone until its due time moves or the retry
        # interval passes.
        keep = not_quarantined(
            QuarantineLoop.REMEDIATION, now=unit.now, field="step__job_id", touched="due_at"
        )
        due = cancels_due(limit=size, keep=keep)
        if not due:
            return
        fence(grant)
    quarantine = Quarantiner(QuarantineLoop.REMEDIATION, source=source_of(grant))
    for cancel_id, job_id in due:
        try:
            what = cancel_resend(cancel_id, job_id=job_id, source=source_of(grant))
        except Exception as exc:
            if not is_item_fault(exc):
                raise
            quarantine.other(f"cancel {cancel_id}", exc, action="skipped", job_id=job_id)
            quarantined(report)
            continue
        if what:
            report.remediated += 1
            tally(report, what)
