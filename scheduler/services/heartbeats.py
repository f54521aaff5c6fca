"""Heartbeats: a call that answers later (HTTP 202, a queue message) reports that it is alive.

A heartbeat moves a deadline, not a status. When the step's policy sets `heartbeat_seconds`, a
call the remote accepted is due again that long after the acceptance, and each heartbeat moves
the step's and the attempt's deadline that far from now: short on silence, long on progress, past
the policy's `timeout_seconds` if the work takes that long. The deadline never passes the job's
deadline nor the end of the step's budget (`step_budget_seconds`), whatever the heartbeats say.
A missed heartbeat is an ordinary overdue call: the supervisor's scan times it out (`no_answer`,
the same operation ID) and the policy reconciles or retries; the next attempt's request carries
the last details any earlier attempt reported (scheduler.services.claims).

Each heartbeat records its time and details on the attempt in flight, under the job's row lock
(as every writer of an attempt), guarded on the attempt being in flight. One for an attempt
the supervisor already gave up on (finished, superseded, or its step moved on) is late evidence:
it changes nothing and the remote hears so (410 to the HTTP heartbeat URL).

Events: not one per heartbeat (a call heartbeating every few seconds for hours would bury the
job's history), but one (`deadline_extended`) for the first heartbeat of an attempt, for the one
that carries it past its nominal timeout, and for the one whose deadline a cap stopped.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from agents.outcome import HEARTBEAT_DETAILS_MAX_BYTES
from sas_project.errors import InvalidInput
from sas_project.validation import json_storable
from scheduler.models import Attempt, Event, EventKind, RemediationPolicy, Step, StepStatus
from scheduler.services.locking import lock_job
from scheduler.transitions import step_heartbeat
from scheduler.unit import unit_of_work

S = StepStatus

#: attempt_heartbeat's verdicts.
RECORDED = "recorded"
#: The attempt was given up on (finished, superseded, or its step moved on): nothing moved.
GONE = "gone"
#: No such attempt.
UNKNOWN = "unknown"


@dataclass(frozen=True)
class HeartbeatVerdict:
    verdict: str
    #: The step's deadline after a recorded heartbeat.
    deadline: dt.datetime | None = None


@dataclass(frozen=True)
class SilenceDeadline:
    """When a call that heartbeats is next due, and what capped it (empty: nothing did)."""

    at: dt.datetime
    capped_by: str = ""


def silence_deadline(
    now: dt.datetime,
    *,
    heartbeat_seconds: float,
    job_deadline: dt.datetime | None,
    first_dispatched_at: dt.datetime | None,
    step_budget_seconds: float | None,
) -> SilenceDeadline:
    """`now + heartbeat_seconds`, but never past the job's deadline nor the end of the step's
    budget: heartbeats extend a call, not the time the job or the step may take."""
    at = now + dt.timedelta(seconds=heartbeat_seconds)
    capped_by = ""
    if step_budget_seconds is not None and first_dispatched_at is not None:
        budget_end = first_dispatched_at + dt.timedelta(seconds=step_budget_seconds)
        if budget_end < at:
            at, capped_by = budget_end, "the step's budget"
    if job_deadline is not None and job_deadline < at:
        at, capped_by = job_deadline, "the job's deadline"
    return SilenceDeadline(at=at, capped_by=capped_by)


def step_silence_deadline(
    now: dt.datetime, *, step: Step, policy: RemediationPolicy
) -> SilenceDeadline | None:
    """The deadline of the step's call from `now` under its policy's heartbeat interval, or None
    when the policy sets none."""
    if policy.heartbeat_seconds is None:
        return None
    return silence_deadline(
        now,
        heartbeat_seconds=policy.heartbeat_seconds,
        job_deadline=step.job.deadline,
        first_dispatched_at=step.first_dispatched_at,
        step_budget_seconds=policy.step_budget_seconds,
    )


def details_valid(details: Any) -> None:
    """Raise InvalidInput when heartbeat details cannot be kept: JSON the database refuses, or
    larger than HEARTBEAT_DETAILS_MAX_BYTES (they travel with every later attempt)."""
    json_storable(details, "details")
    if len(json.dumps(details, ensure_ascii=False).encode()) > HEARTBEAT_DETAILS_MAX_BYTES:
        raise InvalidInput(
            f"details are larger than {HEARTBEAT_DETAILS_MAX_BYTES} bytes as JSON", field="details"
        )


def attempt_heartbeat(step_id: int, *, number: int, details: Any, source: str) -> HeartbeatVerdict:
    """Record a heartbeat of attempt `number` of a step, with its `details` (None: none sent; the
    attempt keeps those of its last heartbeat that had some).

    Under the job's row lock, guarded on the attempt being in flight: "recorded" (the attempt's
    heartbeat time and details written, the deadlines moved when the policy sets an interval),
    "gone" (the attempt was given up on: nothing changes) or "unknown" (no such attempt).
    Raises InvalidInput for details that cannot be kept.
    """
    details_valid(details)
    job_id = Step.objects.filter(pk=step_id).values_list("job_id", flat=True).first()
    if job_id is None:
        return HeartbeatVerdict(UNKNOWN)
    with unit_of_work() as unit:
        state = lock_job(unit, job_id=job_id)
        step = state.step(step_id)
        attempt = (
            Attempt.objects.filter(step_id=step_id, number=number)
            .values("finished_at", "dispatched_at", "started_at", "deadline", "heartbeat_at")
            .first()
        )
        if attempt is None:
            return HeartbeatVerdict(UNKNOWN)
        if attempt["finished_at"] is not None or step.attempt != number or step.status != S.DISPATCHED:
            return HeartbeatVerdict(GONE)
        policy = step.definition.call_policy
        silence = step_silence_deadline(unit.now, step=step, policy=policy)
        reasons: list[str] = []
        data: dict[str, Any] = {"heartbeat": True, "heartbeat_seconds": policy.heartbeat_seconds}
        if silence is not None:
            before: dt.datetime = attempt["deadline"]
            # The call's own timeout runs from when it was made (a task may wait for a worker).
            made = attempt["started_at"] or attempt["dispatched_at"]
            nominal = made + dt.timedelta(seconds=policy.timeout_seconds)
            if attempt["heartbeat_at"] is None:
                reasons.append(
                    f"first heartbeat of attempt {number}: each one moves its deadline "
                    f"{policy.heartbeat_seconds:g} s ahead"
                )
            if before <= nominal < silence.at:
                reasons.append(
                    f"heartbeats carry attempt {number} past its timeout of {policy.timeout_seconds:g} s"
                )
            if silence.capped_by and silence.at != before:
                reasons.append(f"the deadline stops at {silence.capped_by}")
                data["capped_by"] = silence.capped_by
        step_heartbeat(
            unit,
            step,
            details=details,
            deadline=silence.at if silence is not None else None,
            source=source,
            reason="; ".join(reasons),
            data=data,
        )
        return HeartbeatVerdict(RECORDED, deadline=step.deadline)


def heartbeats_missed(steps: list[Step]) -> dict[int, float]:
    """Of these overdue dispatched steps (their policies loaded), those whose call in flight was
    held to heartbeats: its policy sets an interval and the remote accepted the call or already
    sent one. Step id -> the interval it missed."""
    held = {
        s.pk: s
        for s in steps
        if s.status == S.DISPATCHED and s.definition.call_policy.heartbeat_seconds is not None
    }
    if not held:
        return {}
    alive: set[tuple[int, int | None]] = set(
        Attempt.objects.filter(
            step_id__in=list(held), heartbeat_at__isnull=False, finished_at__isnull=True
        ).values_list("step_id", "number")
    )
    alive |= set(
        Event.objects.filter(
            job_id__in={s.job_id for s in held.values()},
            step_id__in=list(held),
            kind=EventKind.CALL_ACCEPTED,
        ).values_list("step_id", "attempt")
    )
    return {
        pk: float(step.definition.call_policy.heartbeat_seconds or 0)
        for pk, step in held.items()
        if (pk, step.attempt) in alive
    }


def timed_out_reason(deadline: dt.datetime | None, *, missed_heartbeat: float | None) -> str:
    """The reason of a `step_timed_out` event (the per-step and set-wise scans write the same)."""
    if missed_heartbeat is not None:
        return f"no heartbeat within {missed_heartbeat:g} s"
    return "no outcome before the deadline" if deadline is not None else "dispatched with no deadline"


__all__ = [
    "GONE",
    "RECORDED",
    "UNKNOWN",
    "HeartbeatVerdict",
    "SilenceDeadline",
    "attempt_heartbeat",
    "details_valid",
    "heartbeats_missed",
    "silence_deadline",
    "step_silence_deadline",
    "timed_out_reason",
]
