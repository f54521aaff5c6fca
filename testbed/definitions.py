"""Definitions the testbed's tools create for themselves, and the guard that keeps them off
databases holding other people's jobs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agents.models import AgentPool
from agents.services import pool_save
from scheduler.definitions import workflow_create, workflow_latest
from scheduler.models import Job, RemediationPolicy, Workflow
from supervisor.policies import policy_create, policy_update


class ForeignJobs(RuntimeError):
    """The database holds jobs a destructive tool did not create."""


def refuse_foreign_jobs(command: str, own_workflows: Iterable[str], *, scratch: bool) -> None:
    """Refuse to run `command` (which deletes queued tasks and settles live jobs of its own) on a
    database that holds jobs of other workflows, unless the caller said it is a scratch database."""
    if scratch:
        return
    foreign = Job.objects.exclude(workflow__name__in=list(own_workflows))
    count = foreign.count()
    if count:
        raise ForeignJobs(
            f"{command} refuses to run: this database holds {count} job(s) it did not create "
            f"(for example of workflow {foreign.values_list('workflow__name', flat=True).first()!r}), "
            "and it deletes queued tasks and settles live jobs. Point DATABASE_URL at a scratch "
            "database, or pass --scratch to confirm this one may be used."
        )


def ensure_pool(
    name: str,
    *,
    kind: str,
    endpoints: list[Any] | None = None,
    alternate: str | None = None,
    max_in_flight: int | None = None,
    max_per_second: float | None = None,
) -> AgentPool:
    """Create the pool, or bring an existing one to exactly these endpoints and limits."""
    return pool_save(
        name=name,
        kind=kind,
        endpoints=endpoints or [],
        alternate=alternate,
        pool=AgentPool.objects.filter(name=name).first(),
        max_in_flight=max_in_flight,
        max_per_second=max_per_second,
    )


def ensure_policy(name: str, **fields: Any) -> RemediationPolicy:
    """Create the policy, or make these its settings (a new version when they differ)."""
    existing = RemediationPolicy.objects.filter(name=name).first()
    if existing is None:
        return policy_create(name=name, actor=None, **fields)
    return policy_update(existing.pk, actor=None, changes=fields)


def ensure_workflow(
    name: str, steps: list[dict[str, Any]], *, description: str = "", input_schema: Any = None
) -> Workflow:
    """The latest version of the workflow, created from `steps` (and its input contract) when it
    does not exist yet."""
    workflow = workflow_latest(name)
    if workflow is None:
        workflow = workflow_create(name=name, steps=steps, description=description, input_schema=input_schema)
    return workflow
