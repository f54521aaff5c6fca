"""The job as the API shows it, declared once: for each resource (job, step, attempt, callback)
an ordered table of its fields and how each is read from the row.

The tables are the representation. The serializers of scheduler.serializers.jobs take their
`Meta.fields` from them (the schema and the documentation come from those), and render with the
functions below, which read the tables; on PostgreSQL the database builds the same document in one
statement (`scheduler/sql/postgresql/sas_job_document.sql`, its timestamps by
`scheduler/sql/postgresql/sas_drf_time.sql`): a field added here is added there, and
tests/api/test_job_document.py fails until it is.

Rendering with plain functions, not DRF's: a ModelSerializer builds its fields from the model's
metadata on each use, which costs more than the rest of a submission or a job page. The output is
the same field for field (tests/api/test_jobs.py compares them with DRF's own rendering).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar

from django.utils import timezone

from scheduler.models import Attempt, Delivery, Job, Step, StepDefinitionKind, StepKind, StepStatus
from scheduler.services.capacity import key_value, rate_key_value
from scheduler.services.flow import waiting_for as job_waiting_for
from scheduler.wait_definitions import next_rung, rung_at, timeout_at

Row = TypeVar("Row")
#: A resource's fields, in the order the API writes them: name -> how it is read from the row.
Fields = dict[str, Callable[[Row], Any]]


def drf_datetime(value: Any) -> str | None:
    """A datetime as DRF renders one: ISO 8601 in the current time zone, UTC as "Z"."""
    if value is None:
        return None
    text: str = value.astimezone(timezone.get_current_timezone()).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def render(fields: Fields[Row], row: Row) -> dict[str, Any]:
    """`row` as the API shows it: each field of its table, in the table's order."""
    return {name: read(row) for name, read in fields.items()}


def _time(name: str) -> Callable[[Any], str | None]:
    """The row's datetime `name`, as the API writes it."""
    read = attrgetter(name)
    return lambda row: drf_datetime(read(row))


def _or_none(name: str) -> Callable[[Any], Any]:
    """The row's `name`, or None for an empty value ("", no key)."""
    read = attrgetter(name)
    return lambda row: read(row) or None


def _id_text(name: str) -> Callable[[Any], str | None]:
    """The row's pointer `name` (a UUID), as text, or None."""
    read = attrgetter(name)
    return lambda row: str(value) if (value := read(row)) else None


def _pool_name(row: Step) -> str | None:
    return row.pool.name if row.pool is not None else None


def waiting_for(step: Step) -> dict[str, Any] | None:
    """What a waiting step waits for, as the API shows it (`waiting_for`), or None when it does
    not wait: `{"kind": "signal", "signal", "timeout_at"}`, `{"kind": "approval", "group",
    "timeout_at"}`, `{"kind": "timer", "until"}`, `{"kind": "workflow", "workflow", "child_job", "tries"}`
    or, for a call waiting its turn, `{"kind": "backoff", "until", "pool"}` (its remote asked to
    wait), `{"kind": "concurrency", "key", "limit"}` (its step's key), `{"kind": "rate", "key",
    "pool", "until"}` (a rate held it back; `until`: when its bucket has a token next) or
    `{"kind": "capacity", "pool"}`."""
    if step.status != StepStatus.WAITING:
        return None
    definition = step.definition
    if definition.kind == StepDefinitionKind.WORKFLOW:
        return {
            "kind": "workflow",
            "workflow": definition.child_workflow,
            "child_job": child_job(step),
            "tries": step.attempt + 1,
        }
    at = drf_datetime(step.deadline)
    if definition.kind == StepDefinitionKind.SIGNAL:
        return {"kind": "signal", "signal": definition.signal, **_decision_times(step)}
    if definition.kind == StepDefinitionKind.APPROVAL:
        return {"kind": "approval", "group": definition.group or None, **_decision_times(step)}
    if definition.kind == StepDefinitionKind.TIMER:
        return {"kind": "timer", "until": at}
    if (definition.for_each or definition.kind == StepDefinitionKind.REPEAT) and step.kind == StepKind.ACTION:
        # A fan-out, or a repeat between or during its iterations (its deadline: the next one's).
        return {"kind": "items"}
    # A call waiting for the pump (scheduler.services.capacity), by what it waits for.
    if step.not_before is not None and not step.rate_key:
        return {"kind": "backoff", "until": drf_datetime(step.not_before), "pool": _pool_name(step)}
    if step.concurrency_key:
        limit = (definition.concurrency or {}).get("limit")
        return {"kind": "concurrency", "key": key_value(step.concurrency_key), "limit": limit}
    if step.rate_key:
        return {
            "kind": "rate",
            "key": rate_key_value(step.rate_key),
            "pool": _pool_name(step),
            "until": drf_datetime(step.not_before),
        }
    return {"kind": "capacity", "pool": _pool_name(step)}


def _decision_times(step: Step) -> dict[str, Any]:
    """A signal's or approval's `timeout_at`, and its `escalation` (None without a ladder):
    `{"rung": walked so far, "rungs", "group": reassigned to, "next": {"do", "at"} or None}`
    (scheduler.services.escalation; its step's deadline is the sooner of the two)."""
    definition, since = step.definition, step.waiting_since
    if since is None:  # began waiting before waits escalated: its deadline is its timeout
        return {"timeout_at": drf_datetime(step.deadline), "escalation": None}
    rungs = definition.escalation or []
    ladder = None
    if rungs:
        following = next_rung(definition, rung=step.escalation_rung)
        rung_time = rung_at(definition, since=since, rung=step.escalation_rung)
        ladder = {
            "rung": step.escalation_rung,
            "rungs": len(rungs),
            "group": step.escalation_group or None,
            "next": {"do": following["do"], "at": drf_datetime(rung_time)} if following else None,
        }
    return {"timeout_at": drf_datetime(timeout_at(definition, since=since)), "escalation": ladder}


def child_job(step: Step) -> str | None:
    """The id of the latest child job a sub-workflow step started (its current try's, or the one
    that failed while the next waits its backoff), or None. Read from `child_job_id` when the
    step's reader put it there (the job's selectors do, for all its steps at once)."""
    if step.definition.kind != StepDefinitionKind.WORKFLOW or step.kind != StepKind.ACTION:
        return None
    if hasattr(step, "child_job_id"):
        found = step.child_job_id
    else:
        found = (
            Job.objects.filter(parent_job_id=step.job_id, parent_step=step.name)
            .order_by("-parent_try")
            .values_list("pk", flat=True)
            .first()
        )
    return str(found) if found is not None else None


def rerun_ids(job: Job) -> list[str]:
    """The jobs that rerun this one, oldest first (light rows carry them; else one query)."""
    given = getattr(job, "rerun_ids", None)
    if given is not None:
        return [str(pk) for pk in given]
    return [
        str(pk)
        for pk in Job.objects.filter(rerun_of_id=job.pk).order_by("created_at").values_list("pk", flat=True)
    ]


ATTEMPT_FIELDS: Fields[Attempt] = {
    "number": attrgetter("number"),
    "kind": attrgetter("kind"),
    "endpoint": attrgetter("endpoint_url"),
    "pool": attrgetter("pool.name"),
    "policy_version": attrgetter("policy_version"),
    "dispatched_at": _time("dispatched_at"),
    "deadline": _time("deadline"),
    "started_at": _time("started_at"),
    "finished_at": _time("finished_at"),
    "outcome": attrgetter("outcome"),
    "decided_by": attrgetter("decided_by"),
    "status_code": attrgetter("status_code"),
    "latency_ms": attrgetter("latency_ms"),
    "response_excerpt": attrgetter("response_excerpt"),
    "error": attrgetter("error"),
    "late_outcome": attrgetter("late_outcome"),
    "late_at": _time("late_at"),
    "heartbeat_at": _time("heartbeat_at"),
    "heartbeat_details": attrgetter("heartbeat_details"),
    "retry_after_seconds": attrgetter("retry_after_seconds"),
}


STEP_FIELDS: Fields[Step] = {
    "id": attrgetter("pk"),
    "name": attrgetter("name"),
    "kind": attrgetter("kind"),
    "compensates": attrgetter("compensates_id"),
    "status": attrgetter("status"),
    "operation_id": attrgetter("operation_id"),
    "attempt_count": attrgetter("attempt"),
    "calls": attrgetter("calls"),
    "last_outcome": attrgetter("last_outcome"),
    "type": attrgetter("definition.kind"),
    "pool": _pool_name,
    "waiting_for": waiting_for,
    # A fan-out step's items by status, put on the row by its reader (scheduler.selectors).
    "items": lambda step: getattr(step, "item_summary", None),
    "deadline": _time("deadline"),
    "not_before": _time("not_before"),
    "output": attrgetter("output"),
    "error": attrgetter("error"),
    "reason": _or_none("status_reason"),
    "input_override": attrgetter("input_override"),
    "reused_from": attrgetter("reused_from_id"),
    "child_job": child_job,
    "created_at": _time("created_at"),
    "updated_at": _time("updated_at"),
    "finished_at": _time("finished_at"),
    "attempts": lambda step: [render(ATTEMPT_FIELDS, a) for a in step.attempts.all()],
}


def step_data(step: Step) -> dict[str, Any]:
    return render(STEP_FIELDS, step)


CALLBACK_FIELDS: Fields[Delivery] = {
    "job_status": lambda delivery: delivery.payload.get("status"),
    "status": attrgetter("status"),
    "tries": attrgetter("tries"),
    "last_status_code": attrgetter("last_status_code"),
    "last_error": attrgetter("last_error"),
    "created_at": _time("created_at"),
    "next_try_at": _time("next_try_at"),
    "delivered_at": _time("delivered_at"),
}


#: A job in a list: no input, result or steps (read the job for those).
JOB_SUMMARY_FIELDS: Fields[Job] = {
    "id": lambda job: str(job.pk),
    "workflow": attrgetter("workflow.name"),
    "workflow_version": attrgetter("workflow.version"),
    "status": attrgetter("status"),
    "paused": lambda job: job.paused_at is not None,
    "at_risk": attrgetter("at_risk"),
    "compensation_reason": attrgetter("compensation_reason"),
    "submitter": lambda job: job.submitter.username if job.submitter is not None else None,
    "business_key": _or_none("business_key"),
    "priority": attrgetter("priority"),
    "rerun_of": _id_text("rerun_of_id"),
    "parent_job": _id_text("parent_job_id"),
    "parent_step": attrgetter("parent_step"),
    "created_at": _time("created_at"),
    "updated_at": _time("updated_at"),
    "finished_at": _time("finished_at"),
}

#: A job read on its own: the summary, then its input, result, callbacks, reruns and steps.
JOB_FIELDS: Fields[Job] = {
    **JOB_SUMMARY_FIELDS,
    "input": attrgetter("input"),
    "result": attrgetter("result"),
    "paused_at": _time("paused_at"),
    "deadline": _time("deadline"),
    "waiting_for": job_waiting_for,  # scheduler.services.flow.waiting_for, its one definition
    "started_by_event": attrgetter("started_by_event"),
    "callback_url": _or_none("callback_url"),
    "callbacks": lambda job: [render(CALLBACK_FIELDS, d) for d in job.callbacks],
    "reruns": rerun_ids,
    "steps": lambda job: [step_data(s) for s in job.steps.all()],
}


def job_summary_data(job: Job) -> dict[str, Any]:
    return render(JOB_SUMMARY_FIELDS, job)


def job_data(job: Job) -> dict[str, Any]:
    return render(JOB_FIELDS, job)
