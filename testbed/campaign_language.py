"""The fault campaign's jobs in the workflow language: a condition, a fan-out over the order's
lines with an input mapping, and a sub-workflow; their inputs, and the checks of
docs/reliability.md ("Conditions, fan-outs and sub-workflows").

The workflows (one shape, three joins): `reserve` (a call), then `charge` (a call, skipped when
`input.prepaid`), then `ship` (a fan-out over `input.lines`: each line is an item shipped under
its own operation ID, its remote sent `{order, line, quantity}`, at most `max_parallel` at once),
then `invoice` (a sub-workflow step: a child job of `campaign_invoice`, which bills the order's
fee and prints a label, two calls). `campaign_order_language` names its items by index and needs
every line shipped; `campaign_order_language_keyed` names them by `item.sku` and needs at least
two; `campaign_order_language_any` ships one line at a time and needs one.

What fails, on purpose, besides the campaign's faults: a line whose quantity is over the
sandbox's limit is refused by shipping (an item fails; the join may still be met), and a fee over
the sandbox's charge limit is declined (the child job is compensated, so is its parent). The
sub-workflow step comes last: a child that succeeded is never under a parent that compensates
(docs/workflow-language.md, "Sub-workflows": such a child is not undone).
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from scheduler.models import (
    JOB_SETTLED,
    STEP_SETTLED,
    Attempt,
    Event,
    EventKind,
    Job,
    JobStatus,
    JoinMode,
    Step,
    StepDefinitionKind,
    StepKind,
    StepStatus,
)
from testbed.definitions import ensure_workflow

WORKFLOW_LANGUAGE = "campaign_order_language"
WORKFLOW_LANGUAGE_KEYED = "campaign_order_language_keyed"
WORKFLOW_LANGUAGE_ANY = "campaign_order_language_any"
#: The child workflow its sub-workflow step runs.
WORKFLOW_INVOICE = "campaign_invoice"
#: The workflows the language jobs are submitted to, in turn.
LANGUAGE_WORKFLOWS = (WORKFLOW_LANGUAGE, WORKFLOW_LANGUAGE_KEYED, WORKFLOW_LANGUAGE_ANY)
#: Every workflow whose jobs this module makes (children included).
ALL_WORKFLOWS = (*LANGUAGE_WORKFLOWS, WORKFLOW_INVOICE)
CHARGE = "charge"
SHIP = "ship"
INVOICE = "invoice"
#: Shipping refuses a line whose quantity is above this (the sandbox's `decline_quantity_over`).
QUANTITY_LIMIT = 5
#: Payments decline an amount above this (the sandbox's `decline_over`): a charge, a fee.
AMOUNT_LIMIT = 1000
MAX_LINES = 4

S = StepStatus
E = EventKind
#: Where a job is left at the end: settled, or held for an operator.
ENDED = JOB_SETTLED | {JobStatus.NEEDS_ATTENTION}


def _call(name: str, pool: str, service_path: str, status: str, undo: str, **more: Any) -> dict[str, Any]:
    return {
        "name": name,
        "pool": pool,
        "path": service_path,
        "status_path": status,
        "compensation_path": undo,
        **more,
    }


def _reserve() -> dict[str, Any]:
    return _call(
        "reserve",
        "campaign-inventory",
        "/inventory/reserve",
        "/inventory/reservations/{operation_id}",
        "/inventory/release",
        policy="campaign",
    )


def _charge(name: str = CHARGE, **more: Any) -> dict[str, Any]:
    return _call(
        name,
        "campaign-payments",
        "/payments/charge",
        "/payments/{operation_id}",
        "/payments/refund",
        policy="campaign-careful",
        **more,
    )


def _schedule(name: str, **more: Any) -> dict[str, Any]:
    return _call(
        name,
        "campaign-shipping",
        "/shipping/schedule",
        "/shipping/shipments/{operation_id}",
        "/shipping/cancel",
        policy="campaign",
        **more,
    )


def ensure_language_definitions() -> None:
    """The child workflow and the three orders that run it (the campaign's pools and policies
    must exist)."""
    ensure_workflow(
        WORKFLOW_INVOICE,
        description="Bill the order's fee, then print its label; both undoable.",
        steps=[_charge("bill"), _schedule("label", depends_on=["bill"])],
    )
    for name, fan_out in (
        (WORKFLOW_LANGUAGE, {"max_parallel": 2}),
        (
            WORKFLOW_LANGUAGE_KEYED,
            {"max_parallel": 3, "item_key": "item.sku", "join": {"mode": "at_least", "count": 2}},
        ),
        (WORKFLOW_LANGUAGE_ANY, {"max_parallel": 1, "join": {"mode": "any"}}),
    ):
        ensure_workflow(
            name,
            description="Reserve; charge unless prepaid; ship each line; invoice in a child job.",
            steps=[
                _reserve(),
                # Not `!input.prepaid`: JMESPath's `!` binds tighter than `.` (always null).
                _charge(depends_on=["reserve"], when="!(input.prepaid)"),
                _schedule(
                    SHIP,
                    depends_on=["reserve", CHARGE],
                    for_each="input.lines",
                    input={"order.$": "input.order", "line.$": "item", "quantity.$": "item.quantity"},
                    output="output.shipment_id",
                    **fan_out,
                ),
                {
                    "name": INVOICE,
                    "kind": "workflow",
                    "workflow": WORKFLOW_INVOICE,
                    "depends_on": [SHIP],
                    "input": {"order.$": "input.order", "amount.$": "input.fee", "quantity": 1},
                    "output": "output.bill",
                    "policy": "campaign",
                },
            ],
        )


# --- inputs ---------------------------------------------------------------------------------------


#: Of each DECK language jobs, how many have a line shipping refuses, and a fee payments declines.
DECK = 10
REFUSED_LINES = 2
DECLINED_FEES = 1


class LanguagePlanner:
    """Draws the language jobs' workflows and inputs: prepaid or not (40 % prepaid), 1 to
    MAX_LINES lines with distinct SKUs and quantities of 1 to 3; from a shuffled deck of DECK
    cards, so that a short run meets each, a line over QUANTITY_LIMIT and a fee over
    AMOUNT_LIMIT."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.cards = ["line"] * REFUSED_LINES + ["fee"] * DECLINED_FEES
        self.cards += ["ok"] * (DECK - len(self.cards))
        rng.shuffle(self.cards)
        self.dealt = 0

    def deal(self, order: str, base: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The next job's workflow and input: `base` (the plain jobs' fields) plus the order's."""
        i = self.dealt
        self.dealt += 1
        if i and i % DECK == 0:
            self.rng.shuffle(self.cards)
        card = self.cards[i % DECK]
        rng = self.rng
        # A declined fee's job ships two lines at least: each join can be met, its child starts.
        count = rng.randint(2 if card == "fee" else 1, MAX_LINES)
        lines = [{"sku": f"{order}-L{n}", "quantity": rng.randint(1, 3)} for n in range(count)]
        if card == "line":
            rng.choice(lines)["quantity"] = QUANTITY_LIMIT + 1
        fee = AMOUNT_LIMIT + rng.randint(1, 500) if card == "fee" else rng.randint(1, 200)
        payload = {**base, "order": order, "prepaid": rng.random() < 0.4, "lines": lines, "fee": fee}
        return LANGUAGE_WORKFLOWS[i % len(LANGUAGE_WORKFLOWS)], payload


# --- the checks -----------------------------------------------------------------------------------


#: Figures that must be zero, in the order the report lists them.
MUST_BE_ZERO = (
    "language_jobs_not_settled",
    "items_not_settled",
    "items_called_under_another_id",
    "operations_called_under_two_ids",
    "succeeded_items_without_one_effect",
    "children_started_twice",
    "parent_steps_settled_twice",
    "child_operations_not_derived",
    "child_operations_performed_twice",
    "parent_steps_disagreeing_with_child",
    "children_succeeded_under_compensated_parents",
    "undo_effects_without_effect",
    "undo_steps_for_steps_never_sent",
    "effects_not_undone_once",
    "failed_items_with_effect_in_succeeded_jobs",
    "skipped_steps_called",
    "conditions_not_as_input_says",
    "joins_met_short",
)


def held_child_parents(jobs: Iterable[Job]) -> set[Any]:
    """The jobs, among `jobs`, still live because a child of theirs (or a child's child) needs
    attention: each waits for the operator its descendant waits for (its step waits for the
    child), so the campaign counts it as held for an operator, not as unsettled."""
    by_pk: dict[Any, Job] = {j.pk: j for j in jobs}
    held: set[Any] = set()
    todo = [j for j in by_pk.values() if j.status == JobStatus.NEEDS_ATTENTION and j.parent_job_id]
    while todo:
        parent = by_pk.get(todo.pop().parent_job_id or "")
        if parent is not None and parent.status not in ENDED and parent.pk not in held:
            held.add(parent.pk)
            todo.append(parent)
    return held


def language_family(job_ids: list[Any]) -> list[Any]:
    """The child jobs of these jobs, and theirs (the campaign's nest one deep)."""
    children: list[Any] = []
    parents = list(job_ids)
    while parents:
        parents = list(Job.objects.filter(parent_job_id__in=parents).values_list("pk", flat=True))
        children += parents
    return children


@dataclass
class _Facts:
    """What the database says about the language jobs and their children."""

    jobs: dict[Any, Job]
    steps: list[Step]
    by_op: dict[str, Step]
    attempted: set[int]
    events: dict[int, Counter[str]]
    condition_skips: set[int]


def _facts(family: list[Any]) -> _Facts:
    jobs = {j.pk: j for j in Job.objects.filter(pk__in=family).select_related("workflow")}
    steps = list(Step.objects.filter(job_id__in=family).select_related("definition", "compensates"))
    ids = [s.pk for s in steps]
    attempted = set(Attempt.objects.filter(step_id__in=ids).values_list("step_id", flat=True))
    events: dict[int, Counter[str]] = defaultdict(Counter)
    condition_skips: set[int] = set()
    for step_id, kind, data in Event.objects.filter(job_id__in=family, step_id__isnull=False).values_list(
        "step_id", "kind", "data"
    ):
        events[step_id][kind] += 1
        if kind == E.STEP_SKIPPED and isinstance(data, dict) and "when" in data:
            condition_skips.add(step_id)
    return _Facts(
        jobs=jobs,
        steps=steps,
        by_op={s.operation_id: s for s in steps},
        attempted=attempted,
        events=events,
        condition_skips=condition_skips,
    )


def _needed(step: Step, total: int) -> int:
    mode = step.definition.join_mode or JoinMode.ALL
    if mode == JoinMode.AT_LEAST:
        return step.definition.join_count or 0
    return 1 if mode == JoinMode.ANY else total


def check_language(language_job_ids: list[Any], stats: dict[str, Any]) -> dict[str, Any]:
    """The figures of the language jobs and their children, from the database and the remote's
    ledger (`stats`: its effects and deliveries by key, and who called under which key)."""
    parents = [str(j) for j in language_job_ids]
    children = [str(j) for j in language_family(language_job_ids)]
    f = _facts([*parents, *children])
    effects: dict[str, int] = stats["effects"]
    deliveries: dict[str, int] = stats["deliveries"]
    family = {str(pk) for pk in f.jobs}
    items = [s for s in f.steps if s.kind == StepKind.ITEM]
    undos = [s for s in f.steps if s.kind == StepKind.COMPENSATION]

    # (a) Every call names its job, step and item: an item's calls carry its one operation ID
    # (its undo's, theirs), and no step is called under two.
    expected = {(str(i.job_id), i.definition.name, i.item_index, False): i.operation_id for i in items}
    expected |= {
        (str(u.job_id), u.definition.name, u.item_index, True): u.operation_id
        for u in undos
        if u.item_index is not None
    }
    keys: dict[tuple[str, str, int | None, bool], set[str]] = defaultdict(set)
    for job_id, step, index, undo, op_id, _n in stats.get("callers", []):
        if job_id in family:
            keys[(job_id, step, index, bool(undo))].add(op_id)
    item_calls = {k: ops for k, ops in keys.items() if k[2] is not None}
    called_otherwise = sorted(
        f"{k[0]} {k[1]}[{k[2]}]{' undo' if k[3] else ''}: {sorted(ops)}"
        for k, ops in item_calls.items()
        if ops != {expected.get(k)}
    )
    two_ids = sorted(f"{k[0]} {k[1]}: {sorted(ops)}" for k, ops in keys.items() if len(ops) > 1)
    items_without_one = [
        i.operation_id
        for i in items
        if i.status in (S.SUCCEEDED, S.COMPENSATED)
        and i.last_outcome == "succeeded"
        and effects.get(i.operation_id) != 1
    ]

    # (b) One child per sub-workflow step, started and settled once; its operations derive from
    # the step's and happen at most once; the step ends as its child did.
    invoice_steps = {
        (str(s.job_id), s.name): s
        for s in f.steps
        if s.kind == StepKind.ACTION and s.definition.kind == StepDefinitionKind.WORKFLOW
    }
    per_parent = Counter(
        (str(j.parent_job_id), j.parent_step) for j in f.jobs.values() if j.parent_job_id is not None
    )
    started_twice = [k for k, n in per_parent.items() if n > 1]
    started_twice += [
        (str(s.job_id), s.name) for s in invoice_steps.values() if f.events[s.pk][E.CHILD_STARTED] > 1
    ]
    settled_twice = [
        s.pk
        for s in invoice_steps.values()
        if f.events[s.pk][E.CHILD_SUCCEEDED] + f.events[s.pk][E.CHILD_FAILED] > 1
    ]
    not_derived: list[str] = []
    performed_twice: list[str] = []
    disagreeing: list[str] = []
    under_compensated: list[str] = []
    child_of: dict[tuple[str, str], Job] = {}
    for child in f.jobs.values():
        if child.parent_job_id is None:
            continue
        parent_step = invoice_steps.get((str(child.parent_job_id), child.parent_step))
        if parent_step is None:
            disagreeing.append(f"child {child.pk}: no step {child.parent_step!r} in its parent")
            continue
        child_of[(str(child.parent_job_id), child.parent_step)] = child
        for s in f.steps:
            if s.job_id != child.pk:
                continue
            if s.kind == StepKind.ACTION and not s.operation_id.startswith(f"{parent_step.operation_id}/"):
                not_derived.append(s.operation_id)
            if effects.get(s.operation_id, 0) > 1:
                performed_twice.append(s.operation_id)
        if (parent_step.status == S.SUCCEEDED) != (child.status == JobStatus.SUCCEEDED):
            disagreeing.append(f"step {parent_step.pk} {parent_step.status}, child {child.pk} {child.status}")
        parent = f.jobs.get(child.parent_job_id)
        if (
            parent is not None
            and parent.status in (JobStatus.COMPENSATED, JobStatus.CANCELLED)
            and child.status == JobStatus.SUCCEEDED
        ):
            under_compensated.append(str(child.pk))
    for key, s in invoice_steps.items():
        if key not in child_of and (s.status == S.SUCCEEDED or f.events[s.pk][E.CHILD_STARTED]):
            disagreeing.append(f"step {s.pk} {s.status}: no child job")

    # (c) Nothing undone that had no effect: every undo the remote performed undid an effect,
    # and no undo step exists for a step never sent or skipped.
    undone_without = sorted(
        op for op in effects if op.endswith(":compensate") and not effects.get(op.removesuffix(":compensate"))
    )
    undo_unsent = [
        u.operation_id
        for u in undos
        if u.compensates is not None
        and (u.compensates.status == S.SKIPPED or u.compensates_id not in f.attempted)
    ]

    # (d) A job that ended compensated or cancelled undid each effect of its items (and a child
    # each of its steps') exactly once; a job that succeeded left no failed item with an effect.
    undone_jobs = {pk for pk, j in f.jobs.items() if j.status in (JobStatus.COMPENSATED, JobStatus.CANCELLED)}
    not_undone_once = [
        s.operation_id
        for s in f.steps
        if s.job_id in undone_jobs
        and (
            s.kind == StepKind.ITEM
            or (s.kind == StepKind.ACTION and f.jobs[s.job_id].parent_job_id is not None)
        )
        and effects.get(s.operation_id, 0)
        and effects.get(f"{s.operation_id}:compensate", 0) != 1
    ]
    failed_with_effect = [
        i.operation_id
        for i in items
        if f.jobs[i.job_id].status == JobStatus.SUCCEEDED
        and i.status == S.FAILED
        and effects.get(i.operation_id, 0)
    ]

    # (e) A skipped step was never called, and a condition followed the input.
    skipped_called = [
        s.operation_id
        for s in f.steps
        if s.status == S.SKIPPED and (deliveries.get(s.operation_id, 0) or s.pk in f.attempted)
    ]
    not_as_input: list[str] = []
    charges = [
        s for s in f.steps if s.kind == StepKind.ACTION and s.name == CHARGE and str(s.job_id) in parents
    ]
    for s in charges:
        prepaid = bool((f.jobs[s.job_id].input or {}).get("prepaid"))
        # Still pending: its condition was never read (the job stopped before `reserve`
        # succeeded, or while it compensated), and it was never called.
        evaluated = s.status != S.PENDING or s.pk in f.attempted
        if prepaid and evaluated and s.status != S.SKIPPED:
            not_as_input.append(f"{s.job_id}: prepaid, charge {s.status}")
        if not prepaid and s.pk in f.condition_skips:
            not_as_input.append(f"{s.job_id}: not prepaid, charge skipped by its condition")

    # A join met with fewer items than it needs.
    fan_outs = [s for s in f.steps if s.kind == StepKind.ACTION and s.definition.for_each]
    item_status: dict[int, Counter[str]] = defaultdict(Counter)
    for i in items:
        item_status[i.parent_id or 0][i.status] += 1
    met_short = [
        s.pk
        for s in fan_outs
        if f.events[s.pk][E.JOIN_MET]
        and item_status[s.pk][S.SUCCEEDED] + item_status[s.pk][S.COMPENSATED]
        < _needed(s, sum(item_status[s.pk].values()))
    ]

    # (f) Everything settles: the jobs (children too) and their items.
    # A job held for an operator (needs_attention) has settled as far as the service goes, as
    # the campaign counts it; its held steps wait for that operator.
    held = {str(pk) for pk in held_child_parents(f.jobs.values())}
    unsettled_jobs = [str(pk) for pk, j in f.jobs.items() if j.status not in ENDED and str(pk) not in held]
    unsettled_items = [
        i.operation_id
        for i in items
        if i.status not in STEP_SETTLED and f.jobs[i.job_id].status in JOB_SETTLED
    ]

    parent_jobs = [j for j in f.jobs.values() if j.parent_job_id is None]
    child_jobs = [j for j in f.jobs.values() if j.parent_job_id is not None]
    item_ops = [i.operation_id for i in items]
    figures: dict[str, Any] = {
        "language_jobs": len(language_job_ids),
        "language_jobs_by_workflow": dict(sorted(Counter(j.workflow.name for j in parent_jobs).items())),
        "language_jobs_by_status": dict(sorted(Counter(j.status for j in parent_jobs).items())),
        "child_jobs_by_status": dict(sorted(Counter(j.status for j in child_jobs).items())),
        "prepaid_jobs": sum(1 for j in parent_jobs if (j.input or {}).get("prepaid")),
        "charges_skipped_by_condition": sum(1 for s in charges if s.pk in f.condition_skips),
        "items": len(items),
        "items_by_status": dict(sorted(Counter(i.status for i in items).items())),
        "item_effects": sum(effects.get(op, 0) for op in item_ops),
        "item_deliveries": sum(deliveries.get(op, 0) for op in item_ops),
        "item_undo_effects": sum(effects.get(f"{op}:compensate", 0) for op in item_ops),
        # Items (and their undos) the remote was called for, each checked for its one key.
        "items_called": len(item_calls),
        "joins_met": sum(f.events[s.pk][E.JOIN_MET] for s in fan_outs),
        "joins_failed": sum(f.events[s.pk][E.JOIN_FAILED] for s in fan_outs),
        "children_started": sum(f.events[s.pk][E.CHILD_STARTED] for s in invoice_steps.values()),
        "language_jobs_not_settled": len(unsettled_jobs),
        "language_jobs_waiting_for_a_held_child": len(held),
        "items_not_settled": len(unsettled_items),
        "items_called_under_another_id": len(called_otherwise),
        "operations_called_under_two_ids": len(two_ids),
        "succeeded_items_without_one_effect": len(items_without_one),
        "children_started_twice": len(started_twice),
        "parent_steps_settled_twice": len(settled_twice),
        "child_operations_not_derived": len(not_derived),
        "child_operations_performed_twice": len(performed_twice),
        "parent_steps_disagreeing_with_child": len(disagreeing),
        "children_succeeded_under_compensated_parents": len(under_compensated),
        "undo_effects_without_effect": len(undone_without),
        "undo_steps_for_steps_never_sent": len(undo_unsent),
        "effects_not_undone_once": len(not_undone_once),
        "failed_items_with_effect_in_succeeded_jobs": len(failed_with_effect),
        "skipped_steps_called": len(skipped_called),
        "conditions_not_as_input_says": len(not_as_input),
        "joins_met_short": len(met_short),
    }
    violations = {name: figures[name] for name in MUST_BE_ZERO if figures[name]}
    return {
        "figures": figures,
        "violations": violations,
        "child_job_ids": children,
        "examples": {
            "not_settled": unsettled_jobs[:5] + unsettled_items[:5],
            "called_otherwise": called_otherwise[:5],
            "two_ids": two_ids[:5],
            "items_without_one_effect": items_without_one[:5],
            "started_twice": [str(k) for k in started_twice[:5]],
            "settled_twice": settled_twice[:5],
            "not_derived": not_derived[:5],
            "performed_twice": performed_twice[:5],
            "disagreeing": disagreeing[:5],
            "under_compensated": under_compensated[:5],
            "undone_without_effect": undone_without[:5],
            "undo_unsent": undo_unsent[:5],
            "not_undone_once": not_undone_once[:5],
            "failed_with_effect": failed_with_effect[:5],
            "skipped_called": skipped_called[:5],
            "not_as_input": not_as_input[:5],
            "met_short": met_short[:5],
        },
    }


def table_rows(language: dict[str, Any]) -> list[tuple[str, Any]]:
    f = language["figures"]

    def of(*names: str) -> str:
        return " / ".join(str(f[n]) for n in names)

    return [
        ("language jobs", f["language_jobs"]),
        *((f"language jobs of {name}", n) for name, n in f["language_jobs_by_workflow"].items()),
        *((f"language jobs {status}", n) for status, n in f["language_jobs_by_status"].items()),
        *((f"child jobs {status}", n) for status, n in f["child_jobs_by_status"].items()),
        ("language jobs and children not settled (must be 0)", f["language_jobs_not_settled"]),
        (
            "prepaid jobs / charges skipped by their condition",
            of("prepaid_jobs", "charges_skipped_by_condition"),
        ),
        ("conditions not as the input says (must be 0)", f["conditions_not_as_input_says"]),
        ("skipped steps and items called (must be 0)", f["skipped_steps_called"]),
        ("items", f["items"]),
        *((f"items {status}", n) for status, n in f["items_by_status"].items()),
        ("items not settled (must be 0)", f["items_not_settled"]),
        (
            "item deliveries / effects / undo effects",
            of("item_deliveries", "item_effects", "item_undo_effects"),
        ),
        (
            "items called (and undone) / under another operation ID (must be 0)",
            of("items_called", "items_called_under_another_id"),
        ),
        ("steps called under two operation IDs (must be 0)", f["operations_called_under_two_ids"]),
        ("succeeded items without exactly one effect (must be 0)", f["succeeded_items_without_one_effect"]),
        ("joins met / failed", of("joins_met", "joins_failed")),
        ("joins met with fewer items than they need (must be 0)", f["joins_met_short"]),
        ("children started", f["children_started"]),
        ("children started twice for one step (must be 0)", f["children_started_twice"]),
        ("sub-workflow steps settled twice (must be 0)", f["parent_steps_settled_twice"]),
        ("child operation IDs not derived from the step's (must be 0)", f["child_operations_not_derived"]),
        ("child operations performed twice (must be 0)", f["child_operations_performed_twice"]),
        (
            "sub-workflow steps ending otherwise than their child (must be 0)",
            f["parent_steps_disagreeing_with_child"],
        ),
        (
            "children succeeded under a compensated parent (must be 0)",
            f["children_succeeded_under_compensated_parents"],
        ),
        ("undo effects for operations without effect (must be 0)", f["undo_effects_without_effect"]),
        ("undo steps for steps never sent or skipped (must be 0)", f["undo_steps_for_steps_never_sent"]),
        (
            "effects of items and children in compensated jobs not undone once (must be 0)",
            f["effects_not_undone_once"],
        ),
        (
            "failed items with an effect in jobs that succeeded (must be 0)",
            f["failed_items_with_effect_in_succeeded_jobs"],
        ),
    ]
