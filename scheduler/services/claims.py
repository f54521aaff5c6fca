"""The agent's claim: one delivery of an attempt takes it (or finds it taken) and reads what the
call needs.

The claim is the attempt's move from queued to started: `started_at` is set by exactly one
delivery, guarded on the attempt being unstarted and in flight; a duplicate or superseded
delivery changes nothing and calls nothing. The claim commits before the call, so a second
delivery of the same attempt finds it taken.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connection, transaction
from django.db.models.functions import Now
from jmespath.exceptions import JMESPathError

from agents.models import AgentKind
from agents.outcome import AttemptKind, CallResult, CallSpec, Outcome
from sas_project.database import is_postgresql
from scheduler import expressions
from scheduler.callback_tokens import callback_url
from scheduler.definitions import ancestors
from scheduler.faults import maybe_fail_after_commit
from scheduler.models import Attempt, EventKind, Step, StepKind, StepStatus
from scheduler.services.locking import JOB_FORWARD
from scheduler.unit import unit_of_work

S = StepStatus
AGENT = "agent"
#: Steps that do the job's forward work (not called once it stops running forward).
FORWARD_KINDS = frozenset({StepKind.ACTION, StepKind.ITEM})


#: attempt_claim's answer when the attempt was claimed but its job no longer runs forward work:
#: the caller records it as "did not happen" without calling the remote.
NOT_CALLED = CallResult(Outcome.NOT_HAPPENED, error="not called: the job stopped running forward steps")


# The job's row is locked (FOR KEY SHARE) before the attempt is claimed, and its status read
# from the locked row: a claim waits for a transaction that holds the job (an outcome, the
# unwind of a compensation) and then sees the status it committed. Read from the statement's
# snapshot instead, a claim racing the unwind of a fan-out saw the job still running and called
# the remote, while the unwind, not seeing the claim, left that item's effect undone.
CLAIM_SQL = """
WITH job AS (
    SELECT j.id, j.status FROM scheduler_job j
    WHERE j.id = (SELECT job_id FROM scheduler_step WHERE id = %(step)s)
    FOR KEY SHARE
), claimed AS (
    UPDATE scheduler_attempt SET started_at = statement_timestamp()
    WHERE step_id = %(step)s AND number = %(number)s AND started_at IS NULL AND finished_at IS NULL
      AND EXISTS (SELECT 1 FROM job)
    RETURNING id
)
SELECT (SELECT count(*) FROM claimed) AS claimed, statement_timestamp() AS db_now,
       a.kind AS attempt_kind, a.endpoint_url, a.deadline, a.dispatched_at, p.name AS pool_name,
       j.trace_parent,
       s.id AS step_id, s.job_id, s.kind AS step_kind, s.operation_id,
       COALESCE(s.input_override, c.input_override) AS input_override,
       d.name, d.path, d.status_path, d.compensation_path, d.depends_on, d.input_map,
       s.item, s.item_index,
       p.kind AS agent_kind, e.secret_header_name, e.secret_header_value,
       (SELECT status FROM job) AS job_status, j.input,
       c.operation_id AS compensates, c.output AS original_output,
       CASE WHEN d.depends_on <> '[]'::jsonb THEN (
           SELECT jsonb_agg(jsonb_build_array(s2.name, s2.status, s2.output, d2.depends_on))
           FROM scheduler_step s2 JOIN scheduler_stepdefinition d2 ON d2.id = s2.definition_id
           WHERE s2.job_id = s.job_id AND s2.kind = 'action'
       ) END AS siblings,
       (SELECT h.heartbeat_details FROM scheduler_attempt h
        WHERE h.step_id = a.step_id AND h.number < a.number AND h.heartbeat_details IS NOT NULL
        ORDER BY h.number DESC LIMIT 1) AS heartbeat_details
FROM scheduler_attempt a
JOIN scheduler_step s ON s.id = a.step_id
JOIN scheduler_job j ON j.id = s.job_id
JOIN scheduler_stepdefinition d ON d.id = s.definition_id
JOIN agents_agentpool p ON p.id = s.pool_id
LEFT JOIN agents_agentendpoint e ON e.id = a.endpoint_id
LEFT JOIN scheduler_step c ON c.id = s.compensates_id
WHERE a.step_id = %(step)s AND a.number = %(number)s
"""


#: The claim's columns that PostgreSQL hands over as JSON text.
JSON_COLUMNS = (
    "depends_on",
    "input",
    "input_override",
    "original_output",
    "siblings",
    "heartbeat_details",
    "input_map",
    "item",
)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def _claim_row(step_id: int, number: int) -> dict[str, Any] | None:
    """Claim the attempt and read what its call needs.

    On PostgreSQL one statement does both (its own transaction: one commit); elsewhere a short
    transaction with the ORM. `claimed` is 0 for a duplicate or superseded delivery.
    """
    if is_postgresql():
        with connection.cursor() as cursor:
            cursor.execute(CLAIM_SQL, {"step": step_id, "number": number})
            row = cursor.fetchone()
            if row is None:
                return None
            data = dict(zip([col.name for col in cursor.description], row, strict=True))
        maybe_fail_after_commit("the claim of an attempt")
        for key in JSON_COLUMNS:
            data[key] = _json(data[key])
        return data
    with transaction.atomic():
        claimed = Attempt.objects.filter(
            step_id=step_id, number=number, started_at__isnull=True, finished_at__isnull=True
        ).update(started_at=Now())
        attempt = (
            Attempt.objects.select_related(
                "step__job", "step__definition", "step__pool", "endpoint", "step__compensates"
            )
            .annotate(db_now=Now())
            .filter(step_id=step_id, number=number)
            .first()
        )
        if attempt is None:
            return None
        step, definition = attempt.step, attempt.step.definition
        siblings = (
            [
                list(r)
                for r in Step.objects.filter(job_id=step.job_id, kind=StepKind.ACTION).values_list(
                    "name", "status", "output", "definition__depends_on"
                )
            ]
            if definition.depends_on
            else None
        )
        heartbeat_details = (
            Attempt.objects.filter(step_id=step_id, number__lt=number, heartbeat_details__isnull=False)
            .order_by("-number")
            .values_list("heartbeat_details", flat=True)
            .first()
        )
    endpoint = attempt.endpoint
    return {
        "claimed": claimed,
        "db_now": attempt.db_now,  # type: ignore[attr-defined]
        "attempt_kind": attempt.kind,
        "endpoint_url": attempt.endpoint_url,
        "deadline": attempt.deadline,
        "dispatched_at": attempt.dispatched_at,
        "pool_name": step.call_pool.name,
        "trace_parent": step.job.trace_parent,
        "step_id": step.pk,
        "job_id": step.job_id,
        "step_kind": step.kind,
        "operation_id": step.operation_id,
        "input_override": (
            step.input_override
            if step.input_override is not None or step.compensates is None
            else step.compensates.input_override
        ),
        "name": definition.name,
        "path": definition.path,
        "status_path": definition.status_path,
        "compensation_path": definition.compensation_path,
        "depends_on": definition.depends_on,
        "input_map": definition.input_map,
        "item": step.item,
        "item_index": step.item_index,
        "agent_kind": step.call_pool.kind,
        "secret_header_name": endpoint.secret_header_name if endpoint else None,
        "secret_header_value": endpoint.secret_header_value if endpoint else None,
        "job_status": step.job.status,
        "input": step.job.input,
        "compensates": step.compensates.operation_id if step.compensates else None,
        "original_output": step.compensates.output if step.compensates else None,
        "siblings": siblings,
        "heartbeat_details": heartbeat_details,
    }


def attempt_claim(step_id: int, *, number: int) -> CallSpec | CallResult | None:
    """Claim attempt `number` of a step for one delivery and describe the call to make.

    Returns None (and records why) for a duplicate delivery or a superseded attempt, and
    NOT_CALLED when the job has stopped running forward steps; neither may call the remote.
    The claim commits before the call: a second delivery of the same attempt finds it taken.
    """
    row = _claim_row(step_id, number)
    if row is None:
        return None
    if not row["claimed"]:
        with unit_of_work() as unit:
            unit.event(
                job_id=row["job_id"],
                step=Step(pk=step_id, job_id=row["job_id"]),
                kind=EventKind.DELIVERY_IGNORED,
                source=AGENT,
                attempt=number,
                reason="duplicate or superseded delivery: attempt already claimed or finished",
            )
        return None
    if row["step_kind"] in FORWARD_KINDS and row["job_status"] not in JOB_FORWARD:
        return NOT_CALLED
    try:
        body = _body(row)
    except JMESPathError as exc:
        # Nothing was sent: the remote cannot have acted (a refusal, as a 4xx would be).
        return CallResult(
            Outcome.BUSINESS_FAILURE, error=f"the step's input mapping cannot be evaluated: {exc}"[:2000]
        )
    payload: dict[str, Any] = {
        "job_id": str(row["job_id"]),
        "step": row["name"],
        "operation_id": row["operation_id"],
        "attempt": number,
        **body,
    }
    if row["compensates"] is not None:
        payload["compensates"] = row["compensates"]
        payload["original_output"] = row["original_output"]
    if row["heartbeat_details"] is not None:
        # Where an earlier attempt of this operation got to, by its last heartbeat: the remote
        # may resume from there. Absent until some attempt reported details.
        payload["heartbeat_details"] = row["heartbeat_details"]
    if row["attempt_kind"] == AttemptKind.RECONCILE:
        path = row["status_path"]
    elif row["step_kind"] == StepKind.COMPENSATION:
        path = row["compensation_path"]
    else:
        path = row["path"]
    headers = {}
    callback = ""
    if row["agent_kind"] == AgentKind.QUEUE:
        # The broker's credentials, for agents.queue to connect with (never logged or queued).
        if row["secret_header_value"]:
            headers = {"username": row["secret_header_name"] or "", "password": row["secret_header_value"]}
    elif row["secret_header_name"] and row["secret_header_value"]:
        headers[row["secret_header_name"]] = row["secret_header_value"]
    if row["agent_kind"] == AgentKind.HTTP and row["attempt_kind"] == AttemptKind.CALL:
        callback = callback_url(step_id, number, row["operation_id"])
    return CallSpec(
        job_id=str(row["job_id"]),
        step_id=step_id,
        attempt=number,
        operation_id=row["operation_id"],
        kind=row["attempt_kind"],
        agent_kind=row["agent_kind"],
        base_url=row["endpoint_url"],
        path=path,
        payload=payload,
        timeout=max((row["deadline"] - row["db_now"]).total_seconds(), 0.0),
        headers=headers,
        deadline=row["deadline"],
        pool=row["pool_name"],
        trace_parent=row["trace_parent"],
        dispatched_at=row["dispatched_at"],
        claimed_at=row["db_now"],
        callback_url=callback,
    )


def _body(row: dict[str, Any]) -> dict[str, Any]:
    """What the remote receives besides the call's identity: `input` and `results` as they are,
    or (with an input mapping) `input` built from them; a fan-out item's element and position as
    `item` and `index` either way."""
    # An operator's edited retry gives the step its own input (and its undo the same one).
    job_input = row["input_override"] if row["input_override"] is not None else row["input"]
    results = _ancestor_results(row["name"], [tuple(r) for r in row["siblings"] or []])
    item: dict[str, Any] = {}
    if row["item_index"] is not None:
        item = {"item": row["item"], "index": row["item_index"]}
    if row["input_map"] is None:
        return {"input": job_input, "results": results, **item}
    data = {"input": job_input, "results": results, **item}
    return {"input": expressions.render(row["input_map"], data), **item}


def _ancestor_results(name: str, siblings: list[tuple[str, str, Any, list[str]]]) -> dict[str, Any]:
    """Outputs of the steps `name` depends on, directly or not. They are settled before the step
    is first dispatched, so every attempt sends the same payload (a remote that compares the
    bodies of one idempotency key sees a true retry)."""
    depends = {n: deps for n, _, _, deps in siblings}
    outputs = {n: out for n, status, out, _ in siblings if status in (S.SUCCEEDED, S.COMPENSATED)}
    return {n: outputs[n] for n in sorted(ancestors(depends, name)) if n in outputs}
