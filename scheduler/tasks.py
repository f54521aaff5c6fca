"""The agent task: one delivery of one attempt, and of the job's next attempts the worker then
takes from the queue itself (decision 0029). django-q2 runs it; it only carries ids.

The scheduler owns the task because the task is a scheduler transaction on each side of the
call: claim the attempt, let the agents make the call, record the outcome. Each delivery logs
one line with the ids it is about, and, when tracing is on, adds its spans to the job's trace.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time

from agents import calls
from agents.models import AgentKind
from agents.outcome import CallResult, CallSpec
from sas_project import tracing
from scheduler.services import attempt_accepted, attempt_claim, hotpath, step_record_outcome
from scheduler.services.cancels import cancel_claim, cancel_record
from scheduler.services.children import child_advance

logger = logging.getLogger("scheduler.attempts")


def run_attempt(step_id: int, number: int) -> str:
    """Claim attempt `number` of step `step_id`, call the remote, record the outcome; then, while
    this task's time allows, take the job's next dispatched attempt from the queue and deliver it
    here too (scheduler.services.hotpath.take_next).

    A duplicate or superseded delivery finds the attempt claimed or finished and returns
    without calling anything.
    """
    started = time.monotonic()
    outcome, job_id = _deliver(step_id, number)
    first = outcome
    for _ in range(hotpath.continuations()):
        if job_id is None:
            break
        following = hotpath.take_next(job_id, budget=hotpath.task_budget() - (time.monotonic() - started))
        if following is None:
            break
        outcome, job_id = _deliver(*following)
    return first


def _deliver(step_id: int, number: int) -> tuple[str, str | None]:
    """One delivery; returns its outcome and, after a success, the job's id (its next attempt may
    be taken)."""
    claimed = attempt_claim(step_id, number=number)
    if claimed is None:
        return "ignored", None
    if isinstance(claimed, CallResult):
        step_record_outcome(step_id, number=number, result=claimed)
        return claimed.outcome, None
    spec = claimed
    if spec.trace_parent and spec.dispatched_at and spec.claimed_at:
        tracing.dispatch_span(
            spec.trace_parent, started=spec.dispatched_at, ended=spec.claimed_at, **_attributes(spec)
        )
    with tracing.call_span(spec.trace_parent, **_attributes(spec)) as trace_headers:
        if trace_headers and spec.agent_kind != AgentKind.QUEUE:
            spec = dataclasses.replace(spec, headers={**spec.headers, **trace_headers})
        result = calls.run_call(spec)
    if result.accepted:
        # The remote reports later (scheduler.replies, scheduler.callbacks): free the worker.
        attempt_accepted(
            step_id,
            number=number,
            result=result,
            job_id=spec.job_id,
            via="queue" if spec.agent_kind == AgentKind.QUEUE else "http",
        )
    else:
        with tracing.span("outcome", spec.trace_parent, **{"sas.outcome": result.outcome}):
            step_record_outcome(step_id, number=number, result=result, spec=spec)
    logger.info(
        "attempt accepted" if result.accepted else "attempt finished",
        extra={
            "job_id": spec.job_id,
            "step_id": step_id,
            "step": spec.payload.get("step"),
            "operation_id": spec.operation_id,
            "attempt": number,
            "kind": spec.kind,
            "pool": spec.pool,
            "endpoint": spec.base_url,
            "outcome": result.outcome,
            "status_code": result.status_code,
            "latency_ms": result.latency_ms,
        },
    )
    return result.outcome, spec.job_id if result.succeeded and not result.accepted else None


def _attributes(spec: CallSpec) -> dict[str, object]:
    return {
        "sas.job_id": spec.job_id,
        "sas.step": str(spec.payload.get("step", "")),
        "sas.operation_id": spec.operation_id,
        "sas.attempt": spec.attempt,
        "sas.pool": spec.pool,
        "server.address": spec.base_url,
    }


def start_child(step_id: int) -> str:
    """Start the child job of sub-workflow step `step_id` (once: a redelivery finds it started)."""
    return child_advance(step_id)


def settle_child(step_id: int) -> str:
    """Settle sub-workflow step `step_id` from its child job, which settled (once: a redelivery
    finds the step settled)."""
    return child_advance(step_id)


def run_cancel(cancel_id: int, number: int) -> str:
    """Send try `number` of a cancel to its remote and record the answer
    (scheduler.services.cancels). A duplicate or stale delivery takes no try and sends nothing."""
    spec = cancel_claim(cancel_id, number=number)
    if spec is None:
        return "ignored"
    with tracing.call_span(spec.trace_parent, **_attributes(spec)) as trace_headers:
        if trace_headers and spec.agent_kind != AgentKind.QUEUE:
            spec = dataclasses.replace(spec, headers={**spec.headers, **trace_headers})
        result = calls.run_call(spec)
    recorded = cancel_record(cancel_id, number=number, result=result, draw=random.random())
    logger.info(
        "cancel answered",
        extra={
            "job_id": spec.job_id,
            "step_id": spec.step_id,
            "step": spec.payload.get("step"),
            "operation_id": spec.operation_id,
            "attempt": spec.attempt,
            "kind": spec.kind,
            "try": number,
            "pool": spec.pool,
            "endpoint": spec.base_url,
            "outcome": result.outcome,
            "status_code": result.status_code,
            "recorded": recorded,
        },
    )
    return result.outcome
