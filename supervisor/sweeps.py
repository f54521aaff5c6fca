"""The scan's sweeps of jobs (supervisor.scan runs them each pass, after the lease check and
before the remediation of due steps): whole-job deadlines, waits whose time came, sub-workflow
steps, jobs waiting for their concurrency key or at their debounce or throttle, cancels sent to
remotes, jobs at risk of missing their workflow's SLA. Each item in its own transaction; one
whose handling raises for its own sake is quarantined (scheduler.services.quarantine) and the
others go on (`each_alone`, the one loop that does it for every sweep here)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any, TypeVar

from sas_project.conf import sas_settings
from scheduler.models import Job, QuarantineLoop
from scheduler.services import JOB_FORWARD, job_start_compensation, lock_job
from scheduler.services.cancels import cancel_resend, cancels_due
from scheduler.services.children import child_advance, children_due
from scheduler.services.flow import StartFailed, jobs_release, waiting_keys
from scheduler.services.gates import gates_due, job_pass
from scheduler.services.quarantine import LoopStopped, Quarantiner, is_item_fault, not_quarantined
from scheduler.services.sla import (
    SlaJob,
    at_risk_candidates,
    forward_steps,
    jobs_flag_at_risk,
    step_durations_cached,
)
from scheduler.services.wakeups import waits_due, waits_due_steps, waits_expire
from scheduler.unit import Unit, db_now, unit_of_work
from supervisor import sla
from supervisor.alerts import alert_subscriptions_enabled, job_at_risk_alert
from supervisor.lease import LeaseGrant, lease_progressed
from supervisor.report import ScanReport, fence, quarantined, source_of, tally

logger = logging.getLogger("supervisor.scan")

T = TypeVar("T")
R = TypeVar("R")


def each_alone(
    items: Iterable[T],
    *,
    handle: Callable[[T], R],
    report: ScanReport,
    quarantine: Callable[[T, Exception], object],
) -> Iterator[tuple[T, R]]:
    """Each of `items` handled alone, in order: `handle` runs the item in a transaction of its
    own. When it raises with a fault of the item's (is_item_fault), what it counted in `report`
    is undone, `quarantine` sets the item aside (a Quarantiner's, which names the loop), the
    report counts the quarantine, and the next item goes on; a fault of the service's ends the
    pass. Yields each item handled, with what `handle` returned, before the next is taken."""
    for item in items:
        before = report.snapshot()
        try:
            result = handle(item)
        except Exception as exc:
            if not is_item_fault(exc):
                raise
            report.restore(before)
            quarantine(item, exc)
            quarantined(report)
            continue
        yield item, result


def in_batch(
    grant: LeaseGrant,
    report: ScanReport,
    *,
    read: Callable[[Unit], list[T]],
    batch: Callable[[Unit, list[T]], object],
    alone: Callable[[T], object],
    quarantine: Callable[[T, Exception], object],
) -> list[T]:
    """The items `read` returns, handled by `batch` in one fenced transaction (the common case
    costs one transaction). When it raises with a fault of an item's, what it counted is undone
    and the same items go each alone (each_alone: `alone` in a transaction of its own, the item
    that raises again set aside by `quarantine`), in the same pass; a fault of the service's ends
    the pass. Returns the items read: none, nothing was due (and no fence was taken)."""
    items: list[T] = []
    before = report.snapshot()
    try:
        with unit_of_work() as unit:
            items += read(unit)
            if not items:
                return items
            fence(grant)
            batch(unit, items)
            lease_progressed(grant)
    except Exception as exc:
        if not items or not is_item_fault(exc):
            raise
        report.restore(before)
        for _ in each_alone(items, handle=alone, report=report, quarantine=quarantine):
            pass  # each item counts what it did in `report` itself
    return items


def sweep_job_deadlines(grant: LeaseGrant, report: ScanReport, size: int) -> None:
    """Jobs past their whole-job deadline stop and compensate what ran: in one transaction, or,
    when that raises, one job at a time, quarantining the job that raises again."""
    quarantine = Quarantiner(QuarantineLoop.JOB_DEADLINES, source=source_of(grant))

    def batch(unit: Unit, jobs: list[Any]) -> None:
        for job_id in jobs:
            _deadline_pass(unit, job_id, grant, report)

    def alone(job_id: Any) -> None:
        with unit_of_work() as unit:
            fence(grant)
            if lock_job(unit, job_id=job_id, skip_locked=True) is not None:
                _deadline_pass(unit, job_id, grant, report)

    in_batch(
        grant,
        report,
        read=lambda unit: _deadlines_due(unit.now, size),
        batch=batch,
        alone=alone,
        quarantine=quarantine.job,
    )


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

    def count(done: dict[str, int]) -> None:
        for what, n in done.items():
            report.examined += n
            report.remediated += n
            report.decisions[what] = report.decisions.get(what, 0) + n

    def alone(job_id: Any) -> None:
        with unit_of_work() as unit:
            fence(grant)
            count(waits_expire(unit, job_ids=[job_id], source=source_of(grant)))

    def set_aside(job_id: Any, exc: Exception) -> None:
        quarantine.job(job_id, exc, steps=waits_due_steps(job_id, now=db_now()))

    while True:
        job_ids = in_batch(
            grant,
            report,
            read=lambda unit: waits_due(unit.now, limit=size, exclude=tried),
            batch=lambda unit, job_ids: count(waits_expire(unit, job_ids=job_ids, source=source_of(grant))),
            alone=alone,
            quarantine=set_aside,
        )
        tried.update(job_ids)
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

    def alone(step_id: int) -> str:
        return child_advance(step_id, source=source_of(grant), skip_locked=True)

    for _, what in each_alone(due, handle=alone, report=report, quarantine=quarantine.step):
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

    def alone(job_id: Any) -> str:
        return job_pass(job_id, source=source_of(grant))

    while True:
        with unit_of_work() as unit:
            due = gates_due(unit.now, limit=size, exclude=tried)
            if due:
                fence(grant)
        tried.update(due)
        for _, what in each_alone(due, handle=alone, report=report, quarantine=quarantine.job):
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

    def alone(cancel: tuple[int, Any]) -> str:
        cancel_id, job_id = cancel
        return cancel_resend(cancel_id, job_id=job_id, source=source_of(grant))

    def set_aside(cancel: tuple[int, Any], exc: Exception) -> None:
        cancel_id, job_id = cancel
        quarantine.other(f"cancel {cancel_id}", exc, action="skipped", job_id=job_id)

    for _, what in each_alone(due, handle=alone, report=report, quarantine=set_aside):
        if what:
            report.remediated += 1
            tally(report, what)


def sweep_at_risk(grant: LeaseGrant, report: ScanReport, size: int) -> None:
    """Live jobs of workflows with an SLA that are now at risk of missing it (supervisor.sla) are
    flagged, with their event and alert, in one transaction per batch of jobs, oldest first,
    paging through them all; a batch that raises is done again one job at a time, and the job
    that raises again is quarantined by the at-risk loop: left unflagged and alone for a while,
    its work untouched (a check that stops nothing must not stop the job either)."""
    quarantine = Quarantiner(QuarantineLoop.AT_RISK, source=source_of(grant))

    def alone(job: SlaJob) -> None:
        with unit_of_work() as unit:
            fence(grant)
            _at_risk_pass(unit, [job], grant, report)

    def set_aside(job: SlaJob, exc: Exception) -> None:
        quarantine.other(f"job {job.pk}", exc, action="skipped", job_id=job.pk)

    after: tuple[dt.datetime, Any] | None = None
    while True:
        jobs = in_batch(
            grant,
            report,
            read=partial(_at_risk_candidates, after=after, limit=size),
            batch=lambda unit, jobs: _at_risk_pass(unit, jobs, grant, report),
            alone=alone,
            quarantine=set_aside,
        )
        if len(jobs) < size:
            return
        after = (jobs[-1].created_at, jobs[-1].pk)


def _at_risk_candidates(unit: Unit, *, after: tuple[dt.datetime, Any] | None, limit: int) -> list[SlaJob]:
    return at_risk_candidates(unit.now, after=after, limit=limit)


def _at_risk_pass(unit: Unit, jobs: list[SlaJob], grant: LeaseGrant, report: ScanReport) -> None:
    """Decide each job (supervisor.sla.at_risk_decide) from its forward steps and its workflow's
    measured step durations, then flag those at risk and write their alerts, in `unit`."""
    steps = forward_steps(job.pk for job in jobs)
    measured = step_durations_cached(
        {job.workflow for job in jobs},
        now=unit.now,
        window_hours=sas_settings.sla_window_hours,
        max_age=sas_settings.sla_stats_seconds,
        percentile=sla.PERCENTILE,
    )
    decided: dict[Any, tuple[SlaJob, sla.AtRisk]] = {}
    for job in jobs:
        facts = sla.JobFacts(
            created_at=job.created_at,
            sla_seconds=job.sla_seconds,
            warn_fraction=job.warn_fraction,
            steps=[
                sla.StepFacts(
                    name=row["name"],
                    status=row["status"],
                    depends_on=tuple(str(name) for name in row["definition__depends_on"] or ()),
                    started_at=row["first_dispatched_at"],
                )
                for row in steps.get(job.pk, [])
            ],
        )
        durations = {
            step: sla.Duration(seconds, samples)
            for step, (seconds, samples) in measured.get(job.workflow, {}).items()
        }
        decision = sla.at_risk_decide(facts, durations, unit.now)
        if decision is not None:
            decided[job.pk] = (job, decision)
    flags = {
        pk: (_at_risk_reason(job, decision), _at_risk_data(job, decision))
        for pk, (job, decision) in decided.items()
    }
    flagged = jobs_flag_at_risk(unit, flags=flags, source=source_of(grant))
    enabled = alert_subscriptions_enabled() if flagged else []
    for job_id in flagged:
        job, decision = decided[job_id]
        job_at_risk_alert(
            job_id,
            {"job_id": str(job_id), "workflow": job.workflow, **_at_risk_data(job, decision)},
            enabled=enabled,
        )
        tally(report, f"at_risk_{decision.rule}")


def _at_risk_reason(job: SlaJob, decision: sla.AtRisk) -> str:
    if decision.rule == "clock":
        return f"not finished after {job.warn_fraction:g} of its SLA of {job.sla_seconds:g} s"
    return (
        f"its remaining steps, at their measured durations, end at {decision.projected_finish.isoformat()}, "
        f"after its SLA of {job.sla_seconds:g} s"
    )


def _at_risk_data(job: SlaJob, decision: sla.AtRisk) -> dict[str, Any]:
    """What the event and the alert say of the decision (the alert adds the job and workflow)."""
    return {
        "rule": decision.rule,
        "sla_seconds": job.sla_seconds,
        "warn_fraction": job.warn_fraction,
        "created_at": job.created_at.isoformat(),
        "warn_at": decision.warn_at.isoformat(),
        "due_at": decision.due_at.isoformat(),
        "projected_finish": decision.projected_finish.isoformat(),
    }
