"""The saga: a job's way forward (the DAG advance) and its way back (compensation).

Forward: dispatch every pending step whose dependencies all succeeded (independent branches
together) and settle the job's status from its steps'. Back: when a job cannot succeed (policy,
job deadline) or an operator compensates or cancels it, stop its forward work and undo, in
reverse dependency order, every step that succeeded or may have had an effect, each undo an
ordinary supervised step with its own operation ID (`<operation_id>:compensate`).

A ready step may be skipped instead: its condition (`when`) is false, or every step it depends on
was skipped. The hot path's functions leave jobs with conditions or waits to this module
(`scheduler/sql/postgresql/sas_submit.sql`, `scheduler/sql/postgresql/sas_record_outcome.sql`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jmespath.exceptions import JMESPathError

from scheduler import expressions
from scheduler.models import (
    STEP_SETTLED,
    EventKind,
    Job,
    JobStatus,
    Step,
    StepDefinitionKind,
    StepStatus,
)
from scheduler.services.cancels import cancels_request
from scheduler.services.dispatch import step_dispatch
from scheduler.services.effects import compensation_dispatch, needs_compensation, sent_steps
from scheduler.services.fanout import (
    ItemsRefused,
    fan_out_advance,
    fan_out_held,
    fan_out_start,
    fan_out_unwind,
    item_counts,
)
from scheduler.services.locking import JOB_FORWARD, JobState, ancestor_outputs, lock_job, step_input
from scheduler.services.repeat import repeat_advance, repeat_start, repeat_unwind
from scheduler.services.waits import current_child, step_begin_child, step_begin_wait
from scheduler.transitions import JOB_TRANSITIONS, job_transition, step_note, step_transition
from scheduler.unit import Unit, User

S = StepStatus
J = JobStatus

#: Forward steps waiting on a decision; abandoned (-> failed) once the job stops running.
STEP_AWAITING = frozenset({S.ATTEMPT_FAILED, S.UNKNOWN, S.RETRY_WAIT, S.HELD})


def job_advance(unit: Unit, *, state: JobState, source: str, actor: User | None = None) -> None:
    """Dispatch what is ready and settle the job's status from its steps' statuses. `actor`: the
    operator whose action caused this, named on the job's transition."""
    job = state.job
    if job.compensation_reason and job.status in (J.COMPENSATING, J.NEEDS_ATTENTION):
        _advance_compensation(unit, state, source=source)
        return
    if job.status not in JOB_FORWARD:
        return
    actions = state.actions
    by_name = {s.name: s for s in actions}
    moved = True
    held_items = 0
    groups: list[Step] = []
    held_iterations: list[str] = []
    while moved and job.status in JOB_FORWARD:
        # A fan-out that settles makes its dependents ready: go round again.
        moved = False
        if job.paused_at is None:
            for step in actions:
                if step.status == S.PENDING and not _start_if_ready(
                    unit, state, step, by_name, source=source
                ):
                    return  # a fan-out's list was refused: its policy decided the job
        groups = [s for s in actions if s.status == S.WAITING and s.fans_out]
        counts = item_counts(unit, group_ids=[g.pk for g in groups]) if groups else {}
        held_items = sum(counts[g.pk][S.HELD] for g in groups)
        for group in groups:
            result = fan_out_advance(unit, state=state, step=group, counts=counts[group.pk], source=source)
            if result == "failed":
                _fan_out_failed(unit, state, group, source=source, reason=group.error)
                return
            moved = moved or result == "succeeded"
        held_iterations = []
        for loop in [s for s in actions if s.status == S.WAITING and s.repeats]:
            result, held_iteration = repeat_advance(unit, state=state, step=loop, source=source)
            if result == "failed":
                _fan_out_failed(unit, state, loop, source=source, reason=loop.error)
                return
            if result == "exhausted":
                job_end_for_step(
                    unit, state=state, step=loop, action="compensate", source=source, reason=loop.error
                )
                return
            held_iterations += [held_iteration] if held_iteration else []
            moved = moved or result == "succeeded"
    if job.status not in JOB_FORWARD:
        return
    if all(s.status in (S.SUCCEEDED, S.SKIPPED) for s in actions):
        job_transition(
            unit, job, J.SUCCEEDED, source=source, actor=actor, result={s.name: s.output for s in actions}
        )
        return
    held = [s.name for s in actions if s.status == S.HELD]
    held += fan_out_held(state, groups=groups, held_items=held_items) + held_iterations
    target = J.NEEDS_ATTENTION if held else J.RUNNING
    if job.status != target:
        job_transition(
            unit,
            job,
            target,
            source=source,
            actor=actor,
            reason=f"held: {', '.join(held)}" if held else "",
        )


def _start_if_ready(
    unit: Unit, state: JobState, step: Step, by_name: dict[str, Step], *, source: str
) -> bool:
    """Start a pending step whose dependencies are done (dispatch it, begin its wait, or make its
    items). False when it was a fan-out whose list was refused and its policy ended the job's
    forward run."""
    deps = [by_name[d] for d in step.definition.depends_on]
    # Ready: every dependency succeeded or was skipped (in a job running forward, a skipped step
    # is one whose condition was false). Steps come in dependency order, so a step skipped here
    # is seen by its dependents in this same loop.
    if any(d.status not in (S.SUCCEEDED, S.SKIPPED) for d in deps):
        return True
    if not _condition_met(unit, state, step, deps, source=source):
        return True
    names = [d.name for d in deps if d.status == S.SUCCEEDED]
    reason = f"{', '.join(names)} succeeded" if names else "ready: no dependencies"
    if step.definition.waits:
        step_begin_wait(unit, state=state, step=step, source=source, reason=reason)
    elif step.definition.kind == StepDefinitionKind.WORKFLOW:
        step_begin_child(unit, state=state, step=step, source=source, reason=reason)
    elif step.repeats:
        repeat_start(unit, state=state, step=step, source=source, reason=reason)
    elif step.fans_out:
        data = {"input": step_input(state, step=step), "results": ancestor_outputs(state, step=step)}
        try:
            fan_out_start(unit, state=state, step=step, source=source, reason=reason, data=data)
        except ItemsRefused as exc:
            _fan_out_failed(unit, state, step, source=source, reason=str(exc))
            return state.job.status in JOB_FORWARD
    else:
        step_dispatch(unit, state=state, step=step, source=source, reason=reason)
    return True


def _fan_out_failed(unit: Unit, state: JobState, step: Step, *, source: str, reason: str) -> None:
    """A fan-out that cannot succeed (its list refused, or its join failed and its items are
    undone), or a repeat whose iteration failed for good: its policy's on_exhausted decides, as
    for a call that ran out of attempts."""
    action = step.definition.call_policy.on_exhausted
    if action == "hold":
        if step.status == S.HELD:
            job_advance(unit, state=state, source=source)
        else:
            step_hold(unit, state=state, step=step, source=source, reason=reason, status_reason=reason)
        return
    if step.status != S.FAILED:
        step_transition(
            unit, step, S.FAILED, source=source, reason=reason, status_reason=reason, error=reason
        )
    job_end_for_step(unit, state=state, step=step, action=action, source=source, reason=reason)


def _condition_met(unit: Unit, state: JobState, step: Step, deps: list[Step], *, source: str) -> bool:
    """Whether a ready step runs. No: every step it depends on was skipped (unless it runs
    anyway), or its `when` is false; it is then skipped with the reason. A condition that cannot
    be evaluated holds the step for an operator."""
    definition = step.definition
    if deps and all(d.status == S.SKIPPED for d in deps) and not definition.run_if_skipped:
        why = f"every step it depends on was skipped ({', '.join(d.name for d in deps)})"
        _skip(unit, step, why, source=source, data={"skipped": "dependencies"})
        return False
    if not definition.when:
        return True
    data = {"input": step_input(state, step=step), "results": ancestor_outputs(state, step=step)}
    try:
        # A condition's value decides; only a false one is kept (on its event).
        value = expressions.evaluate(definition.when, data, stored=False)
    except JMESPathError as exc:
        why = f"its condition {definition.when!r} cannot be evaluated: {exc}"
        step_transition(
            unit, step, S.HELD, source=source, kind=EventKind.STEP_HELD, reason=why, status_reason=why
        )
        return False
    if expressions.truthy(value):
        return True
    _skip(
        unit,
        step,
        f"its condition {definition.when!r} is false",
        source=source,
        data={"when": definition.when, "value": value},
    )
    return False


def _skip(unit: Unit, step: Step, why: str, *, source: str, data: dict[str, Any]) -> None:
    """Skip a ready step that does not run, saying why on its event and in its status."""
    step_transition(unit, step, S.SKIPPED, source=source, reason=why, data=data, status_reason=why)


def job_fail(unit: Unit, *, state: JobState, source: str, reason: str, actor: User | None = None) -> None:
    """End the job `failed` without compensating: stop everything that has not started. A child
    job still running is cancelled (its own saga undoes what it did): nothing waits for it now."""
    for step in state.actions:
        if step.status == S.WAITING and step.has_items:
            _unwind(unit, state, step, source=source, start=False)
            _abandon(unit, step, "job failed", source=source)
        elif _child_stopped(unit, state, step, source=source, reason="its parent job failed"):
            _abandon(unit, step, "job failed: it no longer waits for its child job", source=source)
        elif step.status in (S.PENDING, S.WAITING):
            step_transition(unit, step, S.SKIPPED, source=source, reason="job failed")
        elif step.status in STEP_AWAITING:
            _abandon(unit, step, "job failed", source=source)
    job_transition(unit, state.job, J.FAILED, source=source, reason=reason, actor=actor)


def job_start_compensation(
    unit: Unit,
    *,
    state: JobState,
    reason_code: str,
    source: str,
    reason: str = "",
    actor: User | None = None,
) -> None:
    """Stop the job's forward work and undo, in reverse dependency order, what may have happened.
    A call still running at its remote is told to stop, when its step names a cancel_path (read
    before the forward work is stopped, which abandons the steps whose outcome is unknown)."""
    job_transition(
        unit,
        state.job,
        J.COMPENSATING,
        source=source,
        reason=reason,
        actor=actor,
        compensation_reason=reason_code,
    )
    why = "job cancelled" if reason_code == "cancel" else "job compensating"
    cancels_request(unit, state=state, source=source, reason=why, actor=actor)
    _advance_compensation(unit, state, source=source)


def step_hold(
    unit: Unit,
    *,
    state: JobState,
    step: Step,
    source: str,
    reason: str,
    actor: User | None = None,
    data: dict[str, Any] | None = None,
    **fields: Any,
) -> None:
    """Park `step` for an operator (held, `fields` written with the move) and move its job on:
    the job needs attention while a step is held."""
    step_transition(unit, step, S.HELD, source=source, actor=actor, reason=reason, data=data, **fields)
    job_advance(unit, state=state, source=source, actor=actor)


def job_end_for_step(
    unit: Unit,
    *,
    state: JobState,
    step: Step,
    action: str,
    source: str,
    reason: str,
    actor: User | None = None,
) -> None:
    """A forward step failed for good and its policy's on_exhausted (`action`) ends its job:
    failed for "fail", compensated otherwise. The caller has moved the step and holds the job. A
    job that no longer runs forward (it is already being stopped) only moves on."""
    if state.job.status not in JOB_FORWARD:
        job_advance(unit, state=state, source=source, actor=actor)
        return
    why = f"step {step.name} failed: {reason}"
    if action == "fail":
        job_fail(unit, state=state, source=source, reason=why, actor=actor)
    else:
        job_start_compensation(
            unit, state=state, reason_code="failure", source=source, reason=why, actor=actor
        )


def _advance_compensation(unit: Unit, state: JobState, *, source: str) -> None:
    """One step of the way back: stop the forward work, undo fan-outs and children whose
    dependents are undone (again while that frees more), dispatch the compensations now due, and
    settle the job's status from what is left."""
    actions = state.actions
    _stop_forward_work(unit, state, actions, source=source)
    undo = _Undo(
        unit=unit,
        state=state,
        source=source,
        actions=actions,
        compensations=state.compensations,
        sent=sent_steps(unit, steps=actions),
        children=_children(state),
        dependents=_dependents(actions),
    )
    moved = True
    while moved:
        # A fan-out or a child undone at once makes the steps before it ready: go round again.
        unwound = _unwind_fan_outs(undo)
        moved = _undo_children(undo) or unwound
    if state.job.paused_at is None:
        _dispatch_compensations(undo)
    _settle_compensation(undo)


def _stop_forward_work(unit: Unit, state: JobState, actions: list[Step], *, source: str) -> None:
    """The job stopped running: steps never started are skipped, steps awaiting a decision
    abandoned, children waited for stopped (a waiting fan-out is stopped in its place in the
    reverse order, by `_unwind_fan_outs`)."""
    job = state.job
    for step in actions:
        if step.has_items and (step.status == S.WAITING or (step.repeats and step.status == S.HELD)):
            continue  # its items are stopped and undone below, in its place in the reverse order
        if _child_stopped(unit, state, step, source=source, reason=f"its parent job is {job.status}"):
            # It waits for its child to settle (the child's settling moves it).
            continue
        if step.status in (S.PENDING, S.WAITING):
            step_transition(
                unit, step, S.SKIPPED, source=source, reason=f"job is {job.status}: never started"
            )
        elif step.status in STEP_AWAITING:
            _abandon(unit, step, f"job is {job.status}: no further attempts", source=source)


def _abandon(unit: Unit, step: Step, why: str, *, source: str) -> None:
    """Fail a forward step of a job that stopped running: nothing more is tried for it."""
    step_transition(unit, step, S.FAILED, source=source, kind=EventKind.STEP_ABANDONED, reason=why)


def _dependents(actions: list[Step]) -> dict[str, list[Step]]:
    """The steps that depend on each step, by name: a step is undone after all of them."""
    dependents: dict[str, list[Step]] = {s.name: [] for s in actions}
    for step in actions:
        for dep in step.definition.depends_on:
            dependents[dep].append(step)
    return dependents


@dataclass
class _Undo:
    """What one pass of a job's compensation reads and updates as it goes: the undos dispatched
    (`compensations`, by the step they undo) and the children as they are now (`children`)."""

    unit: Unit
    state: JobState
    source: str
    actions: list[Step]
    compensations: dict[int, Step]
    sent: set[int]
    children: dict[str, Job]
    dependents: dict[str, list[Step]]
    #: The repeat steps found undone in this pass (a failed one keeps its status).
    unwound: set[int] = field(default_factory=set)

    def undoing(self, step: Step) -> Job | None:
        """The child of a sub-workflow step that succeeded, while it is (still) to be undone."""
        child = self.children.get(step.name) if step.status == S.SUCCEEDED else None
        if child is None:
            return None
        if child.status == J.SUCCEEDED or (
            child.compensation_reason and child.status in (J.COMPENSATING, J.NEEDS_ATTENTION)
        ):
            return child
        return None  # compensated (the step follows below), or ended otherwise by an operator

    def done(self, step: Step) -> bool:
        if step.status == S.COMPENSATED:
            return True
        if step.repeats:
            # Undone once its last iteration that succeeded is (`unwound`), or with nothing to undo.
            return (
                step.status in (S.COMPENSATED, S.SKIPPED)
                or step.pk in self.unwound
                or (step.status in (S.SUCCEEDED, S.FAILED) and not step.definition.compensation_path)
            )
        if step.fans_out:
            # Undone once its items are: then failed (it was running) or compensated.
            return step.status in (S.FAILED, S.SKIPPED) or (
                step.status == S.SUCCEEDED and not step.definition.compensation_path
            )
        if self.undoing(step) is not None:
            return False
        return step.status in STEP_SETTLED and not needs_compensation(step, sent=self.sent)

    def dependents_done(self, step: Step) -> bool:
        return all(self.done(d) for d in self.dependents[step.name])


def _unwind_fan_outs(undo: _Undo) -> bool:
    """Stop and undo the items of each fan-out, in reverse order, once its dependents are undone;
    whether one of them moved the fan-out (failed or compensated)."""
    job, unit, source = undo.state.job, undo.unit, undo.source
    moved = False
    for group in reversed(undo.actions):
        unwinding = (S.WAITING, S.SUCCEEDED, S.HELD, S.FAILED) if group.repeats else (S.WAITING, S.SUCCEEDED)
        if not group.has_items or undo.done(group) or group.status not in unwinding:
            continue
        ready = job.paused_at is None and undo.dependents_done(group)
        if _unwind(unit, undo.state, group, source=source, start=ready) and ready:
            moved = True
            if group.repeats:
                undo.unwound.add(group.pk)
            if group.status == S.FAILED:
                continue
            if group.status == S.HELD:
                _abandon(unit, group, f"job is {job.status}: its iterations are stopped", source=source)
                continue
            if group.status == S.WAITING:
                _abandon(unit, group, f"job is {job.status}: its items are stopped and undone", source=source)
            else:
                step_transition(
                    unit,
                    group,
                    S.COMPENSATED,
                    source=source,
                    reason="every item that succeeded is undone",
                )
    return moved


def _unwind(unit: Unit, state: JobState, step: Step, *, source: str, start: bool) -> bool:
    """Stop the items of a fan-out or a repeat and undo what they did; True once all is undone."""
    if step.repeats:
        return repeat_unwind(unit, state=state, step=step, source=source, start=start)
    return fan_out_unwind(unit, state=state, step=step, source=source, start=start)


def _undo_children(undo: _Undo) -> bool:
    """Start undoing the child of each sub-workflow step that succeeded, in reverse order, once
    its dependents are undone; a child compensated for its parent compensates its step. Whether
    a step was compensated."""
    job, unit, source = undo.state.job, undo.unit, undo.source
    moved = False
    for step in reversed(undo.actions):
        child = undo.children.get(step.name)
        if child is None or step.status != S.SUCCEEDED:
            continue
        if child.status == J.SUCCEEDED:
            if job.paused_at is not None or not undo.dependents_done(step):
                continue
            child = undo.children[step.name] = _child_undo(unit, undo.state, step, child, source=source)
        if child.status == J.COMPENSATED and child.compensation_reason == "parent":
            step_transition(
                unit,
                step,
                S.COMPENSATED,
                source=source,
                reason=f"child job {child.pk} compensated",
                data={"child_job": str(child.pk), "child_status": child.status},
                status_reason="",
            )
            moved = True
    return moved


def _dispatch_compensations(undo: _Undo) -> None:
    """Create and dispatch the undo of each step that needs one and has none yet, once every step
    after it is undone."""
    unit, state = undo.unit, undo.state
    for step in undo.actions:
        if step.pk in undo.compensations or not needs_compensation(step, sent=undo.sent):
            continue
        if undo.dependents_done(step):
            undo.compensations[step.pk] = compensation_dispatch(
                unit,
                state=state,
                step=step,
                source=undo.source,
                reason=f"undo {step.name}: every step after it is undone",
            )


def _settle_compensation(undo: _Undo) -> None:
    """The job's status from its compensation: needs attention while an undo (its own, or a
    child's) is held; cancelled or compensated once every step is undone; compensating again when
    what held it moved on."""
    unit, job, source = undo.unit, undo.state.job, undo.source
    held = [c.name for c in undo.compensations.values() if c.status == S.HELD]
    # A child whose own compensation waits for an operator holds its parent's too.
    held += [
        f"{name} (child job {child.pk})"
        for name, child in undo.children.items()
        if child.status == J.NEEDS_ATTENTION and child.compensation_reason
    ]
    if held:
        if job.status != J.NEEDS_ATTENTION:
            job_transition(
                unit,
                job,
                J.NEEDS_ATTENTION,
                source=source,
                reason=f"compensation held: {', '.join(held)}",
            )
        return
    if all(undo.done(s) for s in undo.actions):
        final = J.CANCELLED if job.compensation_reason == "cancel" else J.COMPENSATED
        if final not in JOB_TRANSITIONS[job.status]:
            # Needs attention, and what held it settled on its own (a child's compensation).
            job_transition(unit, job, J.COMPENSATING, source=source, reason="compensation resumed")
        job_transition(unit, job, final, source=source)
        return
    if job.status == J.NEEDS_ATTENTION:
        job_transition(unit, job, J.COMPENSATING, source=source, reason="compensation resumed")


def _children(state: JobState) -> dict[str, Job]:
    """The child jobs of the job's sub-workflow steps that wait or succeeded, by step name (one
    read, without their locks: a child's move that matters to its parent comes back to it through
    the task its child enqueues, scheduler.outbox.parent_notify)."""
    tries = {
        s.name: s.attempt
        for s in state.actions
        if s.definition.kind == StepDefinitionKind.WORKFLOW
        and s.status in (S.WAITING, S.SUCCEEDED)
        and s.reused_from_id is None
    }
    if not tries:
        return {}
    # Only a step's current child (its try): an earlier one ended without success and, failed or
    # compensated on its own, has nothing left for its parent to undo.
    return {
        c.parent_step: c
        for c in Job.objects.filter(parent_job_id=state.job.pk, parent_step__in=list(tries))
        if c.parent_try == tries[c.parent_step]
    }


def _child_undo(unit: Unit, state: JobState, step: Step, child: Job, *, source: str) -> Job:
    """Undo sub-workflow step `step`, which succeeded: its child job compensates (succeeded ->
    compensating, `compensation_reason` "parent"), its own saga undoing its steps, each once, as
    supervised steps of the child. Returns the child as it is now: compensated already when it
    had nothing to undo. Its settling later moves the step (scheduler.services.children).

    Lock order: the caller holds the parent's lock; the child's is taken after it, as in
    `_child_stopped`.
    """
    locked = lock_job(unit, job_id=child.pk)
    if locked.job.status != J.SUCCEEDED:
        return locked.job
    reason = f"its parent job {state.job.pk} is {state.job.status}: every step after {step.name} is undone"
    job_start_compensation(unit, state=locked, reason_code="parent", source=source, reason=reason)
    step_note(
        unit,
        step,
        kind=EventKind.CHILD_COMPENSATING,
        source=source,
        reason=f"undo {step.name}: child job {child.pk} compensates (every step after it is undone)",
        data={"child_job": str(child.pk), "child_status": locked.job.status},
        status_reason=f"undoing child job {child.pk}",
    )
    return locked.job


def _child_stopped(unit: Unit, state: JobState, step: Step, *, source: str, reason: str) -> bool:
    """Whether `step` is a sub-workflow step waiting for a child job that exists; a child that has
    not settled is stopped too (cancelled when its parent is cancelled or fails, compensated when
    its parent compensates), once. Its settling then moves the step (scheduler.services.children).

    Lock order: the caller holds the parent's lock; the child's is taken after it. Nothing takes
    them the other way round (a child's settling reaches its parent through a task of its own).
    """
    if step.status != S.WAITING or step.definition.kind != StepDefinitionKind.WORKFLOW:
        return False
    # A step between tries (its last child failed, the next waits its backoff) has no current
    # child: nothing to stop, and the next never starts in a job that no longer runs forward.
    current = current_child(step)
    if current is None:
        return False
    child = lock_job(unit, job_id=current.pk)
    if child.job.status in JOB_FORWARD and not child.job.compensation_reason:
        cancel = state.job.compensation_reason in ("", "cancel")
        job_start_compensation(
            unit,
            state=child,
            reason_code="cancel" if cancel else "parent",
            source=source,
            reason=f"{reason} (job {state.job.pk})",
        )
    return True
