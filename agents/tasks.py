"""The agent task: one delivery of one attempt. django-q2 runs it; it only carries ids."""

from __future__ import annotations

from agents.http import call_http
from agents.models import AgentKind
from agents.outcome import CallResult, CallSpec
from agents.python import call_python
from scheduler.models import Outcome
from scheduler.services import attempt_claim, step_record_outcome


def run_call(spec: CallSpec) -> CallResult:
    """Make the remote call described by `spec`. Never inside a database transaction."""
    if spec.agent_kind == AgentKind.PYTHON:
        return call_python(spec)
    if not spec.base_url:
        return CallResult(Outcome.TRANSIENT_FAILURE, error="the pool has no enabled endpoint")
    return call_http(spec)


def run_attempt(step_id: int, number: int) -> str:
    """Claim attempt `number` of step `step_id`, call the remote, record the outcome.

    A duplicate or superseded delivery finds the attempt claimed or finished and returns
    without calling anything.
    """
    claimed = attempt_claim(step_id, number)
    if claimed is None:
        return "ignored"
    if isinstance(claimed, CallResult):
        step_record_outcome(step_id, number, claimed)
        return claimed.outcome
    result = run_call(claimed)
    step_record_outcome(step_id, number, result, spec=claimed)
    return result.outcome
