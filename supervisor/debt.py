"""Remediation debt: whether the supervisor is remediating, judged from outside it.

A supervisor's own word (its heartbeat, its lease renewals) says it is alive, not that it works:
a holder whose every batch fails, or that selects nothing, renews its lease for ever. The debt is
read from the step rows alone, by any web or cluster process: the remediable steps more than two
scan intervals past the moment they became due with nothing done to them since (a dispatched step
still past its deadline, a retry whose backoff ended, a failed or unknown attempt not decided, a
wait whose time came). A working supervisor keeps it at zero: it acts within one interval.

Every supervisor loop watches it (`debt_watch`). When the oldest debt is older than
SAS_DEBT_TAKEOVER_INTERVALS intervals under the current holder (counted from when it took the
lease, so a new holder gets its own time) and the holder committed no remediation for as long
(`progressed_at`, written in the transaction of each batch that remediated, so a failing batch
does not write it: a holder working through a backlog is not stalled, until its oldest debt is
`PROGRESS_GRACE` times the threshold old), a loop that is not the holder takes the lease over
(`lease_take_over`: a new fencing token; the old holder's next fence fails and it steps down) and
the alert `supervisor_not_remediating` is written once per stalled term. The holder's own loop
seeing the same, two intervals later (time for a peer to act first), writes the alert itself:
with one cluster there is nobody to take over.

Shown in /metrics (`sas_remediation_debt_steps`, `sas_remediation_debt_oldest_seconds`),
/supervisorz, `GET /api/v1/supervisor/` and the console's overview.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Case, Count, DateTimeField, F, Min, Q, When

from sas_project.conf import sas_settings
from scheduler.models import AlertKind, Step, StepKind, StepStatus
from scheduler.unit import db_now
from supervisor.alerts import alert_write
from supervisor.lease import LEASE_NAME, LeaseGrant, lease_take_over
from supervisor.models import SupervisorLease

logger = logging.getLogger("supervisor")

S = StepStatus

#: Steps more than this many intervals past due, untouched, are debt.
DEBT_INTERVALS = 2
#: Intervals the holder waits, beyond the takeover threshold, before alerting of its own debt.
SELF_ALERT_GRACE = 2
#: How many times the threshold a holder that makes progress may leave its oldest debt alone.
PROGRESS_GRACE = 5


@dataclass(frozen=True)
class Debt:
    #: Remediable steps more than two intervals past due with nothing done since.
    steps: int
    #: Seconds since the oldest of them became due (0 with none).
    oldest_seconds: float
    oldest_due: dt.datetime | None

    def as_dict(self) -> dict[str, float | int]:
        return {"steps": self.steps, "oldest_seconds": round(self.oldest_seconds, 3)}


def _due_at() -> Case:
    """When a live step became the supervisor's to act on."""
    return Case(
        When(status__in=[S.DISPATCHED, S.WAITING], then=F("deadline")),
        When(status=S.RETRY_WAIT, then=F("not_before")),
        default=F("updated_at"),
        output_field=DateTimeField(),
    )


def debt_condition(cutoff: dt.datetime) -> Q:
    """The remediable steps due before `cutoff` and untouched since (the scan's own due
    condition, scheduler-side waits included, through the live steps' index)."""
    return (
        Q(status=S.DISPATCHED, deadline__lte=cutoff)
        | (Q(status=S.RETRY_WAIT, not_before__lte=cutoff) & Q(job__paused_at__isnull=True))
        | Q(status__in=[S.ATTEMPT_FAILED, S.UNKNOWN], updated_at__lte=cutoff)
        | Q(status=S.WAITING, deadline__lte=cutoff, pool__isnull=True, kind=StepKind.ACTION)
    )


def remediation_debt(now: dt.datetime | None = None, interval: float | None = None) -> Debt:
    """The remediation debt now (the database's clock unless `now` is given)."""
    now = now or db_now()
    interval = sas_settings.supervisor_interval if interval is None else interval
    cutoff = now - dt.timedelta(seconds=DEBT_INTERVALS * interval)
    row = (
        Step.objects.filter(status__in=[S.DISPATCHED, S.RETRY_WAIT, S.ATTEMPT_FAILED, S.UNKNOWN, S.WAITING])
        .filter(debt_condition(cutoff))
        .aggregate(n=Count("pk"), oldest=Min(_due_at()))
    )
    oldest = row["oldest"]
    return Debt(
        steps=int(row["n"]),
        oldest_seconds=max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0,
        oldest_due=oldest,
    )


def stalled_for(debt: Debt, lease: SupervisorLease | None, now: dt.datetime) -> float:
    """How long the current holder has left the oldest debt alone: from when it became due, or
    from when this holder took the lease, whichever is later (0 with no debt)."""
    if debt.oldest_due is None:
        return 0.0
    since = debt.oldest_due
    if lease is not None and lease.acquired_at is not None and lease.acquired_at > since:
        since = lease.acquired_at
    return max(0.0, (now - since).total_seconds())


def debt_watch(*, holder: str, interval: float | None = None) -> str:
    """One loop's look at the debt: "" when the supervisor remediates; "alerted" when the holder
    left debt alone too long and this loop is the holder itself; "took_over" when this loop took
    the lease from it. The alert is written once per stalled term (its key names the term)."""
    interval = sas_settings.supervisor_interval if interval is None else interval
    threshold = sas_settings.debt_takeover_intervals * interval
    now = db_now()
    debt = remediation_debt(now, interval)
    if not debt.steps:
        return ""
    lease = SupervisorLease.objects.filter(pk=LEASE_NAME).first()
    if lease is None or not lease.holder or lease.expires_at is None or lease.expires_at <= now:
        return ""  # nobody holds the lease: the next scan takes it (and the stale alert watches)
    stalled = stalled_for(debt, lease, now)
    progressing = lease.progressed_at is not None and (now - lease.progressed_at).total_seconds() < threshold
    if progressing and stalled <= PROGRESS_GRACE * threshold:
        # The holder committed remediations lately: it is working through a backlog, oldest
        # first, not stalled (its debt is still shown). Up to a point: a holder whose progress
        # leaves the oldest debt alone for that long (one kind of work failing, a pass that never
        # ends) is replaced all the same.
        return ""
    if lease.holder == holder:
        # The holder saying it of itself waits a little longer: a peer, if there is one, takes
        # over first and its alert names who did.
        threshold += SELF_ALERT_GRACE * interval
    if stalled <= threshold:
        return ""
    payload = {
        "holder": lease.holder,
        "token": lease.token,
        "debt_steps": debt.steps,
        "oldest_seconds": round(debt.oldest_seconds, 3),
        "threshold_seconds": threshold,
        "taken_over_by": None,
    }
    with transaction.atomic():
        grant: LeaseGrant | None = None
        if lease.holder != holder:
            grant = lease_take_over(holder, from_holder=lease.holder, from_token=lease.token)
            if grant is None:
                return ""  # another loop took it over first, or the holder let go
            payload["taken_over_by"] = holder
        alert_write(AlertKind.SUPERVISOR_NOT_REMEDIATING, f"not-remediating-{lease.token}", payload)
    logger.error(
        "supervisor %s: %d steps overdue for up to %.1fs under holder %s%s",
        holder,
        debt.steps,
        debt.oldest_seconds,
        lease.holder,
        ": lease taken over" if grant is not None else "",
        extra={"debt": payload},
    )
    return "took_over" if grant is not None else "alerted"
