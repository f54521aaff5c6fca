"""Submission: create a job of a workflow's latest version and dispatch its first steps.

Restated in SQL (keep both in step; the equivalence tests compare them):
`scheduler/sql/postgresql/sas_submit.sql`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, cast

from django.contrib.auth.models import AnonymousUser
from django.db import IntegrityError, connection, transaction
from django.db.models import Subquery
from django.db.models.functions import Now

from agents.validation import validate_callback_url
from sas_project import tracing
from sas_project.errors import ActionNotAllowed, IdempotencyConflict, InvalidInput, SasError, StaleWrite
from sas_project.validation import json_storable, valid_name
from scheduler import contracts
from scheduler.contract_budget import input_check_budgeted
from scheduler.faults import maybe_fail_after_commit
from scheduler.models import EventKind, Job, JobStatus, Step, StepDefinition, StepKind, StepStatus, Workflow
from scheduler.operation_ids import child_operation_id, child_try_id
from scheduler.services import hotpath
from scheduler.services.capacity import any_pool_limited, pump_job_after_commit
from scheduler.services.correlation import (
    keyed_signals_claim,
    live_jobs,
    lock_business_key,
    valid_business_key,
    with_start_signalled,
)
from scheduler.services.dispatch import step_dispatch
from scheduler.services.flow import Admission, Concurrency, job_admission, job_wait, key_value
from scheduler.services.gates import job_gate, job_gated
from scheduler.services.locking import JobState
from scheduler.services.saga import job_advance
from scheduler.services.waits import timers_check_input
from scheduler.transitions import step_reuse
from scheduler.unit import Unit, User, unit_of_work

logger = logging.getLogger("scheduler.jobs")

J = JobStatus
S = StepStatus

SCHEDULER = "scheduler"


@dataclass
class Submission:
    """The job a submission made (`created`) or found (a replay of an earlier request with the
    same idempotency key). `job` reads the job unless the submission has it at hand."""

    job_id: Any
    created: bool
    loaded: Job | None = None
    #: A submission with a signal: the signal went to a live job of its business key (`created`
    #: False), or to the job it started.
    signalled: bool = False

    @property
    def job(self) -> Job:
        if self.loaded is None:
            self.loaded = Job.objects.select_related("workflow").get(pk=self.job_id)
        return self.loaded


def valid_priority(value: Any) -> int:
    """A job's priority (a schedule's, for the jobs it submits): an integer from -1000 to 1000."""
    if not isinstance(value, int) or isinstance(value, bool) or not -1000 <= value <= 1000:
        raise InvalidInput("priority must be an integer from -1000 to 1000", field="priority")
    return value


def _request_hash(
    workflow: str, payload: object, callback_url: str = "", business_key: str = "", priority: int = 0
) -> str:
    body: dict[str, Any] = {"workflow": workflow, "input": payload}
    # Each only when given, so the hashes of requests without them stay as they were.
    if callback_url:
        body["callback_url"] = callback_url
    if business_key:
        body["business_key"] = business_key
    if priority:
        body["priority"] = priority
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
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
    return Submission(job_id=existing.pk, created=False, loaded=existing)


@dataclass(frozen=True)
class Prepared:
    """A submission checked and ready to write: what `job_submit` and `jobs_submit_batch` share."""

    workflow: str
    input: dict[str, Any]
    idempotency_key: str | None
    request_hash: str
    callback_url: str
    business_key: str
    priority: int


def submission_prepare(
    *,
    workflow: str,
    input: object,
    idempotency_key: str | None = None,
    callback_url: str = "",
    business_key: str = "",
    priority: int = 0,
) -> Prepared:
    """Check a submission's parts (nothing read or written): InvalidInput names the first bad one."""
    if not isinstance(input, dict):
        raise InvalidInput("input must be a JSON object", field="input")
    json_storable(input, "input")
    if idempotency_key is not None and not (0 < len(idempotency_key) <= 255):
        raise InvalidInput("Idempotency-Key must be 1 to 255 characters", field="Idempotency-Key")
    if callback_url:
        try:
            # No name lookup here: a name server that never answers would hold this request
            # (and, below, its transaction). The outbox checks every address it connects to.
            callback_url = validate_callback_url(callback_url)
        except InvalidInput as exc:
            raise InvalidInput(f"callback_url: {exc.message}", field="callback_url") from exc
    business_key = valid_business_key(business_key)
    priority = valid_priority(priority)
    return Prepared(
        workflow=workflow,
        input=input,
        idempotency_key=idempotency_key,
        request_hash=_request_hash(workflow, input, callback_url, business_key, priority),
        callback_url=callback_url,
        business_key=business_key,
        priority=priority,
    )


def job_submit(
    *,
    workflow: str,
    input: object,
    submitter: User | None = None,
    idempotency_key: str | None = None,
    callback_url: str = "",
    business_key: str = "",
    priority: int = 0,
    signal: Any = None,
) -> Submission:
    """Create a job of the latest version of `workflow` and dispatch its first steps.

    With an idempotency key, the same submitter sending the same body again gets the same job
    back (created=False); a different body raises IdempotencyConflict. Two concurrent requests
    with one key make one job: the database's unique constraint decides, not a prior read.

    With `signal` ({"name", "payload"}: signal-with-start), the submission needs a business key:
    when a live job of the workflow has it (one the submitter may signal), the signal goes to that
    job and no job is made (created=False, signalled); otherwise the job is made and receives the
    signal. One transaction under the business key's lock: two such submissions at once make one
    job, and the second signals it.
    """
    # A bad signal is refused before the workflow and input are read, as it always was.
    said = _signal_said(signal, business_key) if signal is not None else None
    prepared = submission_prepare(
        workflow=workflow,
        input=input,
        idempotency_key=idempotency_key,
        callback_url=callback_url,
        business_key=business_key,
        priority=priority,
    )
    if said is not None:
        return _submit_with_signal(
            prepared, workflow=workflow, submitter=submitter, idempotency_key=idempotency_key, signal=said
        )
    user = submitter if submitter is not None and submitter.is_authenticated else None
    try:
        submission = _submit_prepared(prepared, user)
    except IntegrityError:
        if not idempotency_key:
            raise
        # A concurrent request with the same key won the insert.
        replay = _replay(user, idempotency_key, prepared.request_hash)
        if replay is None:
            raise
        return replay
    return submission


def _signal_said(signal: Any, business_key: str) -> tuple[str, Any]:
    """A signal-with-start's name and payload, or InvalidInput."""
    if not isinstance(signal, dict):
        raise InvalidInput("signal must be an object {name, payload}", field="signal")
    name = valid_name(signal.get("name"), "signal.name", "signal")
    payload = signal.get("payload")
    json_storable(payload, "signal.payload")
    if not business_key:
        raise InvalidInput("a submission with a signal needs a business_key", field="business_key")
    return name, payload


def _submit_with_signal(
    prepared: Prepared,
    *,
    workflow: str,
    submitter: User | None,
    idempotency_key: str | None,
    signal: tuple[str, Any],
) -> Submission:
    """Signal-with-start (job_submit's `signal`)."""
    from scheduler.services.wakeups import signal_send

    name, payload = signal
    sender = submitter if submitter is not None else AnonymousUser()
    # The signal's own key: the same request sent again is the same signal, wherever it went.
    signal_key = f"with-start:{idempotency_key}" if idempotency_key else None
    with transaction.atomic():
        lock_business_key(prepared.business_key)
        if idempotency_key:
            replay = _replay(
                submitter if submitter and submitter.is_authenticated else None,
                idempotency_key,
                prepared.request_hash,
            )
            if replay is not None:
                return replay
            # The first request may have signalled a live job and made none: the same request
            # again is that signal, whether or not the job has ended since.
            signalled = with_start_signalled(
                sender,
                signal_key=signal_key or "",
                workflow=workflow,
                business_key=prepared.business_key,
                payload=payload,
            )
            if signalled is not None:
                return Submission(job_id=signalled, created=False, signalled=True)
        live = live_jobs(business_key=prepared.business_key, workflow=workflow, name=name, user=sender)
        if live:
            signal_send(job_id=live[0], name=name, payload=payload, sender=sender, idempotency_key=signal_key)
            return Submission(job_id=live[0], created=False, signalled=True)
        user = submitter if submitter is not None and submitter.is_authenticated else None
        submission = _submit_prepared(prepared, user)
        signal_send(
            job_id=submission.job_id, name=name, payload=payload, sender=sender, idempotency_key=signal_key
        )
        submission.signalled = True
        return submission


def jobs_submit_batch(items: Sequence[Prepared], *, submitter: User | None) -> list[Submission]:
    """Submit `items` in one transaction: every job is created (or found, for an idempotency key
    used before with the same request), or none is. An item refused (an unknown workflow, an
    input its contract refuses, a key used before for another request) refuses the batch, with
    the item's index in the error; two items may not share a key. The keys' earlier jobs are
    found in one read; each new job is one statement (`sas_submit`) on PostgreSQL."""
    keys = [item.idempotency_key for item in items if item.idempotency_key]
    if len(set(keys)) != len(keys):
        repeated = next(k for k in keys if keys.count(k) > 1)
        raise InvalidInput(f"two jobs of the batch have the idempotency key {repeated!r}", field="jobs")
    user = submitter if submitter is not None and submitter.is_authenticated else None
    submissions: list[Submission] = []
    try:
        with transaction.atomic():
            earlier = (
                {
                    job.idempotency_key: job
                    for job in Job.objects.filter(
                        submitter=cast(Any, user), idempotency_key__in=keys
                    ).select_related("workflow")
                }
                if keys
                else {}
            )
            for index, item in enumerate(items):
                try:
                    found = earlier.get(item.idempotency_key) if item.idempotency_key else None
                    if found is not None:
                        if found.request_hash != item.request_hash:
                            raise IdempotencyConflict(
                                f"Idempotency-Key {item.idempotency_key!r} was already used for a different "
                                f"request (job {found.pk})",
                                job_id=str(found.pk),
                            )
                        submissions.append(Submission(job_id=found.pk, created=False, loaded=found))
                    else:
                        submissions.append(_submit_prepared(item, user, replay_checked=True))
                except SasError as exc:
                    raise type(exc)(
                        f"jobs[{index}]: {exc.message}", **{**exc.detail, "index": index}
                    ) from exc
    except IntegrityError as exc:
        # Not a misuse of a key (422) but a race still being settled: 409, and sent again, the
        # batch finds the other request's jobs.
        raise StaleWrite(
            "another request used one of these idempotency keys at the same moment: send the batch again"
        ) from exc
    return submissions


def _submit_prepared(prepared: Prepared, user: User | None, *, replay_checked: bool = False) -> Submission:
    """Write a prepared submission (`replay_checked`: its key is known to be new)."""
    with tracing.job_trace(prepared.workflow) as trace_parent:
        extra = Extra(
            callback_url=prepared.callback_url,
            trace_parent=trace_parent,
            business_key=prepared.business_key,
            priority=prepared.priority,
        )
        submit = _submit_in_database if hotpath.enabled() else _submit_in_python
        submission = submit(prepared, user, extra, replay_checked=replay_checked)
    if submission.created:
        line = {
            "job_id": str(submission.job_id),
            "workflow": prepared.workflow,
            "submitter": user.get_username() if user is not None else None,
            "callback": bool(prepared.callback_url),
        }
        transaction.on_commit(lambda: logger.info("job submitted", extra=line))
    return submission


@dataclass(frozen=True)
class Extra:
    """What a job carries besides its input: where to call back, and its trace."""

    callback_url: str = ""
    trace_parent: str = ""
    business_key: str = ""
    priority: int = 0


def _submit_in_database(
    prepared: Prepared, user: User | None, extra: Extra, *, replay_checked: bool = False
) -> Submission:
    """The PostgreSQL function `sas_submit` creates the job and dispatches its first steps in one
    statement (one commit, unless the caller's transaction is open)."""
    workflow, payload, request_hash = prepared.workflow, prepared.input, prepared.request_hash
    key = prepared.idempotency_key
    outermost = not connection.in_atomic_block
    if key and not replay_checked:
        # The replay check and the insert in one transaction; a savepoint inside a caller's, so
        # that a concurrent request winning the insert can be answered with the replay.
        with transaction.atomic():
            replay = _replay(user, key, request_hash)
            if replay:
                return replay
            job_id = hotpath.submit(
                workflow,
                payload=payload,
                user=user,
                key=key,
                request_hash=request_hash,
                source=SCHEDULER,
                **asdict(extra),
            )
    else:
        job_id = hotpath.submit(
            workflow,
            payload=payload,
            user=user,
            key=key or None,
            request_hash=request_hash,
            source=SCHEDULER,
            **asdict(extra),
        )
    if job_id is None:
        # An unknown workflow, or one with wait steps (which the function leaves to this path).
        return _submit_in_python(prepared, user, extra, replay_checked=True)
    if any_pool_limited():
        # The function parks the steps of limited pools (the Python path's dispatch registers
        # its own pumps): the pump takes them once this commits.
        pump_job_after_commit(job_id, dispatch=step_dispatch)
    if outermost:
        maybe_fail_after_commit("a submission")
    return Submission(job_id=job_id, created=True)


#: No contract read yet (None is a workflow without one).
_NOT_CHECKED = object()


def _submit_in_python(
    prepared: Prepared, user: User | None, extra: Extra, *, replay_checked: bool = False
) -> Submission:
    # One transaction (one commit) reads the definitions and writes the job; inside a caller's
    # transaction, a savepoint, so that a refusal or a concurrent request winning the insert
    # (an IntegrityError, answered by job_submit with the replay) leaves the caller's intact.
    workflow, payload, request_hash = prepared.workflow, prepared.input, prepared.request_hash
    key = prepared.idempotency_key
    # The contract's check is the caller's CPU, not the database's: outside a caller's
    # transaction it runs before this one opens (checked again inside only if a new version of
    # the workflow came in between with another contract).
    checked: Any = _NOT_CHECKED
    if not connection.in_atomic_block:
        checked = (
            Workflow.objects.filter(name=workflow)
            .order_by("-version")
            .values_list("input_schema", flat=True)
            .first()
        )
        input_check_budgeted(checked, payload, user=user)
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
        if key and not replay_checked:
            replay = _replay(user, key, request_hash)
            if replay:
                return replay
        if definitions[0].workflow.input_schema != checked:
            input_check_budgeted(definitions[0].workflow.input_schema, payload, user=user)
        # A time the job could never read is refused before anything is written. The fast path
        # (sas_submit) leaves every workflow with a wait step to this function, so no job with a
        # timer is written without this check.
        timers_check_input(definitions, payload=payload)
        unit.now = definitions[0].db_now  # type: ignore[attr-defined]
        job = _create_job(unit, definitions, payload, user, request_hash, extra, idempotency_key=key).job
    return Submission(job_id=job.pk, created=True, loaded=job)


def _create_job(
    unit: Unit,
    definitions: Sequence[StepDefinition],
    payload: dict[str, Any],
    user: User | None,
    request_hash: str,
    extra: Extra,
    *,
    idempotency_key: str | None = None,
    actor: User | None = None,
    source: str = SCHEDULER,
    reason: str = "",
    rerun_of: Job | None = None,
    reuse: dict[str, Step] | None = None,
    data: dict[str, Any] | None = None,
    parent: Step | None = None,
) -> JobState:
    """Create a job with its steps and its `job_submitted` event, and start it. `user` submits it,
    `actor` (default: the user) did it; only a client's submission carries an `idempotency_key`
    (a rerun or a child job has none). A rerun names the original (`rerun_of`) and the steps
    whose output it reuses (`reuse`, by name): those succeed at once with that output
    (scheduler.transitions.step_reuse, with their own event) and are never called. A child job
    names the sub-workflow step that starts it (`parent`): its steps' operation IDs derive from
    that step's (child_operation_id)."""
    now = unit.now
    reuse = reuse or {}
    definition = definitions[0].workflow
    actor = actor if actor is not None else user
    # A job is created running (its first steps are dispatched in this same transaction), or
    # waiting at its debounce or throttle (scheduler.services.gates) or for its concurrency key
    # (scheduler.services.flow): then its deadline starts with it.
    gate = job_gate(unit, workflow=definition, payload=payload)
    if gate.kind:
        # Its concurrency key is read when it leaves the gate; one it could never hold is
        # refused now, while the submitter is there to be told.
        concurrency = Concurrency.of(definition)
        if concurrency is not None:
            key_value(concurrency, payload=payload)
        admission = Admission(start=False)
    else:
        admission = job_admission(unit, workflow=definition, payload=payload, actor=actor, source=source)
    status = J.RUNNING if admission.start else J.WAITING
    job = Job.objects.create(
        status=status,
        workflow=definition,
        input=payload,
        submitter=cast(Any, user),
        idempotency_key=idempotency_key or None,
        request_hash=request_hash,
        callback_url=extra.callback_url,
        trace_parent=extra.trace_parent,
        business_key=extra.business_key,
        priority=extra.priority,
        rerun_of=rerun_of,
        parent_job_id=parent.job_id if parent is not None else None,
        parent_step=parent.name if parent is not None else "",
        parent_try=parent.attempt if parent is not None else 0,
        concurrency_key=admission.key,
        **gate.columns(),
        deadline=(
            now + dt.timedelta(seconds=definition.deadline_seconds)
            if definition.deadline_seconds and admission.start
            else None
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
                operation_id=(
                    child_operation_id(child_try_id(parent), step_name=d.name)
                    if parent is not None
                    else str(uuid.uuid4())
                ),
                pool=d.pool,
                reused_from=reuse.get(d.name),
                created_at=now,
                updated_at=now,
            )
            for d in definitions
        ]
    )
    unit.event(
        job_id=job.pk,
        kind=EventKind.JOB_SUBMITTED,
        source=source,
        to_status=status,
        actor=actor,
        reason=reason,
        data={"workflow": definition.name, "version": definition.version, **(data or {})},
    )
    for step in steps:
        step.job = job
        if step.reused_from is not None:
            step_reuse(unit, step, source=source, actor=actor)
    # Signals sent by business key before the job existed, that its workflow takes: its own now.
    keyed_signals_claim(unit, job=job, definitions=list(definitions), source=source)
    state = JobState(job=job, steps=list(steps))
    if gate.kind:
        job_gated(unit, job=job, gate=gate, source=source, actor=actor)
    elif admission.start:
        job_advance(unit, state=state, source=source, actor=actor)
    else:
        job_wait(unit, job=job, admission=admission, source=source, actor=actor)
    return state


def child_create(
    unit: Unit,
    *,
    parent: JobState,
    step: Step,
    definitions: Sequence[StepDefinition],
    payload: dict[str, Any],
    source: str,
) -> JobState:
    """The child job of sub-workflow step `step` of the locked job `parent`: a job of
    `definitions` (a workflow version) with `payload` as its input, created and started in the
    caller's transaction, on the general path (the hot path's `sas_submit` knows nothing of
    parents). It inherits its parent's submitter (who may read it), trace, business key and
    priority, not its callback: the parent's tells its client. At most one child per try of the
    step (its `attempt`): the constraint `job_unique_child` holds it."""
    job = parent.job
    return _create_job(
        unit,
        definitions,
        payload,
        job.submitter,
        "",
        Extra(trace_parent=job.trace_parent, business_key=job.business_key, priority=job.priority),
        source=source,
        reason=f"started by step {step.name} of job {job.pk}",
        data={"parent_job": str(job.pk), "parent_step": step.name},
        parent=step,
    )


def rerun_create(
    unit: Unit,
    *,
    original: JobState,
    from_step: str,
    payload: dict[str, Any],
    actor: User,
    source: str,
    reason: str,
    current: bool = False,
) -> JobState:
    """A new job that runs `from_step` and every step downstream of it again, with new operation
    IDs (the requests may differ: a remote must not replay the old answers), and reuses the
    outputs of the other steps that succeeded (they are not called again; the new job does not
    compensate them: their effects stay the original's). Steps outside the rerun that had not
    succeeded run too. The caller holds the original's lock.

    Of the original's workflow version, or with `current` of the workflow's latest version (a
    path or policy fixed meanwhile): its steps are matched to the original's by name, a step new
    in it runs, and a version without `from_step` is refused (ActionNotAllowed, 409).
    """
    job = original.job
    by_name = {s.name: s for s in original.actions}
    if from_step not in by_name:
        raise InvalidInput(
            f"job {job.pk} has no step {from_step!r} (steps: {', '.join(by_name)})", field="from_step"
        )
    workflow_id = job.workflow_id
    if current:
        latest = Workflow.objects.filter(name=job.workflow.name).order_by("-version").first()
        workflow_id = latest.pk if latest is not None else workflow_id
    definitions = list(
        StepDefinition.objects.filter(workflow_id=workflow_id)
        .select_related("workflow", "policy", "pool")
        .order_by("position")
    )
    target = definitions[0].workflow
    if from_step not in {d.name for d in definitions}:
        raise ActionNotAllowed(
            f"version {target.version} of workflow {target.name!r} has no step {from_step!r}: "
            "rerun on the job's own version, or from a step the current version has"
        )
    dependents: dict[str, set[str]] = {d.name: set() for d in definitions}
    for d in definitions:
        for dep in d.depends_on:
            dependents[dep].add(d.name)
    rerun = {from_step}
    todo = [from_step]
    while todo:
        for child in dependents[todo.pop()]:
            if child not in rerun:
                rerun.add(child)
                todo.append(child)
    contracts.input_check(target.input_schema, payload)
    reuse = {
        name: old
        for name, old in by_name.items()
        if name not in rerun and name in dependents and old.status == S.SUCCEEDED
    }
    return _create_job(
        unit,
        definitions,
        payload,
        job.submitter,
        _request_hash(job.workflow.name, payload),
        Extra(callback_url=job.callback_url, business_key=job.business_key, priority=job.priority),
        actor=actor,
        source=source,
        reason=reason,
        rerun_of=job,
        reuse=reuse,
        data={
            "rerun_of": str(job.pk),
            "from_step": from_step,
            "reused": [d.name for d in definitions if d.name in reuse],
            "input_changed": payload != job.input,
            "version": target.version,
            "original_version": job.workflow.version,
        },
    )
