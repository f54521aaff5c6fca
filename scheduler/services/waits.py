"""Wait steps: a step that waits for a signal, an approval or a time instead of calling a remote.

A wait is a status with a reason, not a sleeping worker (docs/workflow-language.md, "Steps
that wait"): the step is `waiting`, holds no worker and no queue row, and its `deadline` is when the
wait ends by itself (the timeout of a signal or approval, the time of a timer; none: for ever).
The supervisor's scan reads only the waits that are due, through the live-step index, and ends
them (`waits_expire`) with ordinary guarded moves.

- Entering (`step_begin_wait`, from the DAG advance when the step is ready): pending -> waiting.
  A signal step consumes at once a signal the job already received (signals are buffered), and
  a timer whose time has passed fires at once.
- A signal (`signal_send`) is stored with its event, then consumed by the waiting step that
  names it, if there is one: a guarded write of the signal (`consumed_at` still empty) in the
  transaction that completes the step, so each signal is consumed at most once. Its payload is
  the step's output.
- A wait for an inbound event (`"event": "<type>"`) takes the signals named `event:<type>`
  (scheduler.services.events stores one per event and job it reaches, the event as payload), but
  only one its `match` holds for (`event_matches`); its output is the event's `data`.
- An approval (`approval_decide`): Approve completes the step with the decision as its output;
  Reject fails it, and its policy's on_exhausted (compensate when it has none) decides the job.
- A timeout does what the definition says: hold for an operator, fail (as a rejection does), or
  continue with the definition's default output.
- A sub-workflow step waits for its child job (`step_begin_child`): it enters `waiting` and the
  task that starts the child is enqueued in the same transaction; the rest of its life (the
  child's start, its settling, the scan's sweep) is scheduler.services.children's.

The hot path's functions (`scheduler/sql/postgresql/sas_submit.sql`,
`scheduler/sql/postgresql/sas_record_outcome.sql`) leave a job with a wait still to come to the
general path, which starts its waits here.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from typing import Any

from jmespath.exceptions import JMESPathError

from sas_project.errors import InvalidInput
from sas_project.validation import Unreadable, read_time
from scheduler import expressions
from scheduler.event_definitions import event_of_signal
from scheduler.models import (
    JOB_SETTLED,
    EventKind,
    Job,
    JobStatus,
    Signal,
    Step,
    StepDefinition,
    StepDefinitionKind,
    StepStatus,
)
from scheduler.outbox import CHILD_START_TASK, task_write
from scheduler.services.locking import JobState
from scheduler.transitions import step_transition, step_wait
from scheduler.unit import Unit, User
from scheduler.wait_definitions import due_after, rung_at, timeout_at, wait_deadline

S = StepStatus
K = StepDefinitionKind
E = EventKind

logger = logging.getLogger("scheduler.waits")


# --- entering a wait ------------------------------------------------------------------------------


class NoTime(Exception):
    """A timer's `until` field is missing or holds no time the service can store (its message is
    the held step's reason)."""


def timer_due(state: JobState, *, step: Step, now: dt.datetime) -> dt.datetime:
    """When the timer fires: `wait_seconds` after now, or the time at its `until` field (the job's
    input, or an ancestor's output); a time without an offset is UTC. Raises NoTime, and nothing
    else, when the field is missing or its time cannot be read strictly (sas_project.validation.
    read_time: an impossible date, an offset beyond PostgreSQL's +/-15:59, a year out of range),
    so a bad time holds the step where it is armed, never fails the write of its deadline."""
    definition = step.definition
    if not definition.until:
        return due_after(now, seconds=definition.wait_seconds or 0)
    source, *path = definition.until.split(".")
    if source == "input":
        value: Any = step.input_override if step.input_override is not None else state.job.input
    else:
        value = next((s.output for s in state.actions if s.name == source), None)
    for key in path:
        if not isinstance(value, dict) or key not in value:
            raise NoTime(f"timer: {definition.until} is missing")
        value = value[key]
    try:
        return read_time(value)
    except Unreadable as exc:
        raise NoTime(time_unreadable(definition.until, value=value, exc=exc)) from None


def time_unreadable(field: str, *, value: Any, exc: Unreadable) -> str:
    """Why the time at `field` cannot be read (a held step's reason, a refused submission's)."""
    shown = value[:100] if isinstance(value, str) else value
    text = repr(shown)
    if len(text) > 120:
        text = f"{text[:120]}..."
    return f"cannot read the time at {field}: {text} ({exc})"


def timers_check_input(definitions: Sequence[StepDefinition], *, payload: dict[str, Any]) -> None:
    """Refuse a submission whose input holds, where a timer's `until` reads it (`input.<path>`),
    a value that is no readable time (timer_due would hold the step at once): InvalidInput naming
    the field. A field the input lacks is not refused here (the step is held when it starts)."""
    for definition in definitions:
        if definition.kind != K.TIMER or not definition.until.startswith("input."):
            continue
        value: Any = payload
        for key in definition.until.split(".")[1:]:
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            try:
                read_time(value)
            except Unreadable as exc:
                why = time_unreadable(definition.until, value=value, exc=exc)
                raise InvalidInput(f"step {definition.name!r}: {why}", field=definition.until) from None


def step_begin_wait(
    unit: Unit, *, state: JobState, step: Step, source: str, reason: str, actor: User | None = None
) -> None:
    """A ready wait step starts waiting (pending, or held/failed when an operator retries it)."""
    definition = step.definition
    data: dict[str, Any] = {"for": definition.kind}
    kind = E.STEP_WAITING
    if definition.kind == K.TIMER:
        try:
            deadline: dt.datetime | None = timer_due(state, step=step, now=unit.now)
        except NoTime as exc:
            # The job's own data holds no time: the wait starts, and is held at once for an
            # operator to decide (resolve, retry, compensate).
            step_transition(
                unit, step, S.WAITING, source=source, actor=actor, reason=reason, data=data, deadline=None
            )
            why = str(exc)
            step_transition(
                unit, step, S.HELD, source=source, kind=E.STEP_HELD, reason=why, status_reason=why
            )
            return
        data["until"] = deadline.isoformat() if deadline else None
    else:
        # The sooner of the next escalation rung and the timeout (scheduler.services.escalation).
        deadline = wait_deadline(definition, since=unit.now)
        timeout = timeout_at(definition, since=unit.now)
        data["timeout_at"] = timeout.isoformat() if timeout else None
        first = rung_at(definition, since=unit.now, rung=0)
        if first is not None:
            data["escalates_at"] = first.isoformat()
        ladder = {"waiting_since": unit.now, "escalation_rung": 0, "escalation_group": ""}
        if definition.kind == K.SIGNAL:
            data["signal"] = definition.signal
        else:
            data["group"] = definition.group or None
            kind = E.APPROVAL_REQUESTED
    what = describe(definition)
    if definition.kind == K.TIMER:
        ladder = {}
    step_wait(
        unit,
        step,
        source=source,
        kind=kind,
        actor=actor,
        reason=reason,
        waiting=f"waiting for {what}",
        data=data,
        deadline=deadline,
        **ladder,
    )
    if definition.kind == K.SIGNAL:
        buffered = Signal.objects.filter(
            job_id=state.job.pk, name=definition.signal, consumed_at__isnull=True
        ).order_by("id")
        if event_of_signal(definition.signal) is None:
            signal = buffered.first()
        else:
            # A job holds few events of one type (only those its match held for when they came).
            signal = next((s for s in buffered if event_matches(state.job, step=step, event=s.payload)), None)
        if signal is not None:
            signal_consume(unit, step=step, signal=signal, source=source)
    elif definition.kind == K.TIMER and deadline is not None and deadline <= unit.now:
        timer_fire(unit, step=step, source=source)


def current_child(step: Step) -> Job | None:
    """The child job of sub-workflow step `step`'s current try (the child whose `parent_try` is
    the step's `attempt`), or None before that try's child starts."""
    return Job.objects.filter(
        parent_job_id=step.job_id, parent_step=step.name, parent_try=step.attempt
    ).first()


def step_begin_child(
    unit: Unit, *, state: JobState, step: Step, source: str, reason: str, actor: User | None = None
) -> None:
    """A ready sub-workflow step starts waiting for its child job (pending, or held/failed when an
    operator retries it), and the task that starts the child is enqueued in this transaction
    (scheduler.services.children.child_start): the intent and its task commit together, and the
    child is created under the parent's lock, at most once per try, by whichever delivery comes
    first. An operator's retry of a step whose child ended without success (failed, compensated,
    cancelled) is a new try: a new child, under `<step's operation ID>/retry-<n>`. A child that
    succeeded (its output projection held the step) or is still live (it needs attention) is
    waited for again: never two live children for one step."""
    workflow = step.definition.child_workflow
    child = current_child(step)
    data: dict[str, Any] = {
        "for": "workflow",
        "workflow": workflow,
        "child_job": str(child.pk) if child else None,
    }
    tries: dict[str, Any] = {}
    if child is not None and child.status in JOB_SETTLED and child.status != JobStatus.SUCCEEDED:
        tries["attempt"] = step.attempt + 1
        data.update(child_job=None, previous_child=str(child.pk), attempt=tries["attempt"])
        child = None
    what = f"child job {child.pk}" if child is not None else f"a child job of workflow {workflow!r}"
    step_wait(
        unit,
        step,
        source=source,
        actor=actor,
        reason=reason,
        waiting=f"waiting for {what}",
        data=data,
        status_reason=f"waiting for {what}" if child is not None else f"starting {what}",
        **tries,
    )
    task_write(CHILD_START_TASK, step.pk, name=f"step-{step.pk}-child-start")


def event_matches(job: Job, *, step: Step, event: Any) -> bool:
    """Whether the event (`{"type", "id", "source", "data"}`) is this job's, for its step waiting
    for an event: the step's `match` is true over `{"event", "input"}` (the step's edited input,
    or the job's). One that cannot be evaluated is false (logged): the event is not this job's."""
    data = {"event": event, "input": step.input_override if step.input_override is not None else job.input}
    try:
        return expressions.truthy(expressions.evaluate(step.definition.event_match, data, stored=False))
    except JMESPathError as exc:
        logger.info("job %s step %s: match cannot be evaluated: %s", job.pk, step.name, exc)
        return False


def describe(definition: StepDefinition) -> str:
    if definition.kind == K.SIGNAL:
        event_type = event_of_signal(definition.signal)
        if event_type is not None:
            return f"an event {event_type!r}"
        return f"signal {definition.signal!r}"
    if definition.kind == K.APPROVAL:
        return f"an approval by {definition.group or 'an operator'}"
    return "its time"


def signal_consume(unit: Unit, *, step: Step, signal: Signal, source: str, actor: User | None = None) -> None:
    """The waiting step takes the signal: guarded on the signal not being consumed yet, so a
    signal completes one step once, whoever else tries."""
    taken = Signal.objects.filter(pk=signal.pk, consumed_at__isnull=True).update(
        consumed_at=unit.now, consumed_by=step
    )
    if taken != 1:
        return
    signal.consumed_at, signal.consumed_by = unit.now, step
    event_type = event_of_signal(signal.name)
    event = signal.payload if event_type is not None and isinstance(signal.payload, dict) else None
    step_transition(
        unit,
        step,
        S.SUCCEEDED,
        source=source,
        kind=E.STEP_SIGNALLED,
        actor=actor,
        reason=f"signal {signal.name!r} received" if event is None else f"event {event_type!r} received",
        data={"signal_id": signal.pk}
        if event is None
        else {"signal_id": signal.pk, "event": {k: event.get(k) for k in ("type", "id", "source")}},
        # An event's step outputs the event's data (the signal keeps the whole event).
        output=signal.payload if event is None else event.get("data"),
        error="",
    )


def timer_fire(unit: Unit, *, step: Step, source: str) -> None:
    step_transition(
        unit,
        step,
        S.SUCCEEDED,
        source=source,
        kind=E.TIMER_FIRED,
        reason="its time came",
        data={"due": step.deadline.isoformat() if step.deadline else None},
        output={"fired_at": unit.now.isoformat()},
        error="",
    )
