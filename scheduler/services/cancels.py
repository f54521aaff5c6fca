"""Cancellation sent to the remote: a step's `cancel_path`.

When a job stops (an operator's cancel or compensate, a failure its policy compensates, a parent
undoing its child, a concurrency key cancelling the oldest holder: every way into
`saga.job_start_compensation`) while a call of a step that names a `cancel_path` may still be
running at its remote, the remote is told to stop it, with the call's operation ID: an HTTP POST
to the endpoint the call went to plus `cancel_path`, or a message `{"type": "cancel", ...}` on a
queue step's request queue (agents.queue). Python pools run their calls in the worker: nothing to
cancel, and the definition refuses a `cancel_path` there.

Exactly once in effect. The intent (`RemoteCancel`, one per step) and its first task are written in
the transaction that stops the job, so the cancel exists if and only if the decision commits, as a
dispatch's attempt and task do (scheduler.services.dispatch). Each try is taken by one delivery
(`tries` raised from n - 1 to n, under the row's lock), and its answer is recorded only while that
try is the last one taken: a duplicate delivery sends nothing, and a task lost with its worker is
sent again by the supervisor's scan once `due_at` has passed (`cancels_due`, `cancel_resend`). The remote
de-duplicates on the operation ID anyway, so a try sent twice in a crash is one cancel to it.

Retried by the step's policy, as its compensation is (the same `call_policy`): a try answered with
an outcome its `retry_on` lists is tried again after its backoff, until `max_attempts` tries;
a success, a refusal, or the last try ends it. Each try's answer is an event
(`step_cancel_sent`); the final answer is the step's attempt of kind `cancel`, numbered 0: a
cancel is not a dispatch of the step, whose numbers fence its own calls.

The step itself is untouched: its call in flight is answered and recorded as ever (a late success
is compensated by the saga like any other), and the cancel never moves its status.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.db.models import Q
from django_q.brokers import get_broker
from django_q.tasks import async_task

from agents.broker import ClaimByDeleteORM
from agents.models import AgentKind
from agents.outcome import AttemptKind, CallResult, CallSpec, Outcome
from scheduler.backoff import backoff_seconds
from scheduler.models import (
    CANCEL_ATTEMPT_NUMBER,
    Attempt,
    EventKind,
    RemediationPolicy,
    RemoteCancel,
    Step,
    StepKind,
    StepStatus,
)
from scheduler.services.dispatch import task_timeout
from scheduler.services.locking import JobState, lock_job
from scheduler.unit import Unit, User, db_now, unit_of_work

S = StepStatus

#: The task that sends one try of a cancel (its arguments are ids only).
CANCEL_TASK = "scheduler.tasks.run_cancel"
#: Who decides a cancel's answer recorded by its task (as for a call's).
AGENT = "agent"
#: Statuses of a forward step whose last call got no answer: it may still be running remotely.
AWAITING = frozenset({S.ATTEMPT_FAILED, S.UNKNOWN, S.RETRY_WAIT, S.HELD})
#: Outcomes that end a cancel whatever the policy says: the remote answered it.
FINAL = frozenset({Outcome.SUCCEEDED, Outcome.BUSINESS_FAILURE, Outcome.NOT_HAPPENED})


def cancels_request(
    unit: Unit, *, state: JobState, source: str, reason: str, actor: User | None = None
) -> list[RemoteCancel]:
    """Write the cancel of every call of the job that may be running at its remote, with its
    first task, in the caller's transaction (which holds the job's lock and is stopping it).
    Returns the cancels written; a step that has one already gets none."""
    candidates = _candidates(state)
    if not candidates:
        return []
    live = _last_attempts(candidates)
    ids = [s.pk for s in candidates]
    already = set(RemoteCancel.objects.filter(step_id__in=ids).values_list("step_id", flat=True))
    written = []
    for step in candidates:
        attempt = live.get((step.pk, step.attempt))
        if step.pk in already or attempt is None or not _in_flight(step, attempt):
            continue
        policy = step.definition.call_policy
        cancel = RemoteCancel.objects.create(
            step=step,
            endpoint_id=attempt["endpoint_id"],
            endpoint_url=attempt["endpoint_url"],
            call_attempt=step.attempt,
            created_at=unit.now,
            due_at=unit.now + _task_room(policy),
        )
        unit.event(
            job_id=state.job.pk,
            step=step,
            kind=EventKind.STEP_CANCEL_REQUESTED,
            source=source,
            attempt=step.attempt,
            actor=actor,
            reason=f"{reason}: call {step.attempt} may still be running at the remote",
            data={
                "operation_id": step.operation_id,
                "endpoint": attempt["endpoint_url"],
                "cancel_path": step.definition.cancel_path,
                "policy": policy.name,
                "policy_version": policy.version,
            },
        )
        _enqueue(cancel.pk, number=1, policy=policy)
        written.append(cancel)
    return written


def _candidates(state: JobState) -> list[Step]:
    """The job's forward steps that name a cancel_path and call an HTTP or queue pool, in a status
    where a call may be out: its actions as the caller's unit has them, and its fan-outs' items
    (not read with the job) as the database has them."""
    known = [s for s in state.steps if s.forward and not s.fans_out and s.definition.cancel_path]
    maybe = Q(status__in=(S.DISPATCHED, S.UNKNOWN)) | Q(status__in=AWAITING, last_outcome=Outcome.NO_ANSWER)
    items = (
        Step.objects.filter(maybe, job_id=state.job.pk, kind=StepKind.ITEM)
        .exclude(definition__cancel_path="")
        .exclude(pk__in=[s.pk for s in state.steps])
        .select_related("definition__policy", "pool")
    )
    steps = known + state.adopt(list(items))
    return [s for s in steps if s.pool is not None and s.pool.kind in (AgentKind.HTTP, AgentKind.QUEUE)]


def _last_attempts(steps: list[Step]) -> dict[tuple[int, int], dict[str, Any]]:
    """The last attempt of each step (its number is the step's `attempt`), in one statement."""
    rows = Attempt.objects.filter(step_id__in=[s.pk for s in steps], number__gt=0).values(
        "step_id", "number", "kind", "started_at", "finished_at", "endpoint_id", "endpoint_url"
    )
    return {(r["step_id"], r["number"]): dict(r) for r in rows}


def _in_flight(step: Step, attempt: dict[str, Any]) -> bool:
    """May the step's call be running at its remote now? Dispatched: yes once a delivery claimed
    the call (an unclaimed one never goes out now: its claim finds the job stopped), and while a
    status query asks about a call that got no answer. Awaiting a decision: when its outcome is
    unknown (the last call got no answer; a call a refusal or a 5xx answered is over, and the
    saga's compensation covers what it may have done)."""
    if step.status == S.DISPATCHED:
        if attempt["finished_at"] is not None:
            return False
        return attempt["kind"] == AttemptKind.RECONCILE or attempt["started_at"] is not None
    return step.status == S.UNKNOWN or (step.status in AWAITING and step.last_outcome == Outcome.NO_ANSWER)


def _task_room(policy: RemediationPolicy) -> dt.timedelta:
    """How long a try's task may take before the scan counts it lost and sends the cancel again."""
    return dt.timedelta(seconds=task_timeout(policy.timeout_seconds))


def _enqueue(cancel_id: int, *, number: int, policy: RemediationPolicy) -> None:
    """Enqueue try `number` of a cancel, in the caller's transaction (with the project's broker the
    task exists if and only if it commits)."""
    broker = get_broker()
    timeout = task_timeout(policy.timeout_seconds)
    if isinstance(broker, ClaimByDeleteORM):
        broker.enqueue_compact(CANCEL_TASK, (cancel_id, number), timeout=timeout)
        return
    async_task(
        CANCEL_TASK,
        cancel_id,
        number,
        task_name=f"cancel-{cancel_id}-try-{number}",
        broker=broker,
        q_options={"timeout": timeout},
    )


def cancel_claim(cancel_id: int, *, number: int) -> CallSpec | None:
    """Take try `number` of a cancel for one delivery and describe the request to send; None for a
    duplicate or stale delivery (another took this try, or the cancel is finished), which sends
    nothing. The take commits before the request is sent."""
    with transaction.atomic():
        cancel = (
            RemoteCancel.objects.select_for_update(of=("self",))
            .select_related("step__job", "step__definition__policy", "step__pool", "endpoint")
            .filter(pk=cancel_id)
            .first()
        )
        if cancel is None or cancel.finished_at is not None or cancel.tries != number - 1:
            return None
        step, definition = cancel.step, cancel.step.definition
        policy = definition.call_policy
        now = db_now()
        cancel.tries, cancel.tried_at, cancel.due_at = number, now, now + _task_room(policy)
        cancel.save(update_fields=["tries", "tried_at", "due_at"])
    pool = step.call_pool
    endpoint = cancel.endpoint
    headers: dict[str, str] = {}
    secret = (endpoint.secret_header_name, endpoint.secret_header_value) if endpoint else ("", "")
    if pool.kind == AgentKind.QUEUE:
        if secret[1]:
            headers = {"username": secret[0] or "", "password": secret[1]}
    elif secret[0] and secret[1]:
        headers[secret[0]] = secret[1]
    payload: dict[str, Any] = {
        "type": "cancel",
        "job_id": str(step.job_id),
        "step": definition.name,
        "operation_id": step.operation_id,
        "attempt": cancel.call_attempt,
    }
    if step.item_index is not None:
        payload["index"] = step.item_index
    return CallSpec(
        job_id=str(step.job_id),
        step_id=step.pk,
        attempt=cancel.call_attempt,
        operation_id=step.operation_id,
        kind=AttemptKind.CANCEL,
        agent_kind=pool.kind,
        base_url=cancel.endpoint_url,
        # A queue step's cancel goes to its request queue, marked as one; an HTTP step's to its
        # cancel_path under the endpoint the call went to.
        path=definition.path if pool.kind == AgentKind.QUEUE else definition.cancel_path,
        payload=payload,
        timeout=policy.timeout_seconds,
        headers=headers,
        deadline=now + dt.timedelta(seconds=policy.timeout_seconds),
        pool=pool.name,
        trace_parent=step.job.trace_parent,
    )


def cancel_record(cancel_id: int, *, number: int, result: CallResult, draw: float) -> str:
    """Record the answer to try `number` of a cancel, under its job's lock: an event, and either
    the next try's time (an outcome the policy retries, tries left: the scan sends it when due) or
    the end of the cancel with its attempt of kind `cancel`. Returns "retry", "finished", or
    "stale" (the try is no longer the last one taken, or the cancel ended: nothing written)."""
    job_id = RemoteCancel.objects.filter(pk=cancel_id).values_list("step__job_id", flat=True).first()
    if job_id is None:
        return "stale"
    with unit_of_work() as unit:
        lock_job(unit, job_id=job_id)
        cancel = _locked(cancel_id)
        if cancel is None or cancel.tries != number:
            return "stale"
        policy = cancel.step.definition.call_policy
        retry_in = _retry_in(policy, result=result, tries=number, draw=draw)
        _try_event(unit, cancel, result=result, retry_in=retry_in, source=AGENT)
        if retry_in is None:
            _finish(unit, cancel, result=result, decided_by=AGENT)
            return "finished"
        cancel.due_at = unit.now + dt.timedelta(seconds=retry_in)
        cancel.save(update_fields=["due_at"])
        return "retry"


def _locked(cancel_id: int) -> RemoteCancel | None:
    """The cancel, locked, while it is not finished."""
    return (
        RemoteCancel.objects.select_for_update(of=("self",))
        .select_related("step__definition__policy", "step__pool")
        .filter(pk=cancel_id, finished_at__isnull=True)
        .first()
    )


def _retry_in(policy: RemediationPolicy, *, result: CallResult, tries: int, draw: float) -> float | None:
    """Seconds until the next try, or None when the cancel ends with this answer: the remote
    answered it, the policy does not retry this outcome, or its `max_attempts` tries are spent.
    The backoff is the policy's, as for any retry (scheduler.backoff), and waits for a
    Retry-After within it."""
    if result.outcome in FINAL or result.outcome not in (policy.retry_on or ()):
        return None
    if tries >= policy.max_attempts:
        return None
    delay = backoff_seconds(policy, tries=tries, draw=draw)
    if result.retry_after is not None:
        delay = max(delay, min(result.retry_after, policy.backoff_max_seconds))
    return delay


def _try_event(
    unit: Unit, cancel: RemoteCancel, *, result: CallResult, retry_in: float | None, source: str
) -> None:
    step, policy = cancel.step, cancel.step.definition.call_policy
    said = f"HTTP {result.status_code}" if result.status_code is not None else result.outcome
    if retry_in is not None:
        reason = f"cancel try {cancel.tries} of {policy.max_attempts}: {said}; tried again in {retry_in:.2f}s"
    else:
        reason = f"cancel try {cancel.tries} of {policy.max_attempts}: {said}"
    unit.event(
        job_id=step.job_id,
        step=step,
        kind=EventKind.STEP_CANCEL_SENT,
        source=source,
        attempt=cancel.call_attempt,
        reason=reason,
        data={
            "operation_id": step.operation_id,
            "try": cancel.tries,
            "outcome": result.outcome,
            "status_code": result.status_code,
            "error": result.error[:500],
            "retry_in": retry_in,
            "policy": policy.name,
            "policy_version": policy.version,
        },
    )


def _finish(unit: Unit, cancel: RemoteCancel, *, result: CallResult, decided_by: str) -> None:
    """End the cancel and insert its attempt (kind `cancel`, number 0) with the last answer. The
    attempt is written finished: it was never in flight as the step's (the step's call was), so
    it takes no place in the attempt machine's moves nor in the one-live-attempt index."""
    step, policy = cancel.step, cancel.step.definition.call_policy
    tried_at = cancel.tried_at or unit.now
    cancel.finished_at, cancel.due_at = unit.now, None
    cancel.save(update_fields=["finished_at", "due_at"])
    unit.attempt_insert(
        Attempt(
            step=step,
            number=CANCEL_ATTEMPT_NUMBER,
            kind=AttemptKind.CANCEL,
            pool=step.call_pool,
            endpoint_id=cancel.endpoint_id,
            endpoint_url=cancel.endpoint_url,
            policy_version=policy.version,
            dispatched_at=cancel.created_at,
            deadline=tried_at + dt.timedelta(seconds=policy.timeout_seconds),
            started_at=tried_at,
            finished_at=unit.now,
            outcome=result.outcome,
            decided_by=decided_by,
            status_code=result.status_code,
            latency_ms=result.latency_ms,
            response_excerpt=result.excerpt,
            error=result.error[:2000],
        )
    )


def cancels_due(*, limit: int, keep: Q | None = None) -> list[tuple[int, Any]]:
    """The scan's sweep reads these: the unfinished cancels whose `due_at` has passed (a retry's
    time came, or a try's task was lost with its worker, or never ran), oldest first, as (cancel,
    job); `keep` filters them further (the scan's leaves out those it quarantined lately)."""
    query = RemoteCancel.objects.filter(finished_at__isnull=True, due_at__lte=db_now())
    if not query.exists():
        return []  # the common case, one read of remotecancel_due_idx and nothing else
    if keep is not None:
        query = query.filter(keep)
    return list(query.order_by("due_at").values_list("pk", "step__job_id")[:limit])


def cancel_resend(cancel_id: int, *, job_id: Any, source: str) -> str:
    """One due cancel (cancels_due), in its own transaction under its job's lock: its next try's
    task (`cancel_sent_again`), or, its tries spent, given up (`no_answer`, `cancel_given_up`);
    "" when it is no longer due, or another transaction holds its job (the next pass)."""
    with unit_of_work() as unit:
        if lock_job(unit, job_id=job_id, skip_locked=True) is None:
            return ""
        cancel = _locked(cancel_id)
        if cancel is None or cancel.due_at is None or cancel.due_at > unit.now:
            return ""
        policy = cancel.step.definition.call_policy
        if cancel.tries >= policy.max_attempts:
            lost = CallResult(Outcome.NO_ANSWER, error=f"no answer after {cancel.tries} tries: given up")
            _try_event(unit, cancel, result=lost, retry_in=None, source=source)
            _finish(unit, cancel, result=lost, decided_by=source)
            return "cancel_given_up"
        cancel.due_at = unit.now + _task_room(policy)
        cancel.save(update_fields=["due_at"])
        _enqueue(cancel.pk, number=cancel.tries + 1, policy=policy)
        return "cancel_sent_again"
