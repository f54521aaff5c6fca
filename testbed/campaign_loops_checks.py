"""The checks of the fault campaign's loops, ladders and children that retry
(testbed.campaign_loops), from the database and the remote's ledger; docs/reliability.md
("Loops, ladders and children that retry") lists what each figure means."""

from __future__ import annotations

import datetime as dt
import itertools
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from django.db.models import Max, Min

from scheduler.models import (
    JOB_SETTLED,
    Attempt,
    Delivery,
    Event,
    EventKind,
    EventReaction,
    Job,
    JobStatus,
    Step,
    StepKind,
    StepStatus,
)
from testbed.campaign_language import held_child_parents
from testbed.campaign_loops import (
    APPROVAL,
    CHILD_BACKOFF,
    CHILD_TRIES,
    ESCALATED_APPROVAL,
    INVOICE,
    LADDER_WORKFLOWS,
    LOOP,
    LOOP_INTERVAL,
    LOOP_MAX,
    LOOP_WORKFLOWS,
    ON_EXHAUSTED,
    RUNGS,
    LoopsLog,
)

S = StepStatus
E = EventKind
J = JobStatus
#: Where a job is left at the end: settled, or held for an operator.
ENDED = JOB_SETTLED | {J.NEEDS_ATTENTION}
#: Clocks are read by different processes: a gap may look this much shorter than it was.
SLACK = dt.timedelta(seconds=0.1)
RUNG_KINDS = (E.WAIT_REMINDED, E.WAIT_ESCALATED)
DECISIONS = (E.STEP_APPROVED, E.STEP_REJECTED)

MUST_BE_ZERO = (
    "loop_jobs_not_settled",
    "iterations_not_numbered_in_order",
    "iterations_over_their_max",
    "iterations_called_under_another_id",
    "iterations_performed_twice",
    "iterations_overlapping_or_early",
    "loops_ended_twice",
    "loops_not_ended_as_until_says",
    "loops_exhausted_not_as_their_workflow_says",
    "loop_outputs_not_the_last_iteration",
    "loop_undos_not_of_the_last_iteration_once",
    "ladder_jobs_not_settled",
    "rungs_walked_twice",
    "rungs_out_of_order",
    "rungs_before_their_time",
    "rungs_after_a_decision",
    "rungs_without_their_alert",
    "ladders_ended_twice",
    "ladders_left_waiting",
    "ladders_not_ended_as_their_last_rung_says",
    "refused_decisions_taken",
    "self_approvals_taken",
    "lead_decisions_before_the_reassignment",
    "child_retry_jobs_not_settled",
    "children_over_the_policy",
    "children_of_one_try_twice",
    "children_live_at_once",
    "retries_before_their_backoff",
    "retries_after_a_child_that_did_not_fail",
    "retried_child_operations_not_derived",
    "child_operations_performed_twice",
    "children_not_as_the_declines_say",
    "child_effects_not_undone_once",
    "children_succeeded_under_compensated_parents",
)


def wait_for_alerts(job_ids: list[str], *, most: float) -> None:
    """Until the rungs' events queued for their alerts (EventReaction) have been handled, at most
    `most` seconds (the supervisor takes them at its passes)."""
    deadline = time.monotonic() + most
    while time.monotonic() < deadline:
        if not EventReaction.objects.filter(job_id__in=job_ids, kind__in=RUNG_KINDS).exists():
            return
        time.sleep(0.5)


def _events(job_ids: list[Any]) -> dict[int, list[Event]]:
    by_step: dict[int, list[Event]] = defaultdict(list)
    for event in (
        Event.objects.filter(job_id__in=job_ids, step_id__isnull=False).select_related("actor").order_by("id")
    ):
        by_step[event.step_id or 0].append(event)
    return by_step


def check_loops(log: LoopsLog, stats: dict[str, Any]) -> dict[str, Any]:
    """The figures of the loops', ladders' and children's jobs; `stats`: the remote's effects,
    deliveries and callers."""
    figures: dict[str, Any] = {"loops_rounds": log.rounds, "loops_submit_errors": log.submit_errors}
    examples: dict[str, list[str]] = {}
    figures |= _loops(log, stats, examples)
    figures |= _ladders(log, examples)
    children, child_ids = _children(log, stats, examples)
    figures |= children
    violations = {name: figures[name] for name in MUST_BE_ZERO if figures[name]}
    return {
        "figures": figures,
        "violations": violations,
        "examples": {k: v[:5] for k, v in examples.items() if v},
        "job_ids": [*log.all_jobs(), *child_ids],
        "notes": log.notes[:20],
    }


# --- loops ----------------------------------------------------------------------------------------


def _loops(log: LoopsLog, stats: dict[str, Any], examples: dict[str, list[str]]) -> dict[str, Any]:
    effects: dict[str, int] = stats["effects"]
    ids = list(log.loop_jobs)
    jobs = {str(j.pk): j for j in Job.objects.filter(pk__in=ids).select_related("workflow")}
    loops = {str(s.job_id): s for s in Step.objects.filter(job_id__in=ids, name=LOOP, kind=StepKind.ACTION)}
    iterations: dict[int, list[Step]] = defaultdict(list)
    for item in Step.objects.filter(
        parent_id__in=[s.pk for s in loops.values()], kind=StepKind.ITEM
    ).order_by("item_index"):
        iterations[item.parent_id or 0].append(item)
    spans = {
        row["step_id"]: (row["first"], row["last"])
        for row in Attempt.objects.filter(step__parent_id__in=[s.pk for s in loops.values()], number__gt=0)
        .values("step_id")
        .annotate(first=Min("started_at"), last=Max("finished_at"))
    }
    events = _events(ids)
    v: dict[str, list[str]] = defaultdict(list)
    ends: Counter[str] = Counter()
    expected_ops: dict[tuple[str, int, bool], str] = {}
    for job_id, loop in loops.items():
        plan, job = log.loop_jobs[job_id], jobs[job_id]
        action = ON_EXHAUSTED[LOOP_WORKFLOWS.index(job.workflow.name)]
        items = iterations[loop.pk]
        numbers = [i.item_index for i in items]
        if numbers != list(range(1, len(items) + 1)) or any(
            i.operation_id != f"{loop.operation_id}/iter-{i.item_index}" for i in items
        ):
            v["iterations_not_numbered_in_order"].append(f"{job_id}: {numbers}")
        if len(items) > LOOP_MAX:
            v["iterations_over_their_max"].append(f"{job_id}: {len(items)}")
        for i in items:
            expected_ops[(job_id, i.item_index or 0, False)] = i.operation_id
            expected_ops[(job_id, i.item_index or 0, True)] = f"{i.operation_id}:compensate"
            if effects.get(i.operation_id, 0) > 1:
                v["iterations_performed_twice"].append(i.operation_id)
        for a, b in itertools.pairwise(items):
            before, after = spans.get(a.pk, (None, None))[1], spans.get(b.pk, (None, None))[0]
            if (
                before is not None
                and after is not None
                and after + SLACK < before + dt.timedelta(seconds=LOOP_INTERVAL)
            ):
                v["iterations_overlapping_or_early"].append(
                    f"{b.operation_id}: {(after - before).total_seconds():.2f}s"
                )
        kinds = Counter(e.kind for e in events[loop.pk])
        met, exhausted = kinds[E.UNTIL_MET], kinds[E.ITERATIONS_EXHAUSTED]
        if met + exhausted > 1:
            v["loops_ended_twice"].append(job_id)
        polls = int(plan["polls"])
        if met:
            ends["until_met"] += 1
            if polls > LOOP_MAX or len(items) != polls:
                v["loops_not_ended_as_until_says"].append(f"{job_id}: polls {polls}, {len(items)} iterations")
        if exhausted:
            ends[f"exhausted_{action}"] += 1
            allowed = {"fail": {S.FAILED}, "continue": {S.SUCCEEDED, S.COMPENSATED}, "hold": {S.HELD}}[action]
            if polls <= LOOP_MAX or len(items) != LOOP_MAX:
                v["loops_not_ended_as_until_says"].append(f"{job_id}: polls {polls}, exhausted")
            if loop.status not in allowed or (
                action == "fail" and job.status not in (J.COMPENSATED, J.NEEDS_ATTENTION)
            ):
                v["loops_exhausted_not_as_their_workflow_says"].append(
                    f"{job_id}: {action}, {loop.status}, {job.status}"
                )
        succeeded = [
            i for i in items if i.status in (S.SUCCEEDED, S.COMPENSATED) and i.last_outcome == "succeeded"
        ]
        ended_with_output = loop.status in (S.SUCCEEDED, S.COMPENSATED) and (met or exhausted)
        if ended_with_output and (not succeeded or loop.output != succeeded[-1].output):
            v["loop_outputs_not_the_last_iteration"].append(job_id)
        if job.status in (J.COMPENSATED, J.CANCELLED) and succeeded:
            last = succeeded[-1]
            for i in items:
                undone = effects.get(f"{i.operation_id}:compensate", 0)
                want = 1 if i is last and effects.get(i.operation_id, 0) else 0
                if undone != want:
                    v["loop_undos_not_of_the_last_iteration_once"].append(f"{i.operation_id}: {undone}")
    for job_id, step, index, undo, op_id, _n in stats.get("callers", []):
        if job_id in loops and index is not None and expected_ops.get((job_id, index, bool(undo))) != op_id:
            v["iterations_called_under_another_id"].append(f"{job_id} {step}[{index}]: {op_id}")
    not_settled = [pk for pk, j in jobs.items() if j.status not in ENDED]
    v["loop_jobs_not_settled"] = not_settled
    examples.update({f"loops: {k}": list(x) for k, x in v.items()})
    all_items = [i for items in iterations.values() for i in items]
    figures = {
        "loop_jobs": len(ids),
        "loop_jobs_by_status": dict(sorted(Counter(j.status for j in jobs.values()).items())),
        "loop_ends": dict(sorted(ends.items())),
        "iterations": len(all_items),
        "iterations_by_status": dict(sorted(Counter(i.status for i in all_items).items())),
        "iteration_attempts": Attempt.objects.filter(step__in=all_items, number__gt=0).count(),
        "iteration_undo_effects": sum(effects.get(f"{i.operation_id}:compensate", 0) for i in all_items),
    }
    return figures | {name: len(v[name]) for name in MUST_BE_ZERO if name.startswith(("loop", "iteration"))}


# --- ladders --------------------------------------------------------------------------------------


def _ladders(log: LoopsLog, examples: dict[str, list[str]]) -> dict[str, Any]:
    ids = list(log.ladder_jobs)
    jobs = {str(j.pk): j for j in Job.objects.filter(pk__in=ids).select_related("workflow", "submitter")}
    steps = {
        str(s.job_id): s for s in Step.objects.filter(job_id__in=ids, name=APPROVAL, kind=StepKind.ACTION)
    }
    events = _events(ids)
    rung_events = [e for s in steps.values() for e in events[s.pk] if e.kind in RUNG_KINDS]
    alerted = {
        int(key.split(":")[1].removeprefix("event-"))
        for key in Delivery.objects.filter(key__startswith="alert:event-").values_list("key", flat=True)
        if key.split(":")[1].removeprefix("event-").isdigit()
    }
    v: dict[str, list[str]] = defaultdict(list)
    walked: Counter[str] = Counter()
    for job_id, step in steps.items():
        job = jobs[job_id]
        action = ON_EXHAUSTED[LADDER_WORKFLOWS.index(job.workflow.name)]
        rungs = [e for e in events[step.pk] if e.kind in RUNG_KINDS]
        numbers = [int((e.data or {}).get("rung", 0)) for e in rungs]
        decisions = [e for e in events[step.pk] if e.kind in DECISIONS]
        walked.update(f"rung {n}" for n in numbers)
        if len(set(numbers)) != len(numbers):
            v["rungs_walked_twice"].append(f"{job_id}: {numbers}")
        if numbers != list(range(1, len(numbers) + 1)):
            v["rungs_out_of_order"].append(f"{job_id}: {numbers}")
        for e, n in zip(rungs, numbers, strict=True):
            if step.waiting_since is None or not 1 <= n <= len(RUNGS):
                v["rungs_before_their_time"].append(f"{job_id}: rung {n} without a wait")
            elif e.created_at + SLACK < step.waiting_since + dt.timedelta(seconds=RUNGS[n - 1]):
                v["rungs_before_their_time"].append(
                    f"{job_id}: rung {n} at {(e.created_at - step.waiting_since).total_seconds():.2f}s"
                )
            if e.pk not in alerted:
                v["rungs_without_their_alert"].append(f"{job_id}: event {e.pk}")
            if decisions and e.pk > decisions[0].pk:
                v["rungs_after_a_decision"].append(f"{job_id}: rung {n}")
        last_rung = len(RUNGS) in numbers
        if len(decisions) + int(last_rung) > 1:
            v["ladders_ended_twice"].append(f"{job_id}: {len(decisions)} decisions, last rung {last_rung}")
        if step.status == S.WAITING:
            v["ladders_left_waiting"].append(job_id)
        if last_rung:
            ok = {
                "fail": step.status == S.FAILED and job.status in (J.COMPENSATED, J.NEEDS_ATTENTION),
                "continue": step.status in (S.SUCCEEDED, S.COMPENSATED) and step.output == ESCALATED_APPROVAL,
                "hold": step.status == S.HELD,
            }[action]
            if not ok:
                v["ladders_not_ended_as_their_last_rung_says"].append(
                    f"{job_id}: {action}, {step.status}, {job.status}"
                )
        for d in decisions:
            if d.kind != E.STEP_APPROVED:
                continue
            if d.actor_id is not None and d.actor_id == job.submitter_id:
                v["self_approvals_taken"].append(job_id)
            reassigned = next((e for e, n in zip(rungs, numbers, strict=True) if n == 2), None)
            if (
                d.actor is not None
                and d.actor.get_username() == "campaign-lead"
                and (reassigned is None or reassigned.pk > d.pk)
            ):
                v["lead_decisions_before_the_reassignment"].append(job_id)
    v["refused_decisions_taken"] = list(log.refused_decisions_taken)
    v["ladder_jobs_not_settled"] = [pk for pk, j in jobs.items() if j.status not in ENDED]
    examples.update({f"ladders: {k}": list(x) for k, x in v.items()})
    figures = {
        "ladder_jobs": len(ids),
        "ladder_jobs_by_plan": dict(sorted(Counter(log.ladder_jobs.values()).items())),
        "ladder_jobs_by_status": dict(sorted(Counter(j.status for j in jobs.values()).items())),
        "rungs_walked": dict(sorted(walked.items())),
        "rung_events": len(rung_events),
        "rung_alerts": sum(1 for e in rung_events if e.pk in alerted),
        "ladder_answers": dict(sorted(log.answers.items())),
    }
    names = [n for n in MUST_BE_ZERO if n.startswith(("ladder", "rung", "refused", "self", "lead"))]
    return figures | {name: len(v[name]) for name in names}


# --- children that retry --------------------------------------------------------------------------


def children_as_the_declines_say(*, declines: int, step_status: str, children: Sequence[Any]) -> bool:
    """Whether a parent's children (oldest try first; each with `status` and
    `compensation_reason`) are as its account's declines say. Once the invoice step settled it
    took one child per decline and one more that succeeded; with CHILD_TRIES declines or more,
    no child succeeded and, unless the step waits for an operator, it took CHILD_TRIES. A step its
    job stopped before (its `reserve` failed: skipped) took none."""
    if step_status == S.SKIPPED:
        return not children
    if step_status in (S.SUCCEEDED, S.COMPENSATED) and len(children) != declines + 1:
        return False
    if declines >= CHILD_TRIES:
        succeeded = any(
            c.status in (J.SUCCEEDED, J.COMPENSATED) and c.compensation_reason != "failure" for c in children
        )
        if succeeded or (step_status != S.WAITING and len(children) != CHILD_TRIES):
            return False
    return True


def _children(
    log: LoopsLog, stats: dict[str, Any], examples: dict[str, list[str]]
) -> tuple[dict[str, Any], list[str]]:
    effects: dict[str, int] = stats["effects"]
    ids = list(log.child_jobs)
    parents = {str(j.pk): j for j in Job.objects.filter(pk__in=ids)}
    invoices = {
        str(s.job_id): s for s in Step.objects.filter(job_id__in=ids, name=INVOICE, kind=StepKind.ACTION)
    }
    kids: dict[str, list[Job]] = defaultdict(list)
    for child in Job.objects.filter(parent_job__in=list(parents.values()), parent_step=INVOICE).order_by(
        "parent_try", "created_at"
    ):
        kids[str(child.parent_job_id)].append(child)
    child_ids = [str(c.pk) for cs in kids.values() for c in cs]
    child_steps: dict[str, list[Step]] = defaultdict(list)
    for s in Step.objects.filter(job_id__in=child_ids, kind=StepKind.ACTION):
        child_steps[str(s.job_id)].append(s)
    v: dict[str, list[str]] = defaultdict(list)
    tries: Counter[int] = Counter()
    for job_id, parent in parents.items():
        plan, step, children = log.child_jobs[job_id], invoices.get(job_id), kids[job_id]
        tries[len(children)] += 1
        if step is None:
            continue
        if len(children) > CHILD_TRIES:
            v["children_over_the_policy"].append(f"{job_id}: {len(children)}")
        per_try = Counter(c.parent_try for c in children)
        if any(n > 1 for n in per_try.values()):
            v["children_of_one_try_twice"].append(f"{job_id}: {dict(per_try)}")
        for a, b in itertools.pairwise(children):
            if a.finished_at is None or b.created_at < a.finished_at:
                v["children_live_at_once"].append(f"{job_id}: try {b.parent_try}")
                continue
            backoff = dt.timedelta(seconds=CHILD_BACKOFF[min(a.parent_try, len(CHILD_BACKOFF) - 1)])
            if b.created_at + SLACK < a.finished_at + backoff:
                v["retries_before_their_backoff"].append(
                    f"{job_id}: {(b.created_at - a.finished_at).total_seconds():.2f}s"
                )
            if not (
                a.status == J.FAILED or (a.status == J.COMPENSATED and a.compensation_reason == "failure")
            ):
                v["retries_after_a_child_that_did_not_fail"].append(
                    f"{job_id}: {a.status} {a.compensation_reason}"
                )
        for child in children:
            prefix = step.operation_id + (f"/retry-{child.parent_try}/" if child.parent_try else "/")
            for s in child_steps[str(child.pk)]:
                if not s.operation_id.startswith(prefix) or (
                    not child.parent_try and "/retry-" in s.operation_id
                ):
                    v["retried_child_operations_not_derived"].append(s.operation_id)
                if effects.get(s.operation_id, 0) > 1:
                    v["child_operations_performed_twice"].append(s.operation_id)
                undone = effects.get(f"{s.operation_id}:compensate", 0)
                if (
                    child.status in (J.COMPENSATED, J.CANCELLED)
                    and effects.get(s.operation_id, 0)
                    and undone != 1
                ):
                    v["child_effects_not_undone_once"].append(s.operation_id)
            if parent.status in (J.COMPENSATED, J.CANCELLED) and child.status == J.SUCCEEDED:
                v["children_succeeded_under_compensated_parents"].append(str(child.pk))
        declines = int(plan["declines"])
        if not children_as_the_declines_say(declines=declines, step_status=step.status, children=children):
            v["children_not_as_the_declines_say"].append(
                f"{job_id}: {declines} declines, {len(children)} children, invoice {step.status}"
            )
    # A parent waiting for a child held for an operator has settled as far as the service goes.
    held = {
        str(pk) for pk in held_child_parents([*parents.values(), *(c for cs in kids.values() for c in cs)])
    }
    v["child_retry_jobs_not_settled"] = [
        pk for pk, j in parents.items() if j.status not in ENDED and pk not in held
    ]
    examples.update({f"children: {k}": list(x) for k, x in v.items()})
    all_children = [c for cs in kids.values() for c in cs]
    figures = {
        "child_retry_jobs": len(ids),
        "child_retry_jobs_by_status": dict(sorted(Counter(j.status for j in parents.values()).items())),
        "children_by_status": dict(sorted(Counter(c.status for c in all_children).items())),
        "children_per_step": dict(sorted(tries.items())),
        "children_retried": sum(1 for c in all_children if c.parent_try),
    }
    names = [n for n in MUST_BE_ZERO if n.startswith(("child", "children", "retries", "retried"))]
    return figures | {name: len(v[name]) for name in names}, child_ids


def table_rows(loops: dict[str, Any]) -> list[tuple[str, Any]]:
    f = loops["figures"]
    rows: list[tuple[str, Any]] = [
        ("loops, ladders and children: rounds", f["loops_rounds"]),
        ("loop jobs", f["loop_jobs"]),
        *((f"loop jobs {status}", n) for status, n in f["loop_jobs_by_status"].items()),
        *((f"loops ended: {end}", n) for end, n in f["loop_ends"].items()),
        (
            "iterations / their attempts / undo effects",
            f"{f['iterations']} / {f['iteration_attempts']} / {f['iteration_undo_effects']}",
        ),
        ("ladder jobs", f["ladder_jobs"]),
        *((f"ladder jobs {status}", n) for status, n in f["ladder_jobs_by_status"].items()),
        *((f"rungs walked: {rung}", n) for rung, n in f["rungs_walked"].items()),
        ("rung events / their alerts", f"{f['rung_events']} / {f['rung_alerts']}"),
        *((f"decisions: {answer}", n) for answer, n in f["ladder_answers"].items()),
        ("child-retry jobs", f["child_retry_jobs"]),
        *((f"child-retry jobs {status}", n) for status, n in f["child_retry_jobs_by_status"].items()),
        *((f"children {status}", n) for status, n in f["children_by_status"].items()),
        *((f"steps with {tries} children", n) for tries, n in f["children_per_step"].items()),
    ]
    rows += [(f"{name.replace('_', ' ')} (must be 0)", f[name]) for name in MUST_BE_ZERO]
    return rows
