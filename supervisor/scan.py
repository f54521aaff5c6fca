"""The supervisor scan: find live work that needs a decision, decide by policy, apply.

`scan()` is one idempotent function: every scanner may call it at any time; only the lease
holder acts, and every batch re-checks the lease token in its own transaction. It reads only
live steps through the partial index `step_live_idx`, so its cost follows the amount of live work,
never the size of the history. On PostgreSQL each batch claims its jobs with
`FOR UPDATE ... SKIP LOCKED`: a job an agent is writing to right now is left for the next scan
instead of being waited for.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q

from agents.health import pool_has_healthy_endpoint
from agents.models import AgentPool
from agents.outcome import AttemptKind
from sas_project.conf import sas_settings
from scheduler.faults import fail_remediation
from scheduler.models import STEP_SCANNED, Attempt, Job, JobStatus, QuarantineLoop, Step, StepStatus
from scheduler.services import (
    JOB_FORWARD,
    JobState,
    heartbeats_missed,
    load_locked_jobs,
    step_abandon,
    step_dispatch,
    step_give_up,
    step_keep_waiting,
    step_reconcile,
    step_retry_later,
    step_time_out,
    steps_still_queued,
)
from scheduler.services.quarantine import LoopStopped, Quarantiner, error_text, is_item_fault
from scheduler.transitions import attempts_time_out
from scheduler.unit import Unit, unit_of_work
from supervisor import setwise, sweeps
from supervisor.alerts import endpoint_assess_and_alert
from supervisor.lease import LeaseGrant, lease_acquire, lease_progressed, lease_record_scan
from supervisor.policies import GiveUp, PolicySnapshot, Reconcile, Retry, StepFacts, decide
from supervisor.report import ScanReport, fence, quarantined, source_of, tally

logger = logging.getLogger(__name__)

S = StepStatus
J = JobStatus


def due_condition(now: Any) -> Q:
    """Live steps that need the supervisor now.

    NULL-safe on purpose: a dispatched step with no deadline, or a retry with no `not_before`,
    is due (a missing value must never hide a step from the watchdog).
    """
    return (
        (Q(status=S.DISPATCHED) & (Q(deadline__lte=now) | Q(deadline__isnull=True)))
        | (Q(status=S.RETRY_WAIT) & (Q(not_before__lte=now) | Q(not_before__isnull=True)))
        | Q(status__in=[S.ATTEMPT_FAILED, S.UNKNOWN])
    )


def due_steps(
    now: Any, *, limit: int, exclude: set[int], lock: bool = True, only: int | None = None
) -> list[Step]:
    """Up to `limit` due steps, oldest first, their jobs locked (skipping locked ones); `only`:
    that one step, if it is due."""
    query = (
        Step.objects.filter(status__in=[S.DISPATCHED, S.RETRY_WAIT, S.ATTEMPT_FAILED, S.UNKNOWN])
        .filter(due_condition(now))
        # A paused job's retries wait for its resume; its overdue calls are still detected.
        .exclude(Q(status=S.RETRY_WAIT) & Q(job__paused_at__isnull=False))
        .order_by("updated_at", "id")
    )
    if exclude:
        query = query.exclude(pk__in=exclude)
    if only is not None:
        query = query.filter(pk=only)
    if lock:
        query = query.select_for_update(of=("job",), skip_locked=True)
    return list(query.select_related("job")[:limit])


@dataclass
class ScanCache:
    """What one scan looks up once: pool health, endpoints already assessed."""

    pool_healthy: dict[int, bool] = field(default_factory=dict)
    assessed: set[int] = field(default_factory=set)
    last_attempts: dict[int, dict[str, Any]] = field(default_factory=dict)


@dataclass
class _Due:
    """One scan's pass over its due steps: what each batch and each step's remediation share
    (the lease, the report, the lookups, the random draw, the batch size, and the steps already
    taken, which the pass never claims twice)."""

    grant: LeaseGrant
    report: ScanReport
    draw: Callable[[], float]
    size: int
    cache: ScanCache = field(default_factory=ScanCache)
    seen: set[int] = field(default_factory=set)


def scan(
    *,
    holder: str,
    batch_size: int | None = None,
    draw: Callable[[], float] = random.random,
    max_batches: int | None = None,
    pass_ms: int = 0,
    longest_pass_ms: int = 0,
) -> ScanReport:
    """Take or renew the lease; if held, remediate every due step in bounded batches. The loop's
    pass figures go with the scan's (supervisor.loop)."""
    started = time.monotonic()
    report = ScanReport(acted=False, holder=holder, pass_ms=pass_ms, longest_pass_ms=longest_pass_ms)
    grant = lease_acquire(holder)
    if grant is None:
        return report
    report.acted, report.token = True, grant.token
    size = batch_size or sas_settings.scan_batch_size
    try:
        sweeps.sweep_job_deadlines(grant, report, size)
        sweeps.sweep_waits(grant, report, size)
        sweeps.sweep_children(grant, report, size)
        sweeps.sweep_waiting_keys(grant, report, size)
        sweeps.sweep_gates(grant, report, size)
        sweeps.sweep_cancels(grant, report, size)
        sweeps.sweep_at_risk(grant, report, size)
        _remediate_due(_Due(grant, report, draw, size), max_batches)
    except LoopStopped:
        report.lost_lease = True
    report.duration_ms = int((time.monotonic() - started) * 1000)
    if not report.lost_lease:
        lease_record_scan(grant, report.figures())
    return report


def _remediate_due(due: _Due, max_batches: int | None) -> None:
    """The due steps, in bounded batches, each batch one transaction. A batch that raises with a
    fault of an item's is rolled back and its steps are remediated one by one, each in its own
    transaction; a step that raises again is quarantined (scheduler.services.quarantine)."""
    grant, report = due.grant, due.report
    quarantine = Quarantiner(QuarantineLoop.REMEDIATION, source=source_of(grant))
    while max_batches is None or report.batches < max_batches:
        claimed: list[int] = []
        before = report.snapshot()
        try:
            with unit_of_work() as unit:
                fence(grant)
                fail_remediation()
                report.batches += 1
                if setwise.enabled():
                    _setwise_batch(unit, due, claimed)
                else:
                    steps = due_steps(unit.now, limit=due.size, exclude=due.seen)
                    claimed += [c.pk for c in steps]
                    if steps:
                        # The claim locked the jobs without waiting; their steps are read after that.
                        states = load_locked_jobs([c.job for c in steps])
                        _per_step(unit, due, states, claimed)
                if claimed:
                    lease_progressed(grant)
        except Exception as exc:
            if not claimed or not is_item_fault(exc):
                raise
            report.restore(before)
            report.batches += 1
            logger.warning(
                "scan: a batch of %d steps raised (%s): each step on its own", len(claimed), error_text(exc)
            )
            for step_id in claimed:
                _remediate_alone(due, step_id, quarantine)
        if len(claimed) < due.size:
            break


def _remediate_alone(due: _Due, step_id: int, quarantine: Quarantiner) -> None:
    """One due step in a transaction of its own; quarantined when it raises with a fault of its own."""
    grant, report = due.grant, due.report
    due.seen.add(step_id)
    before = report.snapshot()
    try:
        with unit_of_work() as unit:
            fence(grant)
            steps = due_steps(unit.now, limit=1, exclude=set(), only=step_id)
            if steps:
                states = load_locked_jobs([steps[0].job])
                _per_step(unit, due, states, [step_id])
                lease_progressed(grant)
    except Exception as exc:
        if not is_item_fault(exc):
            raise
        report.restore(before)
        report.examined += 1
        quarantine.step(step_id, exc)
        quarantined(report)


def _setwise_batch(unit: Unit, due: _Due, claimed: list[int]) -> None:
    """One batch on PostgreSQL: the common decisions set-wise, the rest per step. The steps it
    claims go to `claimed` first (what to take one by one if the batch raises)."""
    report, cache = due.report, due.cache
    batch = setwise.due_batch(unit.now, limit=due.size, exclude=due.seen)
    claimed += [row.step_id for row in batch]
    if not batch:
        return
    plan = setwise.plan(
        batch, unit.now, draw=due.draw, pool_healthy=cache.pool_healthy, assessed=cache.assessed
    )
    setwise.apply(plan, unit.now, source=source_of(due.grant))
    for row in plan.keep_waiting:
        due.seen.add(row.step_id)
        report.examined += 1
        tally(report, "still_queued")
    for row, decision in plan.retry_later:
        due.seen.add(row.step_id)
        report.examined += 1
        if row.deadline is not None:
            report.lag_ms = max(report.lag_ms, int((unit.now - row.deadline).total_seconds() * 1000))
        report.timed_out += 1
        report.remediated += 1
        tally(report, "timed_out")
        tally(report, "reassigned" if decision.reassign and row.alternate_id is not None else "retry")
    if plan.per_step:
        jobs = list(Job.objects.filter(pk__in={d.job_id for d in plan.per_step}).select_related("workflow"))
        states = load_locked_jobs(jobs)
        _per_step(unit, due, states, [d.step_id for d in plan.per_step])


def _per_step(unit: Unit, due: _Due, states: dict[Any, JobState], step_ids: list[int]) -> None:
    """Remediate these due steps one by one (their jobs are locked and loaded in `states`)."""
    grant, report, cache = due.grant, due.report, due.cache
    by_id = {s.pk: s for state in states.values() for s in state.steps}
    missing = [pk for pk in step_ids if pk not in by_id]
    if missing:
        # Items of fan-outs are not read with their jobs (scheduler.services.locking).
        for item in Step.objects.filter(pk__in=missing).select_related(
            "definition__policy", "pool__alternate"
        ):
            by_id[item.pk] = states[item.job_id].adopt([item])[0]
    steps = [by_id[pk] for pk in step_ids]
    overdue = [s for s in steps if _overdue(s, unit)]
    queued = steps_still_queued(overdue)
    overdue = [s for s in overdue if s.pk not in queued]
    overdue_ids = {s.pk for s in overdue}
    missed = heartbeats_missed(overdue)
    attempts_time_out(unit, overdue, decided_by=source_of(grant))
    cache.last_attempts = _last_attempts(steps)
    for step in steps:
        due.seen.add(step.pk)
        report.examined += 1
        if step.pk in queued:
            step_keep_waiting(unit, state=states[step.job_id], step=step, source=source_of(grant))
            tally(report, "still_queued")
            continue
        if remediate(
            unit,
            states[step.job_id],
            step,
            grant=grant,
            report=report,
            draw=due.draw,
            cache=cache,
            attempt_closed=step.pk in overdue_ids,
            missed_heartbeat=missed.get(step.pk),
        ):
            report.remediated += 1


def _overdue(step: Step, unit: Unit) -> bool:
    return step.status == S.DISPATCHED and (step.deadline is None or step.deadline <= unit.now)


def _last_attempts(steps: list[Step]) -> dict[int, dict[str, Any]]:
    """The latest attempt (kind, endpoint) of each step, in one statement."""
    latest: dict[int, dict[str, Any]] = {}
    rows = Attempt.objects.filter(step_id__in=[s.pk for s in steps]).values(
        "step_id", "number", "kind", "endpoint_id"
    )
    for row in rows:
        if row["number"] >= latest.get(row["step_id"], {}).get("number", -1):
            latest[row["step_id"]] = dict(row)
    return latest


def remediate(
    unit: Unit,
    state: JobState,
    step: Step,
    *,
    grant: LeaseGrant,
    report: ScanReport,
    draw: Callable[[], float],
    cache: ScanCache | None = None,
    attempt_closed: bool = False,
    missed_heartbeat: float | None = None,
) -> bool:
    """Apply the step's policy to one due step. Returns whether anything changed.
    `missed_heartbeat`: an overdue call held to heartbeats this often (its event says so)."""
    source = source_of(grant)
    job = state.job
    if step.status not in STEP_SCANNED:
        return False  # settled earlier in this batch (another step of its job moved it)
    if step.status == S.DISPATCHED:
        if step.deadline is not None and step.deadline > unit.now:
            return False  # an outcome or another decision moved it since the claim
        overdue_ms = int((unit.now - step.deadline).total_seconds() * 1000) if step.deadline else 0
        report.lag_ms = max(report.lag_ms, overdue_ms)
        step_time_out(
            unit,
            state=state,
            step=step,
            source=source,
            attempt_closed=attempt_closed,
            missed_heartbeat=missed_heartbeat,
        )
        report.timed_out += 1
        tally(report, "timed_out")
    if step.forward and job.status not in JOB_FORWARD:
        step_abandon(unit, state=state, step=step, source=source)
        tally(report, "abandoned")
        return True
    if step.status == S.RETRY_WAIT:
        if step.not_before is not None and step.not_before > unit.now:
            return False
        if job.paused_at is not None:
            return False
        step_dispatch(
            unit,
            state=state,
            step=step,
            source=source,
            avoid_endpoint_id=step.endpoint_id,
            reason="backoff elapsed",
        )
        tally(report, "retried")
        return True
    if step.status not in (S.ATTEMPT_FAILED, S.UNKNOWN):
        return False
    facts = step_facts(unit, step, job, cache or ScanCache())
    policy = PolicySnapshot.of(step.definition.call_policy)
    decision = decide(facts, policy, unit.now, draw())
    if isinstance(decision, Reconcile):
        step_reconcile(unit, state=state, step=step, source=source, reason=decision.reason)
        tally(report, "reconcile")
    elif isinstance(decision, Retry):
        pool = step.call_pool.alternate if decision.reassign else None
        step_retry_later(
            unit,
            state=state,
            step=step,
            delay=decision.delay,
            source=source,
            reason=decision.reason,
            pool=pool,
            data={"policy_version": policy.version, "reassigned_to": pool.name if pool else None},
        )
        tally(report, "reassigned" if decision.reassign else "retry")
    elif isinstance(decision, GiveUp):
        step_give_up(
            unit, state=state, step=step, action=decision.action, source=source, reason=decision.reason
        )
        tally(report, f"give_up_{decision.action}")
    return True


def step_facts(unit: Unit, step: Step, job: Job, cache: ScanCache) -> StepFacts:
    """Gather what `decide` needs, assessing the health of the endpoint that just failed."""
    last: dict[str, Any] | None = cache.last_attempts.get(step.pk)
    if last is None or last["number"] != step.attempt:
        row = (
            Attempt.objects.filter(step_id=step.pk, number=step.attempt)
            .values("number", "kind", "endpoint_id")
            .first()
        )
        last = dict(row) if row else {"number": step.attempt, "kind": AttemptKind.CALL, "endpoint_id": None}
    endpoint_id = last["endpoint_id"]
    if endpoint_id is not None and last["kind"] == AttemptKind.CALL and endpoint_id not in cache.assessed:
        cache.assessed.add(endpoint_id)
        if endpoint_assess_and_alert(endpoint_id, unit.now):
            # Health changed: forget what this scan knew about the pools.
            cache.pool_healthy.clear()
    pool = step.call_pool
    alternate = pool.alternate

    def healthy(p: AgentPool) -> bool:
        if p.pk not in cache.pool_healthy:
            cache.pool_healthy[p.pk] = pool_has_healthy_endpoint(p, unit.now)
        return cache.pool_healthy[p.pk]

    return StepFacts(
        kind=step.kind,
        status=step.status,
        last_outcome=step.last_outcome,
        last_attempt_kind=last["kind"],
        calls=step.calls,
        first_dispatched_at=step.first_dispatched_at,
        job_deadline=job.deadline,
        has_status_path=bool(step.definition.status_path) and step.forward,
        on_alternate_pool=step.pool_id != step.definition.pool_id,
        alternate_available=alternate is not None and alternate.pk != step.definition.pool_id,
        pool_healthy=healthy(pool),
        alternate_healthy=alternate is not None and healthy(alternate),
        # A failed attempt's not_before is the remote's ask (scheduler.services.outcomes).
        asked_until=step.not_before if step.status == StepStatus.ATTEMPT_FAILED else None,
    )
