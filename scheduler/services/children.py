"""Sub-workflow steps: a step that runs another workflow as a child job and waits for it.

A child is a job like any other (its own steps, saga and history), linked both ways: the child
names its parent job and step (`parent_job`, `parent_step`) and its try (`parent_try`, the step's
`attempt` when it started), and at most one child exists per try (the constraint
`job_unique_child`); the step's current child is its try's (scheduler.services.waits.
current_child). Its steps' operation IDs derive from the parent step's and the try
(scheduler.operation_ids.child_try_id), so a redelivered start never makes a second child,
nor a second call under a new ID, and a new try is a new operation at every remote.

The step's life, each part a guarded move under the parent's lock:
- Ready (the DAG advance, scheduler.services.waits.step_begin_child): pending -> waiting, and the
  start task enqueued in that transaction.
- Start (`child_advance`, run by the task): the child's input is the step's input mapping over
  `input` and `results` (without one, the job's input); a child nested deeper than
  SAS_MAX_WORKFLOW_DEPTH, an unknown workflow, or an input that breaks the child workflow's
  input_schema fails the step, and its policy decides the job (as a rejected approval does). A
  mapping that cannot be evaluated holds the step. Otherwise the child is created and started in
  this transaction, and the step, still waiting, names it (`child_started`).
- Settle (`child_advance` again, run by the task its child enqueues as it settles, in the child's
  transaction, scheduler.outbox.parent_notify): the child succeeded -> the step succeeds with the
  child's result, projected by its `output` when it has one (`child_succeeded`; a projection
  that cannot be evaluated holds the step); a child that failed on its own, under a policy that
  retries it (`child_retry_in`), is followed by the next try after the policy's backoff
  (`retry_scheduled`: the step keeps waiting, its `attempt` the next try's, `not_before` the
  backoff's end, no child yet); otherwise failed, compensated or cancelled -> the step fails
  (`child_failed`) and its policy decides (compensate when it has none). Only a waiting step
  moves, so it settles once however often it is told.
- Stop (scheduler.services.saga): a parent that is cancelled, compensates or fails stops its live
  child (cancel or compensate), and its step waits for the child to settle; a step between tries
  has no live child and is skipped. Only the current child of a step that succeeded is undone:
  an earlier one failed, and compensated itself or ended failed by its own policy.
- The scan (`children_due`) finds what a lost task left, and the tries whose backoff ended: a
  waiting step without its try's child (a grace after it started waiting, or once its
  `not_before` passed), or with a child that settled, and advances it the same way.

Lock order: parent, then child. A child's own transactions never take its parent's lock: they
reach it through the task, after they commit. So a child job is never completed by the hot path's
`scheduler/sql/postgresql/sas_record_outcome.sql` (it answers 'fallback' for a job with a parent),
whose completion would not enqueue the task; `sas_submit` is never asked to make one.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from django.conf import settings
from django.db.models import Exists, OuterRef, Q
from jmespath.exceptions import JMESPathError

from agents.outcome import Outcome
from sas_project.errors import InvalidInput, KeyBusy
from scheduler import contracts, expressions
from scheduler.backoff import backoff_seconds
from scheduler.models import (
    JOB_SETTLED,
    EventKind,
    Job,
    JobStatus,
    QuarantineLoop,
    RemediationPolicy,
    Step,
    StepDefinition,
    StepDefinitionKind,
    StepKind,
    StepStatus,
    Workflow,
)
from scheduler.services.locking import JOB_FORWARD, JobState, lock_job
from scheduler.services.quarantine import not_quarantined
from scheduler.services.saga import ancestor_outputs, job_advance, step_hold, step_input
from scheduler.services.submission import child_create
from scheduler.services.waits import current_child
from scheduler.services.wakeups import step_wait_failed
from scheduler.transitions import step_note, step_transition
from scheduler.unit import Unit, unit_of_work

S = StepStatus
J = JobStatus
E = EventKind

SOURCE = "scheduler"


def child_advance(step_id: int, *, source: str = SOURCE, skip_locked: bool = False) -> str:
    """Bring sub-workflow step `step_id` in line with its child job: start the child when it has
    none, settle the step when its child has settled, else nothing; in a parent that compensates,
    let its saga read the child (a succeeded step whose child is undone becomes compensated once
    the child is; a child's compensation held holds the parent's). Idempotent: only a waiting
    step settles, and the saga moves only what is behind, under the parent's lock. Returns what it
    did. With `skip_locked`, a job another transaction holds is left alone ("locked")."""
    job_id = Step.objects.filter(pk=step_id).values_list("job_id", flat=True).first()
    if job_id is None:
        return "gone"
    with unit_of_work() as unit:
        state = lock_job(unit, job_id=job_id, skip_locked=skip_locked)
        if state is None:
            return "locked"
        step = state.step(step_id)
        if step.definition.kind != StepDefinitionKind.WORKFLOW:
            return "ignored"
        job = state.job
        undoing = bool(job.compensation_reason) and job.status in (J.COMPENSATING, J.NEEDS_ATTENTION)
        if step.status == S.SUCCEEDED and undoing:
            # Its child is undone (scheduler.services.saga): the parent's saga reads where it is.
            job_advance(unit, state=state, source=source)
            return "compensated" if step.status == S.COMPENSATED else "undoing"
        if step.status != S.WAITING:
            return "ignored"
        # Read after the parent's lock: a child settling commits before its task runs.
        child = current_child(step)
        if child is None:
            return _start(unit, state, step, source=source)
        if child.status in JOB_SETTLED:
            return _settle(unit, state, step, child, source=source)
        if undoing:
            job_advance(unit, state=state, source=source)  # a stopped child's compensation held, or resumed
        return "waiting"


def _ancestry(job: Job) -> tuple[int, Any]:
    """How many parents `job` has (a job submitted by a client: 0), and the id of the first of
    them (the submission's job). Stops counting past the depth limit."""
    depth, root, parent = 0, job.pk, job.parent_job_id
    while parent is not None and depth <= settings.SAS_MAX_WORKFLOW_DEPTH:
        depth += 1
        root = parent
        parent = Job.objects.filter(pk=parent).values_list("parent_job_id", flat=True).first()
    return depth, root


def _descendants(root: Any, *, budget: int) -> int:
    """The jobs below `root`, counted level by level (at most SAS_MAX_WORKFLOW_DEPTH queries) and
    to at most one past `budget`."""
    count, level = 0, [root]
    while level and count < budget:
        level = list(
            Job.objects.filter(parent_job_id__in=level).values_list("pk", flat=True)[: budget - count + 1]
        )
        count += len(level)
    return count


def _start(unit: Unit, state: JobState, step: Step, *, source: str) -> str:
    job = state.job
    if job.status not in JOB_FORWARD or job.compensation_reason:
        # The saga skips a waiting step without a child when the job stops: nothing starts now.
        return "ignored"
    if step.not_before is not None and step.not_before > unit.now:
        return "backoff"  # a retried child starts when its backoff ends (the sweep's read)
    definition = step.definition
    name = definition.child_workflow
    limit = settings.SAS_MAX_WORKFLOW_DEPTH
    depth, root = _ancestry(job)
    depth += 1
    if depth > limit:
        return _refuse(
            unit,
            state,
            step,
            source=source,
            reason=f"a child job of workflow {name!r} would be nested {depth} deep: "
            f"sub-workflows nest at most {limit} deep (SAS_MAX_WORKFLOW_DEPTH)",
            data={"depth": depth, "limit": limit},
        )
    # A submission's budget of jobs below it: depth alone lets workflows that call each other
    # (A -> B -> A), fanned out, make 100^5 jobs from one request.
    budget = settings.SAS_MAX_DESCENDANT_JOBS
    if budget and _descendants(root, budget=budget) >= budget:
        return _refuse(
            unit,
            state,
            step,
            source=source,
            reason=f"the job submitted has {budget} jobs below it already, the most one submission "
            f"may make (SAS_MAX_DESCENDANT_JOBS)",
            data={"root_job": str(root), "limit": budget},
        )
    latest = Workflow.objects.filter(name=name).order_by("-version").first()
    definitions = list(
        StepDefinition.objects.filter(workflow=latest)
        .select_related("workflow", "policy", "pool")
        .order_by("position")
    )
    if latest is None or not definitions:
        return _refuse(unit, state, step, source=source, reason=f"workflow {name!r} does not exist")
    given = step_input(state, step=step)
    if definition.input_map is None:
        payload: Any = given
    else:
        data = {"input": given, "results": ancestor_outputs(state, step=step)}
        try:
            payload = expressions.render(definition.input_map, data)
        except JMESPathError as exc:
            why = f"its input mapping cannot be evaluated: {exc}"
            step_hold(unit, state=state, step=step, source=source, reason=why, status_reason=why)
            return "held"
    if not isinstance(payload, dict):
        return _refuse(
            unit,
            state,
            step,
            source=source,
            reason=f"its input mapping gives {type(payload).__name__}, not the JSON object a job's input is",
        )
    try:
        contracts.input_check(latest.input_schema, payload)
    except InvalidInput as exc:
        return _refuse(
            unit,
            state,
            step,
            source=source,
            reason=f"the child job's {exc.message} (workflow {name!r} version {latest.version})",
            data={"errors": exc.detail.get("errors", [])},
        )
    try:
        child = child_create(
            unit, parent=state, step=step, definitions=definitions, payload=payload, source=source
        )
    except KeyBusy as exc:
        # Its workflow refuses a job over its concurrency key's limit (on_limit cancel_newest),
        # before anything is written.
        return _refuse(unit, state, step, source=source, reason=exc.message, data=exc.detail)
    data = {
        "child_job": str(child.job.pk),
        "workflow": name,
        "version": latest.version,
        "attempt": step.attempt,
    }
    if step.attempt:
        previous = Job.objects.filter(
            parent_job_id=job.pk, parent_step=step.name, parent_try__lt=step.attempt
        ).order_by("-parent_try")
        data["previous_child"] = str(previous.values_list("pk", flat=True).first())
    again = f" (retry {step.attempt}, in place of child job {data['previous_child']})" if step.attempt else ""
    step_note(
        unit,
        step,
        kind=E.CHILD_STARTED,
        source=source,
        reason=f"child job {child.job.pk} of workflow {name!r} version {latest.version} started{again}",
        data=data,
        not_before=None,
        status_reason=f"waiting for child job {child.job.pk} (workflow {name!r})",
    )
    if child.job.status in JOB_SETTLED:
        # Settled in its first transaction (every step skipped, or refused at once).
        return _settle(unit, state, step, child.job, source=source)
    return "started"


def _refuse(
    unit: Unit, state: JobState, step: Step, *, source: str, reason: str, data: dict[str, Any] | None = None
) -> str:
    """The child cannot start: the step fails, and its policy decides the job."""
    _fail(unit, state, step, E.STEP_FAILED, f"no child job started: {reason}", source=source, data=data)
    return "refused"


def _fail(
    unit: Unit, state: JobState, step: Step, kind: EventKind, why: str, *, source: str, data: Any
) -> None:
    """The step fails, saying `why` (on its event and as its status), and its policy decides."""
    step_wait_failed(
        unit, state=state, step=step, kind=kind, source=source, reason=why, data=data, status_reason=why
    )


def _settle(unit: Unit, state: JobState, step: Step, child: Job, *, source: str) -> str:
    data: dict[str, Any] = {"child_job": str(child.pk), "child_status": child.status, "attempt": step.attempt}
    if child.status == J.SUCCEEDED:
        output = child.result
        projection = step.definition.output_map
        if projection:
            seen = {
                "output": child.result,
                "input": step_input(state, step=step),
                "results": ancestor_outputs(state, step=step),
            }
            try:
                output = expressions.evaluate(projection, seen)
            except JMESPathError as exc:
                why = f"child job {child.pk} succeeded, but its output projection cannot be evaluated: {exc}"
                step_hold(
                    unit, state=state, step=step, source=source, reason=why, data=data, status_reason=why
                )
                return "held"
        step_transition(
            unit,
            step,
            S.SUCCEEDED,
            source=source,
            kind=E.CHILD_SUCCEEDED,
            reason=f"child job {child.pk} succeeded",
            data=data,
            output=output,
            error="",
            status_reason="",
        )
        job_advance(unit, state=state, source=source)
        return "succeeded"
    policy = step.definition.policy
    delay = child_retry_in(policy, child=child, attempt=step.attempt, draw=random.random())
    if policy is not None and delay is not None:
        return _retry(unit, state, step, child, policy=policy, delay=delay, source=source)
    tries = (
        f" (try {step.attempt + 1} of {policy.max_attempts})" if policy is not None and step.attempt else ""
    )
    _fail(
        unit,
        state,
        step,
        E.CHILD_FAILED,
        f"child job {child.pk} {child.status}{tries}",
        source=source,
        data=data,
    )
    return "failed"


def child_retry_in(
    policy: RemediationPolicy | None, *, child: Job, attempt: int, draw: float
) -> float | None:
    """Seconds until a new child replaces `child`, the settled child of try `attempt` (0: the
    first) of a step under `policy`; None when the step fails instead and `on_exhausted` decides.

    A child is retried only when it failed on its own: it ended `failed`, or `compensated` after
    its own failure (`compensation_reason` "failure"). A child cancelled, compensated by an
    operator, by its deadline or for its parent is an answer, not a fault: never retried. Its
    failure is the child workflow saying no, so it is retried only under a policy whose
    `retry_on` lists `business_failure` (the default does not: a child's own steps have retried
    already), while its `max_attempts` (children in all, the first included) are not spent. The
    backoff is the policy's, as for any retry (scheduler.backoff), with `draw` in [0, 1) for its
    jitter."""
    if policy is None or Outcome.BUSINESS_FAILURE not in (policy.retry_on or ()):
        return None
    on_its_own = child.status == J.FAILED or (
        child.status == J.COMPENSATED and child.compensation_reason == "failure"
    )
    if not on_its_own or attempt + 1 >= policy.max_attempts:
        return None
    # Try `attempt` (0: the first) is the step's `attempt + 1`-th try.
    return backoff_seconds(policy, tries=attempt + 1, draw=draw)


def _retry(
    unit: Unit,
    state: JobState,
    step: Step,
    child: Job,
    *,
    policy: RemediationPolicy,
    delay: float,
    source: str,
) -> str:
    """The step's next try: it stays waiting, its `attempt` the next try's, with no child until
    its backoff ends (`not_before`, read by the sweep `children_due`: no worker waits), when a new
    child starts under `<step's operation ID>/retry-<attempt>`. No backoff: it starts now."""
    attempt = step.attempt + 1
    until = unit.now + dt.timedelta(seconds=delay)
    step_note(
        unit,
        step,
        kind=E.RETRY_SCHEDULED,
        source=source,
        reason=f"child job {child.pk} {child.status}: a new child job (try {attempt + 1} of "
        f"{policy.max_attempts}) starts in {delay:.2f}s",
        data={
            "child_job": str(child.pk),
            "child_status": child.status,
            "attempt": attempt,
            "not_before": until.isoformat(),
        },
        attempt=attempt,
        not_before=until,
        status_reason=f"child job {child.pk} {child.status}; a new child job starts after its backoff",
    )
    if delay <= 0:
        return _start(unit, state, step, source=source)
    return "retrying"


def children_due(now: dt.datetime, *, grace: dt.timedelta, limit: int) -> list[int]:
    """Up to `limit` sub-workflow steps whose task was lost (its worker died): waiting without a
    child `grace` after they started waiting, or whose child settled `grace` ago; and, in a parent
    that compensates, a succeeded step whose child's compensation ended, or a step whose child's
    compensation is held while the parent's is not, `grace` ago. The first read goes through the
    live steps' index (waiting, no deadline), the second through the jobs' status index (the few
    that compensate); both reach the children by their link (job_unique_child)."""
    children = Job.objects.filter(
        parent_job_id=OuterRef("job_id"), parent_step=OuterRef("name"), parent_try=OuterRef("attempt")
    )
    waiting = list(
        Step.objects.filter(
            status=S.WAITING,
            deadline__isnull=True,
            pool__isnull=True,
            kind=StepKind.ACTION,
            definition__kind=StepDefinitionKind.WORKFLOW,
        )
        .filter(
            # Without its try's child: its start task was lost, or its backoff ended.
            (
                ~Exists(children)
                & (Q(not_before__isnull=True, updated_at__lte=now - grace) | Q(not_before__lte=now))
            )
            | Exists(children.filter(status__in=sorted(JOB_SETTLED), finished_at__lte=now - grace))
        )
        .filter(not_quarantined(QuarantineLoop.CHILDREN, now=now, field="job_id"))
        .order_by("updated_at")
        .values_list("pk", flat=True)[:limit]
    )
    if len(waiting) >= limit:
        return waiting
    undone = children.filter(status=J.COMPENSATED, compensation_reason="parent", finished_at__lte=now - grace)
    held = children.filter(status=J.NEEDS_ATTENTION, updated_at__lte=now - grace).exclude(
        compensation_reason=""
    )
    undoing = (
        Step.objects.filter(
            kind=StepKind.ACTION,
            definition__kind=StepDefinitionKind.WORKFLOW,
            job__status__in=(J.COMPENSATING, J.NEEDS_ATTENTION),
        )
        .exclude(job__compensation_reason="")
        .filter(
            (Q(status=S.SUCCEEDED) & Exists(undone))
            | (Q(status__in=(S.SUCCEEDED, S.WAITING), job__status=J.COMPENSATING) & Exists(held))
        )
        .filter(not_quarantined(QuarantineLoop.CHILDREN, now=now, field="job_id"))
        .order_by("updated_at")
        .values_list("pk", flat=True)[: limit - len(waiting)]
    )
    return waiting + list(undoing)
