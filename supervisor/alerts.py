"""Alerts: tell the subscribed people when something needs one.

Kinds (scheduler.models.AlertKind): a step needs attention (held), a job failed, a job was
compensated (each from its event, whoever wrote it: the database queues those events for
`reactions_handle`, which every supervisor loop runs), an endpoint's circuit opened (when the
scan opens it), and the supervisor stopped (its last scan is older than three intervals; every
cluster's loop checks), and the history archive cannot be written (once per run of failures,
from the lease holder's loop), a loop quarantined an item (once per quarantine), and the lease
holder leaves remediation debt too long (supervisor.debt, once per stalled term), and a signal by
business key expired with no job to take it (once per signal), and a job is at risk of missing
its workflow's SLA (supervisor.sla, once per job, with its flag and event). Each alert is
written once per subscription: its outbox key names what it is about.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.health import endpoint_assess
from agents.models import AgentEndpoint
from scheduler.models import (
    AlertKind,
    AlertSubscription,
    Delivery,
    DeliveryKind,
    EventKind,
    EventReaction,
    Quarantine,
)
from scheduler.outbox import receiver_of
from scheduler.services.correlation import keyed_signals_expire
from scheduler.services.retention import ArchiveUnwritable
from supervisor.lease import LEASE_NAME, scan_age, scan_is_stale
from supervisor.models import SupervisorLease

#: The events that are alerts, and their kind.
EVENT_ALERTS: dict[str, AlertKind] = {
    EventKind.STEP_HELD: AlertKind.STEP_NEEDS_ATTENTION,
    EventKind.JOB_FAILED: AlertKind.JOB_FAILED,
    EventKind.JOB_COMPENSATED: AlertKind.JOB_COMPENSATED,
    EventKind.APPROVAL_REQUESTED: AlertKind.APPROVAL_REQUESTED,
    EventKind.WAIT_REMINDED: AlertKind.APPROVAL_REMINDER,
    EventKind.WAIT_ESCALATED: AlertKind.WAIT_ESCALATED,
}


def _enabled() -> list[AlertSubscription]:
    return list(AlertSubscription.objects.filter(enabled=True))


def _subscriptions(kind: AlertKind, enabled: list[AlertSubscription]) -> list[AlertSubscription]:
    return [s for s in enabled if kind in (s.kinds or [])]


def alert_write(
    kind: AlertKind, about: str, payload: dict[str, Any], *, enabled: list[AlertSubscription] | None = None
) -> int:
    """Write alert `kind` about `about` (what makes it unique) for every subscription that wants
    it: a webhook and/or an email each. Returns how many messages were written. `enabled`: the
    enabled subscriptions, when the caller has read them already."""
    messages: list[Delivery] = []
    body = {"alert": kind.value, **payload}
    for subscription in _subscriptions(kind, _enabled() if enabled is None else enabled):
        channels = (
            (DeliveryKind.WEBHOOK, subscription.webhook_url),
            (DeliveryKind.EMAIL, subscription.email),
        )
        messages += [
            Delivery(
                kind=channel,
                key=f"alert:{about}:{subscription.pk}:{channel.value}",
                target=target,
                receiver=receiver_of(target),  # empty for an email address
                payload=body,
                subscription=subscription,
            )
            for channel, target in channels
            if target
        ]
    if messages:
        Delivery.objects.bulk_create(messages, ignore_conflicts=True)
    return len(messages)


def reactions_handle(limit: int = 500) -> int:
    """Write the alerts of the events queued for reaction (scheduler.models.EventReaction), oldest
    first, and take them off the queue, in one transaction; returns how many were handled. Any
    number of loops may run it at once: each takes rows the others have not locked. The
    subscriptions are read once for the batch (a wave of failures is one read, not one each)."""
    with transaction.atomic():
        batch = list(EventReaction.objects.select_for_update(skip_locked=True).order_by("id")[:limit])
        if not batch:
            return 0
        alerting = [(event, EVENT_ALERTS[event.kind]) for event in batch if event.kind in EVENT_ALERTS]
        enabled = _enabled() if alerting else []
        for event, kind in alerting:
            alert_write(
                kind,
                f"event-{event.event_id}",
                {
                    "job_id": str(event.job_id),
                    "step_id": event.step_id,
                    "attempt": event.attempt,
                    "event": event.kind,
                    "reason": event.reason,
                },
                enabled=enabled,
            )
        EventReaction.objects.filter(pk__in=[event.pk for event in batch]).delete()
    return len(batch)


def keyed_signals_expire_and_alert(limit: int = 500) -> int:
    """Expire the signals by business key kept past their lookback (scheduler.services.
    correlation) and write the `signal_expired` alert of each, once per signal, in one
    transaction: an expiry is never without its alert. Returns how many expired."""
    with transaction.atomic():
        expired = keyed_signals_expire(limit=limit)
        enabled = _enabled() if expired else []
        for keyed in expired:
            alert_write(
                AlertKind.SIGNAL_EXPIRED,
                f"keyed-signal-{keyed.pk}",
                {
                    "keyed_signal": keyed.pk,
                    "business_key": keyed.business_key,
                    "workflow": keyed.workflow,
                    "name": keyed.name,
                    "sender": keyed.sender.get_username() if keyed.sender is not None else None,
                    "sent_at": keyed.created_at.isoformat(),
                    "expired_at": keyed.expired_at.isoformat() if keyed.expired_at else None,
                },
                enabled=enabled,
            )
    return len(expired)


def job_at_risk_alert(
    job_id: Any, payload: dict[str, Any], *, enabled: list[AlertSubscription] | None = None
) -> int:
    """Write the `job_at_risk` alert of a job the scan just flagged (in the transaction of its
    flag and event: supervisor.sweeps.sweep_at_risk), once per job: its key names the job."""
    return alert_write(AlertKind.JOB_AT_RISK, f"job-at-risk-{job_id}", payload, enabled=enabled)


def alert_subscriptions_enabled() -> list[AlertSubscription]:
    """The enabled subscriptions, read once for a batch of alerts (`enabled=` of the writers)."""
    return _enabled()


def quarantines_alert(limit: int = 100) -> int:
    """Write the `quarantined` alert of each quarantine not alerted yet (scheduler.services.
    quarantine), once per row, and mark them; any number of loops may run it at once."""
    with transaction.atomic():
        batch = list(
            Quarantine.objects.filter(alerted_at__isnull=True)
            .select_for_update(skip_locked=True)
            .order_by("id")[:limit]
        )
        if not batch:
            return 0
        enabled = _enabled()
        for row in batch:
            alert_write(
                AlertKind.QUARANTINED,
                f"quarantine-{row.pk}",
                {
                    "loop": row.loop,
                    "job_id": str(row.job_id) if row.job_id else None,
                    "step_id": row.step_id,
                    "subject": row.subject,
                    "action": row.action,
                    "error": row.error,
                },
                enabled=enabled,
            )
        Quarantine.objects.filter(pk__in=[row.pk for row in batch]).update(alerted_at=timezone.now())
    return len(batch)


def endpoint_assess_and_alert(endpoint_id: int, now: dt.datetime) -> bool:
    """agents.health.endpoint_assess, and the circuit-opened alert when it opens the circuit
    (in the scan's transaction). True if it opened now."""
    if not endpoint_assess(endpoint_id, now):
        return False
    endpoint = AgentEndpoint.objects.filter(pk=endpoint_id).values("url", "circuit_open_until").first()
    if endpoint is not None and endpoint["circuit_open_until"] is not None:
        until: dt.datetime = endpoint["circuit_open_until"]
        alert_write(
            AlertKind.CIRCUIT_OPENED,
            f"circuit-{endpoint_id}-{until.isoformat()}",
            {"endpoint_id": endpoint_id, "endpoint": endpoint["url"], "open_until": until.isoformat()},
        )
    return True


def supervisor_stale_check(interval: float) -> bool:
    """Alert when the supervisor's last scan is older than three intervals (once per stall: the
    key names that scan). Returns whether it is stale. Every loop checks, so a stalled holder is
    reported by the others; with no cluster running at all, /readyz and the Prometheus rule on
    sas_supervisor_last_scan_age_seconds say it."""
    lease = SupervisorLease.objects.filter(pk=LEASE_NAME).first()
    if lease is None:
        return False  # no supervisor ever ran: nothing has stopped
    last = lease.last_scan_at or lease.acquired_at
    if last is None or not scan_is_stale(scan_age(last, timezone.now()), interval):
        return False
    alert_write(
        AlertKind.SUPERVISOR_STALE,
        f"supervisor-{last.isoformat()}",
        {
            "holder": lease.holder,
            "last_scan_at": last.isoformat(),
            "lease_expires_at": lease.expires_at.isoformat() if lease.expires_at else None,
        },
    )
    return True


def archive_failed_alert(failure: ArchiveUnwritable) -> int:
    """Alert that the history archive cannot be written: once per run of failures in a row (the
    key names when it began), however often the backed-off retries fail again."""
    return alert_write(
        AlertKind.ARCHIVE_FAILED,
        f"archive-{failure.failing_since.isoformat()}",
        {
            "location": failure.location,
            "error": f"{type(failure.error).__name__}: {failure.error}",
            "failures": failure.failures,
            "retry_at": failure.retry_at.isoformat(),
        },
    )
