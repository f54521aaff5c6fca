"""Which operator actions the console offers on a job and on its steps: those the operator
services would accept now, decided by the services' own rules (supervisor.services:
`RETRYABLE_BY_OPERATOR`, `RESOLVABLE_BY_OPERATOR`, the job checks of `step_actionable_check`, the
stops' `stoppable` statuses), so that a page never offers what the service refuses. The services
still decide for real under the job's lock; a page read a moment ago may be stale (409)."""

from __future__ import annotations

from sas_project.errors import ActionNotAllowed
from scheduler.models import JOB_SETTLED, Job, JobStatus, Step
from scheduler.services import JOB_FORWARD, JobState
from scheduler.services.wakeups import job_takes_signals
from supervisor.services import (
    JOB_STOPS,
    RESOLVABLE_BY_OPERATOR,
    RETRYABLE_BY_OPERATOR,
    step_actionable_check,
)

J = JobStatus


def _job_allows_step(job: Job, step: Step, verb: str) -> bool:
    try:
        step_actionable_check(JobState(job=job, steps=[step]), step=step, verb=verb)
    except ActionNotAllowed:
        return False
    return True


def step_retryable(step: Step) -> bool:
    """What `step_retry` accepts: a retryable status, not a fan-out, a job that lets its steps be
    retried (not paused, not settled for good)."""
    return (
        step.status in RETRYABLE_BY_OPERATOR
        and not step.has_items
        and _job_allows_step(step.job, step, "retry")
    )


def step_resolvable(step: Step) -> bool:
    """What `step_resolve` accepts, for a step in a resolvable status (a wait step waiting is
    offered its own actions instead): a forward step of a job still going forward, failed or
    compensating; a compensation whatever its job."""
    if step.status not in RESOLVABLE_BY_OPERATOR:
        return False
    job = step.job
    return not step.forward or job.status in JOB_FORWARD or job.status in (J.FAILED, J.COMPENSATING)


def job_actions(job: Job) -> frozenset[str]:
    """The job actions `job_pause`, `job_resume`, `job_compensate`, `job_cancel`, `job_rerun`
    and `signal_send` accept now."""
    allowed: set[str] = set()
    if job.paused_at is not None:
        allowed.add("resume")
    elif job.status in JOB_FORWARD or job.status == J.COMPENSATING:
        allowed.add("pause")
    for action, stop in JOB_STOPS.items():
        if not job.compensation_reason and job.status in stop.stoppable:
            allowed.add(action)
    if job.status in JOB_SETTLED:
        allowed.add("rerun")
    if job_takes_signals(job):
        allowed.add("signal")
    return frozenset(allowed)


__all__ = ["job_actions", "step_resolvable", "step_retryable"]
