"""Workflow definitions: validated, versioned DAGs of steps.

A version never changes once created (running jobs keep the version they started with); saving
a workflow under an existing name creates the next version.
"""

from __future__ import annotations

from graphlib import CycleError, TopologicalSorter
from typing import Any, cast

from django.db import IntegrityError, transaction
from django.db.models import ProtectedError

from agents.models import AgentKind, AgentPool
from agents.validation import validate_operation_path, validate_python_agent, validate_queue_name
from sas_project.audit import definition_deleted, definition_logged
from sas_project.errors import ActionNotAllowed, InvalidInput, NotFound, StaleWrite
from sas_project.validation import valid_name
from scheduler.models import Job, RemediationPolicy, Schedule, StepDefinition, Workflow
from scheduler.unit import User

STEP_KEYS = {"name", "pool", "path", "status_path", "compensation_path", "depends_on", "policy"}


def _path_for(kind: str, value: Any) -> str:
    """An operation path as the pool's kind reads it: an HTTP path, a queue name, or a registered
    python callable."""
    if kind == AgentKind.QUEUE:
        return validate_queue_name(value)
    if kind == AgentKind.PYTHON:
        return validate_python_agent(value)
    return validate_operation_path(value, http=True)


def _optional_path(value: Any, field: str, *, kind: str) -> str:
    if value in (None, ""):
        return ""
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be a string", field=field)
    try:
        return _path_for(kind, value)
    except InvalidInput as exc:
        raise InvalidInput(f"{field}: {exc.message}", field=field) from exc


def validate_steps(steps: Any) -> list[dict[str, Any]]:
    """Check a list of step specs; returns them cleaned, in a dependency-respecting order.

    Raises InvalidInput naming the step and the problem: an unknown pool, policy or dependency,
    a duplicate name, a bad path, or a cycle.
    """
    if not isinstance(steps, list) or not steps:
        raise InvalidInput("a workflow needs a non-empty list of steps", field="steps")
    if len(steps) > 100:
        raise InvalidInput("a workflow has at most 100 steps", field="steps")
    cleaned: dict[str, dict[str, Any]] = {}
    pools = {p.name: p for p in AgentPool.objects.all()}
    policies = {p.name: p for p in RemediationPolicy.objects.all()}
    for index, spec in enumerate(steps):
        where = f"steps[{index}]"
        if not isinstance(spec, dict):
            raise InvalidInput(f"{where} must be an object", field="steps")
        extra = set(spec) - STEP_KEYS
        if extra:
            raise InvalidInput(f"{where}: unknown fields {', '.join(sorted(extra))}", field="steps")
        name = valid_name(spec.get("name"), f"{where}.name", "steps")
        if name in cleaned:
            raise InvalidInput(f"step {name!r} appears twice", field="steps")
        pool = pools.get(str(spec.get("pool"))) if isinstance(spec.get("pool"), str) else None
        if pool is None:
            raise InvalidInput(f"step {name!r}: unknown pool {spec.get('pool')!r}", field="steps")
        policy = policies.get(str(spec.get("policy"))) if isinstance(spec.get("policy"), str) else None
        if policy is None:
            raise InvalidInput(f"step {name!r}: unknown policy {spec.get('policy')!r}", field="steps")
        try:
            path = _path_for(pool.kind, spec.get("path", ""))
        except InvalidInput as exc:
            raise InvalidInput(f"step {name!r}: {exc.message}", field="steps") from exc
        depends_on = spec.get("depends_on", [])
        if depends_on is None:
            depends_on = []
        if not isinstance(depends_on, list) or not all(isinstance(d, str) for d in depends_on):
            raise InvalidInput(f"step {name!r}: depends_on must be a list of step names", field="steps")
        cleaned[name] = {
            "name": name,
            "pool": pool,
            "policy": policy,
            "path": path,
            "status_path": _optional_path(
                spec.get("status_path"), f"step {name!r} status_path", kind=pool.kind
            ),
            "compensation_path": _optional_path(
                spec.get("compensation_path"), f"step {name!r} compensation_path", kind=pool.kind
            ),
            "depends_on": list(dict.fromkeys(depends_on)),
        }
    for name, spec in cleaned.items():
        for dep in spec["depends_on"]:
            if dep not in cleaned:
                raise InvalidInput(f"step {name!r} depends on unknown step {dep!r}", field="steps")
            if dep == name:
                raise InvalidInput(f"step {name!r} depends on itself", field="steps")
    try:
        order = list(TopologicalSorter({n: s["depends_on"] for n, s in cleaned.items()}).static_order())
    except CycleError as exc:
        cycle = " -> ".join(exc.args[1]) if len(exc.args) > 1 else "?"
        raise InvalidInput(f"the steps form a cycle: {cycle}", field="steps") from exc
    return [cleaned[name] for name in order]


@transaction.atomic
def workflow_create(
    *,
    name: str,
    steps: Any,
    actor: User | None = None,
    description: str = "",
    deadline_seconds: float | None = None,
) -> Workflow:
    """Create the next version of workflow `name` from validated step specs."""
    valid_name(name, "workflow name", "name")
    if deadline_seconds is not None and (
        isinstance(deadline_seconds, bool)
        or not isinstance(deadline_seconds, int | float)
        or deadline_seconds <= 0
    ):
        raise InvalidInput("deadline_seconds must be empty or greater than 0", field="deadline_seconds")
    if not isinstance(description, str):
        raise InvalidInput("description must be a string", field="description")
    ordered = validate_steps(steps)
    latest = Workflow.objects.select_for_update().filter(name=name).order_by("-version").first()
    # Two first versions of one name can both pass the lock above (there is no row to lock yet):
    # the unique (name, version) constraint decides, and the loser is told to send again.
    try:
        with transaction.atomic():
            workflow = _create_version(name, latest, description, deadline_seconds, actor)
    except IntegrityError as exc:
        raise StaleWrite(f"workflow {name!r} was changed at the same moment; send yours again") from exc
    StepDefinition.objects.bulk_create(
        [StepDefinition(workflow=workflow, position=i, **spec) for i, spec in enumerate(ordered)]
    )
    definition_logged(actor, workflow, created=True)
    return workflow


def _create_version(
    name: str, latest: Workflow | None, description: str, deadline_seconds: float | None, actor: User | None
) -> Workflow:
    return Workflow.objects.create(
        name=name,
        version=(latest.version + 1) if latest else 1,
        description=description,
        deadline_seconds=deadline_seconds,
        created_by=cast(Any, actor) if actor is not None and actor.is_authenticated else None,
    )


def workflow_latest(name: str) -> Workflow | None:
    return Workflow.objects.filter(name=name).order_by("-version").first()


@transaction.atomic
def workflow_delete(name: str, *, actor: Any) -> int:
    """Delete every version of a workflow no job and no schedule uses; returns how many versions.
    Otherwise ActionNotAllowed names a job (or schedule) that uses it: history keeps its
    definitions."""
    versions = list(Workflow.objects.select_for_update().filter(name=name).order_by("version"))
    if not versions:
        raise NotFound(f"workflow {name!r} does not exist")
    job = Job.objects.filter(workflow__name=name).values_list("pk", flat=True).first()
    if job is not None:
        raise ActionNotAllowed(
            f"workflow {name!r} is used by job {job}: it cannot be deleted", job_id=str(job)
        )
    schedule = Schedule.objects.filter(workflow=name).values_list("name", flat=True).first()
    if schedule is not None:
        raise ActionNotAllowed(f"workflow {name!r} is used by schedule {schedule!r}: delete that first")
    for version in versions:
        definition_deleted(actor, version)
    try:
        with transaction.atomic():
            Workflow.objects.filter(name=name).delete()
    except ProtectedError as exc:
        raise ActionNotAllowed(f"workflow {name!r} is still used: it cannot be deleted") from exc
    return len(versions)
