"""The supervisor lease: one acting supervisor at a time, fenced by a growing token.

Every scanner calls `lease_acquire` at the start of a scan; only the holder goes on. A holder
that stops renewing is replaced once `expires_at` passes (one lease period); one that renews but
leaves remediation debt is taken over before that (`lease_take_over`, supervisor.debt). The token grows on
every change of holder, and `lease_fence` re-checks (and renews) it inside each remediation
transaction, holding the lease row's lock until that transaction commits: a supervisor that lost
the lease finds out before its next action, and a takeover waits for an action in progress.
All times are the database's clock.

Restated in SQL (keep both in step; the equivalence tests compare them):
`supervisor/sql/postgresql/sas_lease_term.sql`, `supervisor/sql/sqlite/supervisor_lease_term.sql`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Case, F, Q, When
from django.db.models.functions import Now

from sas_project.conf import sas_settings
from supervisor.models import ScanHistogramBucket, SupervisorLease

LEASE_NAME = "supervisor"
#: The supervisor is stale when its last scan is older than this many scan intervals: the one
#: rule of the console's warning, /readyz and the supervisor_stale alert.
STALE_INTERVALS = 3


def scan_age(last_scan_at: dt.datetime | None, now: dt.datetime) -> float | None:
    """Seconds since the last scan, None when none was ever recorded."""
    return None if last_scan_at is None else (now - last_scan_at).total_seconds()


def scan_is_stale(age: float | None, interval: float | None = None) -> bool:
    """Whether a last scan `age` seconds old (None: never) means the supervisor has stopped."""
    interval = sas_settings.supervisor_interval if interval is None else interval
    return age is None or age > STALE_INTERVALS * interval


@dataclass(frozen=True)
class LeaseGrant:
    holder: str
    token: int


def _period() -> dt.timedelta:
    return dt.timedelta(seconds=sas_settings.lease_seconds)


def _ensure_row() -> None:
    if not SupervisorLease.objects.filter(pk=LEASE_NAME).exists():
        try:
            with transaction.atomic():
                SupervisorLease.objects.create(name=LEASE_NAME)
        except IntegrityError:
            pass  # another scanner created it first


def lease_acquire(holder: str) -> LeaseGrant | None:
    """Take the lease if it is free or expired, or renew it if `holder` has it."""
    _ensure_row()
    changed = (
        SupervisorLease.objects.filter(pk=LEASE_NAME)
        .filter(Q(holder=holder) | Q(holder="") | Q(expires_at__isnull=True) | Q(expires_at__lte=Now()))
        .update(
            token=Case(When(holder=holder, then=F("token")), default=F("token") + 1),
            handovers=Case(
                When(Q(holder=holder) | Q(holder=""), then=F("handovers")),
                default=F("handovers") + 1,
            ),
            acquired_at=Case(When(holder=holder, then=F("acquired_at")), default=Now()),
            holder=holder,
            expires_at=Now() + _period(),
        )
    )
    if not changed:
        return None
    token = (
        SupervisorLease.objects.filter(pk=LEASE_NAME, holder=holder).values_list("token", flat=True).first()
    )
    return None if token is None else LeaseGrant(holder=holder, token=token)


def lease_take_over(holder: str, *, from_holder: str, from_token: int) -> LeaseGrant | None:
    """Take the lease from a holder that renews it but does not remediate (supervisor.debt):
    only while `from_holder` still holds it with `from_token`, so two loops deciding at once make
    one change of holder. The token grows, so the old holder's next fence fails and it steps
    down; an action of its in progress holds the lease row's lock, and this waits for it."""
    changed = SupervisorLease.objects.filter(pk=LEASE_NAME, holder=from_holder, token=from_token).update(
        token=F("token") + 1,
        handovers=F("handovers") + 1,
        acquired_at=Now(),
        holder=holder,
        expires_at=Now() + _period(),
    )
    return LeaseGrant(holder=holder, token=from_token + 1) if changed else None


def lease_fence(grant: LeaseGrant) -> bool:
    """Inside a transaction: True if `grant` still holds the lease (renewing and locking it)."""
    return (
        SupervisorLease.objects.filter(
            pk=LEASE_NAME, holder=grant.holder, token=grant.token, expires_at__gt=Now()
        ).update(expires_at=Now() + _period())
        == 1
    )


def lease_progressed(grant: LeaseGrant) -> None:
    """Inside the transaction of a batch that remediated something: when it commits, the lease
    row says the holder made progress (supervisor.debt). The row is locked by the batch's fence
    already, so this costs one small UPDATE."""
    SupervisorLease.objects.filter(pk=LEASE_NAME, holder=grant.holder, token=grant.token).update(
        progressed_at=Now()
    )


def lease_record_scan(grant: LeaseGrant, figures: dict[str, Any]) -> None:
    """The scan's heartbeat and figures, written only while the grant holds, and its duration
    added to the scans' histogram (every bucket it fits, in one statement)."""
    held = SupervisorLease.objects.filter(pk=LEASE_NAME, holder=grant.holder, token=grant.token).update(
        last_scan_at=Now(), last_scan=figures
    )
    if held:
        seconds = float(figures.get("duration_ms", 0)) / 1000
        fitting = ScanHistogramBucket.objects.filter(Q(bound__isnull=True) | Q(bound__gte=seconds))
        if not fitting.update(count=F("count") + 1, total=F("total") + seconds):
            ScanHistogramBucket.ensure()
            fitting.update(count=F("count") + 1, total=F("total") + seconds)


def lease_release(grant: LeaseGrant) -> None:
    """Give the lease up (on a clean stop) so another supervisor takes over at its next scan."""
    SupervisorLease.objects.filter(pk=LEASE_NAME, holder=grant.holder, token=grant.token).update(
        expires_at=Now()
    )


def lease_current() -> SupervisorLease | None:
    return SupervisorLease.objects.filter(pk=LEASE_NAME).first()
