"""The three state machines (job, step, attempt): the only code that moves a status or an outcome.

The allowed moves are data (below); a move not listed raises InvalidTransition at once, and a move
listed as operator-only needs an authenticated actor, whom its event names. Every move is a
guarded write registered with the current unit of work (scheduler.unit): steps are fenced on the
status and attempt they were read with, attempts on their phase (in flight, or finished with no
late outcome noted), jobs on their status; a row that another writer changed meanwhile fails the
unit with StaleWrite, so the change, its event and everything else in the unit roll back together.

Vocabulary (scheduler.models): *final* statuses have no move out at all; *settled* ones have no
automatic move left and carry `finished_at` (a failed job, which an operator may reopen, is
settled but not final).

Enforced in the database by `scheduler/sql/postgresql/sas_status_guard.sql` (with the generated
sas_move_allowed).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.dispatch import Signal

from agents.outcome import Outcome
from sas_project.errors import InvalidTransition, StaleWrite
from scheduler.models import (
    JOB_SETTLED,
    STEP_SETTLED,
    Attempt,
    EventKind,
    Job,
    JobStatus,
    Step,
    StepStatus,
)
from scheduler.outbox import callback_write, parent_notify
from scheduler.unit import STEP_WRITABLE, AttemptGuard, AttemptWrite, Unit, User

S = StepStatus
J = JobStatus
E = EventKind

# --- the tables ---------------------------------------------------------------------------------

STEP_TRANSITIONS: dict[str, frozenset[str]] = {
    # To succeeded without a call: a rerun's step that reuses the original's output (step_reuse).
    # To held: a step that cannot start (its condition or its timer's time cannot be read).
    # To failed: a fan-out whose list cannot become items (not a list, longer than the limit).
    S.PENDING: frozenset({S.DISPATCHED, S.WAITING, S.SKIPPED, S.SUCCEEDED, S.HELD, S.FAILED}),
    # A pool at its limit: the capacity pump dispatches the step; its job stopping skips it. A wait
    # step: its signal, approval or time completes it; a rejection or a timeout fails or holds it.
    S.WAITING: frozenset({S.DISPATCHED, S.SKIPPED, S.FAILED, S.SUCCEEDED, S.HELD}),
    # To held: the call succeeded but its output projection cannot be evaluated on the answer.
    S.DISPATCHED: frozenset({S.SUCCEEDED, S.ATTEMPT_FAILED, S.UNKNOWN, S.HELD}),
    S.ATTEMPT_FAILED: frozenset({S.DISPATCHED, S.WAITING, S.RETRY_WAIT, S.FAILED, S.HELD, S.SUCCEEDED}),
    S.UNKNOWN: frozenset({S.DISPATCHED, S.WAITING, S.RETRY_WAIT, S.FAILED, S.HELD, S.SUCCEEDED}),
    S.RETRY_WAIT: frozenset({S.DISPATCHED, S.WAITING, S.FAILED, S.HELD, S.SUCCEEDED}),
    S.HELD: frozenset({S.DISPATCHED, S.WAITING, S.SUCCEEDED, S.FAILED}),
    S.SUCCEEDED: frozenset({S.COMPENSATED}),
    S.FAILED: frozenset({S.DISPATCHED, S.WAITING, S.SUCCEEDED, S.COMPENSATED}),
    S.SKIPPED: frozenset(),
    S.COMPENSATED: frozenset(),
}

#: Moves only an operator may make, and whose event names them: those that reopen settled work
#: or complete a step without its call (a resolve, a rerun reusing an output).
STEP_OPERATOR_ONLY: frozenset[tuple[str, str]] = frozenset(
    {
        (S.PENDING, S.SUCCEEDED),
        (S.HELD, S.DISPATCHED),
        (S.HELD, S.WAITING),
        (S.FAILED, S.DISPATCHED),
        (S.FAILED, S.WAITING),
        (S.FAILED, S.SUCCEEDED),
        (S.WAITING, S.SUCCEEDED),
    }
)

#: Operator-only moves that a wait step makes on its own, as the events named here: its signal,
#: approval (the approver is named), timer or timeout completes it (scheduler.services.waits), or
#: its child job's success (scheduler.services.children).
STEP_WAIT_COMPLETIONS: dict[tuple[str, str], frozenset[EventKind]] = {
    (S.WAITING, S.SUCCEEDED): frozenset(
        {
            *(E.STEP_SIGNALLED, E.STEP_APPROVED, E.TIMER_FIRED, E.WAIT_TIMED_OUT, E.JOIN_MET),
            *(E.CHILD_SUCCEEDED, E.WAIT_ESCALATED, E.UNTIL_MET, E.ITERATIONS_EXHAUSTED),
        }
    ),
}

#: The event a move to each step status writes unless the caller names a more precise one.
#: `attempt_failed` and `unknown` have none: their event says which outcome brought the step there.
STEP_EVENTS: dict[str, EventKind] = {
    S.DISPATCHED: E.STEP_DISPATCHED,
    S.WAITING: E.STEP_WAITING,
    S.SUCCEEDED: E.STEP_SUCCEEDED,
    S.RETRY_WAIT: E.RETRY_SCHEDULED,
    S.HELD: E.STEP_HELD,
    S.FAILED: E.STEP_FAILED,
    S.SKIPPED: E.STEP_SKIPPED,
    S.COMPENSATED: E.STEP_COMPENSATED,
}

#: Where a live call's outcome other than a success takes its step, and the event that says which
#: outcome it was (STEP_EVENTS has none for attempt_failed and unknown). A status query that
#: itself failed says so instead (step_reconcile_failed: scheduler.services.outcomes). The
#: database code reads it as sas_outcome_status and sas_event_kind('outcome', ...) (generated by
#: scheduler.sqlgen, as are sas_event_kind('step'|'job', ...) from STEP_EVENTS and JOB_EVENTS).
OUTCOME_MOVES: dict[str, tuple[StepStatus, EventKind]] = {
    Outcome.NO_ANSWER: (S.UNKNOWN, E.STEP_NO_ANSWER),
    Outcome.BUSINESS_FAILURE: (S.ATTEMPT_FAILED, E.STEP_BUSINESS_FAILURE),
    Outcome.TRANSIENT_FAILURE: (S.ATTEMPT_FAILED, E.STEP_TRANSIENT_FAILURE),
    Outcome.NOT_HAPPENED: (S.ATTEMPT_FAILED, E.STEP_NOT_HAPPENED),
}

JOB_TRANSITIONS: dict[str, frozenset[str]] = {
    # Succeeded -> compensating: a child job (a sub-workflow step's) whose parent compensates
    # after it succeeded; its own saga undoes its steps (scheduler.services.saga). No other job
    # makes this move (JOB_PARENT_ONLY): a succeeded job a client submitted is final for it.
    J.PENDING: frozenset({J.RUNNING, J.COMPENSATING, J.CANCELLED, J.FAILED}),
    # Waiting for its concurrency key (scheduler.services.flow): it starts, or is cancelled
    # (through compensation, which finds nothing to undo) before it ever ran.
    J.WAITING: frozenset({J.RUNNING, J.COMPENSATING, J.CANCELLED}),
    J.RUNNING: frozenset({J.SUCCEEDED, J.COMPENSATING, J.FAILED, J.NEEDS_ATTENTION, J.CANCELLED}),
    J.NEEDS_ATTENTION: frozenset({J.RUNNING, J.SUCCEEDED, J.COMPENSATING, J.FAILED, J.CANCELLED}),
    J.COMPENSATING: frozenset({J.COMPENSATED, J.CANCELLED, J.NEEDS_ATTENTION}),
    J.FAILED: frozenset({J.COMPENSATING, J.RUNNING}),
    J.SUCCEEDED: frozenset({J.COMPENSATING}),
    J.COMPENSATED: frozenset(),
    J.CANCELLED: frozenset(),
}

JOB_OPERATOR_ONLY: frozenset[tuple[str, str]] = frozenset({(J.FAILED, J.COMPENSATING), (J.FAILED, J.RUNNING)})

#: Moves only a child job makes, when its parent's saga undoes it (`compensation_reason`
#: "parent"). The database's guard allows them for every job (it knows the table, not who asks);
#: job_transition refuses them to any other job.
JOB_PARENT_ONLY: frozenset[tuple[str, str]] = frozenset({(J.SUCCEEDED, J.COMPENSATING)})

JOB_EVENTS: dict[str, EventKind] = {
    J.WAITING: E.JOB_WAITING,
    J.RUNNING: E.JOB_RUNNING,
    J.SUCCEEDED: E.JOB_SUCCEEDED,
    J.NEEDS_ATTENTION: E.JOB_NEEDS_ATTENTION,
    J.COMPENSATING: E.JOB_COMPENSATING,
    J.COMPENSATED: E.JOB_COMPENSATED,
    J.FAILED: E.JOB_FAILED,
    J.CANCELLED: E.JOB_CANCELLED,
}

#: An attempt is *queued* (dispatched, its task not yet taken), then *started* (claimed by the one
#: delivery that may call; scheduler.services.claims), then *finished* with one outcome, which
#: never changes. In flight means queued or started. A result that arrives after the outcome was
#: set is noted beside it (`late_outcome`), once.
IN_FLIGHT = ""
ATTEMPT_TRANSITIONS: dict[str, frozenset[str]] = {
    IN_FLIGHT: frozenset(Outcome.values),
    **{outcome: frozenset() for outcome in Outcome.values},
}
#: The late outcomes an attempt notes, once: those a remote reports. A success is evidence (the
#: effect happened once) and may still complete the step; a failure changes nothing but is noted
#: all the same, so that a copy of it (a callback token replayed) finds the attempt noted and is
#: refused without a new event.
ATTEMPT_LATE_OUTCOMES = frozenset(
    {Outcome.SUCCEEDED, Outcome.BUSINESS_FAILURE, Outcome.TRANSIENT_FAILURE, Outcome.NOT_HAPPENED}
)


#: The machines by name: their table and their operator-only moves (docs/architecture.md draws
#: each with `mermaid`, and a test keeps the drawings equal to the tables).
MACHINES: dict[str, tuple[dict[str, frozenset[str]], frozenset[tuple[str, str]]]] = {
    "step": (STEP_TRANSITIONS, STEP_OPERATOR_ONLY),
    "job": (JOB_TRANSITIONS, JOB_OPERATOR_ONLY),
    "attempt": (ATTEMPT_TRANSITIONS, frozenset()),
}


def mermaid(machine: str) -> str:
    """The machine's table as a mermaid `stateDiagram-v2`: one arrow per allowed move (labelled
    `operator` when only an operator may make it, `parent` when only a child job undone by its
    parent does), and an arrow to `[*]` from each final status.
    States and moves come in the table's order, so the text changes only when the table does.
    An attempt's in-flight phase (the empty outcome) is drawn as `in_flight`."""
    table, operator_only = MACHINES[machine]
    order = list(table)

    def name(status: str) -> str:
        return status or "in_flight"

    lines = ["stateDiagram-v2"]
    for frm, targets in table.items():
        if not targets:
            lines.append(f"    {name(frm)} --> [*]")
        for to in sorted(targets, key=order.index):
            label = ": operator" if (frm, to) in operator_only else ""
            if machine == "job" and (frm, to) in JOB_PARENT_ONLY:
                label = ": parent"
            lines.append(f"    {name(frm)} --> {name(to)}{label}")
    return "\n".join(lines) + "\n"


def _check(
    table: dict[str, frozenset[str]],
    operator_only: frozenset[tuple[str, str]],
    what: str,
    frm: str,
    to: str,
    actor: User | None,
    kind: EventKind | None = None,
) -> None:
    if to not in table[frm]:
        raise InvalidTransition(f"{what} cannot go from {frm} to {to}", frm=frm, to=to)
    if what == "step" and kind is not None and kind in STEP_WAIT_COMPLETIONS.get((frm, to), ()):
        return
    if (frm, to) in operator_only and (actor is None or not actor.is_authenticated):
        raise InvalidTransition(f"only an operator may move a {what} from {frm} to {to}", frm=frm, to=to)


# --- steps ------------------------------------------------------------------------------------------


def step_transition(
    unit: Unit,
    step: Step,
    to: str,
    *,
    source: str,
    kind: EventKind | None = None,
    reason: str = "",
    actor: User | None = None,
    data: dict[str, Any] | None = None,
    **fields: Any,
) -> None:
    """Move `step` to `to` (with `fields`), fenced on the status and attempt it was read with.

    Raises InvalidTransition at once for a move not in the table. The row is written when the
    unit ends, together with every other step the unit changed, in one UPDATE guarded on what
    each row looked like when read. Entering a settled status sets `finished_at`; leaving one
    clears it.
    """
    frm = step.status
    _check(STEP_TRANSITIONS, STEP_OPERATOR_ONLY, "step", frm, to, actor, kind)
    kind = kind or STEP_EVENTS.get(to)
    if kind is None:
        raise ValueError(f"a move to {to} must name its event kind")
    unknown = set(fields) - set(STEP_WRITABLE)
    if unknown:
        raise ValueError(f"a transition cannot write {sorted(unknown)}")
    updates: dict[str, Any] = {"status": to, "updated_at": unit.now, **fields}
    if to in STEP_SETTLED:
        updates.setdefault("finished_at", unit.now)
    elif "finished_at" not in updates and step.finished_at is not None:
        updates["finished_at"] = None
    unit.step_changed(step, to)
    for name, value in updates.items():
        setattr(step, name, value)
    _step_event(unit, step, kind, source=source, reason=reason, data=data, frm=frm, to=to, actor=actor)


def step_wait(
    unit: Unit,
    step: Step,
    *,
    source: str,
    reason: str,
    waiting: str,
    kind: EventKind | None = None,
    actor: User | None = None,
    data: dict[str, Any] | None = None,
    **fields: Any,
) -> None:
    """A ready step begins waiting (for its items, an iteration, a child job, a signal, a timer):
    no call of its own, so no deadline or backoff unless `fields` set them. The event's reason
    is the caller's followed by `waiting` (what the step waits for)."""
    fields = {"deadline": None, "not_before": None, **fields}
    step_transition(
        unit,
        step,
        StepStatus.WAITING,
        source=source,
        kind=kind,
        actor=actor,
        reason=f"{reason}; {waiting}" if reason else waiting,
        data=data,
        **fields,
    )


def _step_event(
    unit: Unit,
    step: Step,
    kind: EventKind,
    *,
    source: str,
    reason: str,
    data: dict[str, Any] | None,
    frm: str = "",
    to: str = "",
    actor: User | None = None,
) -> None:
    """The event of a change to `step` (a move from `frm` to `to`, or none), naming its attempt."""
    unit.event(
        job_id=step.job_id,
        step=step,
        kind=kind,
        source=source,
        from_status=frm,
        to_status=to,
        attempt=step.attempt or None,
        actor=actor,
        reason=reason,
        data=data,
    )


def step_note(
    unit: Unit,
    step: Step,
    *,
    source: str,
    kind: EventKind,
    reason: str = "",
    data: dict[str, Any] | None = None,
    **fields: Any,
) -> None:
    """Record what happened to a step that keeps its status, writing `fields` fenced like a
    transition (a fan-out whose join failed stays waiting while its items are undone, a waiting
    step whose child job started)."""
    unknown = set(fields) - set(STEP_WRITABLE)
    if unknown:
        raise ValueError(f"a note cannot write {sorted(unknown)}")
    unit.step_changed(step)
    for name, value in {"updated_at": unit.now, **fields}.items():
        setattr(step, name, value)
    _step_event(unit, step, kind, source=source, reason=reason, data=data)


def step_reuse(unit: Unit, step: Step, *, source: str, actor: User | None) -> None:
    """Complete a rerun's new step with the output of the step it reuses (`reused_from`, of the
    original job), without calling it: pending -> succeeded, an operator's move. Raises
    InvalidTransition unless the reused step succeeded."""
    original = step.reused_from
    if original is None or original.status != S.SUCCEEDED:
        raise InvalidTransition(
            f"step {step.name} reuses no output: only a step that succeeded is reused",
            frm=step.status,
            to=S.SUCCEEDED,
        )
    step_transition(
        unit,
        step,
        S.SUCCEEDED,
        source=source,
        actor=actor,
        reason=f"output reused from job {original.job_id}: not called again",
        data={"reused_from": original.pk},
        output=original.output,
    )


def step_postpone(
    unit: Unit,
    step: Step,
    *,
    deadline: dt.datetime,
    source: str,
    reason: str,
    kind: EventKind = E.DEADLINE_EXTENDED,
    data: dict[str, Any] | None = None,
) -> None:
    """Move the deadline of a dispatched step and of its attempt in flight (no change of status),
    fenced like a transition. The event is `kind` (a deadline extended, or a call accepted whose
    deadline became the first heartbeat's)."""
    _move_deadline(unit, step, deadline, {})
    _step_event(
        unit,
        step,
        kind,
        source=source,
        reason=reason,
        data={**(data or {}), "deadline": deadline.isoformat()},
    )


def step_heartbeat(
    unit: Unit,
    step: Step,
    *,
    details: Any,
    deadline: dt.datetime | None,
    source: str,
    reason: str = "",
    data: dict[str, Any] | None = None,
) -> None:
    """A heartbeat of the step's attempt in flight: its time, and its details when it sent some,
    on the attempt; with `deadline`, the step's and the attempt's deadline moved there. No status
    changes. Fenced like a transition: the attempt must still be in flight.

    An event (`deadline_extended`) only when the caller gives a `reason`: a call that heartbeats
    every few seconds for hours would otherwise bury the job's history.
    """
    fields: dict[str, Any] = {"heartbeat_at": unit.now}
    if details is not None:
        fields["heartbeat_details"] = details
    if deadline is None:
        if step.status != S.DISPATCHED:
            raise InvalidTransition(f"only a dispatched step has a call in flight, not a {step.status} one")
        unit.attempt_write(AttemptWrite(step.pk, step.attempt, fields, AttemptGuard.LIVE))
    else:
        _move_deadline(unit, step, deadline, fields)
    if reason:
        moved_to = deadline.isoformat() if deadline is not None else None
        _step_event(
            unit,
            step,
            E.DEADLINE_EXTENDED,
            source=source,
            reason=reason,
            data={**(data or {}), "deadline": moved_to},
        )


def _move_deadline(unit: Unit, step: Step, deadline: dt.datetime, attempt_fields: dict[str, Any]) -> None:
    if step.status != S.DISPATCHED:
        raise InvalidTransition(f"only a dispatched step has a deadline to move, not a {step.status} one")
    unit.step_changed(step)
    step.deadline = deadline
    step.updated_at = unit.now
    unit.attempt_write(
        AttemptWrite(step.pk, step.attempt, {**attempt_fields, "deadline": deadline}, AttemptGuard.LIVE)
    )


# --- jobs -------------------------------------------------------------------------------------------


#: The statuses in which a job holds its concurrency key (scheduler.services.flow): live and not
#: waiting. A job that leaves them frees its key: `key_freed` is sent once its transaction commits.
KEY_HOLDING = frozenset({J.PENDING, J.RUNNING, J.NEEDS_ATTENTION, J.COMPENSATING})
#: Sent after the commit of a transaction in which a job left KEY_HOLDING (workflow: its name, key);
#: scheduler.services.flow receives it and starts what waits for the key.
key_freed = Signal()


def job_transition(
    unit: Unit,
    job: Job,
    to: str,
    *,
    source: str,
    reason: str = "",
    actor: User | None = None,
    data: dict[str, Any] | None = None,
    **fields: Any,
) -> None:
    """Move `job` to `to`, fenced on its current status and written at once, with the event its
    new status writes (JOB_EVENTS). Entering a settled status sets `finished_at`; leaving one (an
    operator reopening a failed job) clears it."""
    frm = job.status
    _check(JOB_TRANSITIONS, JOB_OPERATOR_ONLY, "job", frm, to, actor)
    undone_child = job.parent_job_id is not None and fields.get("compensation_reason") == "parent"
    if (frm, to) in JOB_PARENT_ONLY and not undone_child:
        raise InvalidTransition(
            f"only a child job whose parent compensates moves from {frm} to {to}", frm=frm, to=to
        )
    updates: dict[str, Any] = {"status": to, "updated_at": unit.now, **fields}
    if to in JOB_SETTLED:
        updates.setdefault("finished_at", unit.now)
    elif job.finished_at is not None:
        updates.setdefault("finished_at", None)
    changed = Job.objects.filter(pk=job.pk, status=frm).update(**updates)
    if changed != 1:
        raise StaleWrite(f"job {job.pk} changed under us (expected {frm})")
    for name, value in updates.items():
        setattr(job, name, value)
    if to in JOB_SETTLED and job.callback_url:
        callback_write(job, to)
    if job.concurrency_key and frm in KEY_HOLDING and to not in KEY_HOLDING:
        workflow, key = job.workflow.name, job.concurrency_key
        transaction.on_commit(lambda: key_freed.send(sender=Job, workflow=workflow, key=key))
    if job.parent_job_id is not None and (
        to in JOB_SETTLED or (job.compensation_reason and J.NEEDS_ATTENTION in (frm, to))
    ):
        # Settled, or a compensation that stopped for an operator (or resumed): its parent waits
        # for it, and needs attention while it does.
        parent_notify(job)
    unit.event(
        job_id=job.pk,
        kind=JOB_EVENTS[to],
        source=source,
        from_status=frm,
        to_status=to,
        actor=actor,
        reason=reason,
        data=data,
    )


def job_set_paused(
    unit: Unit, job: Job, *, paused: bool, source: str, actor: User | None, reason: str = ""
) -> None:
    """Pause (no new dispatches) or resume a job. Pausing is orthogonal to the job's status."""
    value = unit.now if paused else None
    changed = Job.objects.filter(pk=job.pk, paused_at__isnull=paused).update(
        paused_at=value, updated_at=unit.now
    )
    if changed != 1:
        raise StaleWrite(f"job {job.pk} is already {'paused' if paused else 'running'}")
    job.paused_at = value
    job.updated_at = unit.now
    unit.event(
        job_id=job.pk,
        kind=E.JOB_PAUSED if paused else E.JOB_RESUMED,
        source=source,
        actor=actor,
        reason=reason,
    )


# --- attempts -----------------------------------------------------------------------------------------


def attempt_open(
    unit: Unit,
    step: Step,
    *,
    number: int,
    kind: str,
    endpoint: Any,
    policy_version: int,
    deadline: dt.datetime,
    queue_row: int | None,
) -> Attempt:
    """A new attempt in flight (queued). Inserted when the unit ends, after the attempt before it
    was closed: at most one attempt of a step is in flight (a unique index holds it)."""
    attempt = Attempt(
        step=step,
        number=number,
        kind=kind,
        pool=step.pool,
        endpoint=endpoint,
        endpoint_url=endpoint.url if endpoint is not None else "",
        policy_version=policy_version,
        dispatched_at=unit.now,
        deadline=deadline,
        queue_row=queue_row,
    )
    unit.attempt_insert(attempt)
    return attempt


def attempt_finish(
    unit: Unit,
    step_id: int,
    number: int,
    outcome: str,
    *,
    decided_by: str,
    status_code: int | None = None,
    latency_ms: int | None = None,
    excerpt: str = "",
    error: str = "",
    late_success: bool = False,
    not_sent: bool = False,
    retry_after: float | None = None,
) -> None:
    """Finish attempt `number` of a step with `outcome` (in flight -> outcome), guarded on it
    being in flight. `late_success`: the success came after the deadline (noted beside it).
    `not_sent`: claimed but nothing was sent, so no effect is possible (clears `started_at`).
    `retry_after`: the seconds the remote asked to wait (Retry-After), kept as it asked them."""
    if outcome not in ATTEMPT_TRANSITIONS[IN_FLIGHT]:
        raise InvalidTransition(f"an attempt cannot finish as {outcome!r}", frm=IN_FLIGHT, to=outcome)
    fields: dict[str, Any] = {
        "finished_at": unit.now,
        "outcome": outcome,
        "decided_by": decided_by,
        "status_code": status_code,
        "latency_ms": latency_ms,
        "response_excerpt": excerpt,
        "error": error[:2000],
    }
    if late_success:
        if outcome != Outcome.SUCCEEDED:
            raise InvalidTransition("only a success is noted as late", frm=IN_FLIGHT, to=outcome)
        fields.update(late_outcome=Outcome.SUCCEEDED, late_at=unit.now)
    if not_sent:
        fields["started_at"] = None
    if retry_after is not None:
        fields["retry_after_seconds"] = retry_after
    unit.attempt_write(AttemptWrite(step_id, number, fields, AttemptGuard.LIVE))


def attempt_supersede(unit: Unit, step: Step, *, decided_by: str) -> None:
    """Close the step's attempt in flight, if it has one, as superseded: the step was completed
    another way, and that attempt's own answer can no longer change anything."""
    if step.attempt:
        unit.attempt_write(
            AttemptWrite(
                step.pk,
                step.attempt,
                {"finished_at": unit.now, "outcome": Outcome.SUPERSEDED, "decided_by": decided_by},
                AttemptGuard.LIVE_IF_ANY,
            )
        )


def attempts_time_out(unit: Unit, steps: list[Step], *, decided_by: str) -> None:
    """Close the attempts in flight of these dispatched steps as unanswered (no_answer)."""
    for step in steps:
        unit.attempt_write(
            AttemptWrite(
                step.pk,
                step.attempt,
                {
                    "finished_at": unit.now,
                    "outcome": Outcome.NO_ANSWER,
                    "decided_by": decided_by,
                    "error": "no outcome reported before the deadline",
                },
                AttemptGuard.LIVE,
            )
        )


def attempt_note_late(unit: Unit, step_id: int, number: int, outcome: str) -> None:
    """Note a late outcome beside a finished attempt's verdict (once; the verdict stays)."""
    if outcome not in ATTEMPT_LATE_OUTCOMES:
        raise InvalidTransition(f"a late {outcome} is not noted on the attempt", frm="finished", to=outcome)
    unit.attempt_write(
        AttemptWrite(
            step_id,
            number,
            {"late_outcome": outcome, "late_at": unit.now},
            AttemptGuard.FINISHED_UNNOTED,
        )
    )
