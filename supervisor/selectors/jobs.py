"""The job page (steps, attempts, timeline, DAG data) and the job list with its progress."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.db.models import Count, Q, QuerySet

from agents.models import AgentPool
from scheduler.models import (
    CANARY_WORKFLOW,
    JOB_LIVE,
    STEP_SETTLED,
    Attempt,
    Delivery,
    DeliveryStatus,
    Event,
    InboundEvent,
    Job,
    JobStatus,
    Signal,
    Step,
    StepDefinitionKind,
    StepKind,
    StepStatus,
    Workflow,
)
from scheduler.selectors import item_summaries
from scheduler.services.flow import KeyWait, key_wait
from scheduler.services.gates import GateWait, gate_wait
from supervisor.selectors.actions import job_actions
from supervisor.selectors.attention import StepActions
from supervisor.selectors.events import event_of
from supervisor.selectors.overview import signature
from supervisor.services import input_edit_refusal

S = StepStatus
J = JobStatus

#: Events shown on a job page (the most recent ones).
TIMELINE_EVENTS = 500


# --- a job ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepRow(StepActions):
    step: Step
    attempts: list[Attempt]
    compensation: Step | None
    #: Other pools of the step's kind, for "retry on another pool".
    other_pools: list[str] = field(default_factory=list)
    #: A sub-workflow step's child job, once started.
    child: Job | None = None

    @property
    def can_edit_input(self) -> bool:
        """Whether a retry may carry a new input: a held or failed call whose last call had no
        effect (the services decide for real)."""
        return self.can_retry and input_edit_refusal(self.step) is None

    @property
    def input_text(self) -> str:
        """The input the step was called with, to edit."""
        s = self.step
        value = s.input_override if s.input_override is not None else s.job.input
        return json.dumps(value, indent=2, sort_keys=True)


#: The order in which a progress bar draws its steps by status: how they ended first (succeeded,
#: then undone or failed, then never run), then the live ones; pending steps are the empty track.
SEGMENT_ORDER = (
    S.SUCCEEDED,
    S.COMPENSATED,
    S.FAILED,
    S.SKIPPED,
    S.HELD,
    S.UNKNOWN,
    S.ATTEMPT_FAILED,
    S.RETRY_WAIT,
    S.DISPATCHED,
    S.WAITING,
)


@dataclass(frozen=True)
class Segment:
    """A run of a progress bar: the steps of one status, and where it sits on a 0-100 scale."""

    status: str
    label: str
    count: int
    x: float
    width: float


@dataclass(frozen=True)
class Progress:
    done: int
    succeeded: int
    total: int
    #: Action steps by status.
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else 0

    @property
    def segments(self) -> list[Segment]:
        """The bar by status, so that a job whose steps failed or were undone does not read as
        a full green bar."""
        result, x = [], 0.0
        for status in SEGMENT_ORDER:
            count = self.counts.get(status, 0)
            if not count or not self.total:
                continue
            width = round(100 * count / self.total, 2)
            result.append(Segment(str(status), S(status).label.lower(), count, round(x, 2), width))
            x += width
        return result

    @property
    def settled_text(self) -> str:
        """How the settled steps ended ("2 succeeded, 1 compensated, 1 skipped"), or ""."""
        return ", ".join(
            f"{self.counts[s]} {S(s).label.lower()}"
            for s in sorted(STEP_SETTLED, key=SEGMENT_ORDER.index)
            if self.counts.get(s)
        )

    @property
    def ended_badly(self) -> bool:
        """Some step failed or was undone: the bar is not all success."""
        return any(self.counts.get(s) for s in (S.FAILED, S.COMPENSATED))


def _progress(counts: dict[str, int]) -> Progress:
    return Progress(
        done=sum(n for s, n in counts.items() if s in STEP_SETTLED),
        succeeded=counts.get(S.SUCCEEDED, 0),
        total=sum(counts.values()),
        counts=counts,
    )


#: The most of a job's input or result its page renders (pretty-printed characters); the whole
#: document is the API's.
JSON_SHOWN_CHARS = 20_000
#: A document of more lines than this starts collapsed.
JSON_OPEN_LINES = 40


@dataclass(frozen=True)
class JsonShown:
    """A JSON document as the job page shows it: pretty, and cut at JSON_SHOWN_CHARS."""

    text: str
    #: Characters of the whole pretty-printed document.
    chars: int
    truncated: bool

    @property
    def lines(self) -> int:
        return self.text.count("\n") + 1

    @property
    def collapsed(self) -> bool:
        return self.truncated or self.lines > JSON_OPEN_LINES


def json_shown(value: Any) -> JsonShown | None:
    """`value` pretty-printed for a page, at most JSON_SHOWN_CHARS of it; None for no value."""
    if value is None:
        return None
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    if len(text) <= JSON_SHOWN_CHARS:
        return JsonShown(text, len(text), truncated=False)
    return JsonShown(text[:JSON_SHOWN_CHARS], len(text), truncated=True)


@dataclass(frozen=True)
class JobDetail:
    job: Job
    actions: list[StepRow]
    compensations: list[StepRow]
    events: list[Event]
    events_truncated: bool
    progress: Progress
    #: The job's completion callbacks and how their delivery goes (empty without a callback URL).
    callbacks: list[Delivery] = field(default_factory=list)
    #: The jobs that reran this one (newest last).
    reruns: list[Job] = field(default_factory=list)
    #: A job waiting for its concurrency key: the key, its holders, how many wait ahead.
    key_wait: KeyWait | None = None
    #: A job waiting at its debounce or throttle: which, its key, when it starts.
    gate_wait: GateWait | None = None
    #: The inbound event whose trigger started it, while the event is kept.
    started_by: InboundEvent | None = None

    @cached_property
    def input_shown(self) -> JsonShown | None:
        return json_shown(self.job.input)

    @cached_property
    def result_shown(self) -> JsonShown | None:
        return json_shown(self.job.result)

    @property
    def waits(self) -> list[StepRow]:
        """The wait steps waiting now (for a signal, an approval or a time), in step order."""
        return [r for r in self.actions if r.wait is not None and r.wait_kind]

    @cached_property
    def job_actions(self) -> frozenset[str]:
        """The job actions the services accept now (pause, resume, compensate, cancel, rerun)."""
        return job_actions(self.job)

    @property
    def can_rerun(self) -> bool:
        return "rerun" in self.job_actions

    @property
    def live(self) -> bool:
        return (
            self.job.status in JOB_LIVE
            or self.job.status == J.FAILED
            or any(c.status == DeliveryStatus.PENDING for c in self.callbacks)
        )

    @property
    def signature(self) -> str:
        """Every change of a job writes an event in the same transaction, so the newest event
        (with the job's own row) tells whether the page changed."""
        newest = self.events[-1].pk if self.events else None
        callbacks = [(c.pk, c.status, c.tries) for c in self.callbacks]
        return signature(self.job.status, self.job.paused_at, self.job.updated_at, newest, callbacks)


#: Reruns listed on a job's page.
RERUNS_SHOWN = 50


def job_detail(job_id: Any) -> JobDetail | None:
    """A job with its steps, every attempt of every step and its latest events: five queries (six
    with sub-workflow steps: their children)."""
    job = Job.objects.select_related("workflow", "submitter").filter(pk=job_id).first()
    if job is None:
        return None
    # A fan-out's items (and their undoing) have their own pages (job_items), not job rows.
    steps = list(
        Step.objects.filter(job_id=job.pk, item_index__isnull=True)
        .select_related("definition__policy", "pool", "endpoint")
        .order_by("id")
    )
    for s in steps:
        s.job = job  # one job for all: no query per step when a row reads its input
    summaries = item_summaries([s.pk for s in steps if s.has_items])
    for s in steps:
        s.item_summary = summaries.get(s.pk)  # type: ignore[attr-defined]
    attempts: dict[int, list[Attempt]] = defaultdict(list)
    for attempt in (
        Attempt.objects.filter(step__job_id=job.pk, step__item_index__isnull=True)
        .select_related("pool")
        .order_by("step_id", "number")
    ):
        attempts[attempt.step_id].append(attempt)
    recent = list(
        Event.objects.filter(job_id=job.pk)
        .select_related("actor", "step")
        .order_by("-id")[: TIMELINE_EVENTS + 1]
    )
    compensation_of = {s.compensates_id: s for s in steps if s.compensates_id is not None}
    # The children of its sub-workflow steps, by step, the latest try last so that it is the one
    # kept (one query, on job_unique_child's index).
    children = (
        {
            c.parent_step: c
            for c in Job.objects.filter(parent_job_id=job.pk)
            .select_related("workflow")
            .order_by("parent_try")
        }
        if any(s.definition.kind == StepDefinitionKind.WORKFLOW for s in steps)
        else {}
    )
    pools = list(AgentPool.objects.order_by("name").values_list("name", "kind"))
    rows = [
        StepRow(
            s,
            attempts[s.pk],
            compensation_of.get(s.pk),
            [
                name
                for name, kind in pools
                if s.pool is not None and (kind, name) != (s.pool.kind, s.pool.name) and kind == s.pool.kind
            ],
            children.get(s.name) if s.kind == StepKind.ACTION else None,
        )
        for s in steps
    ]
    actions = [r for r in rows if r.step.kind == StepKind.ACTION]
    return JobDetail(
        job=job,
        actions=actions,
        compensations=[r for r in rows if r.step.kind == StepKind.COMPENSATION],
        events=list(reversed(recent[:TIMELINE_EVENTS])),
        events_truncated=len(recent) > TIMELINE_EVENTS,
        progress=_progress(dict(Counter(str(r.step.status) for r in actions))),
        callbacks=job.callbacks if job.callback_url else [],
        reruns=list(Job.objects.filter(rerun_of=job.pk).order_by("created_at", "pk")[:RERUNS_SHOWN]),
        key_wait=key_wait(job),
        gate_wait=gate_wait(job),
        started_by=event_of(job),
    )


#: A fan-out's items on one page of the console.
ITEMS_PER_PAGE = 50


@dataclass(frozen=True)
class ItemsPage:
    job: Job
    step: Step
    #: The items, in list order (of one status, when filtered).
    items: QuerySet[Step]
    summary: dict[str, int]


def job_items(job_id: Any, step_name: str, *, status: str = "") -> ItemsPage | None:
    """A fan-out step of a job and its items (a query set to page through), or None when the job
    or the step does not exist or the step has no items."""
    job = Job.objects.select_related("workflow").filter(pk=job_id).first()
    if job is None:
        return None
    step = (
        Step.objects.filter(job=job, name=step_name, item_index__isnull=True)
        .select_related("definition")
        .first()
    )
    if step is None or not step.has_items:
        return None
    items = Step.objects.filter(parent_id=step.pk, kind=StepKind.ITEM).select_related("compensation")
    if status:
        items = items.filter(status=status)
    summary = item_summaries([step.pk])[step.pk]
    return ItemsPage(job=job, step=step, items=items.order_by("item_index"), summary=summary)


# --- the job list --------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobFilters:
    job_id: Any = None
    #: Matches a job's business key or its idempotency key, exactly.
    key: str = ""
    status: str = ""
    workflow: str = ""
    created_from: dt.datetime | None = None
    created_to: dt.datetime | None = None


def jobs_search(filters: JobFilters) -> QuerySet[Job]:
    """Jobs matching `filters`, newest first (job_created_idx / job_status_created_idx); the
    canary's jobs only when the filters name their workflow or one of them."""
    query = Job.objects.select_related("workflow").order_by("-created_at", "-pk")
    if filters.job_id:
        query = query.filter(pk=filters.job_id)
    if filters.key:
        # Both columns are indexed (job_business_key_idx, the idempotency key's unique index).
        query = query.filter(Q(business_key=filters.key) | Q(idempotency_key=filters.key))
    if filters.status:
        query = query.filter(status=filters.status)
    if filters.workflow:
        query = query.filter(workflow__name=filters.workflow)
    elif not filters.job_id:
        # The canary's jobs, when asked for by name or id only.
        query = query.exclude(workflow__name=CANARY_WORKFLOW)
    if filters.created_from:
        query = query.filter(created_at__gte=filters.created_from)
    if filters.created_to:
        query = query.filter(created_at__lt=filters.created_to)
    return query


def step_progress(job_ids: Iterable[Any]) -> dict[Any, Progress]:
    """Progress of each listed job from its action steps, in one query."""
    counts: dict[Any, dict[str, int]] = defaultdict(dict)
    rows = (
        Step.objects.filter(job_id__in=list(job_ids), kind=StepKind.ACTION)
        .values_list("job_id", "status")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for job_id, status, n in rows:
        counts[job_id][status] = n
    return {job_id: _progress(by_status) for job_id, by_status in counts.items()}


def signal_taker(signal_id: int) -> str | None:
    """The name of the step that took a signal, or None while it is kept."""
    return Signal.objects.filter(pk=signal_id).values_list("consumed_by__name", flat=True).first()


def workflow_names() -> list[str]:
    return list(Workflow.objects.order_by("name").values_list("name", flat=True).distinct())
