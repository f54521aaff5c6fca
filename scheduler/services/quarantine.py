"""No item stops a loop: what a loop that serves many jobs or users does with the one item whose
handling raises.

Every such loop (the scan's remediation batches and sweeps, the schedules, retention) first tries
its batch as it always has, in one transaction. When the batch raises, the transaction rolls
back and the loop goes through the same items one by one, each in a transaction of its own; an
item that raises again, with a fault of its own (`is_item_fault`), is **quarantined**: in yet
another transaction its step is held for an operator with the error as the reason (an event
names the loop and the error, and the job needs attention), or its job is made to need
attention, and a `Quarantine` row records it. The loop goes on with the rest in the same pass.

A fault of the service's (the database unreachable or restarting, a lock or serialization
conflict, another writer first, the lease lost) is not the item's: it quarantines nothing and
ends the pass as before, to be tried again at the next. So does an exhausted budget: more than
`PASS_BUDGET` quarantines in one pass of one loop look like the service's own fault (a bad
deploy fails every item), and the rest of that pass's failing items are only skipped and logged,
never held.

The loops' queries leave alone an item quarantined less than SAS_QUARANTINE_RETRY_SECONDS ago
and not changed since (`recently_quarantined`), so one poisoned item costs at most one failure
per period, and an operator's retry or resume is taken at the next pass.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.db import InterfaceError, OperationalError
from django.db.models import Exists, OuterRef, Q

from sas_project.conf import sas_settings
from sas_project.errors import StaleWrite
from scheduler.models import EventKind, JobStatus, Quarantine, QuarantineLoop, Step, StepStatus
from scheduler.services.locking import lock_job
from scheduler.services.saga import job_advance
from scheduler.transitions import STEP_TRANSITIONS, attempts_time_out, job_transition, step_transition
from scheduler.unit import Unit, unit_of_work

logger = logging.getLogger("supervisor.quarantine")

S = StepStatus
J = JobStatus

#: Quarantines one loop may make in one pass before it takes the failures for the service's.
PASS_BUDGET = 20

#: The longest error text kept (the exception's type and message).
ERROR_CHARS = 2000


class LoopStopped(Exception):
    """The loop must stop this pass (the lease was lost): not the item's fault."""


def is_item_fault(exc: BaseException) -> bool:
    """Whether `exc`, raised while handling one item, is the item's own (its data, a bug on its
    path: a value the database refuses, a time that cannot be read, a recursion) rather than the
    service's (a connection lost, a lock or serialization conflict, another writer first, the
    lease lost), which must never hold anybody's step."""
    return not isinstance(exc, OperationalError | InterfaceError | StaleWrite | LoopStopped)


def error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    # The text is stored and shown: no NUL, no unpaired surrogate, bounded.
    text = text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    return text[:ERROR_CHARS]


def recently_quarantined(
    loop: QuarantineLoop, *, field: str, now: dt.datetime, by: str = "job_id", touched: str = "updated_at"
) -> Exists:
    """`Exists` of a quarantine by `loop` of the item named by `field` (a job's id, or a step's
    with `by="step_id"`) less than SAS_QUARANTINE_RETRY_SECONDS before `now` and not older than
    the row's last change (`touched`): the loop leaves that item alone, until an operator's
    action (a retry, a resume) changes the row."""
    since = now - dt.timedelta(seconds=sas_settings.quarantine_retry_seconds)
    return Exists(
        Quarantine.objects.filter(
            **{by: OuterRef(field)}, loop=loop, created_at__gt=since, created_at__gte=OuterRef(touched)
        )
    )


def not_quarantined(
    loop: QuarantineLoop,
    *,
    now: dt.datetime,
    field: str = "pk",
    by: str = "job_id",
    touched: str = "updated_at",
) -> Q:
    """A Q for `.filter` that leaves out the items `loop` quarantined lately."""
    return ~Q(recently_quarantined(loop, field=field, now=now, by=by, touched=touched))


class Quarantiner:
    """One pass of one loop: quarantines its failing items, within the pass's budget."""

    def __init__(self, loop: QuarantineLoop, *, source: str) -> None:
        self.loop = loop
        self.source = source
        self.count = 0
        self.skipped = 0

    def _over_budget(self, exc: BaseException, what: str) -> bool:
        if self.count < PASS_BUDGET:
            return False
        self.skipped += 1
        logger.error(
            "%s loop: %s failed (%s); over this pass's quarantine budget, skipped",
            self.loop,
            what,
            error_text(exc),
        )
        return True

    def step(self, step_id: int, exc: BaseException) -> str:
        """Quarantine one step: held for an operator (its job needs attention). Returns what was
        done: `held`, `needs_attention` (the step could not be held: its job was), `skipped`."""
        if self._over_budget(exc, f"step {step_id}"):
            return "skipped"
        self.count += 1
        text = error_text(exc)
        logger.error("%s loop: step %s quarantined: %s", self.loop, step_id, text, exc_info=exc)
        job_id = Step.objects.filter(pk=step_id).values_list("job_id", flat=True).first()
        if job_id is None:
            return "skipped"
        for hold in (True, False):
            try:
                with unit_of_work() as unit:
                    action = _quarantine(
                        unit, job_id, [step_id], loop=self.loop, text=text, source=self.source, hold=hold
                    )
                    _record(unit.now, self.loop, job_id=job_id, step_id=step_id, text=text, action=action)
                    return action
            except Exception:
                logger.exception("%s loop: quarantining step %s failed", self.loop, step_id)
        return self._record_only(job_id=job_id, step_id=step_id, text=text)

    def job(self, job_id: Any, exc: BaseException, *, steps: list[int] | None = None) -> str:
        """Quarantine one job: its `steps` (those the loop was handling) held for an operator, or,
        with none, the job made to need attention."""
        if self._over_budget(exc, f"job {job_id}"):
            return "skipped"
        self.count += 1
        text = error_text(exc)
        logger.error("%s loop: job %s quarantined: %s", self.loop, job_id, text, exc_info=exc)
        for hold in (True, False):
            try:
                with unit_of_work() as unit:
                    action = _quarantine(
                        unit, job_id, steps or [], loop=self.loop, text=text, source=self.source, hold=hold
                    )
                    _record(unit.now, self.loop, job_id=job_id, step_id=None, text=text, action=action)
                    return action
            except Exception:
                logger.exception("%s loop: quarantining job %s failed", self.loop, job_id)
        return self._record_only(job_id=job_id, step_id=None, text=text)

    def other(self, subject: str, exc: BaseException, *, action: str, job_id: Any = None) -> None:
        """Record the quarantine of an item that is not a step (a schedule's firing, a batch of
        history), whose loop did what `action` says with it."""
        if self._over_budget(exc, subject):
            return
        self.count += 1
        text = error_text(exc)
        logger.error("%s loop: %s quarantined (%s): %s", self.loop, subject, action, text, exc_info=exc)
        with unit_of_work() as unit:
            _record(
                unit.now, self.loop, job_id=job_id, step_id=None, text=text, action=action, subject=subject
            )

    def _record_only(self, *, job_id: Any, step_id: int | None, text: str) -> str:
        """Nothing could be held: the row alone, so the loop leaves the item alone for a while."""
        try:
            with unit_of_work() as unit:
                _record(unit.now, self.loop, job_id=job_id, step_id=step_id, text=text, action="skipped")
        except Exception:
            logger.exception("%s loop: recording the quarantine of job %s failed", self.loop, job_id)
        return "skipped"


def _record(
    now: dt.datetime,
    loop: QuarantineLoop,
    *,
    job_id: Any,
    step_id: int | None,
    text: str,
    action: str,
    subject: str = "",
) -> None:
    Quarantine.objects.create(
        loop=loop,
        job_id=job_id,
        step_id=step_id,
        subject=subject[:200],
        error=text,
        action=action,
        created_at=now,
    )


def _quarantine(
    unit: Unit, job_id: Any, step_ids: list[int], *, loop: str, text: str, source: str, hold: bool
) -> str:
    """Under the job's lock: hold these steps (with `hold`) and let the job say it needs
    attention; without `hold`, or with no step that may be held, move the job itself to needs
    attention."""
    state = lock_job(unit, job_id=job_id, also=step_ids[0] if len(step_ids) == 1 else None)
    reason = f"quarantined by the {loop} loop: {text}"
    data = {"quarantine": {"loop": loop, "error": text}}
    holdable = (
        [s for s in state.steps if s.pk in step_ids and S.HELD in STEP_TRANSITIONS[s.status]] if hold else []
    )
    for step in holdable:
        if step.status == S.DISPATCHED:
            attempts_time_out(unit, [step], decided_by=source)
        step_transition(
            unit, step, S.HELD, source=source, reason=reason, data=data, status_reason=reason[:500]
        )
    if holdable:
        job_advance(unit, state=state, source=source)
        return "held"
    job = state.job
    if job.status in (J.RUNNING, J.COMPENSATING):
        job_transition(unit, job, J.NEEDS_ATTENTION, source=source, reason=reason, data=data)
        return "needs_attention"
    if job.status == J.NEEDS_ATTENTION:
        unit.event(job_id=job.pk, kind=EventKind.JOB_NEEDS_ATTENTION, source=source, reason=reason, data=data)
        return "needs_attention"
    return "skipped"
