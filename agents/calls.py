"""The agents' one entry point: make the remote call a CallSpec describes, by agent kind."""

from __future__ import annotations

from agents.http import call_http
from agents.models import AgentKind
from agents.outcome import CallResult, CallSpec, Outcome
from agents.python import call_python


def run_call(spec: CallSpec) -> CallResult:
    """Make the remote call described by `spec`. Never inside a database transaction."""
    if spec.agent_kind == AgentKind.PYTHON:
        return call_python(spec)
    if not spec.base_url:
        return CallResult(Outcome.TRANSIENT_FAILURE, error="the pool has no enabled endpoint")
    return call_http(spec)
