"""Inbound events and signals by business key as the console shows them (docs/events.md): the
latest events received, what each started, signalled or refused, and the signals by key that
expired without a job to take them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.models import InboundEvent, Job, KeyedSignal

#: Rows each list of the page shows (newest first).
LATEST = 100


@dataclass(frozen=True)
class EventRow:
    event: InboundEvent
    started: list[str]
    signalled: list[str]
    refused: list[dict[str, Any]]


def latest_events(*, limit: int = LATEST) -> list[EventRow]:
    """The events received most recently, with what their answer says they did."""
    rows = InboundEvent.objects.select_related("sender", "replayed_by").order_by("-received_at", "-id")
    rows = rows[:limit]
    return [
        EventRow(
            event=event,
            started=[str(j) for j in (event.answer or {}).get("started", [])],
            signalled=[str(j) for j in (event.answer or {}).get("signalled", [])],
            refused=list((event.answer or {}).get("refused", [])),
        )
        for event in rows
    ]


def keyed_signals(*, limit: int = LATEST) -> list[KeyedSignal]:
    """The signals sent by business key that were kept for a job to come: still waiting, taken,
    or expired, newest first."""
    return list(
        KeyedSignal.objects.filter(buffered=True)
        .select_related("sender")
        .order_by("-created_at", "-id")[:limit]
    )


def event_of(job: Job) -> InboundEvent | None:
    """The inbound event that started `job`, while it is kept (None otherwise)."""
    if job.started_by_event is None:
        return None
    return InboundEvent.objects.select_related("replayed_by").filter(pk=job.started_by_event).first()
