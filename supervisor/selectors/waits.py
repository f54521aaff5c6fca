"""Waiting steps as the console shows them: what a step waits for (a signal, an approval, a time,
or a free slot of its pool), since when and until when; and which approvals a user may give."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.models import Job, OnTimeout, Step, StepDefinition, StepDefinitionKind, StepStatus
from scheduler.services.capacity import KEY_IN_FLIGHT, key_value, rate_key_value
from scheduler.services.wakeups import may_decide
from scheduler.unit import User
from scheduler.wait_definitions import next_rung, rung_at, timeout_at

K = StepDefinitionKind

#: What a timeout does, in the words of the console.
THEN = {
    OnTimeout.HOLD: "then held for an operator",
    OnTimeout.FAIL: "then the step fails",
    OnTimeout.CONTINUE: "then it continues with the default output",
}


def _hm(moment: dt.datetime) -> str:
    return f"{moment.astimezone(dt.UTC):%H:%M}"


@dataclass(frozen=True)
class Wait:
    """What a waiting step waits for."""

    #: "signal", "approval", "timer" (the step's kind), or "capacity": a call parked until its
    #: pool has a free slot.
    kind: str
    #: The signal's name, the approval's group ("" for the operators), the pool's name.
    name: str
    #: When it began waiting (the step's last change: nothing else writes a waiting step).
    since: dt.datetime
    #: When the wait ends by itself: the timeout of a signal or approval, the timer's time; None
    #: for ever (and for capacity, which has no deadline).
    until: dt.datetime | None
    #: What the timeout does (signal and approval only).
    on_timeout: str = ""
    #: A call held by its key: how many of the key's calls are in flight, and behind which jobs.
    detail: str = ""

    @property
    def for_person(self) -> bool:
        return self.kind == K.APPROVAL

    @property
    def short(self) -> str:
        """A few words, for a DAG node: "signal shipped", "approval: finance", "timer 14:05"."""
        if self.kind == K.SIGNAL:
            return f"signal {self.name}"
        if self.kind == K.APPROVAL:
            return f"approval: {self.name or 'operators'}"
        if self.kind == K.TIMER:
            return f"timer {_hm(self.until)}" if self.until else "timer"
        if self.kind == "concurrency":
            return f"key {self.name}"
        if self.kind == "rate":
            return f"rate of {self.name}"
        if self.kind == "backoff":
            return f"asked to wait till {_hm(self.until)}" if self.until else "asked to wait"
        return f"capacity of {self.name}"

    @property
    def label(self) -> str:
        """The step's status as a pill reads it."""
        labels: dict[str, str] = {
            K.SIGNAL: "Waiting for a signal",
            K.APPROVAL: "Waiting for approval",
            K.TIMER: "Waiting for its time",
            "concurrency": "Waiting for its key",
            "rate": "Waiting for its rate",
            "backoff": "Remote asked to wait",
        }
        return labels.get(self.kind, "Waiting for capacity")

    @property
    def what(self) -> str:
        """What it waits for, as a phrase."""
        if self.kind == K.SIGNAL:
            return f"signal {self.name!r}"
        if self.kind == K.APPROVAL:
            return f"an approval by {self.name or 'an operator'}"
        if self.kind == K.TIMER:
            return "its time"
        if self.kind == "concurrency":
            return f"key {self.name}: {self.detail}" if self.detail else f"key {self.name}"
        if self.kind == "rate":
            return f"the rate of {self.name} ({self.detail})" if self.detail else f"the rate of {self.name}"
        if self.kind == "backoff":
            return f"pool {self.name}, whose every endpoint asked for no calls before then (Retry-After)"
        return f"a free slot of pool {self.name}"

    @property
    def then(self) -> str:
        return THEN.get(OnTimeout(self.on_timeout), "") if self.on_timeout else ""

    @property
    def until_text(self) -> str:
        """When and how the wait ends by itself."""
        if self.kind == K.TIMER:
            return f"fires at {self.until:%H:%M:%S} UTC" if self.until else "fires when its time comes"
        if self.kind == "backoff" and self.until is not None:
            return f"goes out after {self.until:%H:%M:%S} UTC"
        if self.kind == "rate" and self.until is not None:
            return f"its rate has room again at {self.until:%H:%M:%S} UTC"
        if self.kind in ("concurrency", "rate"):
            return "goes out when its turn comes"
        ladder = f"; {self.detail}" if self.detail and self.kind in (K.SIGNAL, K.APPROVAL) else ""
        if self.until is None:
            return ("no timeout" if self.kind != "capacity" else "until a slot frees") + ladder
        then = f", {self.then}" if self.then else ""
        return f"times out at {self.until:%H:%M:%S} UTC{then}{ladder}"


def wait_of(step: Step) -> Wait | None:
    """What `step` waits for, or None when it is not waiting. Reads the step's definition (load
    it with the step) and its pool."""
    if step.status != StepStatus.WAITING:
        return None
    definition = step.definition
    if definition.kind in (K.SIGNAL, K.APPROVAL):
        since = step.waiting_since or step.updated_at
        until = timeout_at(definition, since=since) if step.waiting_since else step.deadline
        name = definition.signal if definition.kind == K.SIGNAL else definition.group
        return Wait(definition.kind, name, since, until, definition.on_timeout, detail=_ladder_text(step))
    if definition.kind == K.TIMER:
        return Wait(K.TIMER, "", step.updated_at, step.deadline)
    pool = step.pool.name if step.pool is not None else ""
    if step.not_before is not None and not step.rate_key:
        return Wait("backoff", pool, step.updated_at, step.not_before)
    if step.concurrency_key:
        return Wait(
            "concurrency", key_value(step.concurrency_key), step.updated_at, None, detail=_key_detail(step)
        )
    if step.rate_key:
        scope = step.rate_key.rsplit(":", 1)[0]
        return Wait("rate", rate_key_value(step.rate_key), step.updated_at, step.not_before, detail=scope)
    return Wait("capacity", pool, step.updated_at, None)


def _ladder_text(step: Step) -> str:
    """Where a waiting signal or approval is on its escalation ladder, in words ("" without one):
    "escalation: 1 of 3 rungs walked (reassigned to finance); next: hold at 14:05 UTC"."""
    rungs = step.definition.escalation or []
    if not rungs or step.waiting_since is None:
        return ""
    walked = f"escalation: {step.escalation_rung} of {len(rungs)} rungs walked"
    if step.escalation_group:
        walked += f" (reassigned to {step.escalation_group})"
    following = next_rung(step.definition, rung=step.escalation_rung)
    at = rung_at(step.definition, since=step.waiting_since, rung=step.escalation_rung)
    if following is None or at is None:
        return walked
    return f"{walked}; next: {following['do']} at {at:%H:%M:%S} UTC"


def _key_detail(step: Step) -> str:
    """How many calls of the step's key are in flight, of how many, and behind which jobs."""
    holders = list(
        Step.objects.filter(KEY_IN_FLIGHT, concurrency_key=step.concurrency_key)
        .exclude(pk=step.pk)
        .exclude(concurrency_key="")
        .order_by("first_dispatched_at", "id")
        .values_list("job_id", flat=True)[:100]
    )
    limit = (step.definition.concurrency or {}).get("limit")
    behind = f", behind job {', '.join(str(h) for h in holders[:3])}" if holders else ""
    more = f" and {len(holders) - 3} more" if len(holders) > 3 else ""
    return f"{len(holders)} of {limit} in flight{behind}{more}"


def wait_kind_text(definition: StepDefinition) -> str:
    """A wait step's kind and what it waits for, whatever its status ("" for a call)."""
    if definition.kind == K.SIGNAL:
        return f"signal {definition.signal}"
    if definition.kind == K.APPROVAL:
        return f"approval: {definition.group or 'operators'}"
    if definition.kind == K.TIMER:
        if definition.until:
            return f"timer until {definition.until}"
        return f"timer {definition.wait_seconds or 0:g}s"
    return ""


def decidable_steps(user: User, steps: Iterable[Step]) -> frozenset[int]:
    """The ids of the steps among `steps` that wait for an approval `user` may give
    (`may_decide`, which the service checks again; an approval a submitter may not give to their
    own job is not offered): a few queries per approval definition."""
    waiting = [s for s in steps if s.status == StepStatus.WAITING and s.definition.kind == K.APPROVAL]
    if not waiting:
        return frozenset()
    submitters = dict(
        Job.objects.filter(pk__in={s.job_id for s in waiting}).values_list("pk", "submitter_id")
    )
    allowed: dict[tuple[int, str, bool], bool] = {}
    ids = set()
    for step in waiting:
        definition = step.definition
        own = submitters.get(step.job_id) == user.pk
        key = (definition.pk, step.escalation_group, own)
        if key not in allowed:
            allowed[key] = may_decide(user, step=step, submitter_id=submitters.get(step.job_id))
        if allowed[key]:
            ids.add(step.pk)
    return frozenset(ids)
