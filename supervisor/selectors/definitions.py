"""The console's read-only pages of definitions: workflows (their versions, the latest one's
steps, the jobs that use them), agent pools and their endpoints (limits, health, calls waiting),
and remediation policies (their fields and revisions). Editing stays in the Django admin, through
the audited services.

Each page is a fixed number of queries: the jobs of a workflow are counted among the live jobs
only (`job_status_created_idx`) and listed newest first, a few (`job_created_idx`); the calls
waiting or in flight per pool are counted through `step_live_idx`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Max, Q, QuerySet

from agents.models import AgentPool
from scheduler.models import (
    JOB_LIVE,
    Attempt,
    Job,
    PolicyRevision,
    RemediationPolicy,
    Step,
    StepDefinition,
    StepStatus,
    Workflow,
)
from scheduler.unit import db_now
from supervisor.selectors.overview import EndpointHealthRow, endpoint_health

#: The newest jobs listed on a workflow's page (the Jobs list, filtered, has the rest).
RECENT_JOBS = 10
#: A policy's revisions listed on its page, newest first.
REVISIONS_SHOWN = 50


# --- workflows ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkflowRow:
    latest: Workflow
    versions: int
    steps: int
    #: Live jobs of any version, by status.
    live: dict[str, int]

    @property
    def live_total(self) -> int:
        return sum(self.live.values())


def _live_jobs_by_workflow(names: list[str] | None = None) -> dict[str, dict[str, int]]:
    query = Job.objects.filter(status__in=sorted(JOB_LIVE))
    if names is not None:
        query = query.filter(workflow__name__in=names)
    result: dict[str, dict[str, int]] = {}
    for name, status, n in query.values_list("workflow__name", "status").annotate(n=Count("pk")).order_by():
        result.setdefault(name, {})[status] = n
    return result


def workflow_list() -> list[WorkflowRow]:
    """Every workflow by name, its latest version first: three queries."""
    latest_versions = dict(Workflow.objects.values_list("name").annotate(latest=Max("version")).order_by())
    counts = dict(Workflow.objects.values_list("name").annotate(n=Count("pk")).order_by())
    latest = [
        w
        for w in Workflow.objects.annotate(n_steps=Count("steps")).order_by("name", "-version")
        if latest_versions.get(w.name) == w.version
    ]
    live = _live_jobs_by_workflow()
    return [
        WorkflowRow(w, counts[w.name], w.n_steps, live.get(w.name, {}))  # type: ignore[attr-defined]
        for w in latest
    ]


@dataclass(frozen=True)
class WorkflowDetail:
    name: str
    #: Newest first, each with `n_steps`.
    versions: Sequence[Workflow]
    steps: list[StepDefinition]
    live: dict[str, int]
    recent_jobs: list[Job]

    @property
    def latest(self) -> Workflow:
        return self.versions[0]


def workflow_detail(name: str) -> WorkflowDetail | None:
    """A workflow's versions, its latest version's steps and its jobs: four queries."""
    versions = list(
        Workflow.objects.filter(name=name)
        .annotate(n_steps=Count("steps", distinct=True))
        .order_by("-version")
    )
    if not versions:
        return None
    steps = list(
        StepDefinition.objects.filter(workflow=versions[0])
        .select_related("pool", "policy")
        .order_by("position", "id")
    )
    recent = list(
        Job.objects.filter(workflow__name=name)
        .select_related("workflow")
        .order_by("-created_at", "-pk")[:RECENT_JOBS]
    )
    return WorkflowDetail(
        name=name,
        versions=versions,
        steps=steps,
        live=_live_jobs_by_workflow([name]).get(name, {}),
        recent_jobs=recent,
    )


# --- pools ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolRow:
    pool: AgentPool
    endpoints: list[EndpointHealthRow] = field(default_factory=list)
    #: Calls parked until the pool (or their key, or a rate) has room.
    waiting: int = 0
    in_flight: int = 0
    #: Of the calls in flight: queued for a worker (their task not yet taken), and being made by
    #: a worker or answered later by the remote (taken, no answer yet).
    queued: int = 0
    calling: int = 0


def pool_list(now: dt.datetime | None = None) -> list[PoolRow]:
    """Every pool with its limits, its endpoints' health (the overview's figures) and its calls
    waiting and in flight (queued for a worker, or being made): four queries."""
    now = now or db_now()
    health = {p.name: p.endpoints for p in endpoint_health(now)}
    counts: dict[tuple[int, str], int] = {
        (pool_id, status): n
        for pool_id, status, n in Step.objects.filter(
            status__in=[StepStatus.WAITING, StepStatus.DISPATCHED], pool__isnull=False
        )
        .values_list("pool_id", "status")
        .annotate(n=Count("pk"))
        .order_by()
    }
    calls: dict[int, Any] = {
        row["pool_id"]: row
        for row in Attempt.objects.filter(finished_at__isnull=True, number__gt=0)
        .values("pool_id")
        .annotate(
            queued=Count("pk", filter=Q(started_at__isnull=True)),
            calling=Count("pk", filter=Q(started_at__isnull=False)),
        )
        .order_by()
    }
    return [
        PoolRow(
            pool=p,
            endpoints=health.get(p.name, []),
            waiting=counts.get((p.pk, StepStatus.WAITING), 0),
            in_flight=counts.get((p.pk, StepStatus.DISPATCHED), 0),
            queued=calls.get(p.pk, {}).get("queued", 0),
            calling=calls.get(p.pk, {}).get("calling", 0),
        )
        for p in AgentPool.objects.select_related("alternate").order_by("name")
    ]


# --- policies -------------------------------------------------------------------------------------

#: A policy's fields as its page lists them (the model's own, but its name and bookkeeping).
POLICY_FIELDS = tuple(
    f.name
    for f in RemediationPolicy._meta.concrete_fields
    if f.name not in ("id", "name", "version", "created_at", "updated_at")
)


def policy_rows() -> QuerySet[RemediationPolicy]:
    """Every policy, with how many step definitions name it."""
    return RemediationPolicy.objects.annotate(n_steps=Count("step_definitions")).order_by("name")


@dataclass(frozen=True)
class PolicyDetail:
    policy: RemediationPolicy
    fields: list[tuple[str, Any]]
    revisions: list[PolicyRevision]


def policy_detail(name: str) -> PolicyDetail | None:
    """A policy, its fields and its latest revisions (who changed what): two queries."""
    policy = RemediationPolicy.objects.filter(name=name).first()
    if policy is None:
        return None
    revisions = list(
        PolicyRevision.objects.filter(policy=policy)
        .select_related("changed_by")
        .order_by("-version")[:REVISIONS_SHOWN]
    )
    return PolicyDetail(
        policy=policy,
        fields=[(f, getattr(policy, f)) for f in POLICY_FIELDS],
        revisions=revisions,
    )
