"""A wait that escalates (docs/workflow-language.md, "Waits that escalate"): while a signal or an
approval gets no decision, its step walks the rungs of its definition's `escalation` on time,
found by the waits' sweep like a timeout (the step's `deadline` is the sooner of its next rung and
its timeout), each rung a guarded move under the job's lock with its event (which the database
queues for the rung's alert: scheduler.models.AlertKind `approval_reminder`, `wait_escalated`):

* `remind`: an event `wait_reminded` (the alert `approval_reminder`); the step waits on;
* `reassign`: the rung's group may now decide too (`escalation_group`; scheduler.services.wakeups
  `may_decide`); the step waits on;
* `hold`: the step is held for an operator; `fail`: it fails and the job compensates; `continue`:
  it succeeds with the definition's `default_output`. Each ends the wait, and the ladder.

A decision at any rung ends the wait (the step no longer waits), so no rung comes after it: the
ladder ends once. The rungs count from `waiting_since`, when the step began waiting.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from scheduler.models import EventKind, OnExhausted, Step, StepStatus
from scheduler.services.locking import JobState
from scheduler.services.saga import job_advance, job_end_for_step, step_hold
from scheduler.transitions import step_note, step_transition
from scheduler.unit import Unit
from scheduler.wait_definitions import next_rung, rung_at, wait_deadline

S = StepStatus
E = EventKind


def rung_due(step: Step, *, now: dt.datetime) -> dict[str, Any] | None:
    """The rung of a waiting step whose time has come, or None (no ladder, none left, not yet)."""
    if step.waiting_since is None:
        return None
    at = rung_at(step.definition, since=step.waiting_since, rung=step.escalation_rung)
    return next_rung(step.definition, rung=step.escalation_rung) if at is not None and at <= now else None


def escalate(unit: Unit, *, state: JobState, step: Step, rung: dict[str, Any], source: str) -> str:
    """Walk `rung` (the step's next one, due): see the module's docstring. Returns what it did."""
    definition = step.definition
    number = step.escalation_rung + 1
    since = step.waiting_since or unit.now
    following = wait_deadline(definition, since=since, rung=number)
    do, group = rung["do"], rung.get("group") or ""
    waited = (unit.now - since).total_seconds()
    reason = (
        f"no decision after {waited:.0f} s: escalation rung {number} ({do}{' ' + group if group else ''})"
    )
    data = {
        "rung": number,
        "do": do,
        "group": group or None,
        "after_seconds": rung["after_seconds"],
        "next_at": following.isoformat() if following and do in ("remind", "reassign") else None,
    }
    if do in ("remind", "reassign"):
        fields: dict[str, Any] = {"escalation_rung": number, "deadline": following}
        if do == "reassign":
            fields["escalation_group"] = group
        kind = E.WAIT_REMINDED if do == "remind" else E.WAIT_ESCALATED
        step_note(unit, step, source=source, kind=kind, reason=reason, data=data, **fields)
        return f"wait_{'reminded' if do == 'remind' else 'reassigned'}"
    if do == "continue":
        # The rung's event is the move's own: a wait completed by its escalation.
        step_transition(
            unit,
            step,
            S.SUCCEEDED,
            source=source,
            kind=E.WAIT_ESCALATED,
            reason=f"{reason}: continued with the default output",
            data=data,
            output=definition.default_output,
            error="",
            escalation_rung=number,
            deadline=None,
        )
        job_advance(unit, state=state, source=source)
        return "wait_escalated_continue"
    # Hold and fail: the rung's event (its alert), then the move that ends the wait.
    step_note(
        unit, step, source=source, kind=E.WAIT_ESCALATED, reason=reason, data=data, escalation_rung=number
    )
    if do == "hold":
        step_hold(unit, state=state, step=step, source=source, reason=f"{reason}: held for an operator")
    else:
        step_transition(unit, step, S.FAILED, source=source, kind=E.STEP_FAILED, reason=reason, error=reason)
        job_end_for_step(
            unit, state=state, step=step, action=OnExhausted.COMPENSATE, source=source, reason=reason
        )
    return f"wait_escalated_{do}"
