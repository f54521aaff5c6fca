"""The outbox: messages for receivers outside the service, written in the transaction of what they
tell (scheduler.models.Delivery), sent later by the supervisor loop (supervisor.deliveries).

- A job's completion callback is written when the job settles (scheduler.transitions, and the
  PostgreSQL function that completes jobs), keyed `<job id>:<status>`.
- Alerts are written by the supervisor, which hears of the events it alerts on through
  `register_event_hook`: the unit of work hands every batch of events it writes to the hooks,
  inside its transaction, so an alert commits with its event or not at all (and the scheduler
  imports nothing from the supervisor).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scheduler.models import Delivery, DeliveryKind, Job


@dataclass(frozen=True)
class WrittenEvent:
    """An event as written (with its id), for the hooks."""

    id: int
    kind: str
    job_id: Any
    step_id: int | None
    attempt: int | None
    reason: str
    data: dict[str, Any]


EventHook = Callable[[list[WrittenEvent]], None]
_hooks: list[EventHook] = []


def register_event_hook(hook: EventHook) -> None:
    """Call `hook` with every batch of events a unit of work writes, in its transaction."""
    if hook not in _hooks:
        _hooks.append(hook)


def events_written(events: list[WrittenEvent]) -> None:
    for hook in _hooks:
        hook(events)


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
