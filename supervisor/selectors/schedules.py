"""The schedules page: every schedule with when it fires next and what its last firing did."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, OuterRef, Q, Subquery

from scheduler.models import JOB_LIVE, FiringStatus, Schedule, ScheduleFiring


@dataclass(frozen=True)
class ScheduleRow:
    schedule: Schedule

    @property
    def buffered(self) -> int:
        """Firings waiting in the buffer for the live job to settle."""
        return int(getattr(self.schedule, "buffered", 0))

    @property
    def live_job(self) -> object | None:
        job = self.schedule.last_job
        return job if job is not None and job.status in JOB_LIVE else None

    @property
    def last_skip(self) -> tuple[object, str] | None:
        """When the last skipped firing was due, and why it was skipped."""
        when = getattr(self.schedule, "last_skip_at", None)
        return (when, getattr(self.schedule, "last_skip_reason", "")) if when else None

    @property
    def when(self) -> str:
        """What the schedule says, in words an operator reads at a glance."""
        s = self.schedule
        if s.cron:
            return f"cron {s.cron} ({s.timezone})"
        return f"once at {s.run_at:%Y-%m-%d %H:%M:%S} UTC" if s.run_at else "once"


#: Schedules listed (a deployment has tens; the list is not paginated).
SCHEDULES_SHOWN = 500


def schedule_rows() -> list[ScheduleRow]:
    """Schedules by name, with their last job, buffered firings and last skip: one query."""
    skips = ScheduleFiring.objects.filter(schedule=OuterRef("pk"), status=FiringStatus.SKIPPED).order_by(
        "-fire_at"
    )
    query = (
        Schedule.objects.select_related("last_job", "created_by")
        .annotate(
            buffered=Count("firings", filter=Q(firings__status=FiringStatus.WAITING)),
            last_skip_at=Subquery(skips.values("fire_at")[:1]),
            last_skip_reason=Subquery(skips.values("reason")[:1]),
        )
        .order_by("name")
    )
    return [ScheduleRow(s) for s in query[:SCHEDULES_SHOWN]]
