"""Read queries for jobs, steps, events and definitions (the API and the console read through these).

Every function returns rows with what its callers render already joined or prefetched, so that
reading one job, or a page of jobs, costs a fixed number of queries whatever its size.

Visibility: operators (and administrators) see every job; a submitter sees only the jobs it
submitted. A job the user may not see is reported as missing (NotFound), never as forbidden, so
that its existence does not leak.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from django.db import connection
from django.db.models import Count, OuterRef, Prefetch, QuerySet, Subquery
from django.utils import timezone

from agents.outcome import AttemptKind
from sas_project.conf import sas_settings
from sas_project.database import is_postgresql, supports_json_containment
from sas_project.errors import Archived, NotFound, SasError
from sas_project.permissions import can_read_all_jobs
from scheduler.models import (
    CANARY_WORKFLOW,
    ArchivedJob,
    Attempt,
    Delivery,
    DeliveryKind,
    Event,
    Job,
    Step,
    StepDefinition,
    StepDefinitionKind,
    StepKind,
    Workflow,
)

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


def archived_job(*, user: Any, job_id: uuid.UUID | str, every_job: bool = False) -> ArchivedJob | None:
    """Where retention archived a job the user may see (the same rule as a live job; `every_job`
    for callers that already checked the user may act on every job), or None."""
    try:
        pk = uuid.UUID(str(job_id))
    except ValueError:
        return None
    archived = ArchivedJob.objects.filter(pk=pk)
    if not every_job and not can_read_all_jobs(user):
        if user is None or not user.is_authenticated:
            return None
        archived = archived.filter(submitter_id=user.pk)
    return archived.first()


def job_missing(*, user: Any, job_id: uuid.UUID | str, every_job: bool = False) -> SasError:
    """The error for a job id not in the tables: Archived (410, naming the file) when retention
    archived it and the user may see it, NotFound otherwise."""
    archived = archived_job(user=user, job_id=job_id, every_job=every_job)
    if archived is None:
        return NotFound(f"job {job_id} does not exist")
    return Archived(
        f"job {job_id} was archived: it settled on {archived.settled_at:%Y-%m-%d} and history is kept "
        f"{sas_settings.history_days:g} days; its rows are in the archive object {archived.archive}",
        archive=archived.archive,
    )


def job_list(
    *,
    user: Any,
    status: str | None = None,
    workflow: str | None = None,
    created_after: dt.datetime | None = None,
    created_before: dt.datetime | None = None,
    business_key: str | None = None,
    idempotency_key: str | None = None,
    input_fields: dict[str, Any] | None = None,
    at_risk: bool | None = None,
) -> QuerySet[Job]:
    """Jobs the user may see, newest first (served by job_created_idx / job_status_created_idx,
    job_business_key_idx, and on PostgreSQL the GIN index on the input). The canary's jobs are
    listed only when asked for by their workflow's name."""
    jobs = jobs_visible_to(user).select_related("workflow", "submitter")
    if status:
        jobs = jobs.filter(status=status)
    jobs = jobs.filter(workflow__name=workflow) if workflow else jobs.exclude(workflow__name=CANARY_WORKFLOW)
    if business_key:
        jobs = jobs.filter(business_key=business_key)
    if at_risk is not None:
        jobs = jobs.filter(at_risk=at_risk)
    if idempotency_key:
        jobs = jobs.filter(idempotency_key=idempotency_key)
    if input_fields:
        if supports_json_containment():
            # `input @> {...}`: the GIN index (jsonb_path_ops) serves it.
            jobs = jobs.filter(input__contains=input_fields)
        else:
            for field, value in input_fields.items():
                jobs = jobs.filter(**{f"input__{field}": value})
    if created_after is not None:
        jobs = jobs.filter(created_at__gte=created_after)
    if created_before is not None:
        jobs = jobs.filter(created_at__lt=created_before)
    # The id breaks ties between jobs created in the same transaction, so pages never overlap.
    return jobs.order_by("-created_at", "-id")


def _attempts_prefetch() -> Prefetch:
    return Prefetch("attempts", queryset=Attempt.objects.select_related("pool").order_by("number"))


#: The latest child job of a sub-workflow step (through the constraint job_unique_child's index;
#: scheduler.serializers.rendering.child_job).
CHILD_JOB = Subquery(
    Job.objects.filter(parent_job_id=OuterRef("job_id"), parent_step=OuterRef("name"))
    .order_by("-parent_try")
    .values("pk")[:1]
)


def _steps_prefetch() -> Prefetch:
    # A fan-out's items (and their undoing) are pages of their own (step_items), not job rows.
    return Prefetch(
        "steps",
        queryset=Step.objects.filter(item_index__isnull=True)
        .select_related("pool", "definition")
        .prefetch_related(_attempts_prefetch())
        .annotate(child_job_id=CHILD_JOB)
        .order_by("id"),
    )


def item_summaries(step_ids: list[int]) -> dict[int, dict[str, int]]:
    """For each fan-out step: its items' count, in all and by status (one aggregate)."""
    summaries: dict[int, dict[str, int]] = {pk: {"total": 0} for pk in step_ids}
    if not step_ids:
        return summaries
    rows = (
        Step.objects.filter(parent_id__in=step_ids, kind=StepKind.ITEM)
        .values_list("parent_id", "status")
        .annotate(n=Count("id"))
        .order_by()
    )
    for parent_id, status, n in rows:
        summaries[parent_id][status] = n
        summaries[parent_id]["total"] += n
    return summaries


def _attach_item_summaries(steps: Iterable[Any]) -> None:
    """Give each fan-out step of a job its `item_summary` (None for the others)."""
    steps = list(steps)
    groups = [
        s.pk
        for s in steps
        if (s.definition.for_each or s.definition.kind == StepDefinitionKind.REPEAT)
        and s.kind == StepKind.ACTION
    ]
    summaries = item_summaries(groups)
    for step in steps:
        step.item_summary = summaries.get(step.pk)


def step_items(*, user: Any, job_id: uuid.UUID | str, step_name: str) -> QuerySet[Step]:
    """The items of a fan-out step of a job the user may see, in list order; NotFound for an
    unknown job or step, or a step that has no items."""
    if not jobs_visible_to(user).filter(pk=job_id).exists():
        raise job_missing(user=user, job_id=job_id)
    step = (
        Step.objects.filter(job_id=job_id, name=step_name, kind=StepKind.ACTION)
        .select_related("definition")
        .first()
    )
    if step is None:
        raise NotFound(f"job {job_id} has no step {step_name!r}")
    if not step.has_items:
        raise NotFound(f"step {step_name!r} is not a fan-out (for_each) nor a repeat: it has no items")
    return (
        Step.objects.filter(parent_id=step.pk, kind=StepKind.ITEM)
        .select_related("compensation")
        .order_by("item_index")
    )


def _callbacks_prefetch() -> Prefetch:
    return Prefetch(
        "deliveries",
        queryset=Delivery.objects.filter(kind=DeliveryKind.CALLBACK).order_by("id"),
        to_attr="_prefetched_callbacks",
    )


def job_detail(*, user: Any, job_id: uuid.UUID | str) -> Job:
    """One job with its steps and their attempts (three queries), or NotFound."""
    job = (
        jobs_visible_to(user)
        .select_related("workflow", "submitter")
        .prefetch_related(_steps_prefetch(), _callbacks_prefetch())
        .filter(pk=job_id)
        .first()
    )
    if job is None:
        raise job_missing(user=user, job_id=job_id)
    _attach_item_summaries(job.steps.all())
    return job


# The job as the API shows it, read at speed on PostgreSQL: three prepared statements into light
# rows with the attributes the representation reads (scheduler.serializers.job_data), instead of
# three ORM queries compiled and turned into model instances on every submission and job read.
# Each column is named as the light row's attribute (`_named` reads the names back).
# tests/api/test_jobs.py checks that both reads render the same.

JOB_SQL = """
SELECT j.id AS pk, j.status, j.at_risk, j.input, j.result, j.compensation_reason, j.paused_at, j.deadline,
       j.created_at, j.updated_at, j.finished_at, w.name AS workflow_name,
       w.version AS workflow_version, u.username AS submitter, j.callback_url, j.business_key,
       j.priority, j.rerun_of_id,
       ARRAY(SELECT r.id FROM scheduler_job r WHERE r.rerun_of_id = j.id ORDER BY r.created_at)
           AS rerun_ids,
       j.parent_job_id, j.parent_step, j.concurrency_key, j.start_gate, j.start_at, j.debounce_key,
       j.throttle_key, j.started_by_event, w.concurrency AS workflow_concurrency
FROM scheduler_job j
JOIN scheduler_workflow w ON w.id = j.workflow_id
LEFT JOIN auth_user u ON u.id = j.submitter_id
WHERE j.id = %s AND (%s OR j.submitter_id = %s)
"""
STEPS_SQL = """
SELECT s.id AS pk, s.name, s.kind, s.compensates_id, s.status, s.operation_id, s.attempt, s.calls,
       s.last_outcome, p.name AS pool, s.deadline, s.not_before, s.output, s.error, s.created_at,
       s.updated_at, s.finished_at, s.input_override, s.reused_from_id, d.kind AS definition_kind,
       d.signal AS definition_signal, d."group" AS definition_group, s.status_reason,
       d.child_workflow AS definition_child_workflow,
       CASE WHEN d.kind = 'workflow' THEN (SELECT c.id FROM scheduler_job c
                                          WHERE c.parent_job_id = s.job_id AND c.parent_step = s.name
                                          ORDER BY c.parent_try DESC LIMIT 1) END
           AS child_job_id,
       d.for_each AS definition_for_each, d.concurrency AS definition_concurrency,
       s.concurrency_key, s.rate_key, s.waiting_since, s.escalation_rung, s.escalation_group,
       d.escalation AS definition_escalation, d.timeout_seconds AS definition_timeout_seconds
FROM scheduler_step s
JOIN scheduler_stepdefinition d ON d.id = s.definition_id
LEFT JOIN agents_agentpool p ON p.id = s.pool_id
WHERE s.job_id = %s AND s.item_index IS NULL ORDER BY s.id
"""
ATTEMPTS_SQL = """
SELECT a.step_id, a.number, a.kind, a.endpoint_url, p.name AS pool, a.policy_version, a.dispatched_at,
       a.deadline, a.started_at, a.finished_at, a.outcome, a.decided_by, a.status_code,
       a.latency_ms, a.response_excerpt, a.error, a.late_outcome, a.late_at, a.heartbeat_at,
       a.heartbeat_details, a.retry_after_seconds
FROM scheduler_attempt a
JOIN scheduler_step s ON s.id = a.step_id
JOIN agents_agentpool p ON p.id = a.pool_id
WHERE s.job_id = %s AND s.item_index IS NULL ORDER BY a.step_id, a.number
"""

CALLBACKS_SQL = """
SELECT payload, status, tries, last_status_code, last_error, created_at, next_try_at, delivered_at
FROM scheduler_delivery WHERE job_id = %s AND kind = 'callback' ORDER BY id
"""

#: The attributes of a light step's definition, read from its columns `definition_<name>`.
_DEFINITION_ATTRS = ("kind", "signal", "group", "child_workflow", "for_each", "timeout_seconds")


def _json(value: Any) -> Any:
    """A jsonb column read raw (Django has psycopg hand jsonb over as text)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def _named(cursor: Any) -> list[dict[str, Any]]:
    """The rows the cursor's statement read, each a dict by column name."""
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _light(row: dict[str, Any], **computed: Any) -> SimpleNamespace:
    """A light row: the columns as attributes, those in `computed` replaced by its values."""
    return SimpleNamespace(**{**row, **computed})


class Rows(list[Any]):
    """Children of a light row, read like a related manager (`.all()`)."""

    def all(self) -> Rows:
        return self


def _reading(user: Any, job_id: uuid.UUID | str) -> tuple[uuid.UUID, bool, Any]:
    """What the hand-written reads of one job filter on: the job's id (NotFound when it is not a
    UUID), whether the user reads every job, and else the submitter they must be."""
    try:
        job_uuid = uuid.UUID(str(job_id))
    except ValueError:
        raise NotFound(f"job {job_id} does not exist") from None
    owner = user.pk if user is not None and user.is_authenticated else None
    return job_uuid, can_read_all_jobs(user), owner


def job_json(*, user: Any, job_id: uuid.UUID | str) -> str | None:
    """The job as the API shows it, as JSON text that PostgreSQL builds in one statement
    (`scheduler/sql/postgresql/sas_job_document.sql`), or NotFound. None where the function does
    not apply (another database; a time zone other than UTC, which it does not write): the caller
    renders `job_for_reading`.

    A submission's answer and a read of a job cost one statement and no rendering in Python:
    the three reads into light rows and their rendering were a third of the API's CPU per
    submission (docs/performance-history.md, "Engine IV")."""
    if not is_postgresql() or timezone.get_current_timezone_name() != "UTC":
        return None
    job_uuid, everyone, owner = _reading(user, job_id)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sas_job_document(p_job => %s, p_everyone => %s, p_owner => %s)",
            [job_uuid, everyone, owner],
        )
        text: str | None = cursor.fetchone()[0]
    if text is None:
        raise job_missing(user=user, job_id=job_uuid)
    return text


def job_for_reading(*, user: Any, job_id: uuid.UUID | str) -> Any:
    """The job with its steps and attempts, for the API to render, or NotFound: light rows on
    PostgreSQL, the ORM's `job_detail` elsewhere."""
    if not is_postgresql():
        return job_detail(user=user, job_id=job_id)
    job_uuid, everyone, owner = _reading(user, job_id)
    with connection.cursor() as cursor:
        cursor.execute(JOB_SQL, [job_uuid, everyone, owner])
        found = _named(cursor)
        if not found:
            raise job_missing(user=user, job_id=job_uuid)
        row = found[0]
        cursor.execute(STEPS_SQL, [job_uuid])
        step_rows = _named(cursor)
        cursor.execute(ATTEMPTS_SQL, [job_uuid])
        attempt_rows = _named(cursor)
        callback_rows: list[dict[str, Any]] = []
        if row["callback_url"]:  # only a job given a callback URL has callbacks
            cursor.execute(CALLBACKS_SQL, [job_uuid])
            callback_rows = _named(cursor)
    attempts: dict[int, Rows] = {}
    for a in attempt_rows:
        attempts.setdefault(a.pop("step_id"), Rows()).append(
            _light(a, pool=SimpleNamespace(name=a["pool"]), heartbeat_details=_json(a["heartbeat_details"]))
        )
    steps = Rows(
        _light(
            {name: value for name, value in s.items() if not name.startswith("definition_")},
            pool=SimpleNamespace(name=s["pool"]) if s["pool"] is not None else None,
            definition=SimpleNamespace(
                **{name: s[f"definition_{name}"] for name in _DEFINITION_ATTRS},
                concurrency=_json(s["definition_concurrency"]),
                escalation=_json(s["definition_escalation"]),
            ),
            output=_json(s["output"]),
            input_override=_json(s["input_override"]),
            attempts=attempts.get(s["pk"], Rows()),
        )
        for s in step_rows
    )
    _attach_item_summaries(steps)
    return _light(
        {name: value for name, value in row.items() if not name.startswith("workflow_")},
        input=_json(row["input"]),
        result=_json(row["result"]),
        workflow=SimpleNamespace(
            name=row["workflow_name"],
            version=row["workflow_version"],
            concurrency=_json(row["workflow_concurrency"]),
        ),
        submitter=SimpleNamespace(username=row["submitter"]) if row["submitter"] is not None else None,
        rerun_ids=row["rerun_ids"] or [],
        callbacks=[_light(c, payload=_json(c["payload"])) for c in callback_rows],
        steps=steps,
    )


def job_events(*, user: Any, job_id: uuid.UUID | str) -> QuerySet[Event]:
    """The job's history, oldest first (event_job_idx), or NotFound if the user may not see it."""
    if not jobs_visible_to(user).filter(pk=job_id).exists():
        raise job_missing(user=user, job_id=job_id)
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


# --- endpoints ----------------------------------------------------------------------------------


def endpoint_recent_outcomes(endpoint_id: int, limit: int) -> list[str]:
    """The outcomes of the most recent calls finished through an endpoint, newest first, at most
    `limit`: what agents.health judges the endpoint on (registered as its reader in
    scheduler.apps). One bounded query on attempt_endpoint_recent_idx."""
    return list(
        Attempt.objects.filter(endpoint_id=endpoint_id, kind=AttemptKind.CALL, finished_at__isnull=False)
        .order_by("-finished_at")
        .values_list("outcome", flat=True)[:limit]
    )
