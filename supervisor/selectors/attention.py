"""The Needs-attention list: live steps that need a person or the supervisor, oldest first, with
the reason and the actions each allows (read through `step_live_idx`): calls the supervisor could
not settle, steps held for an operator, and waits for a person (approvals) or about to time out."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from django.db.models import OuterRef, Q, QuerySet, Subquery

from agents.http import CANARY_POOL
from agents.models import AgentPool
from scheduler.models import (
    Event,
    OnTimeout,
    Step,
    StepDefinitionKind,
    StepKind,
    StepStatus,
    Workflow,
)
from scheduler.unit import db_now
from supervisor.selectors.actions import job_actions, step_resolvable, step_retryable
from supervisor.selectors.overview import signature
from supervisor.selectors.waits import Wait, wait_kind_text, wait_of
from supervisor.services import BULK_LIMIT

S = StepStatus

#: Rows shown at once on the Needs-attention list (oldest first); bulk actions reach further.
ATTENTION_ROWS = 50


# --- needs attention ----------------------------------------------------------------------------

#: The statuses the Needs-attention list reads (all live: step_live_idx serves the query).
ATTENTION_STATUSES = (S.DISPATCHED, S.UNKNOWN, S.ATTEMPT_FAILED, S.HELD, S.RETRY_WAIT, S.WAITING)

#: A wait for a signal that times out within this long is listed (unless its timeout continues).
TIMING_OUT_SOON = dt.timedelta(minutes=15)


def attention_condition(now: dt.datetime) -> Q:
    """Steps an operator may need to act on.

    - dispatched past its deadline, or with no deadline (NULL-safe, like the scan);
    - an unknown outcome or a failed attempt awaiting the supervisor's decision;
    - held for an operator;
    - a compensation that keeps failing (dispatched again, or waiting to retry, after its first
      attempt);
    - a step waiting for an approval (a person decides it);
    - a step waiting for a signal whose timeout comes within TIMING_OUT_SOON and does not just
      continue (a held or failed step would follow).
    """
    overdue = Q(status=S.DISPATCHED) & (Q(deadline__lt=now) | Q(deadline__isnull=True))
    deciding = Q(status__in=[S.UNKNOWN, S.ATTEMPT_FAILED, S.HELD])
    failing_compensation = (
        Q(kind=StepKind.COMPENSATION) & Q(status__in=[S.DISPATCHED, S.RETRY_WAIT]) & Q(attempt__gt=1)
    )
    waits = Q(status=S.WAITING, pool__isnull=True)
    approval = waits & Q(definition__kind=StepDefinitionKind.APPROVAL)
    timing_out = (
        waits
        & Q(definition__kind=StepDefinitionKind.SIGNAL, deadline__lt=now + TIMING_OUT_SOON)
        & ~Q(definition__on_timeout=OnTimeout.CONTINUE)
    )
    return overdue | deciding | failing_compensation | approval | timing_out


class StepActions:
    """Which operator actions a row's step allows now (the services decide for real)."""

    step: Step

    @property
    def can_retry(self) -> bool:
        # A retried wait waits again (supervisor.services.step_retry); a fan-out's items are
        # retried one by one, not the fan-out; a step of a settled or paused job not at all.
        return step_retryable(self.step)

    @cached_property
    def wait(self) -> Wait | None:
        """What the step waits for, when it is waiting (read once per row: a keyed call's costs a
        query)."""
        return wait_of(self.step)

    @property
    def wait_text(self) -> str:
        """A wait step's kind and what it waits for ("approval: finance"); "" for a call."""
        return wait_kind_text(self.step.definition)

    @property
    def wait_kind(self) -> str:
        """The kind of a wait step ("signal", "approval", "timer"); "" for a call."""
        return str(self.step.definition.kind) if self.step.definition.waits else ""

    @property
    def can_resolve(self) -> bool:
        return step_resolvable(self.step)

    @cached_property
    def job_actions(self) -> frozenset[str]:
        """What the services accept now on the step's job (pause, compensate, cancel...)."""
        return job_actions(self.step.job)


@dataclass(frozen=True)
class AttentionFilters:
    workflow: str = ""
    step: str = ""
    pool: str = ""
    older_than_minutes: int | None = None

    @property
    def active(self) -> bool:
        return bool(self.workflow or self.step or self.pool or self.older_than_minutes)


@dataclass(frozen=True)
class AttentionItem(StepActions):
    step: Step
    #: Why it is on the list, in words.
    why: str
    #: The step's last event: what last happened to it, and who or what did it.
    last_event: Event | None
    age: dt.timedelta
    #: Other pools of the same kind, for "retry on another pool".
    other_pools: list[str]

    @property
    def age_text(self) -> str:
        """Minutes at most: the list re-renders once a minute when nothing else changes."""
        minutes = max(int(self.age.total_seconds()), 0) // 60
        if minutes < 1:
            return "< 1m"
        if minutes < 60:
            return f"{minutes}m"
        if minutes < 1440:
            return f"{minutes // 60}h {minutes % 60:02d}m"
        return f"{minutes // 1440}d {minutes % 1440 // 60:02d}h"

    @property
    def is_compensation(self) -> bool:
        return self.step.kind == StepKind.COMPENSATION

    @property
    def short_job(self) -> str:
        return str(self.step.job_id)[:8]

    @property
    def error_not_in_event(self) -> bool:
        """The step's error, when its last event does not already say it."""
        return bool(self.step.error) and (
            self.last_event is None or self.step.error != self.last_event.reason
        )


@dataclass(frozen=True)
class AttentionList:
    now: dt.datetime
    items: list[AttentionItem]
    total: int
    filters: AttentionFilters
    workflows: list[str]
    pools: list[str]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.items)

    @property
    def signature(self) -> str:
        """Changes whenever what the list shows changes (and at least once a minute, for the
        ages): a poll that brings the same signature back needs no new rendering."""
        return signature(
            self.total,
            self.pools,
            self.now.replace(second=0, microsecond=0),
            [
                (
                    i.step.pk,
                    i.step.status,
                    i.step.attempt,
                    i.step.updated_at,
                    i.last_event.pk if i.last_event else None,
                    i.step.job.status,
                    i.step.job.paused_at,
                )
                for i in self.items
            ],
        )


def _attention_queryset(now: dt.datetime, filters: AttentionFilters) -> QuerySet[Step]:
    query = Step.objects.filter(status__in=ATTENTION_STATUSES).filter(attention_condition(now))
    if not filters.workflow and not filters.pool:
        # The canary's step is the service's own (its alert says when it is stuck), and a retry
        # by hand would hide what it measures: listed only when asked for by name.
        query = query.exclude(pool__name=CANARY_POOL)
    if filters.workflow:
        query = query.filter(job__workflow__name=filters.workflow)
    if filters.step:
        query = query.filter(name=filters.step)
    if filters.pool:
        query = query.filter(pool__name=filters.pool)
    if filters.older_than_minutes:
        query = query.filter(updated_at__lte=now - dt.timedelta(minutes=filters.older_than_minutes))
    return query


def _why(step: Step, now: dt.datetime) -> str:
    wait = wait_of(step)
    if wait is not None:
        until = wait.until_text
        if wait.for_person:
            return f"waiting for {wait.what}: {until}"
        return f"{wait.what} not received yet: {until}"
    if step.kind == StepKind.COMPENSATION and step.status != S.HELD and step.attempt > 1:
        return f"compensation failing: attempt {step.attempt} is {step.get_status_display().lower()}"
    if step.status == S.DISPATCHED:
        if step.deadline is None:
            return "dispatched with no deadline"
        return f"overdue: no outcome by its deadline, {step.deadline:%H:%M:%S} UTC"
    if step.status == S.UNKNOWN:
        return "outcome unknown: it may or may not have happened"
    if step.status == S.ATTEMPT_FAILED:
        return f"attempt {step.attempt} failed ({step.last_outcome or 'no outcome'}): awaiting a decision"
    if step.status == S.HELD:
        what = "compensation held" if step.kind == StepKind.COMPENSATION else "held"
        return f"{what} for an operator"
    return step.get_status_display()


def _attention_items(now: dt.datetime, steps: list[Step], pools: list[AgentPool]) -> list[AttentionItem]:
    events = Event.objects.select_related("actor").in_bulk(
        [s.last_event_id for s in steps if s.last_event_id]  # type: ignore[attr-defined]
    )
    by_kind: dict[str, list[str]] = defaultdict(list)
    for pool in pools:
        by_kind[pool.kind].append(pool.name)
    return [
        AttentionItem(
            step=s,
            why=_why(s, now),
            last_event=events.get(s.last_event_id),  # type: ignore[attr-defined]
            age=now - s.updated_at,
            other_pools=[p for p in by_kind[s.pool.kind] if p != s.pool.name] if s.pool is not None else [],
        )
        for s in steps
    ]


def _with_last_event(query: QuerySet[Step]) -> QuerySet[Step]:
    last = Event.objects.filter(step_id=OuterRef("pk")).order_by("-id").values("id")[:1]
    return query.select_related("job__workflow", "definition", "pool", "endpoint").annotate(
        last_event_id=Subquery(last)
    )


def needs_attention(
    filters: AttentionFilters | None = None, *, now: dt.datetime | None = None, limit: int = ATTENTION_ROWS
) -> AttentionList:
    """The steps an operator may need to act on, oldest first (in their current state longest),
    with why each is there. Six queries whatever the number of rows."""
    now = now or db_now()
    filters = filters or AttentionFilters()
    query = _attention_queryset(now, filters)
    total = query.count()
    steps = list(_with_last_event(query).order_by("updated_at", "id")[:limit])
    pools = list(AgentPool.objects.order_by("name"))
    workflows = list(Workflow.objects.order_by("name").values_list("name", flat=True).distinct())
    return AttentionList(
        now=now,
        items=_attention_items(now, steps, pools),
        total=total,
        filters=filters,
        workflows=workflows,
        pools=[p.name for p in pools],
    )


def attention_item(step_id: int, *, now: dt.datetime | None = None) -> AttentionItem | None:
    """One row of the list, or None when the step no longer needs attention."""
    now = now or db_now()
    step = _with_last_event(_attention_queryset(now, AttentionFilters()).filter(pk=step_id)).first()
    if step is None:
        return None
    pools = list(AgentPool.objects.filter(kind=step.pool.kind)) if step.pool is not None else []
    return _attention_items(now, [step], pools)[0]


def attention_step_ids(filters: AttentionFilters, *, now: dt.datetime | None = None) -> list[int]:
    """The ids of every step matching the filters, oldest first, up to one bulk action's limit."""
    now = now or db_now()
    query = _attention_queryset(now, filters).order_by("updated_at", "id")
    return list(query.values_list("pk", flat=True)[:BULK_LIMIT])


def step_job_id(step_id: int) -> Any:
    """The job a step belongs to, or None."""
    return Step.objects.filter(pk=step_id).values_list("job_id", flat=True).first()


def step_job_and_name(step_id: int) -> tuple[Any, str] | None:
    """The job a step belongs to and the step's name (how the scheduler's services name a step),
    or None."""
    return Step.objects.filter(pk=step_id).values_list("job_id", "name").first()
