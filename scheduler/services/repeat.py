"""Loops: a `repeat` step calls its remote again, one iteration after another, until its `until`
holds (the poll-until pattern for a remote that offers only a status endpoint).

Each iteration is an `item` step row of the repeat step (`item_index` = its number, from 1), with
its own operation ID (`<step's operation ID>/iter-<n>`), attempts and retries under the step's
policy, supervised like any call (scheduler.services.fanout stores a fan-out's items the same
way, and the items API lists both). The repeat step itself calls nothing: it waits (`waiting`,
no pool, no worker) while an iteration runs, and between iterations its `deadline` is when the
next one is due: the supervisor's waits sweep reads it through the live steps' index, as it reads
a timer's (scheduler.services.wakeups), and the next iteration is dispatched then.

After an iteration succeeds, `until` (JMESPath over `output`, `input`, `iteration`) decides:
true, the step succeeds with that iteration's output; false, the next iteration is made and due
after `interval_seconds`; after `max_iterations`, `on_exhausted`: hold for an operator, fail (the
saga then compensates the job), or continue with the last output. An iteration that fails for good
fails the step as a failed call would (its policy's on_exhausted; scheduler.services.saga).

Undoing a repeat calls its compensation once, for the last iteration that succeeded (the effect
the loop ended on); earlier iterations only asked.
"""

from __future__ import annotations

from typing import Any

from jmespath.exceptions import JMESPathError

from scheduler import expressions
from scheduler.models import STEP_SETTLED, EventKind, Step, StepKind, StepStatus
from scheduler.services.dispatch import step_dispatch
from scheduler.services.effects import compensation_dispatch
from scheduler.services.fanout import items_stop
from scheduler.services.locking import JobState, step_input
from scheduler.transitions import step_note, step_transition, step_wait
from scheduler.unit import Unit
from scheduler.wait_definitions import due_after

S = StepStatus
E = EventKind

#: An iteration that is running (or waiting for its pool's capacity or a retry).
RUNNING = frozenset({S.WAITING, S.DISPATCHED, S.ATTEMPT_FAILED, S.UNKNOWN, S.RETRY_WAIT})


def loop_of(step: Step) -> dict[str, Any]:
    """The repeat's `{"until", "interval_seconds", "max_iterations", "on_exhausted"}`."""
    return step.definition.repeat or {}


def repeat_start(unit: Unit, *, state: JobState, step: Step, source: str, reason: str) -> None:
    """The ready repeat step begins waiting on its first iteration, dispatched at once."""
    loop = loop_of(step)
    status_reason = f"iteration 1 of at most {loop.get('max_iterations')}"
    step_wait(
        unit,
        step,
        source=source,
        kind=E.ITERATION_STARTED,
        reason=reason,
        waiting=status_reason,
        data={"iteration": 1},
        status_reason=status_reason,
        pool=None,
    )
    first = _make_iteration(unit, state, step, 1)
    if state.job.paused_at is None:
        step_dispatch(unit, state=state, step=first, source=source, reason=f"iteration 1 of {step.name}")


def _make_iteration(unit: Unit, state: JobState, step: Step, number: int) -> Step:
    iteration = Step.objects.create(
        job=state.job,
        definition=step.definition,
        name=f"{step.name}[{number}]",
        kind=StepKind.ITEM,
        parent=step,
        item_index=number,
        operation_id=f"{step.operation_id}/iter-{number}",
        pool=step.definition.pool,
        created_at=unit.now,
        updated_at=unit.now,
    )
    return state.adopt([iteration])[0]


def _last(unit: Unit, state: JobState, step: Step) -> Step | None:
    unit.flush()  # the iterations as this unit left them
    last = (
        Step.objects.filter(parent_id=step.pk, kind=StepKind.ITEM)
        .select_related("definition__policy", "pool")
        .order_by("-item_index")
        .first()
    )
    return state.adopt([last])[0] if last is not None else None


def repeat_advance(unit: Unit, *, state: JobState, step: Step, source: str) -> tuple[str, str]:
    """Move a waiting repeat step on, in a job running forward. Returns what it did and, for an
    iteration held for an operator, its name: ("running", ""), ("running", <held iteration>),
    ("succeeded", ""), ("held", "") (exhausted, on_exhausted hold), ("exhausted", "") (the step
    failed: its job compensates) or ("failed", "") (an iteration failed for good: the caller
    applies the step's policy, as for a failed call; the reason is the step's `error`)."""
    last = _last(unit, state, step)
    if last is None:
        return "running", ""
    number = last.item_index or 0
    if last.status == S.PENDING:
        due = step.deadline is None or step.deadline <= unit.now
        if due and state.job.paused_at is None:
            step_note(
                unit,
                step,
                source=source,
                kind=E.ITERATION_STARTED,
                reason=f"iteration {number} is due",
                data={"iteration": number},
                status_reason=f"iteration {number} of at most {loop_of(step).get('max_iterations')}",
                deadline=None,
            )
            step_dispatch(
                unit, state=state, step=last, source=source, reason=f"iteration {number} of {step.name}"
            )
        return "running", ""
    if last.status == S.HELD:
        return "running", last.name
    if last.status in RUNNING:
        return "running", ""
    if last.status != S.SUCCEEDED:
        why = (
            f"iteration {number} {last.status}: {last.error}" if last.error else f"iteration {number} failed"
        )
        step_note(unit, step, source=source, kind=E.STEP_FAILED, reason=why, error=why[:2000])
        return "failed", ""
    return _decide(unit, state, step, last, number, source=source)


def _decide(
    unit: Unit, state: JobState, step: Step, last: Step, number: int, *, source: str
) -> tuple[str, str]:
    """An iteration succeeded: the loop ends (`until` holds, or it is exhausted) or goes on."""
    loop = loop_of(step)
    until = str(loop.get("until") or "")
    data = {"output": last.output, "input": step_input(state, step=step), "iteration": number}
    try:
        value = expressions.evaluate(until, data, stored=False)
    except JMESPathError as exc:
        why = f"its until {until!r} cannot be evaluated on iteration {number}'s answer: {exc}"
        step_transition(unit, step, S.HELD, source=source, kind=E.STEP_HELD, reason=why, status_reason=why)
        return "held", ""
    if expressions.truthy(value):
        step_transition(
            unit,
            step,
            S.SUCCEEDED,
            source=source,
            kind=E.UNTIL_MET,
            reason=f"until {until!r} held on iteration {number}",
            data={"iteration": number},
            output=last.output,
            status_reason="",
            error="",
        )
        return "succeeded", ""
    most = int(loop.get("max_iterations") or 1)
    if number >= most:
        return _exhausted(
            unit, step, last, number, until=until, action=str(loop.get("on_exhausted")), source=source
        )
    interval = float(loop.get("interval_seconds") or 0)
    due = due_after(unit.now, seconds=interval)
    _make_iteration(unit, state, step, number + 1)
    step_note(
        unit,
        step,
        source=source,
        kind=E.ITERATION_SCHEDULED,
        reason=f"until {until!r} is false on iteration {number}: iteration {number + 1} in {interval:g} s",
        data={"iteration": number + 1, "due": due.isoformat()},
        status_reason=f"iteration {number + 1} of at most {most}, due after the interval",
        deadline=due,
    )
    if interval <= 0:
        return repeat_advance(unit, state=state, step=step, source=source)
    return "running", ""


def _exhausted(
    unit: Unit, step: Step, last: Step, number: int, *, until: str, action: str, source: str
) -> tuple[str, str]:
    why = f"until {until!r} did not hold in {number} iterations"
    data = {"iterations": number, "on_exhausted": action}
    if action == "continue":
        step_transition(
            unit,
            step,
            S.SUCCEEDED,
            source=source,
            kind=E.ITERATIONS_EXHAUSTED,
            reason=f"{why}: continued with the last output",
            data=data,
            output=last.output,
            status_reason="",
            error="",
        )
        return "succeeded", ""
    if action == "fail":
        step_transition(
            unit,
            step,
            S.FAILED,
            source=source,
            kind=E.ITERATIONS_EXHAUSTED,
            reason=why,
            data=data,
            status_reason=why,
            error=why,
        )
        return "exhausted", ""
    step_transition(
        unit,
        step,
        S.HELD,
        source=source,
        kind=E.ITERATIONS_EXHAUSTED,
        reason=f"{why}: held for an operator",
        data=data,
        status_reason=why,
    )
    return "held", ""


def repeat_unwind(unit: Unit, *, state: JobState, step: Step, source: str, start: bool) -> bool:
    """Stop a repeat's iterations and undo the last one that succeeded, once; True once nothing is
    left to undo. `start`: its compensation may start now (every step after this one is undone)."""
    if not items_stop(unit, state=state, step=step, source=source):
        return False  # a call in flight settles first (its outcome says whether it is undone)
    if not step.definition.compensation_path:
        return True
    last = (
        Step.objects.filter(parent_id=step.pk, kind=StepKind.ITEM, status__in=[S.SUCCEEDED, S.COMPENSATED])
        .select_related("definition__policy", "pool")
        .order_by("-item_index")
        .first()
    )
    if last is None or last.status == S.COMPENSATED:
        return True
    undo = state.compensations.get(last.pk)
    if undo is not None:
        return undo.status in STEP_SETTLED
    if not start or state.job.paused_at is not None:
        return False
    compensation_dispatch(
        unit,
        state=state,
        step=state.adopt([last])[0],
        source=source,
        reason=f"undo iteration {last.item_index} of {step.name}, the last that succeeded",
    )
    return False
