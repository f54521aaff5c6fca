"""Builders for definitions, through the same services the API and admin use."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection

from agents.models import AgentPool
from agents.services import pool_save
from sas_project import dbcode
from sas_project.database import is_postgresql
from scheduler.definitions import workflow_create
from scheduler.models import RemediationPolicy, Step, Workflow
from supervisor.policies import policy_create

FAST = {
    "timeout_seconds": 5,
    "max_attempts": 3,
    "backoff_initial_seconds": 0,
    "backoff_multiplier": 1,
    "backoff_max_seconds": 0,
    "backoff_jitter": 0,
}


def make_policy(name: str = "default", **fields: Any) -> RemediationPolicy:
    existing = RemediationPolicy.objects.filter(name=name).first()
    if existing:
        return existing
    return policy_create(name=name, actor=None, **{**FAST, **fields})


def make_pool(
    name: str = "local",
    kind: str = "python",
    endpoints: list[Any] | None = None,
    alternate: str | None = None,
) -> AgentPool:
    existing = AgentPool.objects.filter(name=name).first()
    if existing:
        return existing
    return pool_save(name=name, kind=kind, endpoints=endpoints or [], alternate=alternate)


def step(
    name: str,
    *deps: str,
    pool: str = "local",
    policy: str = "default",
    path: str = "agents.builtin.noop",
    compensation: str = "agents.builtin.noop",
    status_path: str = "",
) -> dict[str, Any]:
    return {
        "name": name,
        "pool": pool,
        "policy": policy,
        "path": path,
        "compensation_path": compensation,
        "status_path": status_path,
        "depends_on": list(deps),
    }


def make_workflow(
    name: str, *steps: dict[str, Any], deadline_seconds: float | None = None, **fields: Any
) -> Workflow:
    """A workflow of `steps` on the local pool and default policy; `fields` are workflow_create's
    other fields (concurrency, input_schema, ...)."""
    make_pool()
    make_policy()
    return workflow_create(name=name, steps=list(steps), deadline_seconds=deadline_seconds, **fields)


def chain(name: str = "chain", n: int = 3, **step_kwargs: Any) -> Workflow:
    names = [f"s{i}" for i in range(1, n + 1)]
    return make_workflow(
        name, *[step(s, *([names[i - 1]] if i else []), **step_kwargs) for i, s in enumerate(names)]
    )


def diamond(name: str = "diamond", **step_kwargs: Any) -> Workflow:
    return make_workflow(
        name,
        step("a", **step_kwargs),
        step("b", "a", **step_kwargs),
        step("c", "a", **step_kwargs),
        step("d", "b", "c", **step_kwargs),
    )


def failing_endpoint_history(workflow: str, url: str) -> Step:
    """A job of `workflow` (one HTTP step) whose calls through the endpoint at `url` mostly
    failed, its step waiting for the supervisor's decision: the scan then opens that circuit."""
    from django.db.models import F
    from django_q.models import OrmQ

    from agents.models import AgentEndpoint
    from agents.outcome import Outcome
    from scheduler.models import Attempt, StepStatus
    from scheduler.services import job_submit

    bad = AgentEndpoint.objects.get(url=url)
    seed_step = job_submit(workflow=workflow, input={}).job.steps.get()
    OrmQ.objects.all().delete()
    Step.objects.filter(pk=seed_step.pk).update(endpoint=bad)
    Attempt.objects.filter(step=seed_step).update(
        endpoint=bad, finished_at=F("dispatched_at"), outcome=Outcome.TRANSIENT_FAILURE
    )
    for number in (2, 3):
        Attempt.objects.create(
            step=seed_step,
            number=number,
            pool=seed_step.pool,
            endpoint=bad,
            policy_version=1,
            dispatched_at=seed_step.created_at,
            deadline=seed_step.created_at,
            finished_at=seed_step.created_at,
            outcome=Outcome.NO_ANSWER,
        )
    Step.objects.filter(pk=seed_step.pk).update(
        status=StepStatus.ATTEMPT_FAILED, attempt=3, calls=1, last_outcome=Outcome.TRANSIENT_FAILURE
    )
    return seed_step


@contextmanager
def state_arranged() -> Iterator[None]:
    """Test setup only: place rows in the state under test, past the database's guard of the state
    machines (scheduler/sql/), which refuses a move the tables do not allow, as it should for
    every writer. On PostgreSQL this session's triggers are off for the block
    (session_replication_role); on SQLite the guard triggers are dropped and then installed again."""
    with connection.cursor() as cursor:
        if is_postgresql():
            cursor.execute("SET session_replication_role = replica")
            try:
                yield
            finally:
                cursor.execute("SET session_replication_role = DEFAULT")
            return
        for source in dbcode.sources("sqlite"):
            if source.name.endswith("_guard") and source.name != "event_job_guard":
                cursor.execute(f'DROP TRIGGER IF EXISTS "{source.name}"')
        try:
            yield
        finally:
            dbcode.install(connection)
