"""Injected persistence faults, for the fault campaign: a write that commits and then reports an
error to its caller (Temporal's ExecuteAndTimeout; DBOS's "connection drops after the commit").

Off unless SAS_FAULT_COMMIT_ERROR_RATE is set above 0. The rate applies to every outermost unit of
work (outcome recording, transitions, supervisor batches, operator actions).
"""

from __future__ import annotations

import os
import random

from django.db import OperationalError

_rng = random.Random()


def commit_error_rate() -> float:
    try:
        return float(os.environ.get("SAS_FAULT_COMMIT_ERROR_RATE", "0") or 0)
    except ValueError:
        return 0.0


def maybe_fail_after_commit(what: str) -> None:
    """Raise as if the connection dropped after `what` committed, at the configured rate."""
    rate = commit_error_rate()
    if rate > 0 and _rng.random() < rate:
        raise OperationalError(f"injected fault: {what} committed, then the connection failed")


def remediation_fails() -> bool:
    """SAS_FAULT_REMEDIATION_FAILS: every remediation batch of this process's supervisor raises
    as if the database refused it, while its loop goes on renewing the lease (a supervisor alive
    but not remediating; what remediation debt exists to catch). Off unless set to 1."""
    return os.environ.get("SAS_FAULT_REMEDIATION_FAILS", "") == "1"


def fail_remediation() -> None:
    if remediation_fails():
        raise OperationalError("injected fault: this supervisor's remediation fails")
