"""What a schedule's firing does, decided without the database or the clock: when it starts
(its jitter) and what its overlap policy says while an earlier firing's job is live. Applied by
scheduler.schedules under the schedule's lock."""

from __future__ import annotations

import datetime as dt
import hashlib

from scheduler.models import Overlap, Schedule


def jitter_delay(schedule: Schedule, *, fire_at: dt.datetime) -> dt.timedelta:
    """How long after `fire_at` its firing starts: in [0, jitter_seconds], drawn from a hash of
    the schedule's name and the fire time, so every loop (and every turn of one) agrees on it."""
    if not schedule.jitter_seconds:
        return dt.timedelta(0)
    digest = hashlib.sha256(f"{schedule.name}:{fire_at.isoformat()}".encode()).digest()
    return dt.timedelta(seconds=int.from_bytes(digest[:8], "big") % (schedule.jitter_seconds + 1))


#: What a firing does (overlap_decide).
START, SKIP, BUFFER, CANCEL = "start", "skip", "buffer", "cancel"


def overlap_decide(overlap: str, *, live: bool, waiting: int) -> str:
    """What a firing does under `overlap`, given whether the previous firing's job is live and how
    many firings wait in the buffer: START, SKIP, BUFFER, or CANCEL (the live job, then start).
    With firings buffered, a new one queues behind them even when nothing is live: they go first."""
    if overlap == Overlap.ALLOW_ALL:
        return START
    if overlap in (Overlap.BUFFER_ONE, Overlap.BUFFER_ALL):
        if not live and not waiting:
            return START
        return SKIP if overlap == Overlap.BUFFER_ONE and waiting else BUFFER
    if not live:
        return START
    return SKIP if overlap == Overlap.SKIP else CANCEL
