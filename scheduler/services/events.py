"""Inbound events (`POST /api/v1/events/`, docs/events.md "Inbound events"): a fact from another
system (`{"type", "id", "source", "data"}`) that starts jobs and continues the jobs waiting for it.

One event, one transaction, in this order:

1. Its row (`InboundEvent`) is written first: the unique (source, id) makes a second post of the
   same event, concurrent or not, wait for the first and answer with the first's answer
   (`duplicate`), doing nothing. The rows are kept SAS_EVENT_RETENTION_HOURS
   (`inbound_events_prune`, a chore of the supervisor loop).
2. The live jobs waiting for an event of its type receive it (`signalled`): each job (the
   sender's own, or any for an operator) with a signal step `{"event": <type>, "match"}` still
   pending or waiting whose `match` (over `{"event", "input"}`) holds for it. Under the job's lock
   the event is stored as a Signal named `event:<type>` whose payload is the event (its
   `signal_received` event with it), and a step already waiting for it takes it at once; one not
   yet reached takes it when it starts waiting (scheduler.services.waits). The step's output is
   the event's `data`.
3. Each trigger of the latest version of every workflow with the event's type starts one job
   (`started`), submitted by the event's sender with an idempotency key derived from the event,
   the workflow and the trigger's index: a trigger whose `when` is false starts none; one whose
   expressions cannot be evaluated, whose input is not an object or whose submission is refused
   is reported (`refused`) and the others go on. Jobs the event starts do not receive it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from dataclasses import dataclass
from typing import Any, cast

from django.db import IntegrityError, transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone
from jmespath.exceptions import JMESPathError

from sas_project.conf import sas_settings
from sas_project.errors import InvalidInput, NotFound, SasError
from sas_project.permissions import events_reach_every_job
from sas_project.validation import json_storable
from scheduler import expressions
from scheduler.event_definitions import event_signal, valid_event_name
from scheduler.models import (
    EventKind,
    EventSource,
    InboundEvent,
    Job,
    Signal,
    Step,
    StepDefinitionKind,
    StepStatus,
    Workflow,
)
from scheduler.services.correlation import LIVE, valid_business_key
from scheduler.services.locking import lock_job
from scheduler.services.saga import job_advance
from scheduler.services.submission import job_submit
from scheduler.services.waits import event_matches, signal_consume
from scheduler.services.wakeups import MAX_SIGNALS_PER_JOB
from scheduler.unit import User, unit_of_work

logger = logging.getLogger("scheduler.events")

S = StepStatus
#: The longest idempotency key a job or a signal may carry.
MAX_KEY = 255


@dataclass(frozen=True)
class EventReceipt:
    """The event's row, and whether this request made it (False: a duplicate of an event
    received before, answered with what that one did)."""

    event: InboundEvent
    created: bool

    @property
    def answer(self) -> dict[str, Any]:
        answer = {
            "event": self.event.pk,
            "started": list(self.event.answer.get("started", [])),
            "signalled": list(self.event.answer.get("signalled", [])),
            "refused": list(self.event.answer.get("refused", [])),
            "duplicate": not self.created,
        }
        if self.event.replay_of_id is not None:
            by = self.event.replayed_by
            answer |= {
                "replay_of": self.event.replay_of_id,
                "replayed_by": by.get_username() if by is not None else "",
                "reason": self.event.replay_reason,
            }
        return answer


def valid_event_id(value: Any) -> str:
    """An event's id: 1-200 printable characters."""
    if not isinstance(value, str) or not 0 < len(value) <= 200 or not value.isprintable():
        raise InvalidInput("id must be 1 to 200 printable characters", field="id")
    return value


def event_receive(
    *, type: Any, id: Any, source: Any, data: Any, sender: User, everyone: bool = False
) -> EventReceipt:
    """Receive an inbound event (see the module's docstring): what it started and signalled, or,
    for a (source, id) received before, what that one did. Raises InvalidInput (400) for a bad
    type, id, source or data; a trigger or a job it cannot serve is reported in the answer."""
    event_type = valid_event_name(type, "type")
    source = valid_event_name(source, "source")
    event_id = valid_event_id(id)
    json_storable(data, "data")
    earlier = _received(source, event_id)
    if earlier is not None:
        return EventReceipt(event=earlier, created=False)
    event = {"type": event_type, "id": event_id, "source": source, "data": data}
    try:
        with transaction.atomic():
            # First, so that a concurrent post of the same event waits here for this one.
            row = InboundEvent.objects.create(
                type=event_type,
                source=source,
                event_id=event_id,
                data=data,
                sender=cast(Any, sender) if sender.is_authenticated else None,
                received_at=timezone.now(),
            )
            _act(row, event, sender=sender, everyone=everyone)
    except IntegrityError:
        # The same event was received at the same moment: its answer is this one's.
        earlier = _received(source, event_id)
        if earlier is None:
            raise
        return EventReceipt(event=earlier, created=False)
    return EventReceipt(event=row, created=True)


def _received(source: str, event_id: str) -> InboundEvent | None:
    """The event received with this source and id (not a replay of it), while it is kept."""
    return InboundEvent.objects.filter(source=source, event_id=event_id, replay_of__isnull=True).first()


def event_replay(event_pk: int, *, actor: User, reason: str) -> EventReceipt:
    """An operator's replay of a received event: the event as it came, acted on again as today's
    definitions and jobs take it, as a new row naming the event (`replay_of`), the operator and
    the reason. Its triggers start new jobs (their idempotency keys name the replay), submitted by
    the event's sender as the first were; the jobs waiting for it now receive it again, each
    `signal_received` naming the operator. Raises NotFound for no such event, InvalidInput for a
    replay of a replay (replay the event itself) or a reason too long."""
    reason = (reason or "").strip()
    if len(reason) > 500:
        raise InvalidInput("reason must be at most 500 characters", field="reason")
    original = InboundEvent.objects.select_related("sender").filter(pk=event_pk).first()
    if original is None:
        raise NotFound(f"no event {event_pk} (events are kept SAS_EVENT_RETENTION_HOURS)")
    if original.replay_of_id is not None:
        raise InvalidInput(
            f"event {event_pk} is a replay of event {original.replay_of_id}: replay that one",
            field="event",
        )
    sender: User = original.sender if original.sender is not None else actor
    # As the first time: a verified provider's event reaches every job; a sender's, those the
    # sender may reach.
    everyone = EventSource.objects.filter(name=original.source, run_as=original.sender_id).exists()
    event = {"type": original.type, "id": original.event_id, "source": original.source, "data": original.data}
    with transaction.atomic():
        row = InboundEvent.objects.create(
            type=original.type,
            source=original.source,
            event_id=original.event_id,
            data=original.data,
            sender=original.sender,
            received_at=timezone.now(),
            replay_of=original,
            replayed_by=cast(Any, actor),
            replay_reason=reason,
        )
        _act(row, event, sender=sender, everyone=everyone, actor=actor, replay=row.pk)
    return EventReceipt(event=row, created=True)


def _act(
    row: InboundEvent,
    event: dict[str, Any],
    *,
    sender: User,
    everyone: bool,
    actor: User | None = None,
    replay: int | None = None,
) -> None:
    """What an event does (the module's docstring, 2 and 3), written on its row as its answer,
    in the caller's transaction. A replay's keys name it, so that it acts again."""
    suffix = f":replay-{replay}" if replay is not None else ""
    signalled = _signal_waiting(event, sender=sender, everyone=everyone, actor=actor, suffix=suffix)
    started, refused = _start(event, sender=sender, suffix=suffix)
    # The jobs say which event started them (set here: a plain workflow's job is made by the
    # SQL fast path, which knows nothing of events).
    Job.objects.filter(pk__in=started, started_by_event__isnull=True).update(started_by_event=row.pk)
    row.answer = {"started": started, "signalled": signalled, "refused": refused}
    row.save(update_fields=["answer"])
    logger.info(
        "event %s %s/%s%s: started %d, signalled %d, refused %d",
        event["type"],
        event["source"],
        event["id"],
        f" (replayed by {actor.get_username()})" if actor is not None and replay is not None else "",
        len(started),
        len(signalled),
        len(refused),
        extra={"event_type": event["type"], "event_source": event["source"], "event_id": event["id"]},
    )


def _key(*parts: str, suffix: str = "") -> str:
    """An idempotency key derived from the event (`event:<source>:<id><suffix>`); when that is
    too long, the event's part is its SHA-256."""
    key = f"event:{':'.join(parts)}{suffix}"
    if len(key) <= MAX_KEY:
        return key
    return f"event:{hashlib.sha256(chr(0).join(parts).encode()).hexdigest()}{suffix}"


# --- the jobs waiting for it -------------------------------------------------------------------------


def _signal_waiting(
    event: dict[str, Any], *, sender: User, everyone: bool, actor: User | None, suffix: str
) -> list[str]:
    """Deliver the event to each live job it matches (ids, oldest job first): every job for an
    operator, an event sender or a verified source (`everyone`), a submitter's own otherwise."""
    name = event_signal(event["type"])
    steps = (
        Step.objects.filter(
            definition__kind=StepDefinitionKind.SIGNAL,
            definition__signal=name,
            status__in=(S.PENDING, S.WAITING),
            job__status__in=LIVE,
            job__compensation_reason="",
        )
        .select_related("definition", "job")
        .order_by("job__created_at", "job_id", "id")
    )
    if not (everyone or events_reach_every_job(sender)):
        steps = steps.filter(job__submitter_id=sender.pk)
    # A first look without locks (read again under each job's lock below).
    candidates = list(dict.fromkeys(s.job_id for s in steps if event_matches(s.job, step=s, event=event)))
    key = _key(event["source"], event["id"], suffix=suffix)
    reached = []
    for job_id in candidates:
        try:
            if _deliver(job_id, event=event, name=name, key=key, sender=sender, actor=actor):
                reached.append(str(job_id))
        except SasError as exc:
            logger.info("event %s: job %s not reached: %s", event["type"], job_id, exc)
    return reached


def _deliver(
    job_id: Any, *, event: dict[str, Any], name: str, key: str, sender: User, actor: User | None
) -> bool:
    """Under the job's lock: store the event for it when a step of its still waits for the event
    and matches it, and let a waiting step take it. Whether the job has it. `actor`: the operator
    replaying it, named by the job's history (else its sender)."""
    with unit_of_work() as unit:
        state = lock_job(unit, job_id=job_id)
        job = state.job
        if job.status not in LIVE or job.compensation_reason:
            return False
        steps = [
            s
            for s in state.actions
            if s.definition.kind == StepDefinitionKind.SIGNAL
            and s.definition.signal == name
            and s.status in (S.PENDING, S.WAITING)
            and event_matches(job, step=s, event=event)
        ]
        if not steps:
            return False
        if Signal.objects.filter(job_id=job.pk, idempotency_key=key).exists():
            return True  # it has this event already (received again after its row was pruned)
        if Signal.objects.filter(job_id=job.pk).count() >= MAX_SIGNALS_PER_JOB:
            logger.warning(
                "event %s: job %s holds %d signals: it takes no more", name, job.pk, MAX_SIGNALS_PER_JOB
            )
            return False
        signal = Signal.objects.create(
            job=job,
            name=name,
            payload=event,
            idempotency_key=key,
            sender=cast(Any, sender) if sender.is_authenticated else None,
            created_at=unit.now,
        )
        by = actor if actor is not None else sender
        source = f"operator:{by.get_username()}" if actor is not None else f"api:{sender.get_username()}"
        replayed = " replayed" if actor is not None else ""
        unit.event(
            job_id=job.pk,
            kind=EventKind.SIGNAL_RECEIVED,
            source=source,
            actor=by,
            reason=f"event {event['type']!r} from {event['source']}{replayed}",
            data={
                "signal_id": signal.pk,
                "name": name,
                "event": {k: event[k] for k in ("type", "id", "source")},
            },
        )
        waiting = next((s for s in steps if s.status == S.WAITING), None)
        if waiting is not None:
            signal_consume(unit, step=waiting, signal=signal, source=source, actor=by)
            job_advance(unit, state=state, source=source, actor=by)
        return True


# --- the jobs it starts ---------------------------------------------------------------------------


def _start(event: dict[str, Any], *, sender: User, suffix: str) -> tuple[list[str], list[dict[str, Any]]]:
    """Each trigger of the event's type of each workflow's latest version starts one job."""
    latest = Workflow.objects.filter(name=OuterRef("name")).order_by("-version").values("pk")[:1]
    workflows = (
        Workflow.objects.filter(triggers__isnull=False, pk=Subquery(latest))
        .order_by("name")
        .values_list("name", "triggers")
    )
    started: list[str] = []
    refused: list[dict[str, Any]] = []
    for workflow, triggers in workflows:
        for index, trigger in enumerate(triggers or []):
            if trigger.get("event") != event["type"]:
                continue
            try:
                job_id = _start_one(
                    event, workflow=workflow, index=index, trigger=trigger, sender=sender, suffix=suffix
                )
            except _Refused as exc:
                refused.append({"workflow": workflow, "trigger": index, "reason": str(exc)})
                logger.info(
                    "event %s: trigger %d of workflow %s refused: %s", event["type"], index, workflow, exc
                )
                continue
            if job_id is not None:
                started.append(job_id)
    return started, refused


class _Refused(Exception):
    """A trigger that cannot start its job (the message says why)."""


def _start_one(
    event: dict[str, Any], *, workflow: str, index: int, trigger: dict[str, Any], sender: User, suffix: str
) -> str | None:
    """The id of the job the trigger started (or had started: the same event again), None when
    its `when` is false. Raises _Refused."""
    data = {"event": event}
    try:
        if trigger.get("when") and not expressions.truthy(
            expressions.evaluate(trigger["when"], data, stored=False)
        ):
            return None
        payload = (
            event["data"] if trigger.get("input") is None else expressions.render(trigger["input"], data)
        )
        business_key = (
            expressions.evaluate(trigger["business_key"], data) if trigger.get("business_key") else None
        )
    except JMESPathError as exc:
        raise _Refused(f"cannot be evaluated: {exc}") from exc
    if not isinstance(payload, dict):
        what = "the event's data" if trigger.get("input") is None else "its input mapping"
        raise _Refused(f"the job's input must be a JSON object: {what} is {type(payload).__name__}")
    if business_key is not None and not isinstance(business_key, str):
        raise _Refused(f"business_key must be a string (use to_string()), not {type(business_key).__name__}")
    try:
        key = valid_business_key(business_key or "")
        with transaction.atomic():
            submission = job_submit(
                workflow=workflow,
                input=payload,
                submitter=sender,
                idempotency_key=_key(event["source"], event["id"], suffix=f"{suffix}:{workflow}:{index}"),
                business_key=key,
            )
    except SasError as exc:
        raise _Refused(exc.message) from exc
    return str(submission.job_id)


# --- retention ------------------------------------------------------------------------------------


def inbound_events_prune(*, now: dt.datetime | None = None) -> int:
    """Forget the events received more than SAS_EVENT_RETENTION_HOURS ago (a chore of the
    supervisor loop's lease holder): the same event posted after that is received again (its
    triggers' jobs and its signals are found again by their idempotency keys). Returns how many."""
    before = (now or timezone.now()) - dt.timedelta(hours=sas_settings.event_retention_hours)
    deleted, _ = InboundEvent.objects.filter(received_at__lt=before).delete()
    return int(deleted)
