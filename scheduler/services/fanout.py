"""Fan-out over items: a call step with `for_each` runs once per element of a list.

When the step is ready, its list (a JMESPath expression over `input` and `results`) becomes its
items: one `item` step row per element, each with its own operation ID (the step's, plus the
item's index or the key `item_key` names), attempts and retries, supervised like any step. The
step itself calls nothing: it waits (`waiting`, no pool, no worker) while at most `max_parallel`
of its items are started and unsettled, and settles by its join:

- met (`all` items or `at_least` N succeeded once every item settled; `any`: one succeeded, the
  items not started then skipped and those in flight settled): the items that failed after a
  call that may have reached the remote (no answer, a 5xx) are compensated, and then the step
  succeeds with the items' outputs in list order (null where an item did not succeed);
- no longer possible: the items not started are skipped, those awaiting a decision abandoned,
  those in flight waited for; then every item that succeeded (or may have had an effect) is
  compensated, highest index first, at most `max_parallel` at once, each an ordinary supervised
  compensation step; then the step fails and its policy's `on_exhausted` decides the job.

A job that compensates (a later step failed, an operator cancelled) unwinds a fan-out's items the
same way, in its place in the reverse order. The outcome function
`scheduler/sql/postgresql/sas_record_outcome.sql` records an item's success in one round trip while
it can neither settle the join nor free a slot (other items still unsettled, none waiting to start);
the rest comes here. Items are never loaded with their job
(scheduler.services.locking): this module counts them with one aggregate and reads a page at a
time, so an item's outcome costs the same with 10 items as with 1,000.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Sum, TextField
from django.db.models.functions import Cast, Length
from jmespath.exceptions import JMESPathError

from scheduler import expressions
from scheduler.models import STEP_SETTLED, EventKind, JoinMode, Step, StepKind, StepStatus
from scheduler.services.dispatch import step_dispatch
from scheduler.services.effects import compensation_dispatch, needs_compensation, sent_steps
from scheduler.services.locking import JobState
from scheduler.transitions import step_note, step_transition, step_wait
from scheduler.unit import Unit

S = StepStatus
E = EventKind

#: Items started and not settled: what `max_parallel` bounds.
STARTED = frozenset({S.DISPATCHED, S.WAITING, S.ATTEMPT_FAILED, S.UNKNOWN, S.RETRY_WAIT})
#: Items awaiting a decision: abandoned when the join can no longer be met.
AWAITING = frozenset({S.ATTEMPT_FAILED, S.UNKNOWN, S.RETRY_WAIT, S.HELD})
#: The longest item key (the operation ID has 200 characters in all).
MAX_KEY_LENGTH = 80


class ItemsRefused(Exception):
    """The step's list cannot become items (not a list, too long, bad keys): the step fails."""


def fan_out_start(
    unit: Unit, *, state: JobState, step: Step, source: str, reason: str, data: dict[str, Any]
) -> str:
    """Make the ready step's items and start the first of them. Returns "started", or "held" when
    the list expression cannot be evaluated; raises ItemsRefused (nothing written) when the list
    cannot become items: the caller fails the step under its policy."""
    definition = step.definition
    try:
        elements = expressions.evaluate(definition.for_each, data)
    except JMESPathError as exc:
        why = f"its for_each {definition.for_each!r} cannot be evaluated: {exc}"
        step_transition(unit, step, S.HELD, source=source, kind=E.STEP_HELD, reason=why, status_reason=why)
        return "held"
    keys = _keys(definition.item_key, elements)
    now = unit.now
    items = Step.objects.bulk_create(
        [
            Step(
                job=state.job,
                definition=definition,
                name=f"{step.name}[{index}]",
                kind=StepKind.ITEM,
                parent=step,
                item_index=index,
                item=element,
                operation_id=f"{step.operation_id}:{key}",
                pool=step.pool,
                created_at=now,
                updated_at=now,
            )
            for index, (element, key) in enumerate(zip(elements, keys, strict=True))
        ]
    )
    join = _join_text(step)
    bound = f", at most {definition.max_parallel} at once" if definition.max_parallel else ""
    status_reason = f"{len(items)} items{bound}; join: {join}"
    step_wait(
        unit,
        step,
        source=source,
        kind=E.ITEMS_STARTED,
        reason=reason,
        waiting=status_reason,
        data={"items": len(items), "max_parallel": definition.max_parallel, "join": join},
        status_reason=status_reason,
        pool=None,
    )
    if items and state.job.paused_at is None:
        first = items[: definition.max_parallel or len(items)]
        # bulk_create returns the rows with their keys (PostgreSQL, SQLite): they are as read.
        for item in state.adopt(first):
            step_dispatch(
                unit, state=state, step=item, source=source, reason=f"item {item.item_index} of {step.name}"
            )
    return "started"


def _keys(expression: str, elements: Any) -> list[str]:
    """Each element's name in its operation ID: its index, or the value of `item_key` (unique
    strings or numbers, at most MAX_KEY_LENGTH characters)."""
    limit = settings.SAS_MAX_FANOUT_ITEMS
    if not isinstance(elements, list):
        raise ItemsRefused(f"for_each yielded {type(elements).__name__}, not a list")
    if len(elements) > limit:
        raise ItemsRefused(
            f"for_each yielded {len(elements)} items: the limit is {limit} (SAS_MAX_FANOUT_ITEMS)"
        )
    if not expression:
        return [str(index) for index in range(len(elements))]
    keys: list[str] = []
    for index, element in enumerate(elements):
        try:
            value = expressions.evaluate(expression, {"item": element, "index": index})
        except JMESPathError as exc:
            raise ItemsRefused(f"item_key cannot be evaluated on item {index}: {exc}") from exc
        if isinstance(value, bool) or not isinstance(value, str | int | float) or value == "":
            raise ItemsRefused(
                f"item_key of item {index} is {value!r}: a key is a non-empty string or number"
            )
        key = str(value)
        if len(key) > MAX_KEY_LENGTH:
            raise ItemsRefused(f"item_key of item {index} is longer than {MAX_KEY_LENGTH} characters")
        keys.append(key)
    duplicates = sorted(k for k, n in Counter(keys).items() if n > 1)
    if duplicates:
        raise ItemsRefused(f"item_key gives two items the key {duplicates[0]!r}: keys name items uniquely")
    return keys


def _join_text(step: Step) -> str:
    mode = step.definition.join_mode or JoinMode.ALL
    return f"at least {step.definition.join_count}" if mode == JoinMode.AT_LEAST else mode


def _needed(step: Step, total: int) -> int:
    mode = step.definition.join_mode or JoinMode.ALL
    if mode == JoinMode.AT_LEAST:
        return step.definition.join_count or 0
    if mode == JoinMode.ANY:
        return 1
    return total


def item_counts(unit: Unit, *, group_ids: list[int]) -> dict[int, Counter[str]]:
    """Items by status, per fan-out step: one aggregate over the items' index, after this
    unit's moves are written (they are part of what the join counts)."""
    unit.flush()
    counts: dict[int, Counter[str]] = {g: Counter() for g in group_ids}
    with connection.cursor() as cursor:
        # Plain SQL: this runs on every outcome of an item; the ORM would compile it each time.
        cursor.execute(COUNT_SQL.format(ids=", ".join(["%s"] * len(group_ids))), list(group_ids))
        for parent_id, status, n in cursor.fetchall():
            counts[parent_id][status] = n
    return counts


COUNT_SQL = (
    "SELECT parent_id, status, count(*) FROM scheduler_step "
    "WHERE parent_id IN ({ids}) AND kind = 'item' GROUP BY parent_id, status"
)


def fan_out_advance(unit: Unit, *, state: JobState, step: Step, counts: Counter[str], source: str) -> str:
    """Move a waiting fan-out on, in a job running forward: start items up to its bound, or settle
    its join. Returns "running", "succeeded", or "failed" (its items unwound; the caller applies
    the step's policy)."""
    total = sum(counts.values())
    succeeded = counts[S.SUCCEEDED]
    needed = _needed(step, total)
    if step.error:
        # The join failed earlier: its items are being unwound.
        return (
            "failed" if fan_out_unwind(unit, state=state, step=step, source=source, start=True) else "running"
        )
    possible = succeeded + counts[S.PENDING] + sum(counts[s] for s in STARTED) + counts[S.HELD]
    if possible < needed:
        why = (
            f"join {_join_text(step)} cannot be met: {succeeded} of {total} items succeeded, {possible} could"
        )
        step_note(
            unit,
            step,
            source=source,
            kind=E.JOIN_FAILED,
            reason=why,
            data={"succeeded": succeeded, "failed": counts[S.FAILED], "total": total},
            status_reason=f"{why}; undoing the items that succeeded",
            error=why,
        )
        return (
            "failed" if fan_out_unwind(unit, state=state, step=step, source=source, start=True) else "running"
        )
    in_flight = sum(counts[s] for s in STARTED)
    first_wins = (step.definition.join_mode or JoinMode.ALL) == JoinMode.ANY
    if succeeded >= needed and first_wins and counts[S.PENDING]:
        # `any`: the first success is enough, the items not started are not.
        _skip_pending(unit, state, step, source=source, reason=f"join {_join_text(step)} met")
        counts[S.PENDING] = 0
    # What is in flight or held settles first (its effect is accounted for: kept in the output,
    # or undone); `all` and `at_least` run every item.
    if succeeded >= needed and not (in_flight or counts[S.HELD] or counts[S.PENDING]):
        if not _undo_failed_items(unit, state, step, source=source):
            return "running"  # the undos of failed items that may have had an effect come first
        joined, size = _joined_output(state, step, succeeded=succeeded, total=total)
        step_transition(
            unit,
            step,
            S.SUCCEEDED,
            source=source,
            kind=E.JOIN_MET,
            reason=f"join {_join_text(step)} met: {succeeded} of {total} items succeeded",
            data={
                "succeeded": succeeded,
                "total": total,
                "output_bytes": size,
                "by_reference": isinstance(joined, dict),
            },
            output=joined,
            status_reason="",
            error="",
        )
        return "succeeded"
    bound = step.definition.max_parallel or total
    room = bound - in_flight
    if room > 0 and counts[S.PENDING] and state.job.paused_at is None:
        pending = _page(step, [S.PENDING], room, descending=False)
        for item in pending:
            step_dispatch(
                unit, state=state, step=item, source=source, reason=f"item {item.item_index} of {step.name}"
            )
    return "running"


def _joined_output(state: JobState, step: Step, *, succeeded: int, total: int) -> tuple[Any, int]:
    """The join's output and its size: the items' outputs in list order (null where an item did
    not succeed), or, past SAS_MAX_JOIN_BYTES, a reference to them (the items route pages them).
    The size is measured in the database, before any output is read into this process."""
    items = Step.objects.filter(parent_id=step.pk, kind=StepKind.ITEM, status=S.SUCCEEDED)
    size = int(items.aggregate(n=Sum(Length(Cast("output", TextField()))))["n"] or 0)
    limit = settings.SAS_MAX_JOIN_BYTES
    if limit and size > limit:
        reference = f"/api/v1/jobs/{state.job.pk}/steps/{step.name}/items/"
        return {"items": reference, "total": total, "succeeded": succeeded, "output_bytes": size}, size
    outputs = dict(items.values_list("item_index", "output"))
    return [outputs.get(index) for index in range(total)], size


def fan_out_held(state: JobState, *, groups: list[Step], held_items: int) -> list[str]:
    """What holds these waiting fan-out steps for an operator (a few names, for the job's
    reason): their held items (`held_items` counted them), and the held undos of their items (a
    failed join unwinding, or a met join undoing its failed items). Items share their fan-out's
    definition, and so do their undos, which are read with the job."""
    held: list[str] = []
    if held_items:
        held += list(
            Step.objects.filter(parent_id__in=[g.pk for g in groups], kind=StepKind.ITEM, status=S.HELD)
            .order_by("id")
            .values_list("name", flat=True)[:5]
        )
    fanning = {g.definition_id for g in groups}
    held += [
        c.name
        for c in state.compensations.values()
        if c.status == S.HELD and c.item_index is not None and c.definition_id in fanning
    ]
    return held


def _page(step: Step, statuses: list[str], limit: int, *, descending: bool) -> list[Step]:
    order = "-item_index" if descending else "item_index"
    return list(
        Step.objects.filter(parent_id=step.pk, kind=StepKind.ITEM, status__in=statuses)
        .select_related("definition__policy", "pool")
        .order_by(order)[:limit]
    )


def _skip_pending(unit: Unit, state: JobState, step: Step, *, source: str, reason: str) -> None:
    for item in state.adopt(_page(step, [S.PENDING], settings.SAS_MAX_FANOUT_ITEMS, descending=False)):
        step_transition(unit, item, S.SKIPPED, source=source, reason=f"{reason}: never started")


def _undo_failed_items(unit: Unit, state: JobState, step: Step, *, source: str) -> bool:
    """Undo the items of a met join that failed after a call that may have reached the remote (no
    answer, a 5xx: a timeout is not a failure, the answer may have been lost); True once none is
    left to undo. The step's output keeps them as null, so an effect of theirs would be one the
    job neither uses nor undoes."""
    unit.flush()  # the query below reads the items as this unit left them
    failed = state.adopt(_page(step, [S.FAILED], settings.SAS_MAX_FANOUT_ITEMS, descending=True))
    if not failed:
        return True
    return _undo(unit, state, step, failed, source=source, start=True)


def items_stop(unit: Unit, *, state: JobState, step: Step, source: str) -> bool:
    """Stop the items of `step` (a fan-out's, or a repeat's iterations) that are not in flight:
    those never started are skipped, those awaiting a decision abandoned (failed, no further
    attempts). Returns False while a call of an item is still in flight (its outcome settles it
    first), else True; either way the unit is flushed, so what the caller reads next sees the items
    as these moves leave them."""
    unit.flush()  # the query below reads the items as this unit left them
    limit = settings.SAS_MAX_FANOUT_ITEMS
    stopping = state.adopt(_page(step, [S.PENDING, S.WAITING, *AWAITING], limit, descending=False))
    for item in stopping:
        if item.status in (S.PENDING, S.WAITING):
            step_transition(unit, item, S.SKIPPED, source=source, reason=f"{step.name} stops: never started")
        else:
            step_transition(
                unit,
                item,
                S.FAILED,
                source=source,
                kind=E.STEP_ABANDONED,
                reason=f"{step.name} stops: no further attempts",
            )
    unit.flush()
    return not Step.objects.filter(parent_id=step.pk, kind=StepKind.ITEM, status=S.DISPATCHED).exists()


def fan_out_unwind(unit: Unit, *, state: JobState, step: Step, source: str, start: bool) -> bool:
    """Stop a fan-out's items and undo those that may have had an effect; True once nothing is
    left to undo. `start`: compensations may start now (every step after this one is undone)."""
    if not items_stop(unit, state=state, step=step, source=source):
        return False  # calls in flight settle first (their outcome says whether to undo them)
    # An item abandoned above after a call that got no answer is a failed item that may have had
    # an effect, and is undone.
    limit = settings.SAS_MAX_FANOUT_ITEMS
    candidates = state.adopt(_page(step, [S.SUCCEEDED, S.FAILED], limit, descending=True))
    return _undo(unit, state, step, candidates, source=source, start=start)


def _undo(
    unit: Unit, state: JobState, step: Step, candidates: list[Step], *, source: str, start: bool
) -> bool:
    """Start the compensations of those `candidates` (items of `step`, settled) that may have had
    an effect, at most `max_parallel` at once, highest index first; True once none is left."""
    limit = settings.SAS_MAX_FANOUT_ITEMS
    sent = sent_steps(unit, steps=candidates)
    compensations = state.compensations
    undo = [i for i in candidates if needs_compensation(i, sent=sent)]
    live = [
        compensations[i.pk]
        for i in undo
        if i.pk in compensations and compensations[i.pk].status not in STEP_SETTLED
    ]
    todo = [i for i in undo if i.pk not in compensations]
    if not todo and not live:
        return True
    if not start or state.job.paused_at is not None:
        return False
    room = (step.definition.max_parallel or limit) - len(live)
    for item in todo[: max(room, 0)]:
        compensation_dispatch(
            unit, state=state, step=item, source=source, reason=f"undo item {item.item_index} of {step.name}"
        )
    return False
