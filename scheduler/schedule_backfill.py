"""A schedule's backfill: an operator (or the schedule's owner) fires the fire times of a past
range that made no job, each once.

Each fire time is submitted through the fire key a normal firing uses (scheduler.schedules.
firing_submit), so a fire time that already made its job is answered with that job and starts
nothing, and a second backfill of the same range starts nothing. The whole backfill is one
transaction under the schedule's lock (the loop's firings and buffered starts take the same
lock): a backfill refused, whatever the reason, starts nothing.

A backfill ignores the schedule's overlap policy: it is an explicit request to run those fire
times now, and its jobs start at once. They do not become the schedule's `last_job` (the job the
policy watches is that of its latest regular firing). A paused schedule may be backfilled.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from sas_project.audit import definition_logged
from sas_project.conf import sas_settings
from sas_project.editing import locked_one
from sas_project.errors import ActionNotAllowed, InvalidInput
from scheduler.models import FiringStatus, Job, Schedule
from scheduler.schedules import fire_key, firing_record, firing_submit, next_fire, owner_unfit


@dataclass(frozen=True)
class BackfilledFiring:
    fire_at: dt.datetime
    job_id: Any
    #: True: this backfill started the job; False: the fire time had made it already.
    started: bool


def fire_times(schedule: Schedule, *, start: dt.datetime, end: dt.datetime, most: int) -> list[dt.datetime]:
    """The schedule's fire times in [start, end]; InvalidInput when there are more than `most`."""
    times: list[dt.datetime] = []
    when = next_fire(schedule, start - dt.timedelta(microseconds=1))
    while when is not None and when <= end:
        if len(times) == most:
            raise InvalidInput(
                f"the range holds more than {most} fire times (SAS_SCHEDULE_BACKFILL_MAX): "
                "backfill a shorter range",
                field="end",
            )
        times.append(when)
        if not schedule.cron:
            break
        when = next_fire(schedule, when)
    return times


def _instant(value: Any, field: str) -> dt.datetime:
    if not isinstance(value, dt.datetime):
        raise InvalidInput(f"{field} must be an instant (ISO 8601)", field=field)
    return timezone.make_aware(value, dt.UTC) if timezone.is_naive(value) else value


@transaction.atomic
def schedule_backfill(
    name: str, *, actor: Any, start: Any, end: Any, now: dt.datetime | None = None
) -> list[BackfilledFiring]:
    """Fire each fire time of schedule `name` in [start, end] that made no job, once, as `actor`
    asks (named on each job's `job_scheduled` event, on the firing's row and in the audit log).
    Refused, changing nothing: `end` before `start` or after now (the fire times to come fire on
    their own), more fire times than SAS_SCHEDULE_BACKFILL_MAX, an owner who may not submit, a
    fire time whose job is refused."""
    start, end = _instant(start, "start"), _instant(end, "end")
    if end < start:
        raise InvalidInput("end is before start", field="end")
    moment = now or timezone.now()
    if end > moment:
        raise InvalidInput(
            f"end is after now ({moment.isoformat()}): the fire times to come fire on their own",
            field="end",
        )
    schedule = locked_one(Schedule.objects.filter(name=name), f"schedule {name!r} does not exist")
    times = fire_times(schedule, start=start, end=end, most=sas_settings.schedule_backfill_max)
    unfit = owner_unfit(schedule.created_by)
    if unfit:
        raise ActionNotAllowed(f"schedule {name!r} cannot submit: {unfit}")
    made = dict(
        Job.objects.filter(
            submitter=schedule.created_by, idempotency_key__in=[fire_key(schedule, fire_at=t) for t in times]
        ).values_list("idempotency_key", "pk")
    )
    answer = []
    who = getattr(actor, "get_username", lambda: "")()
    for when in times:
        if fire_key(schedule, fire_at=when) in made:
            answer.append(BackfilledFiring(when, made[fire_key(schedule, fire_at=when)], started=False))
            continue
        submission = firing_submit(schedule, fire_at=when, actor=actor, how="backfilled")
        firing_record(
            schedule,
            fire_at=when,
            status=FiringStatus.STARTED,
            reason=f"backfilled by {who}",
            job_id=submission.job_id,
            actor=actor,
        )
        answer.append(BackfilledFiring(when, submission.job_id, started=submission.created))
    definition_logged(
        actor, schedule, created=False, changes={"backfill": [start.isoformat(), end.isoformat()]}
    )
    return answer
