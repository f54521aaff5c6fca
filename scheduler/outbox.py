"""The outbox: messages for receivers outside the service, written in the transaction of what they
tell (scheduler.models.Delivery), sent later by the supervisor loop (supervisor.deliveries).

- A job's completion callback is written when the job settles (scheduler.transitions, and the
  PostgreSQL function that completes jobs), keyed `<job id>:<status>`.
- Alerts are written by the supervisor from the events it reacts to. Those events reach it
  through the database, not through Python: a trigger on the event table (generated from
  REACTION_KINDS by scheduler.sqlgen) queues each event of these kinds (scheduler.models.
  EventReaction) in the transaction that writes it, whoever writes it, and the supervisor loop
  takes them from there (supervisor.alerts.reactions_handle).

Restated in SQL (keep both in step; the equivalence tests compare them):
`scheduler/sql/postgresql/sas_record_outcome.sql`.
"""

from __future__ import annotations

from typing import Any

from scheduler.models import Delivery, DeliveryKind, EventKind, Job

#: The event kinds something reacts to (the supervisor's alert kinds read these): each is queued
#: for its reader by the database (scheduler/sql/*/..._reactions.sql, generated from this set).
REACTION_KINDS: frozenset[str] = frozenset(
    {EventKind.STEP_HELD, EventKind.JOB_FAILED, EventKind.JOB_COMPENSATED, EventKind.APPROVAL_REQUESTED}
)


def callback_summary(job: Job, status: str) -> dict[str, Any]:
    """What a completion callback carries."""
    return {
        "id": str(job.pk),
        "workflow": job.workflow.name,
        "status": status,
        "result": job.result,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
    }


def callback_write(job: Job, status: str) -> None:
    """The job's completion callback for `status`, once (a second one with the same key is
    dropped: the receiver would see the same message twice)."""
    Delivery.objects.bulk_create(
        [
            Delivery(
                kind=DeliveryKind.CALLBACK,
                key=f"{job.pk}:{status}",
                target=job.callback_url,
                payload=callback_summary(job, status),
                job=job,
                next_try_at=job.finished_at or job.updated_at,
                created_at=job.updated_at,
            )
        ],
        ignore_conflicts=True,
    )
