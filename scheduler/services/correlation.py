"""Correlation by business key: signals addressed to the jobs of a business key rather than to a
job id (`POST /api/v1/signals/`), and a submission that signals its business key's live job or
starts one with the signal (signal-with-start, `POST /api/v1/jobs/` with `signal`).

A signal by key reaches every live job (running, waiting, needing attention; not compensating)
with that business key, of the named workflow when one is named, whose workflow has a signal
step taking the name, and that the sender may signal (submitters their own jobs, operators any):
each gets the signal as `signal_send` gives it (its event; consumed at once by a waiting step, or
kept for the step). When it reaches none it is kept (`KeyedSignal.buffered`) for
SAS_SIGNAL_LOOKBACK_SECONDS: the first job with that key (and workflow) created meanwhile whose
workflow takes the name claims it at its creation (`keyed_signals_claim`, in the transaction
that creates the job: a guarded write, so one job at most) and receives it as a buffered signal;
past the lookback the supervisor expires it (`keyed_signals_expire`).

No race between "is a job live?" and "keep it" or "start one": the request and a job's creation
take one transaction-scoped advisory lock per business key (PostgreSQL; SQLite has one writer),
so a job created while a signal is sent either is seen by it or sees it kept.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any, cast

from django.db import IntegrityError, transaction
from django.db.models import Q

from sas_project import database
from sas_project.conf import sas_settings
from sas_project.errors import IdempotencyConflict, InvalidInput, SasError
from sas_project.permissions import can_operate
from sas_project.validation import json_storable, valid_name
from scheduler.models import (
    EventKind,
    Job,
    JobStatus,
    KeyedSignal,
    Signal,
    StepDefinition,
    StepDefinitionKind,
)
from scheduler.unit import Unit, User, db_now

logger = logging.getLogger("scheduler.correlation")

J = JobStatus
#: The statuses of a job a signal by key reaches: it may still take a signal.
LIVE = (J.RUNNING, J.WAITING, J.NEEDS_ATTENTION)


@dataclass(frozen=True)
class KeyedReceipt:
    """What a signal by key did: the jobs it reached, whether it is kept for a job to come, and
    whether this request made it (False: a replay of its Idempotency-Key)."""

    signal: KeyedSignal
    created: bool

    @property
    def jobs(self) -> list[str]:
        return [str(j) for j in self.signal.reached]

    @property
    def buffered(self) -> bool:
        return self.signal.buffered


def valid_business_key(value: Any) -> str:
    """A job's business key (a schedule's, for the jobs it submits): text of at most 200
    characters that PostgreSQL can store (no NUL)."""
    if not isinstance(value, str) or len(value) > 200 or "\x00" in value:
        raise InvalidInput(
            "business_key must be a string of at most 200 characters, without NUL characters",
            field="business_key",
        )
    return value


def lock_business_key(business_key: str) -> None:
    """Serialize, till the transaction ends, the signals by key and the job creations of one
    business key."""
    database.lock_until_commit(f"sas_business_key:{business_key}")


def _takes(workflow: str, name: str) -> Q:
    """Step definitions of a signal step taking `name` (of workflow `workflow` when given)."""
    found = Q(kind=StepDefinitionKind.SIGNAL, signal=name)
    return found & Q(workflow__name=workflow) if workflow else found


def _hash(business_key: str, workflow: str, name: str, payload: Any) -> str:
    canonical = json.dumps(
        {"business_key": business_key, "workflow": workflow, "name": name, "payload": payload},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def signals_by_key(
    *,
    business_key: Any,
    name: Any,
    payload: Any,
    sender: User,
    workflow: Any = None,
    idempotency_key: str | None = None,
) -> KeyedReceipt:
    """Send signal `name` to the live jobs of `business_key` (see the module's docstring).

    Raises InvalidInput (400) when no workflow (the named one, or any) has a signal step taking
    `name`, IdempotencyConflict (422) when the key was used for another request; the same key
    with the same request answers what it did the first time."""
    business_key = valid_business_key(business_key)
    if not business_key:
        raise InvalidInput("business_key must not be empty", field="business_key")
    name = valid_name(name, "name", "name")
    workflow = valid_name(workflow, "workflow", "workflow") if workflow not in (None, "") else ""
    json_storable(payload, "payload")
    if idempotency_key is not None and not (0 < len(idempotency_key) <= 255):
        raise InvalidInput("Idempotency-Key must be 1 to 255 characters", field="Idempotency-Key")
    if not StepDefinition.objects.filter(_takes(workflow, name)).exists():
        where = f"workflow {workflow!r}" if workflow else "any workflow"
        raise InvalidInput(f"no signal step of {where} takes signal {name!r}", field="name")
    request_hash = _hash(business_key, workflow, name, payload)
    user = sender if sender.is_authenticated else None
    if idempotency_key and user is not None:
        replay = _replay(user, idempotency_key, request_hash)
        if replay is not None:
            return replay
    try:
        with transaction.atomic():
            lock_business_key(business_key)
            now = db_now()
            reached = _deliver(
                business_key=business_key,
                workflow=workflow,
                name=name,
                payload=payload,
                sender=sender,
                idempotency_key=idempotency_key,
            )
            signal = KeyedSignal.objects.create(
                business_key=business_key,
                workflow=workflow,
                name=name,
                payload=payload,
                sender=cast(Any, user),
                idempotency_key=idempotency_key if user is not None else None,
                request_hash=request_hash,
                reached=[str(j) for j in reached],
                buffered=not reached,
                created_at=now,
                expires_at=None
                if reached
                else now + dt.timedelta(seconds=sas_settings.signal_lookback_seconds),
            )
    except IntegrityError:
        # A concurrent request with the same key won: answer with its signal.
        if not idempotency_key or user is None:
            raise
        replay = _replay(user, idempotency_key, request_hash)
        if replay is None:
            raise
        return replay
    return KeyedReceipt(signal=signal, created=True)


def _replay(user: User, key: str, request_hash: str) -> KeyedReceipt | None:
    existing = KeyedSignal.objects.filter(sender_id=user.pk, idempotency_key=key).first()
    if existing is None:
        return None
    if existing.request_hash != request_hash:
        raise IdempotencyConflict(f"Idempotency-Key {key!r} was already used for a different signal")
    return KeyedReceipt(signal=existing, created=False)


def live_jobs(*, business_key: str, workflow: str, name: str, user: User) -> list[Any]:
    """The ids of the live jobs of `business_key` (and `workflow`) whose workflow takes signal
    `name` and that `user` may signal, oldest first."""
    takes = StepDefinition.objects.filter(_takes(workflow, name)).values("workflow_id")
    jobs = Job.objects.filter(business_key=business_key, status__in=LIVE, compensation_reason="").filter(
        workflow_id__in=takes
    )
    if not can_operate(user):
        jobs = jobs.filter(submitter_id=user.pk)
    return list(jobs.order_by("created_at", "id").values_list("pk", flat=True))


def _deliver(
    *, business_key: str, workflow: str, name: str, payload: Any, sender: User, idempotency_key: str | None
) -> list[Any]:
    """Send the signal to each live job of the key: the ids of those that took it."""
    from scheduler.services.wakeups import signal_send

    reached = []
    for job_id in live_jobs(business_key=business_key, workflow=workflow, name=name, user=sender):
        try:
            with transaction.atomic():
                signal_send(
                    job_id=job_id,
                    name=name,
                    payload=payload,
                    sender=sender,
                    idempotency_key=f"by-key:{idempotency_key}" if idempotency_key else None,
                )
        except SasError as exc:
            # A job that stopped taking signals meanwhile (or holds too many): the others go on.
            logger.info("signal %r by key %s: job %s not reached: %s", name, business_key, job_id, exc)
            continue
        reached.append(job_id)
    return reached


def keyed_signals_claim(unit: Unit, *, job: Job, definitions: list[StepDefinition], source: str) -> int:
    """At a job's creation (in its transaction): the signals by key kept for its business key
    that its workflow takes become its own buffered signals, oldest first, each claimed by a
    guarded write (one job at most). Returns how many."""
    if not job.business_key:
        return 0
    names = {d.signal for d in definitions if d.kind == StepDefinitionKind.SIGNAL}
    if not names:
        return 0
    lock_business_key(job.business_key)
    waiting = (
        KeyedSignal.objects.filter(
            business_key=job.business_key,
            name__in=names,
            buffered=True,
            consumed_at__isnull=True,
            expired_at__isnull=True,
            expires_at__gt=unit.now,
        )
        .filter(Q(workflow="") | Q(workflow=job.workflow.name))
        .select_related("sender")
        .order_by("id")
    )
    from scheduler.services.wakeups import may_send

    claimed = 0
    for keyed in waiting:
        if not _may_reach(keyed, job):
            continue
        takers = [d for d in definitions if d.kind == StepDefinitionKind.SIGNAL and d.signal == keyed.name]
        sender = keyed.sender
        if not any(
            not d.sender_group or (sender is not None and may_send(sender, definition=d)) for d in takers
        ):
            continue  # the step takes this signal from its sender group only
        taken = KeyedSignal.objects.filter(pk=keyed.pk, consumed_at__isnull=True).update(
            consumed_job=job, consumed_at=unit.now
        )
        if not taken:
            continue
        signal = Signal.objects.create(
            job=job,
            name=keyed.name,
            payload=keyed.payload,
            sender_id=keyed.sender_id,
            created_at=unit.now,
        )
        unit.event(
            job_id=job.pk,
            kind=EventKind.SIGNAL_RECEIVED,
            source=source,
            reason=f"signal {keyed.name!r}, sent by business key {job.business_key} before the job started",
            data={"signal_id": signal.pk, "name": keyed.name, "keyed_signal": keyed.pk},
        )
        claimed += 1
    return claimed


def _may_reach(keyed: KeyedSignal, job: Job) -> bool:
    """A submitter's signal reaches its own jobs only; an operator's any."""
    sender = keyed.sender
    return sender is None or sender.pk == job.submitter_id or can_operate(sender)


def keyed_signals_expire(*, limit: int = 500) -> list[KeyedSignal]:
    """The supervisor's chore: signals kept past their lookback that no job claimed end expired
    (a guarded write each: one a job claims meanwhile is not expired), logged with what they were,
    in the caller's transaction (which alerts them: supervisor.alerts). Returns those expired."""
    now = db_now()
    due = list(
        KeyedSignal.objects.filter(
            buffered=True, consumed_at__isnull=True, expired_at__isnull=True, expires_at__lte=now
        ).select_related("sender")[:limit]
    )
    expired = []
    for keyed in due:
        if KeyedSignal.objects.filter(pk=keyed.pk, consumed_at__isnull=True, expired_at__isnull=True).update(
            expired_at=now
        ):
            keyed.expired_at = now
            expired.append(keyed)
            logger.info(
                "signal %r by business key %s expired: no job with the key started within the lookback",
                keyed.name,
                keyed.business_key,
                extra={"keyed_signal": keyed.pk, "business_key": keyed.business_key, "signal": keyed.name},
            )
    return expired


def with_start_signalled(
    sender: User, *, signal_key: str, workflow: str, business_key: str, payload: Any
) -> Any:
    """The job a signal-with-start under `signal_key` signalled before (None: none did): its
    signal, sent to a live job of the workflow and key, is the request's answer again. Raises
    IdempotencyConflict when that signal carried another payload."""
    if not signal_key or not sender.is_authenticated:
        return None
    from scheduler.services.wakeups import signal_hash

    sent = (
        Signal.objects.filter(
            idempotency_key=signal_key,
            sender_id=sender.pk,
            job__business_key=business_key,
            job__workflow__name=workflow,
        )
        .order_by("id")
        .first()
    )
    if sent is None:
        return None
    if sent.request_hash != signal_hash(sent.name, payload=payload):
        key = signal_key.removeprefix("with-start:")
        raise IdempotencyConflict(
            f"Idempotency-Key {key!r} was already used for another signal", field="Idempotency-Key"
        )
    return sent.job_id
