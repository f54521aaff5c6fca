"""Which steps may have had an effect at their remote, and so need undoing: the saga's rule
(scheduler.services.saga), which a fan-out's items follow too (scheduler.services.fanout)."""

from __future__ import annotations

from agents.outcome import AttemptKind, Outcome
from scheduler.models import Attempt, Step, StepKind, StepStatus
from scheduler.services.dispatch import step_dispatch
from scheduler.services.locking import JobState
from scheduler.unit import Unit

S = StepStatus

#: The last outcomes that prove an operation did not happen at the remote: the remote processed
#: the operation ID and refused it. A status query's "not found" is no such proof (the call may
#: still be on its way), so a step whose last word is that is compensated all the same.
NO_EFFECT_OUTCOMES = frozenset({Outcome.BUSINESS_FAILURE})


def needs_compensation(step: Step, *, sent: set[int]) -> bool:
    """Did (or may) this forward step have a side effect that has an undo action?

    Yes when it succeeded, or when it failed after a call that may have reached the remote
    (`sent`: steps with a claimed call) unless the remote's last answer for the operation ID was a
    refusal: an idempotent remote keeps the first answer it gave for a key, so a refusal is the
    operation's fate. No answer, a 5xx or a status query's "not found" prove nothing.
    """
    if not step.definition.compensation_path or not step.forward or step.has_items:
        # A fan-out or a repeat calls nothing itself: its items are undone (scheduler.services.
        # fanout, scheduler.services.repeat).
        return False
    if step.reused_from_id is not None:
        # A rerun reused this output: the effect is the original job's, undone only by it.
        return False
    if step.status == S.SUCCEEDED:
        return True
    return step.status == S.FAILED and step.pk in sent and step.last_outcome not in NO_EFFECT_OUTCOMES


def sent_steps(unit: Unit, *, steps: list[Step]) -> set[int]:
    """Failed steps with a call that was claimed by an agent (and so may have been sent).

    Counts this unit's own pending attempt writes: an attempt this unit records as never sent
    (its claim found the job stopping) is not a call that may have reached the remote."""
    failed = [s.pk for s in steps if s.status == S.FAILED and s.attempt > 0]
    if not failed:
        return set()
    unsent = {
        (w.step_id, w.number)
        for w in unit.pending_attempt_writes()
        if "started_at" in w.fields and w.fields["started_at"] is None
    }
    rows = Attempt.objects.filter(
        step_id__in=failed, kind=AttemptKind.CALL, started_at__isnull=False
    ).values_list("step_id", "number")
    return {step_id for step_id, number in rows if (step_id, number) not in unsent}


def compensation_dispatch(unit: Unit, *, state: JobState, step: Step, source: str, reason: str) -> Step:
    """Create the undo of `step` and dispatch it: an ordinary supervised step of the job (a fan-out
    item's keeps its item and index) with its own operation ID, `<operation_id>:compensate`."""
    compensation = Step.objects.create(
        job=state.job,
        definition=step.definition,
        name=f"{step.name}.compensate",
        kind=StepKind.COMPENSATION,
        compensates=step,
        operation_id=f"{step.operation_id}:compensate",
        pool=step.pool,
        item=step.item,
        item_index=step.item_index,
        created_at=unit.now,
        updated_at=unit.now,
    )
    state.steps.append(compensation)
    step_dispatch(unit, state=state, step=compensation, source=source, reason=reason)
    return compensation
