"""Operation IDs derived from others: a child job's steps' from its parent step's, so that every
try of a sub-workflow step is the same operation at every remote however often its start is
redelivered, and a retried child a new one (scheduler.services.children)."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduler.models import Step

#: The longest operation ID a job's step may have: the column's 200 characters, less the suffix
#: its compensation's ID adds (`<operation_id>:compensate`).
MAX_OPERATION_ID = 200 - len(":compensate")


def child_try_id(step: Step) -> str:
    """The operation ID a child of sub-workflow step `step` derives its steps' from: the step's
    own for its first child, `<step's>/retry-<n>` for the child of its try n (the step's
    `attempt`), so a retried child is a new operation at every remote, and each try's the same
    however often its start is redelivered."""
    return step.operation_id if not step.attempt else f"{step.operation_id}/retry-{step.attempt}"


def child_operation_id(parent_operation_id: str, *, step_name: str) -> str:
    """The operation ID of step `step_name` of the child job started by the step whose operation
    ID is `parent_operation_id`: `<parent's>/<step>`, the same however often the parent's step is
    retried or its start redelivered. Nested deeper than the column allows, the parent's part is
    replaced by its SHA-256 (40 hex digits): still derived, still the same every time."""
    derived = f"{parent_operation_id}/{step_name}"
    if len(derived) <= MAX_OPERATION_ID:
        return derived
    return f"{hashlib.sha256(parent_operation_id.encode()).hexdigest()[:40]}/{step_name}"
