"""Read queries for jobs, steps, events and definitions (the API and the console read through these).

Every function returns rows with what its callers render already joined or prefetched, so that
reading one job, or a page of jobs, costs a fixed number of queries whatever its size.

Visibility: operators (and administrators) see every job; a submitter sees only the jobs it
submitted. A job the user may not see is reported as missing (NotFound), never as forbidden, so
that its existence does not leak.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from django.db.models import OuterRef, Prefetch, QuerySet, Subquery

from sas_project.errors import NotFound
from sas_project.permissions import can_read_all_jobs
from scheduler.models import Attempt, Event, Job, Step, StepDefinition, Workflow

#: Largest value of a PostgreSQL bigint: larger ids cannot exist (and cannot be queried).
MAX_ID = 2**63 - 1


# --- jobs, steps, events ------------------------------------------------------------------------


def jobs_visible_to(user: Any) -> QuerySet[Job]:
    """Every job for an operator; otherwise only the user's own jobs (none when anonymous)."""
    jobs = Job.objects.all()
    if can_read_all_jobs(user):
        return jobs
    if user is None or not user.is_authenticated:
        return jobs.none()
    return jobs.filter(submitter=user)


def job_list(
    *,
    user: Any,
    status: str | None = None,
    workflow: str | None = None,
    created_after: dt.datetime | None = None,
    created_before: dt.datetime | None = None,
) -> QuerySet[Job]:
    """Jobs the user may see, newest first (served by job_created_idx / job_status_created_idx)."""
    jobs = jobs_visible_to(user).select_related("workflow", "submitter")
    if status:
        jobs = jobs.filter(status=status)
    if workflow:
        jobs = jobs.filter(workflow__name=workflow)
    if created_after is not None:
        jobs = jobs.filter(created_at__gte=created_after)
    if created_before is not None:
        jobs = jobs.filter(created_at__lt=created_before)
    # The id breaks ties between jobs created in the same transaction, so pages never overlap.
    return jobs.order_by("-created_at", "-id")


def _attempts_prefetch() -> Prefetch:
    return Prefetch("attempts", queryset=Attempt.objects.select_related("pool").order_by("number"))


def _steps_prefetch() -> Prefetch:
    return Prefetch(
        "steps",
        queryset=Step.objects.select_related("pool").prefetch_related(_attempts_prefetch()).order_by("id"),
    )


def job_detail(*, user: Any, job_id: uuid.UUID | str) -> Job:
    """One job with its steps and their attempts (three queries), or NotFound."""
    job = (
        jobs_visible_to(user)
        .select_related("workflow", "submitter")
        .prefetch_related(_steps_prefetch())
        .filter(pk=job_id)
        .first()
    )
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    return job


def job_events(*, user: Any, job_id: uuid.UUID | str) -> QuerySet[Event]:
    """The job's history, oldest first (event_job_idx), or NotFound if the user may not see it."""
    if not jobs_visible_to(user).filter(pk=job_id).exists():
        raise NotFound(f"job {job_id} does not exist")
    return Event.objects.filter(job_id=job_id).select_related("step", "actor").order_by("id")


def step_detail(*, user: Any, step_id: int) -> Step:
    """One step of a job the user may see, with its attempts, or NotFound."""
    step = None
    if 0 < step_id <= MAX_ID:
        steps = Step.objects.filter(pk=step_id)
        if not can_read_all_jobs(user):
            steps = steps.filter(job__submitter=user) if user.is_authenticated else steps.none()
        step = steps.select_related("pool").prefetch_related(_attempts_prefetch()).first()
    if step is None:
        raise NotFound(f"step {step_id} does not exist")
    return step


# --- workflows ------------------------------------------------------------------------------------


def _workflows() -> QuerySet[Workflow]:
    return Workflow.objects.select_related("created_by").prefetch_related(
        Prefetch(
            "steps",
            queryset=StepDefinition.objects.select_related("pool", "policy").order_by("position"),
        )
    )


def workflow_list() -> QuerySet[Workflow]:
    """The latest version of every workflow, by name."""
    latest = Workflow.objects.filter(name=OuterRef("name")).order_by("-version").values("version")[:1]
    return _workflows().filter(version=Subquery(latest)).order_by("name")


def workflow_get(name: str, version: int | None = None) -> Workflow:
    """The latest version of workflow `name`, or the given version; NotFound otherwise."""
    workflows = _workflows().filter(name=name)
    workflow = (
        workflows.filter(version=version).first()
        if version is not None
        else workflows.order_by("-version").first()
    )
    if workflow is None:
        suffix = f" version {version}" if version is not None else ""
        raise NotFound(f"workflow {name!r}{suffix} does not exist")
    return workflow
