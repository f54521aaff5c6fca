"""The schedules page: every schedule with when it fires next and what its last firing did."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.models import Schedule


@dataclass(frozen=True)
class ScheduleRow:
    schedule: Schedule

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
    """Schedules by name, with their last job: one query."""
    query = Schedule.objects.select_related("last_job", "created_by").order_by("name")
    return [ScheduleRow(s) for s in query[:SCHEDULES_SHOWN]]
