"""The agent task: one delivery of one attempt. django-q2 runs it; it only carries ids.

The scheduler owns the task because the task is a scheduler transaction on each side of the
call: claim the attempt, let the agents make the call, record the outcome.
"""

from __future__ import annotations

from agents import calls
from agents.outcome import CallResult
from scheduler.services import attempt_claim, step_record_outcome


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
    result = calls.run_call(claimed)
    step_record_outcome(step_id, number, result, spec=claimed)
    return result.outcome
