"""The agents' one entry point: make the remote call a CallSpec describes, by agent kind
(http, python, queue)."""

from __future__ import annotations

from agents.http import call_http
from agents.models import AgentKind
from agents.outcome import CallResult, CallSpec, Outcome
from agents.python import call_python


def run_call(spec: CallSpec) -> CallResult:
    """Make the remote call described by `spec`. Never inside a database transaction.

    The result is final (an outcome) or ACCEPTED: the remote took the call and reports later.
    """
    if spec.agent_kind == AgentKind.PYTHON:
        return call_python(spec)
    if not spec.base_url:
        return CallResult(Outcome.TRANSIENT_FAILURE, error="the pool has no enabled endpoint")
    if spec.agent_kind == AgentKind.QUEUE:
        from agents.queue import call_queue  # kombu is imported only where a queue pool is used

        return call_queue(spec)
    return call_http(spec)
