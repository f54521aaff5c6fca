"""The scheduler's services: submit jobs, dispatch steps, record outcomes, advance the DAG.

Transaction boundaries (docs/architecture.md, "How one step runs"):
- every service that changes a job takes the job's row lock first (`_lock`), then reads its
  steps; outcomes of parallel branches therefore serialise on the job, and the step that joins
  them is dispatched exactly once;
- dispatch writes the step's intent, its Attempt, its Event and the agent task (django-q2's ORM
  broker on the same database) in that one transaction: a crash leaves no intent or an intent
  with a deadline that the supervisor will find;
- no remote is ever called inside a transaction: the agent claims its attempt, commits, calls,
  then records the outcome in a new transaction.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from django.db import IntegrityError, connection, transaction
from django.db.models import Subquery
from django.db.models.functions import Now
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.tasks import async_task

from agents.health import choose_endpoint
from agents.models import AgentPool
from agents.outcome import CallResult, CallSpec
from scheduler.errors import IdempotencyConflict, InvalidInput
from scheduler.faults import maybe_fail_after_commit
from scheduler.models import (
    Attempt,
    AttemptKind,
    Job,
    JobStatus,
    Outcome,
    Step,
    StepDefinition,
    StepKind,
    StepStatus,
    Workflow,
)
from scheduler.transitions import (
    STEP_TERMINAL,
    Unit,
    User,
    job_transition,
    step_postpone,
    step_transition,
    unit_of_work,
)

S = StepStatus
J = JobStatus

SCHEDULER = "scheduler"
AGENT = "agent"

#: Forward steps stop here when their job stops running (compensating, failed, cancelled).
STEP_SETTLED = frozenset({S.SUCCEEDED, S.FAILED, S.SKIPPED, S.COMPENSATED})
#: Forward steps waiting on a decision; abandoned (-> failed) once the job stops running.
STEP_AWAITING = frozenset({S.ATTEMPT_FAILED, S.UNKNOWN, S.RETRY_WAIT, S.HELD})
#: The last outcomes that prove an operation did not happen at the remote: the remote processed
#: the operation ID and refused it. A status query's "not found" is no such proof (the call may
#: still be on its way), so a step whose last word is that is compensated all the same.
NO_EFFECT_OUTCOMES = frozenset({Outcome.BUSINESS_FAILURE})
#: Job statuses in which forward steps are dispatched and retried.
JOB_FORWARD = frozenset({J.PENDING, J.RUNNING, J.NEEDS_ATTENTION})


# --- loading ----------------------------------------------------------------------------------


@dataclass
class JobState:
    """A locked job and all its steps, read after the lock was taken."""

    job: Job
    steps: list[Step]

    def step(self, step_id: int) -> Step:
        for step in self.steps:
            if step.pk == step_id:
                return step
        raise InvalidInput(f"step {step_id} is not part of job {self.job.pk}")

    @property
    def actions(self) -> list[Step]:
        return [s for s in self.steps if s.kind == StepKind.ACTION]

    @property
    def compensations(self) -> dict[int, Step]:
        return {s.compensates_id: s for s in self.steps if s.compensates_id is not None}


def lock_job(unit: Unit, job_id: Any) -> JobState:
    """Take the job's row lock (reading the database clock with it), then load its steps.

    Two statements on purpose: under READ COMMITTED a single `SELECT ... JOIN ... FOR UPDATE OF
    job` that waited for the lock would return the steps as they were before the transaction it
    waited for committed. The second statement reads them after the lock is held.
    """
    job = (
        Job.objects.select_for_update(of=("self",))
        .select_related("workflow")
        .annotate(db_now=Now())
        .get(pk=job_id)
    )
    unit.now = job.db_now  # type: ignore[attr-defined]
    steps = list(
        Step.objects.filter(job_id=job.pk).select_related("definition__policy", "pool").order_by("id")
    )
    for step in steps:
        step.job = job  # one instance: a change made through one step is seen through all
    return JobState(job=job, steps=steps)


def load_locked_jobs(jobs: list[Job]) -> dict[Any, JobState]:
    """States of jobs whose row locks this transaction already holds, with all their steps read
    in one statement (after the locks were taken)."""
    by_id = {job.pk: job for job in jobs}
    states = {job_id: JobState(job=job, steps=[]) for job_id, job in by_id.items()}
    for step in (
        Step.objects.filter(job_id__in=list(by_id))
        .select_related("definition__policy", "pool__alternate")
        .order_by("job_id", "id")
    ):
        step.job = by_id[step.job_id]
        states[step.job_id].steps.append(step)
    return states


# --- submission -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Submission:
    job: Job
    created: bool


def json_storable(value: Any, field: str, *, depth: int = 0) -> None:
    """Refuse JSON that the database cannot store or that nests absurdly deep: NUL characters
    (PostgreSQL's jsonb has no room for them), non-finite numbers, more than 64 levels."""
    if depth > 64:
        raise InvalidInput(f"{field} nests deeper than 64 levels", field=field)
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidInput(f"{field} contains a NUL character", field=field)
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidInput(f"{field} contains a number that is not finite", field=field)
    elif isinstance(value, dict):
        for key, item in value.items():
            json_storable(key, field, depth=depth + 1)
            json_storable(item, field, depth=depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            json_storable(item, field, depth=depth + 1)


def _request_hash(workflow: str, payload: object) -> str:
    canonical = json.dumps({"workflow": workflow, "input": payload}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _replay(submitter: User | None, key: str, request_hash: str) -> Submission | None:
    existing = Job.objects.filter(
        submitter=cast(Any, submitter) if submitter is not None and submitter.is_authenticated else None,
        idempotency_key=key,
    ).first()
    if existing is None:
        return None
    if existing.request_hash != request_hash:
        raise IdempotencyConflict(
            f"Idempotency-Key {key!r} was already used for a different request (job {existing.pk})",
            job_id=str(existing.pk),
        )
    return Submission(job=existing, created=False)


def job_submit(
    *,
    workflow: str,
    input: object,
    submitter: User | None = None,
    idempotency_key: str | None = None,
) -> Submission:
    """Create a job of the latest version of `workflow` and dispatch its first steps.

    With an idempotency key, the same submitter sending the same body again gets the same job
    back (created=False); a different body raises IdempotencyConflict. Two concurrent requests
    with one key make one job: the database's unique constraint decides, not a prior read.
    """
    if not isinstance(input, dict):
        raise InvalidInput("input must be a JSON object", field="input")
    json_storable(input, "input")
    if idempotency_key is not None and not (0 < len(idempotency_key) <= 255):
        raise InvalidInput("Idempotency-Key must be 1 to 255 characters", field="Idempotency-Key")
    request_hash = _request_hash(workflow, input)
    user = submitter if submitter is not None and submitter.is_authenticated else None
    try:
        # One transaction (one commit) reads the definitions and writes the job.
        with unit_of_work() as unit:
            definitions = list(
                StepDefinition.objects.filter(
                    workflow_id=Subquery(
                        Workflow.objects.filter(name=workflow).order_by("-version").values("id")[:1]
                    )
                )
                .select_related("workflow", "policy", "pool")
                .annotate(db_now=Now())
                .order_by("position")
            )
            if not definitions:
                raise InvalidInput(f"unknown workflow {workflow!r}", field="workflow")
            if idempotency_key:
                replay = _replay(user, idempotency_key, request_hash)
                if replay:
                    return replay
            unit.now = definitions[0].db_now  # type: ignore[attr-defined]
            job = _create_job(unit, definitions, input, user, idempotency_key, request_hash)
    except IntegrityError:
        if not idempotency_key:
            raise
        # A concurrent request with the same key won the insert.
        replay = _replay(user, idempotency_key, request_hash)
        if replay is None:
            raise
        return replay
    return Submission(job=job, created=True)


def _create_job(
    unit: Unit,
    definitions: Sequence[StepDefinition],
    payload: dict[str, Any],
    user: User | None,
    idempotency_key: str | None,
    request_hash: str,
) -> Job:
    now = unit.now
    definition = definitions[0].workflow
    # A job is created running: its first steps are dispatched in this same transaction.
    job = Job.objects.create(
        status=J.RUNNING,
        workflow=definition,
        input=payload,
        submitter=cast(Any, user),
        idempotency_key=idempotency_key or None,
        request_hash=request_hash,
        deadline=(
            now + dt.timedelta(seconds=definition.deadline_seconds) if definition.deadline_seconds else None
        ),
        created_at=now,
        updated_at=now,
    )
    steps = Step.objects.bulk_create(
        [
            Step(
                job=job,
                definition=d,
                name=d.name,
                kind=StepKind.ACTION,
                operation_id=str(uuid.uuid4()),
                pool=d.pool,
                created_at=now,
                updated_at=now,
            )
            for d in definitions
        ]
    )
    unit.event(
        job_id=job.pk,
        kind="job_submitted",
        source=SCHEDULER,
        to_status=J.RUNNING,
        actor=user,
        data={"workflow": definition.name, "version": definition.version},
    )
    for step in steps:
        step.job = job
    job_advance(unit, JobState(job=job, steps=list(steps)), source=SCHEDULER)
    return job


# --- dispatch ---------------------------------------------------------------------------------


def step_dispatch(
    unit: Unit,
    state: JobState,
    step: Step,
    *,
    source: str,
    kind: str = AttemptKind.CALL,
    pool: AgentPool | None = None,
    avoid_endpoint_id: int | None = None,
    actor: User | None = None,
    reason: str = "",
    data: dict[str, Any] | None = None,
) -> Attempt:
    """Write the intent of attempt n+1 and enqueue its agent task, in the caller's transaction.

    The deadline comes from the database clock and the step's current policy.
    """
    policy = step.definition.policy
    pool = pool or step.pool
    endpoint = choose_endpoint(pool, now=unit.now, avoid_id=avoid_endpoint_id, spread=step.pk)
    number = step.attempt + 1
    deadline = unit.now + dt.timedelta(seconds=policy.timeout_seconds)
    data = {
        "kind": kind,
        "pool": pool.name,
        "endpoint": endpoint.url if endpoint else "",
        "policy": policy.name,
        "policy_version": policy.version,
        "deadline": deadline.isoformat(),
        **(data or {}),
    }
    step_transition(
        unit,
        step,
        S.DISPATCHED,
        source=source,
        kind="step_dispatched",
        actor=actor,
        reason=reason,
        data=data,
        attempt=number,
        calls=step.calls + (1 if kind == AttemptKind.CALL else 0),
        pool=pool,
        endpoint=endpoint,
        deadline=deadline,
        not_before=None,
        first_dispatched_at=step.first_dispatched_at or unit.now,
    )
    # The ORM broker writes to this same database inside this transaction: the task exists
    # if and only if the intent commits. Only ids go into the (pickled) task.
    broker = get_broker()
    async_task(
        "agents.tasks.run_attempt",
        step.pk,
        number,
        task_name=f"step-{step.pk}-attempt-{number}",
        broker=broker,
        q_options={"timeout": max(int(Conf.TIMEOUT or 0), int(policy.timeout_seconds) + 30)},
    )
    attempt = Attempt.objects.create(
        step=step,
        number=number,
        kind=kind,
        pool=pool,
        endpoint=endpoint,
        endpoint_url=endpoint.url if endpoint else "",
        policy_version=policy.version,
        dispatched_at=unit.now,
        deadline=deadline,
        # Which queue row carries the task (the project's broker tells; others do not).
        queue_row=getattr(broker, "last_enqueued", None),
    )
    return attempt


# --- the agent's side: claim and report ---------------------------------------------------------


#: attempt_claim's answer when the attempt was claimed but its job no longer runs forward work:
#: the caller records it as "did not happen" without calling the remote.
NOT_CALLED = CallResult(Outcome.NOT_HAPPENED, error="not called: the job stopped running forward steps")


CLAIM_SQL = """
WITH claimed AS (
    UPDATE scheduler_attempt SET started_at = statement_timestamp()
    WHERE step_id = %(step)s AND number = %(number)s AND started_at IS NULL AND finished_at IS NULL
    RETURNING id
)
SELECT (SELECT count(*) FROM claimed) AS claimed, statement_timestamp() AS db_now,
       a.kind AS attempt_kind, a.endpoint_url, a.deadline,
       s.id AS step_id, s.job_id, s.kind AS step_kind, s.operation_id,
       d.name, d.path, d.status_path, d.compensation_path, d.depends_on,
       p.kind AS agent_kind, e.secret_header_name, e.secret_header_value,
       j.status AS job_status, j.input,
       c.operation_id AS compensates, c.output AS original_output,
       CASE WHEN d.depends_on <> '[]'::jsonb THEN (
           SELECT jsonb_agg(jsonb_build_array(s2.name, s2.status, s2.output, d2.depends_on))
           FROM scheduler_step s2 JOIN scheduler_stepdefinition d2 ON d2.id = s2.definition_id
           WHERE s2.job_id = s.job_id AND s2.kind = 'action'
       ) END AS siblings
FROM scheduler_attempt a
JOIN scheduler_step s ON s.id = a.step_id
JOIN scheduler_job j ON j.id = s.job_id
JOIN scheduler_stepdefinition d ON d.id = s.definition_id
JOIN agents_agentpool p ON p.id = s.pool_id
LEFT JOIN agents_agentendpoint e ON e.id = a.endpoint_id
LEFT JOIN scheduler_step c ON c.id = s.compensates_id
WHERE a.step_id = %(step)s AND a.number = %(number)s
"""


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def _claim_row(step_id: int, number: int) -> dict[str, Any] | None:
    """Claim the attempt and read what its call needs.

    On PostgreSQL one statement does both (its own transaction: one commit); elsewhere a short
    transaction with the ORM. `claimed` is 0 for a duplicate or superseded delivery.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(CLAIM_SQL, {"step": step_id, "number": number})
            row = cursor.fetchone()
            if row is None:
                return None
            data = dict(zip([col.name for col in cursor.description], row, strict=True))
        maybe_fail_after_commit("the claim of an attempt")
        for key in ("depends_on", "input", "original_output", "siblings"):
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
    endpoint = attempt.endpoint
    return {
        "claimed": claimed,
        "db_now": attempt.db_now,  # type: ignore[attr-defined]
        "attempt_kind": attempt.kind,
        "endpoint_url": attempt.endpoint_url,
        "deadline": attempt.deadline,
        "step_id": step.pk,
        "job_id": step.job_id,
        "step_kind": step.kind,
        "operation_id": step.operation_id,
        "name": definition.name,
        "path": definition.path,
        "status_path": definition.status_path,
        "compensation_path": definition.compensation_path,
        "depends_on": definition.depends_on,
        "agent_kind": step.pool.kind,
        "secret_header_name": endpoint.secret_header_name if endpoint else None,
        "secret_header_value": endpoint.secret_header_value if endpoint else None,
        "job_status": step.job.status,
        "input": step.job.input,
        "compensates": step.compensates.operation_id if step.compensates else None,
        "original_output": step.compensates.output if step.compensates else None,
        "siblings": siblings,
    }


def attempt_claim(step_id: int, number: int) -> CallSpec | CallResult | None:
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
                kind="delivery_ignored",
                source=AGENT,
                attempt=number,
                reason="duplicate or superseded delivery: attempt already claimed or finished",
            )
        return None
    if row["step_kind"] == StepKind.ACTION and row["job_status"] not in JOB_FORWARD:
        return NOT_CALLED
    payload: dict[str, Any] = {
        "job_id": str(row["job_id"]),
        "step": row["name"],
        "operation_id": row["operation_id"],
        "attempt": number,
        "input": row["input"],
        "results": _ancestor_results(row["name"], [tuple(r) for r in row["siblings"] or []]),
    }
    if row["compensates"] is not None:
        payload["compensates"] = row["compensates"]
        payload["original_output"] = row["original_output"]
    if row["attempt_kind"] == AttemptKind.RECONCILE:
        path = row["status_path"]
    elif row["step_kind"] == StepKind.COMPENSATION:
        path = row["compensation_path"]
    else:
        path = row["path"]
    headers = {}
    if row["secret_header_name"] and row["secret_header_value"]:
        headers[row["secret_header_name"]] = row["secret_header_value"]
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
    )


def _ancestor_results(name: str, siblings: list[tuple[str, str, Any, list[str]]]) -> dict[str, Any]:
    """Outputs of the steps `name` depends on, directly or not. They are settled before the step
    is first dispatched, so every attempt sends the same payload (a remote that compares the
    bodies of one idempotency key sees a true retry)."""
    depends = {n: deps for n, _, _, deps in siblings}
    outputs = {n: out for n, status, out, _ in siblings if status in (S.SUCCEEDED, S.COMPENSATED)}
    found: set[str] = set()
    todo = list(depends.get(name, []))
    while todo:
        dep = todo.pop()
        if dep not in found:
            found.add(dep)
            todo.extend(depends.get(dep, []))
    return {n: outputs[n] for n in sorted(found) if n in outputs}


def step_record_outcome(
    step_id: int,
    number: int,
    result: CallResult,
    *,
    source: str = AGENT,
    spec: CallSpec | None = None,
) -> None:
    """Record the outcome of attempt `number` and move the job on, in one transaction.

    Fenced on the attempt: an outcome for an attempt that is already decided never rolls the
    step back; a success arriving that late still completes a step that has not settled (a late
    success, the evidence of a too-short timeout), and is noted on the attempt otherwise.
    `spec` (the claimed call) saves the lookups of the job and the attempt.
    """
    job_id = (
        spec.job_id
        if spec is not None
        else (Step.objects.filter(pk=step_id).values_list("job_id", flat=True).first())
    )
    if job_id is None:
        return
    with unit_of_work() as unit:
        state = lock_job(unit, job_id)
        step = state.step(step_id)
        fields = {
            "finished_at": unit.now,
            "outcome": result.outcome,
            "decided_by": source,
            "status_code": result.status_code,
            "latency_ms": result.latency_ms,
            "response_excerpt": result.excerpt,
            "error": result.error[:2000],
        }
        live = step.attempt == number and step.status == S.DISPATCHED
        if live and spec is not None and spec.deadline is not None:
            # Under the job lock, the current attempt of a dispatched step is still in flight: its
            # outcome is written with the step's change when the unit ends (guarded all the same).
            late = unit.now > spec.deadline
            if late and result.succeeded:
                fields.update(late_outcome=Outcome.SUCCEEDED, late_at=unit.now)
            unit.close_attempt(step_id, number, fields)
            _apply_outcome(unit, state, step, result, source=source, late=late, attempt_kind=spec.kind)
            return
        if result is NOT_CALLED:
            fields["started_at"] = None  # claimed, but nothing was sent: no effect is possible
        attempt = Attempt.objects.get(step_id=step_id, number=number)
        if attempt.finished_at is not None or not live:
            _record_late(unit, state, step, attempt, result)
            return
        late = unit.now > attempt.deadline
        if late and result.succeeded:
            fields.update(late_outcome=Outcome.SUCCEEDED, late_at=unit.now)
        Attempt.objects.filter(pk=attempt.pk).update(**fields)
        _apply_outcome(unit, state, step, result, source=source, late=late, attempt_kind=attempt.kind)


def _apply_outcome(
    unit: Unit,
    state: JobState,
    step: Step,
    result: CallResult,
    *,
    source: str,
    late: bool = False,
    attempt_kind: str = AttemptKind.CALL,
) -> None:
    data = {"latency_ms": result.latency_ms, "status_code": result.status_code}
    if late:
        data["late"] = True
    if result.outcome == Outcome.SUCCEEDED:
        step_succeed(
            unit,
            state,
            step,
            output=result.output,
            source=source,
            kind="step_reconciled" if attempt_kind == AttemptKind.RECONCILE else "step_succeeded",
            reason="the remote reports the operation happened"
            if attempt_kind == AttemptKind.RECONCILE
            else "",
            data=data,
            supersede_live=False,
        )
        return
    if result.outcome == Outcome.NO_ANSWER:
        to, kind = S.UNKNOWN, "step_no_answer"
    elif attempt_kind == AttemptKind.RECONCILE and result.outcome != Outcome.NOT_HAPPENED:
        # The status query itself failed: the operation's outcome is still unknown.
        to, kind = S.UNKNOWN, "step_reconcile_failed"
    else:
        to, kind = S.ATTEMPT_FAILED, f"step_{result.outcome}"
    step_transition(
        unit,
        step,
        to,
        source=source,
        kind=kind,
        reason=result.error,
        data=data,
        last_outcome=Outcome.NO_ANSWER if to == S.UNKNOWN else result.outcome,
        error=result.error[:2000],
    )
    if state.job.status not in JOB_FORWARD and step.kind == StepKind.ACTION:
        job_advance(unit, state, source=source)


def _record_late(unit: Unit, state: JobState, step: Step, attempt: Attempt, result: CallResult) -> None:
    """An outcome for an attempt that is no longer the step's live one."""
    if attempt.finished_at is None:
        # Still open although the step moved on (should not happen): close it as superseded.
        Attempt.objects.filter(pk=attempt.pk).update(
            finished_at=unit.now, outcome=Outcome.SUPERSEDED, decided_by=AGENT
        )
    if not result.succeeded or attempt.late_outcome:
        unit.event(
            job_id=step.job_id,
            step=step,
            kind="late_outcome_ignored",
            source=AGENT,
            attempt=attempt.number,
            reason=f"{result.outcome} for attempt {attempt.number} after it was decided",
        )
        return
    Attempt.objects.filter(pk=attempt.pk).update(late_outcome=Outcome.SUCCEEDED, late_at=unit.now)
    if step.status in STEP_TERMINAL:
        unit.event(
            job_id=step.job_id,
            step=step,
            kind="late_success",
            source=AGENT,
            attempt=attempt.number,
            reason=f"attempt {attempt.number} succeeded after the step was already {step.status}",
            data={"output": result.output, "applied": False},
        )
        return
    step_succeed(
        unit,
        state,
        step,
        output=result.output,
        source=AGENT,
        kind="late_success",
        reason=f"attempt {attempt.number} succeeded after its deadline",
        data={"late_attempt": attempt.number, "applied": True},
    )


def step_succeed(
    unit: Unit,
    state: JobState,
    step: Step,
    *,
    output: Any,
    source: str,
    kind: str = "step_succeeded",
    reason: str = "",
    actor: User | None = None,
    data: dict[str, Any] | None = None,
    supersede_live: bool = True,
) -> None:
    """Complete a step with `output` and move its job on. Closes a live attempt as superseded
    unless the caller is recording that attempt's own outcome (`supersede_live=False`)."""
    if step.status == S.DISPATCHED and supersede_live:
        # The attempt in flight (if it is not the one reporting) can no longer change anything.
        Attempt.objects.filter(step_id=step.pk, finished_at__isnull=True).update(
            finished_at=unit.now, outcome=Outcome.SUPERSEDED, decided_by=source
        )
    step_transition(
        unit,
        step,
        S.SUCCEEDED,
        source=source,
        kind=kind,
        reason=reason,
        actor=actor,
        data=data,
        output=output,
        error="",
        last_outcome=Outcome.SUCCEEDED,
    )
    if step.compensates_id is not None:
        original = state.step(step.compensates_id)
        if original.status in (S.SUCCEEDED, S.FAILED):
            step_transition(
                unit,
                original,
                S.COMPENSATED,
                source=source,
                reason=f"compensation {step.operation_id} succeeded",
            )
    job_advance(unit, state, source=source)


# --- supervisor-facing services (decisions are made in supervisor.policies) -----------------------


def steps_still_queued(steps: list[Step]) -> set[int]:
    """Of these dispatched steps, those whose attempt has not started and whose task still waits
    in the broker's queue: they wait for a worker, not for the remote."""
    if not steps:
        return set()
    waiting = dict(
        Attempt.objects.filter(
            step_id__in=[s.pk for s in steps],
            finished_at__isnull=True,
            started_at__isnull=True,
            queue_row__isnull=False,
        ).values_list("queue_row", "step_id")
    )
    if not waiting:
        return set()
    present = OrmQ.objects.filter(pk__in=list(waiting)).values_list("pk", flat=True)
    return {waiting[pk] for pk in present}


def step_keep_waiting(unit: Unit, state: JobState, step: Step, *, source: str) -> None:
    """An overdue attempt whose task has not left the queue: give it another timeout.

    Calling again would only queue a second task behind the first (under load, a retry storm of
    stale tasks); the task keeps its place, and the attempt counts as made only once it runs.
    """
    deadline = unit.now + dt.timedelta(seconds=step.definition.policy.timeout_seconds)
    Attempt.objects.filter(step_id=step.pk, number=step.attempt, finished_at__isnull=True).update(
        deadline=deadline
    )
    step_postpone(
        unit,
        step,
        deadline=deadline,
        source=source,
        reason="its task is still waiting in the queue for a worker: deadline extended",
    )


def attempts_time_out(unit: Unit, steps: list[Step], *, source: str) -> None:
    """Close the attempts in flight of `steps` as unanswered, in one statement (each step has at
    most one unfinished attempt)."""
    if steps:
        Attempt.objects.filter(step_id__in=[s.pk for s in steps], finished_at__isnull=True).update(
            finished_at=unit.now,
            outcome=Outcome.NO_ANSWER,
            decided_by=source,
            error="no outcome reported before the deadline",
        )


def step_time_out(
    unit: Unit, state: JobState, step: Step, *, source: str, attempt_closed: bool = False
) -> None:
    """The attempt in flight passed its deadline with no outcome: its outcome is unknown.
    `attempt_closed`: the caller already closed the attempt (attempts_time_out)."""
    overdue_ms = int((unit.now - step.deadline).total_seconds() * 1000) if step.deadline is not None else None
    if not attempt_closed:
        attempts_time_out(unit, [step], source=source)
    step_transition(
        unit,
        step,
        S.UNKNOWN,
        source=source,
        kind="step_timed_out",
        reason="no outcome before the deadline"
        if step.deadline is not None
        else "dispatched with no deadline",
        data={"overdue_ms": overdue_ms},
        last_outcome=Outcome.NO_ANSWER,
        error="no outcome reported before the deadline",
    )


def step_retry_later(
    unit: Unit,
    state: JobState,
    step: Step,
    *,
    delay: float,
    source: str,
    reason: str,
    pool: AgentPool | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """Retry the step after `delay` seconds (now, when 0 and the job is not paused)."""
    if delay <= 0 and state.job.paused_at is None:
        step_dispatch(
            unit,
            state,
            step,
            source=source,
            pool=pool,
            avoid_endpoint_id=step.endpoint_id,
            reason=reason,
            data=data,
        )
        return
    fields: dict[str, Any] = {"not_before": unit.now + dt.timedelta(seconds=max(delay, 0))}
    if pool is not None:
        fields["pool"] = pool
    step_transition(
        unit,
        step,
        S.RETRY_WAIT,
        source=source,
        kind="retry_scheduled",
        reason=reason,
        data={"delay_s": round(delay, 3), **(data or {})},
        **fields,
    )


def step_reconcile(unit: Unit, state: JobState, step: Step, *, source: str, reason: str) -> None:
    """Ask the remote whether the operation happened (through a normal, supervised dispatch)."""
    step_dispatch(unit, state, step, source=source, kind=AttemptKind.RECONCILE, reason=reason)


def step_hold(unit: Unit, state: JobState, step: Step, *, source: str, reason: str) -> None:
    step_transition(unit, step, S.HELD, source=source, kind="step_held", reason=reason)
    job_advance(unit, state, source=source)


def step_give_up(unit: Unit, state: JobState, step: Step, *, action: str, source: str, reason: str) -> None:
    """No more attempts. `action` is the policy's on_exhausted: compensate, fail or hold.

    A compensation that cannot be completed is always held: only an operator can decide it.
    """
    if action == "hold" or step.kind == StepKind.COMPENSATION:
        step_hold(unit, state, step, source=source, reason=reason)
        return
    step_transition(unit, step, S.FAILED, source=source, kind="step_failed", reason=reason)
    if state.job.status not in JOB_FORWARD:
        job_advance(unit, state, source=source)
    elif action == "fail":
        job_fail(unit, state, source=source, reason=f"step {step.name} failed: {reason}")
    else:
        job_start_compensation(
            unit, state, reason_code="failure", source=source, reason=f"step {step.name} failed: {reason}"
        )


def step_abandon(unit: Unit, state: JobState, step: Step, *, source: str) -> None:
    """A forward step of a job that stopped running: no more attempts."""
    step_transition(
        unit,
        step,
        S.FAILED,
        source=source,
        kind="step_abandoned",
        reason=f"job is {state.job.status}: no further attempts",
    )
    job_advance(unit, state, source=source)


# --- the job: advance, fail, compensate -----------------------------------------------------------


def job_advance(unit: Unit, state: JobState, *, source: str, actor: User | None = None) -> None:
    """Dispatch what is ready and settle the job's status from its steps' statuses. `actor`: the
    operator whose action caused this, named on the job's transition."""
    job = state.job
    if job.compensation_reason and job.status in (J.COMPENSATING, J.NEEDS_ATTENTION):
        _advance_compensation(unit, state, source=source)
        return
    if job.status not in JOB_FORWARD:
        return
    actions = state.actions
    by_name = {s.name: s for s in actions}
    if job.paused_at is None:
        for step in actions:
            if step.status == S.PENDING and all(
                by_name[d].status == S.SUCCEEDED for d in step.definition.depends_on
            ):
                deps = step.definition.depends_on
                reason = f"{', '.join(deps)} succeeded" if deps else "ready: no dependencies"
                step_dispatch(unit, state, step, source=source, reason=reason)
    if all(s.status == S.SUCCEEDED for s in actions):
        job_transition(
            unit, job, J.SUCCEEDED, source=source, actor=actor, result={s.name: s.output for s in actions}
        )
        return
    target = J.NEEDS_ATTENTION if any(s.status == S.HELD for s in actions) else J.RUNNING
    if job.status != target:
        held = [s.name for s in actions if s.status == S.HELD]
        job_transition(
            unit,
            job,
            target,
            source=source,
            actor=actor,
            reason=f"held: {', '.join(held)}" if held else "",
        )


def job_fail(unit: Unit, state: JobState, *, source: str, reason: str, actor: User | None = None) -> None:
    """End the job `failed` without compensating: stop everything that has not started."""
    for step in state.actions:
        if step.status == S.PENDING:
            step_transition(unit, step, S.SKIPPED, source=source, reason="job failed")
        elif step.status in STEP_AWAITING:
            step_transition(unit, step, S.FAILED, source=source, kind="step_abandoned", reason="job failed")
    job_transition(unit, state.job, J.FAILED, source=source, reason=reason, actor=actor)


def job_start_compensation(
    unit: Unit,
    state: JobState,
    *,
    reason_code: str,
    source: str,
    reason: str = "",
    actor: User | None = None,
) -> None:
    """Stop the job's forward work and undo, in reverse dependency order, what may have happened."""
    job_transition(
        unit,
        state.job,
        J.COMPENSATING,
        source=source,
        reason=reason,
        actor=actor,
        compensation_reason=reason_code,
    )
    _advance_compensation(unit, state, source=source)


def needs_compensation(step: Step, sent: set[int]) -> bool:
    """Did (or may) this forward step have a side effect that has an undo action?

    Yes when it succeeded, or when it failed after a call that may have reached the remote
    (`sent`: steps with a claimed call) unless the remote's last answer for the operation ID was a
    refusal: an idempotent remote keeps the first answer it gave for a key, so a refusal is the
    operation's fate. No answer, a 5xx or a status query's "not found" prove nothing.
    """
    if not step.definition.compensation_path or step.kind != StepKind.ACTION:
        return False
    if step.status == S.SUCCEEDED:
        return True
    return step.status == S.FAILED and step.pk in sent and step.last_outcome not in NO_EFFECT_OUTCOMES


def _sent_steps(steps: list[Step]) -> set[int]:
    """Failed steps with a call that was claimed by an agent (and so may have been sent)."""
    failed = [s.pk for s in steps if s.status == S.FAILED and s.attempt > 0]
    if not failed:
        return set()
    return set(
        Attempt.objects.filter(step_id__in=failed, kind=AttemptKind.CALL, started_at__isnull=False)
        .values_list("step_id", flat=True)
        .distinct()
    )


def _advance_compensation(unit: Unit, state: JobState, *, source: str) -> None:
    job = state.job
    actions = state.actions
    for step in actions:
        if step.status == S.PENDING:
            step_transition(
                unit, step, S.SKIPPED, source=source, reason=f"job is {job.status}: never started"
            )
        elif step.status in STEP_AWAITING:
            step_transition(
                unit,
                step,
                S.FAILED,
                source=source,
                kind="step_abandoned",
                reason=f"job is {job.status}: no further attempts",
            )
    compensations = state.compensations
    sent = _sent_steps(actions)

    def done(step: Step) -> bool:
        if step.status == S.COMPENSATED:
            return True
        return step.status in STEP_SETTLED and not needs_compensation(step, sent)

    dependents: dict[str, list[Step]] = {s.name: [] for s in actions}
    for step in actions:
        for dep in step.definition.depends_on:
            dependents[dep].append(step)

    if job.paused_at is None:
        for step in actions:
            if step.pk in compensations or not needs_compensation(step, sent):
                continue
            if all(done(d) for d in dependents[step.name]):
                compensation = Step.objects.create(
                    job=job,
                    definition=step.definition,
                    name=f"{step.name}.compensate",
                    kind=StepKind.COMPENSATION,
                    compensates=step,
                    operation_id=f"{step.operation_id}:compensate",
                    pool=step.pool,
                    created_at=unit.now,
                    updated_at=unit.now,
                )
                state.steps.append(compensation)
                compensations[step.pk] = compensation
                step_dispatch(
                    unit,
                    state,
                    compensation,
                    source=source,
                    reason=f"undo {step.name}: every step after it is undone",
                )

    if any(c.status == S.HELD for c in compensations.values()):
        if job.status != J.NEEDS_ATTENTION:
            held = [c.name for c in compensations.values() if c.status == S.HELD]
            job_transition(
                unit,
                job,
                J.NEEDS_ATTENTION,
                source=source,
                reason=f"compensation held: {', '.join(held)}",
            )
        return
    if all(done(s) for s in actions):
        final = J.CANCELLED if job.compensation_reason == "cancel" else J.COMPENSATED
        job_transition(unit, job, final, source=source)
        return
    if job.status == J.NEEDS_ATTENTION:
        job_transition(unit, job, J.COMPENSATING, source=source, reason="compensation resumed")
