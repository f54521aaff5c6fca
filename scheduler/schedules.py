"""Schedules: submit a job of a workflow at one instant (`run_at`) or at every time of a cron
expression in a time zone (cronsim, which evaluates expressions as Debian's cron does, daylight
saving included).

Every supervisor loop fires what is due (`schedules_fire`). A due schedule is taken with
`FOR UPDATE SKIP LOCKED`, its job submitted and its next firing written in that one transaction,
so a firing submits exactly once: two clusters firing the same minute make one job (and the job's
idempotency key, `schedule:<id>:<fire time>`, says which firing made it). After downtime, the
firings missed meanwhile make one job for the latest of them (`catch_up` = once) or none
(`skip`; the next firing is on time). A paused schedule does not fire; resumed, it goes on from
its next firing after now.

A firing submits as the schedule's owner, outside the API's request rates: a user owns at most
SAS_SCHEDULES_PER_USER schedules, and the schedule of a deactivated owner does not submit (its
`last_error` says why; it goes on to its next firing, and submits again once the owner is active).

A firing that raises (not a refusal: an error on the service's side of the job, a value the
database refuses) never stops the others: it is quarantined (its `last_error` says why, the
`quarantined` alert tells), the schedule goes on to its next firing, and after
its `pause_after_failures` (default SAS_SCHEDULE_MAX_FAILURES) firings in a row that raised it
pauses itself. So it does when as many jobs it started in a row ended failed or compensated (read
when a firing would replace its last job: a job is counted once, `counted_job_id`).

While the job of its previous firing (`last_job`) is live, a firing does what the schedule's
`overlap` says (`overlap_decide`): start anyway (`allow_all`, the default, as before overlap
policies existed), start nothing (`skip`), wait in the buffer (`buffer_one`, `buffer_all`: a
`ScheduleFiring` row, started by the loop once the live job settles, `schedules_start_buffered`)
or cancel the live job first (`cancel_other`). A firing starts `jitter_delay` after its fire time
(`next_due_at`); the fire time, and so the job's key, stays the same.
"""

from __future__ import annotations

import datetime as dt
import logging
import zoneinfo
from typing import Any

from cronsim import CronSim, CronSimError
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from sas_project.audit import definition_deleted, definition_logged
from sas_project.conf import sas_settings
from sas_project.editing import fields_known, locked_one
from sas_project.errors import (
    ActionNotAllowed,
    InvalidInput,
    LimitReached,
    SasError,
    StaleWrite,
)
from sas_project.permissions import can_submit
from sas_project.validation import is_count, json_storable, valid_name
from scheduler import contracts
from scheduler.models import (
    JITTER_MAX_SECONDS,
    JOB_LIVE,
    CatchUp,
    EventKind,
    FiringStatus,
    Job,
    JobStatus,
    Overlap,
    QuarantineLoop,
    Schedule,
    ScheduleFiring,
    Workflow,
)
from scheduler.schedule_policies import BUFFER, CANCEL, SKIP, jitter_delay, overlap_decide
from scheduler.services import (
    JOB_FORWARD,
    Submission,
    job_start_compensation,
    job_submit,
    lock_job,
    valid_business_key,
    valid_priority,
)
from scheduler.services.quarantine import Quarantiner, error_text, is_item_fault
from scheduler.services.waits import timers_check_input
from scheduler.unit import unit_of_work

logger = logging.getLogger("scheduler.schedules")

SOURCE = "schedule"
#: What a schedule holds besides its name.
SCHEDULE_FIELDS = (
    "workflow",
    "input",
    "business_key",
    "priority",
    "run_at",
    "cron",
    "timezone",
    "catch_up",
    "overlap",
    "jitter_seconds",
    "pause_after_failures",
)
#: The most failures in a row a schedule may wait for before it pauses itself.
PAUSE_AFTER_MAX = 1000
#: A firing later than this is "missed" (for catch_up = skip): downtime, not a slow loop.
LATE_GRACE = dt.timedelta(seconds=60)
#: Due schedules fired per loop turn.
BATCH = 50


def next_fire(schedule: Schedule, after: dt.datetime) -> dt.datetime | None:
    """The first firing strictly after `after`, or None (a one-off that is past)."""
    if schedule.cron:
        zone = zoneinfo.ZoneInfo(schedule.timezone)
        # cronsim steps from the start it is given; a minute boundary keeps `after` itself out.
        start = after.astimezone(zone).replace(second=0, microsecond=0)
        for when in CronSim(schedule.cron, start):
            if when > after:
                return when.astimezone(dt.UTC)
        return None
    if schedule.run_at is not None and schedule.run_at > after:
        return schedule.run_at
    return None


def plan_next(schedule: Schedule, *, after: dt.datetime) -> None:
    """Set the schedule's next fire time after `after` and when that firing starts."""
    schedule.next_fire_at = next_fire(schedule, after)
    schedule.next_due_at = (
        schedule.next_fire_at + jitter_delay(schedule, fire_at=schedule.next_fire_at)
        if schedule.next_fire_at
        else None
    )


def fire_key(schedule: Schedule, *, fire_at: dt.datetime) -> str:
    """The idempotency key of the job of the firing at `fire_at`: one job per fire time."""
    return f"schedule:{schedule.pk}:{fire_at.isoformat()}"


def failure_limit(schedule: Schedule) -> int:
    return schedule.pause_after_failures or sas_settings.schedule_max_failures


def latest_fire(schedule: Schedule, upto: dt.datetime) -> dt.datetime | None:
    """The last firing at or before `upto` (cron schedules)."""
    zone = zoneinfo.ZoneInfo(schedule.timezone)
    start = upto.astimezone(zone) + dt.timedelta(microseconds=1)
    for when in CronSim(schedule.cron, start, reverse=True):
        return when.astimezone(dt.UTC)
    return None


def schedule_validate(values: dict[str, Any]) -> dict[str, Any]:
    """The values, cleaned; InvalidInput names the field at fault."""
    clean = dict(values)
    workflow = clean.get("workflow")
    if not isinstance(workflow, str) or not Workflow.objects.filter(name=workflow).exists():
        raise InvalidInput(f"unknown workflow {workflow!r}", field="workflow")
    payload = clean.get("input") if clean.get("input") is not None else {}
    if not isinstance(payload, dict):
        raise InvalidInput("input must be a JSON object", field="input")
    json_storable(payload, "input")
    # Each firing submits the latest version: its contract, as it stands now.
    version = Workflow.objects.filter(name=workflow).order_by("-version").first()
    assert version is not None  # it exists: checked above
    contracts.input_check(version.input_schema, payload)
    # A time a timer would read from the input must be readable (or every firing is refused).
    timers_check_input(list(version.steps.all()), payload=payload)
    clean["input"] = payload
    # The jobs' own rules: a firing must not be refused for what the schedule accepted.
    clean["business_key"] = valid_business_key(clean.get("business_key") or "")
    clean["priority"] = valid_priority(clean.get("priority") or 0)
    zone_name = clean.get("timezone") or "UTC"
    try:
        zoneinfo.ZoneInfo(str(zone_name))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidInput(f"unknown time zone {zone_name!r}", field="timezone") from exc
    clean["timezone"] = zone_name
    cron = (clean.get("cron") or "").strip()
    run_at = clean.get("run_at")
    if bool(cron) == (run_at is not None):
        raise InvalidInput(
            "a schedule has either run_at or cron, not both", field="cron" if cron else "run_at"
        )
    if cron:
        if len(cron) > 100:
            raise InvalidInput("cron is at most 100 characters", field="cron")
        try:
            next(iter(CronSim(cron, timezone.now().astimezone(zoneinfo.ZoneInfo(zone_name)))))
        except (CronSimError, StopIteration) as exc:
            raise InvalidInput(
                f"cron {cron!r} is not a cron expression that ever fires: {exc}", field="cron"
            ) from exc
    if run_at is not None and not isinstance(run_at, dt.datetime):
        raise InvalidInput("run_at must be an instant (ISO 8601)", field="run_at")
    if isinstance(run_at, dt.datetime) and timezone.is_naive(run_at):
        run_at = timezone.make_aware(run_at, dt.UTC)  # an instant without an offset is UTC
        clean["run_at"] = run_at
    clean["cron"] = cron
    catch_up = clean.get("catch_up") or CatchUp.ONCE
    if catch_up not in CatchUp.values:
        raise InvalidInput(f"catch_up must be one of {', '.join(CatchUp.values)}", field="catch_up")
    clean["catch_up"] = catch_up
    overlap = clean.get("overlap") or Overlap.ALLOW_ALL
    if overlap not in Overlap.values:
        raise InvalidInput(f"overlap must be one of {', '.join(Overlap.values)}", field="overlap")
    clean["overlap"] = overlap
    clean["jitter_seconds"] = _bounded(
        clean.get("jitter_seconds") or 0, "jitter_seconds", 0, JITTER_MAX_SECONDS
    )
    pause_after = clean.get("pause_after_failures")
    if pause_after is not None:
        pause_after = _bounded(pause_after, "pause_after_failures", 1, PAUSE_AFTER_MAX)
    clean["pause_after_failures"] = pause_after
    return clean


def _bounded(value: Any, field: str, low: int, high: int) -> int:
    if not is_count(value, low, high):
        raise InvalidInput(f"{field} must be a whole number from {low} to {high}", field=field)
    return value


def _settings(schedule: Schedule) -> dict[str, Any]:
    values = {name: getattr(schedule, name) for name in SCHEDULE_FIELDS}
    values["run_at"] = schedule.run_at.isoformat() if schedule.run_at else None
    return values


@transaction.atomic
def schedule_create(*, name: str, actor: Any, **fields: Any) -> Schedule:
    valid_name(name, "schedule name", "name")
    fields_known(fields, SCHEDULE_FIELDS, "schedule")
    values = schedule_validate(fields)
    if Schedule.objects.filter(name=name).exists():
        raise InvalidInput(f"a schedule named {name!r} already exists", field="name")
    if not getattr(actor, "is_authenticated", False):
        # Its jobs are submitted as its owner: a schedule of nobody's would fire as nobody.
        raise ActionNotAllowed("a schedule needs an owner: the user whose jobs it submits")
    owner = actor
    _check_schedule_limit(owner)
    schedule = Schedule(name=name, created_by=owner, **values)
    plan_next(schedule, after=timezone.now())
    try:
        with transaction.atomic():
            schedule.save()
    except Exception as exc:  # an IntegrityError: a request with the same name won
        raise StaleWrite(f"schedule {name!r} was created at the same moment; send yours again") from exc
    definition_logged(actor, schedule, created=True)
    return schedule


def _check_schedule_limit(owner: Any) -> None:
    """Refuse a schedule beyond the owner's limit. The owner's row is locked first, so that two
    creations at once cannot both take the last place."""
    limit = sas_settings.schedules_per_user
    if not limit:
        return
    get_user_model().objects.select_for_update().filter(pk=owner.pk).values_list("pk").first()
    owned = Schedule.objects.filter(created_by=owner).count()
    if owned >= limit:
        raise LimitReached(
            f"{owner.get_username()} already has {owned} schedules, the most one user may have "
            f"(SAS_SCHEDULES_PER_USER={limit}): delete one first"
        )


@transaction.atomic
def schedule_update(name: str, *, actor: Any, changes: dict[str, Any]) -> Schedule:
    fields_known(changes, SCHEDULE_FIELDS, "schedule")
    schedule = locked_one(Schedule.objects.filter(name=name), f"schedule {name!r} does not exist")
    before = _settings(schedule)
    current = {field: getattr(schedule, field) for field in SCHEDULE_FIELDS}
    merged = {**current, **changes}
    # Switching between run_at and cron: the one not sent is dropped.
    if "cron" in changes and changes["cron"] and "run_at" not in changes:
        merged["run_at"] = None
    if "run_at" in changes and changes["run_at"] is not None and "cron" not in changes:
        merged["cron"] = ""
    values = schedule_validate(merged)
    for field, value in values.items():
        setattr(schedule, field, value)
    diff = {k: [before[k], v] for k, v in _settings(schedule).items() if before[k] != v}
    if diff:
        plan_next(schedule, after=timezone.now())
        schedule.save()
        definition_logged(actor, schedule, created=False, changes=diff)
    return schedule


@transaction.atomic
def schedule_delete(name: str, *, actor: Any) -> None:
    schedule = locked_one(Schedule.objects.filter(name=name), f"schedule {name!r} does not exist")
    definition_deleted(actor, schedule)
    schedule.delete()


@transaction.atomic
def schedule_set_paused(name: str, *, actor: Any, paused: bool) -> Schedule:
    """Pause (no firing) or resume (from the next firing after now, or, with catch_up once, the
    latest firing missed while paused, fired at the next turn of the loop). Resuming counts
    failures afresh: it is what an operator does once the cause is fixed."""
    schedule = locked_one(Schedule.objects.filter(name=name), f"schedule {name!r} does not exist")
    if paused == (schedule.paused_at is not None):
        raise ActionNotAllowed(f"schedule {name!r} is already {'paused' if paused else 'running'}")
    now = timezone.now()
    schedule.paused_at = now if paused else None
    if not paused:
        schedule.failures = schedule.job_failures = 0
    if (
        not paused
        and schedule.catch_up == CatchUp.SKIP
        and schedule.next_fire_at
        and schedule.next_fire_at < now
    ):
        plan_next(schedule, after=now)
    schedule.save(
        update_fields=["paused_at", "next_fire_at", "next_due_at", "failures", "job_failures", "updated_at"]
    )
    definition_logged(actor, schedule, created=False, changes={"paused": [not paused, paused]})
    return schedule


def schedules_fire(now: dt.datetime | None = None) -> int:
    """Fire every schedule that is due; returns how many jobs were submitted. A schedule whose
    firing raises is quarantined (scheduler.services.quarantine): its `last_error` says why, it
    moves on to its next firing and, after SAS_SCHEDULE_MAX_FAILURES in a row, pauses itself; the
    schedules after it fire in the same pass."""
    quarantine = Quarantiner(QuarantineLoop.SCHEDULES, source=SOURCE)
    # Buffered firings first: they are older than any firing due now.
    submitted = schedules_start_buffered(now)
    for schedule_id in (
        Schedule.objects.filter(paused_at__isnull=True, next_due_at__lte=now or timezone.now())
        .order_by("next_due_at")
        .values_list("pk", flat=True)[:BATCH]
    ):
        try:
            submitted += _fire_one(schedule_id, now, quarantine)
        except Exception as exc:
            if not is_item_fault(exc):
                raise
            _move_on(schedule_id, now, exc, quarantine)
    return submitted


def _failed(schedule: Schedule, moment: dt.datetime, exc: BaseException, quarantine: Quarantiner) -> str:
    """Count a firing that raised: the error said, the schedule paused at the limit of failures
    in a row, the quarantine recorded. Returns the error to keep (the caller saves the row)."""
    schedule.failures += 1
    error = f"could not submit: {error_text(exc)}"
    action = "moved_on"
    if schedule.failures >= failure_limit(schedule):
        schedule.paused_at = moment
        error += f" (paused after {schedule.failures} failures in a row: resume it once fixed)"
        action = "schedule_paused"
    quarantine.other(f"schedule {schedule.name}", exc, action=action)
    return error


def _move_on(schedule_id: int, now: dt.datetime | None, exc: BaseException, quarantine: Quarantiner) -> None:
    """The firing raised outside its submission (its row could not even be written as fired):
    in a transaction of its own, the schedule goes on to its next firing with the error said, or
    pauses when even its next firing cannot be read."""
    with transaction.atomic():
        schedule = (
            Schedule.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(pk=schedule_id, paused_at__isnull=True)
            .first()
        )
        if schedule is None:
            return
        moment = now or timezone.now()
        schedule.last_error = _failed(schedule, moment, exc, quarantine)
        try:
            plan_next(schedule, after=moment)
        except Exception:
            logger.exception("schedule %s: its next firing cannot be read", schedule.name)
            schedule.paused_at = moment
        schedule.save(
            update_fields=["last_error", "failures", "paused_at", "next_fire_at", "next_due_at", "updated_at"]
        )


def owner_unfit(owner: Any) -> str:
    """Why the schedule's owner may not submit its jobs now ('' when they may): checked at every
    firing, as the API checks a submitter at every request."""
    if owner is None:
        return "its owner was deleted (an administrator may give the schedule to another user, or delete it)"
    if not owner.is_active:
        return (
            f"its owner {owner.get_username()} is deactivated (reactivate the owner, or delete the schedule)"
        )
    if not can_submit(owner):
        return (
            f"its owner {owner.get_username()} may no longer submit jobs (give back the submitters' "
            "role, or delete the schedule)"
        )
    return ""


def firing_submit(
    schedule: Schedule, *, fire_at: dt.datetime, actor: Any = None, how: str = "fired"
) -> Submission:
    """Submit the job of the firing at `fire_at` under its fire key (in a savepoint): a fire time
    that already made its job gets that job back (created=False) and nothing new. The job's
    `job_scheduled` event says which firing made it, `how` (fired, started from the buffer,
    backfilled) and, for a backfill, who asked."""
    with transaction.atomic():
        submission = job_submit(
            workflow=schedule.workflow,
            input=schedule.input,
            submitter=schedule.created_by,
            idempotency_key=fire_key(schedule, fire_at=fire_at),
            business_key=schedule.business_key,
            priority=schedule.priority,
        )
        if submission.created:
            with unit_of_work() as unit:
                unit.event(
                    job_id=submission.job_id,
                    kind=EventKind.JOB_SCHEDULED,
                    source=f"{SOURCE}:{schedule.name}",
                    actor=actor,
                    reason=f"schedule {schedule.name} {how} for {fire_at.isoformat()}",
                    data={"schedule": schedule.name, "fire_at": fire_at.isoformat(), "how": how},
                )
    return submission


def firing_record(
    schedule: Schedule,
    *,
    fire_at: dt.datetime,
    status: str,
    reason: str,
    job_id: Any = None,
    actor: Any = None,
) -> ScheduleFiring:
    """Write the firing's row (the caller holds the schedule's lock, as every writer of its
    firings does): a new one, or the row of the same fire time moved to `status`."""
    firing, created = ScheduleFiring.objects.get_or_create(
        schedule=schedule,
        fire_at=fire_at,
        defaults={"status": status, "reason": reason, "job_id": job_id, "actor": actor},
    )
    if not created:
        firing.status, firing.reason, firing.job_id, firing.actor = status, reason, job_id, actor
        firing.save(update_fields=["status", "reason", "job", "actor", "updated_at"])
    return firing


def _live_job(schedule: Schedule) -> Job | None:
    """The job of the schedule's previous firing, while it has not settled."""
    if schedule.last_job_id is None:
        return None
    return Job.objects.filter(pk=schedule.last_job_id, status__in=JOB_LIVE).first()


def _jobs_failed_limit(schedule: Schedule) -> str:
    """Count the end of the previous firing's job, once (a success sets the count to zero; a
    cancel leaves it); at the schedule's limit, why it pauses instead of starting another."""
    if schedule.last_job_id is None or schedule.counted_job_id == schedule.last_job_id:
        return ""
    status = Job.objects.filter(pk=schedule.last_job_id).values_list("status", flat=True).first()
    if status in (JobStatus.FAILED, JobStatus.COMPENSATED):
        schedule.job_failures += 1
    elif status == JobStatus.SUCCEEDED:
        schedule.job_failures = 0
    elif status is not None and status in JOB_LIVE:
        return ""  # not ended yet: counted at a later firing
    schedule.counted_job_id = schedule.last_job_id
    if schedule.job_failures < failure_limit(schedule):
        return ""
    return (
        f"paused after {schedule.job_failures} jobs in a row ended failed or compensated (the last: "
        f"job {schedule.last_job_id}, {status}): resume it once fixed"
    )


def _cancel_live(schedule: Schedule, job: Job, fire_at: dt.datetime) -> None:
    """Cancel the live job as an operator's cancel does (its compensation started under the
    job's lock, reason code `cancel`), with the schedule as the source and its owner the actor.
    A job already being stopped is left to finish stopping."""
    with unit_of_work() as unit:
        state = lock_job(unit, job_id=job.pk)
        if state.job.compensation_reason or state.job.status not in (*JOB_FORWARD, JobStatus.WAITING):
            return
        job_start_compensation(
            unit,
            state=state,
            reason_code="cancel",
            source=f"{SOURCE}:{schedule.name}",
            actor=schedule.created_by,
            reason=(
                f"cancelled by schedule {schedule.name}: its firing for {fire_at.isoformat()} starts "
                "a new job (overlap cancel_other)"
            ),
        )


def _lock_active(schedule_id: int) -> Schedule | None:
    """The schedule, locked for this transaction, when it is not paused and no other loop holds
    it (skip locked: that loop is firing it)."""
    return (
        Schedule.objects.select_for_update(skip_locked=True, of=("self",))
        .filter(pk=schedule_id, paused_at__isnull=True)
        .select_related("created_by")
        .first()
    )


def _fire_one(schedule_id: int, now: dt.datetime | None, quarantine: Quarantiner) -> int:
    with transaction.atomic():
        schedule = _lock_active(schedule_id)
        moment = now or timezone.now()
        if (
            schedule is None
            or schedule.next_fire_at is None
            or schedule.next_due_at is None
            or schedule.next_due_at > moment
        ):
            return 0  # another loop took it, or fired it already
        due = schedule.next_fire_at
        fire_at: dt.datetime | None = due
        if schedule.cron and moment - schedule.next_due_at > LATE_GRACE:
            # Fired late: the loop was down. One job for the latest firing missed, or none.
            fire_at = latest_fire(schedule, moment) if schedule.catch_up == CatchUp.ONCE else None
        job_id = None
        error = ""
        unfit = owner_unfit(schedule.created_by)
        if fire_at is not None and unfit:
            # A schedule submits as its owner: an owner who may no longer submit stops it until
            # someone looks (the reason is its last error, and the console shows it paused).
            error = f"not submitted for {fire_at.isoformat()} and paused: {unfit}"
            logger.warning("schedule %s did not submit: %s", schedule.name, error)
            schedule.paused_at = moment
            fire_at = None
        if fire_at is not None:
            fire_at, error = _apply_overlap(schedule, fire_at, moment)
        if fire_at is not None:
            try:
                job_id = firing_submit(schedule, fire_at=fire_at).job_id
                schedule.failures = 0
            except SasError as exc:
                # Refused (an unknown workflow, an input its contract refuses): the schedule's
                # own content, said and not counted as a failure of the service.
                error = exc.message
                logger.warning("schedule %s did not submit: %s", schedule.name, error)
            except Exception as exc:
                if not is_item_fault(exc):
                    raise
                # The submission rolled back to its savepoint; the schedule still moves on.
                error = _failed(schedule, moment, exc, quarantine)
        schedule.last_fired_at = fire_at if job_id else schedule.last_fired_at
        schedule.last_job_id = job_id or schedule.last_job_id
        schedule.last_error = error
        # From the fire time as if it had no jitter, so a delay never skips the next fire time.
        plan_next(schedule, after=max(moment - jitter_delay(schedule, fire_at=due), fire_at or due))
        schedule.save(update_fields=[*_FIRED_FIELDS])
        return 1 if job_id is not None else 0


#: What a firing writes on its schedule.
_FIRED_FIELDS = (
    "last_fired_at",
    "last_job",
    "last_error",
    "failures",
    "job_failures",
    "counted_job_id",
    "paused_at",
    "next_fire_at",
    "next_due_at",
    "updated_at",
)


def _apply_overlap(
    schedule: Schedule, fire_at: dt.datetime, moment: dt.datetime
) -> tuple[dt.datetime | None, str]:
    """Apply the schedule's failures limit and overlap policy to its firing at `fire_at` (the
    caller holds the schedule's lock). Returns the fire time to submit (None: nothing to start
    now) and the error to keep."""
    paused = _jobs_failed_limit(schedule)
    if paused:
        schedule.paused_at = moment
        firing_record(schedule, fire_at=fire_at, status=FiringStatus.SKIPPED, reason=paused)
        logger.warning("schedule %s: %s", schedule.name, paused)
        return None, paused
    live = _live_job(schedule)
    waiting = 0
    if schedule.overlap in (Overlap.BUFFER_ONE, Overlap.BUFFER_ALL):
        waiting = ScheduleFiring.objects.filter(schedule=schedule, status=FiringStatus.WAITING).count()
    verdict = overlap_decide(schedule.overlap, live=live is not None, waiting=waiting)
    busy = [f"job {live.pk} of an earlier firing is still {live.status}"] if live is not None else []
    if waiting:
        busy.append(f"{waiting} earlier firing{'s' if waiting > 1 else ''} already wait in the buffer")
    if verdict == SKIP:
        why = f"skipped (overlap {schedule.overlap}): {'; '.join(busy)}"
        firing_record(schedule, fire_at=fire_at, status=FiringStatus.SKIPPED, reason=why)
        return None, ""
    if verdict == BUFFER:
        why = f"waits (overlap {schedule.overlap}): {'; '.join(busy)}"
        firing_record(schedule, fire_at=fire_at, status=FiringStatus.WAITING, reason=why)
        return None, ""
    if verdict == CANCEL and live is not None:
        _cancel_live(schedule, live, fire_at)
    return fire_at, ""


def schedules_start_buffered(now: dt.datetime | None = None) -> int:
    """Start the oldest buffered firing of each running schedule whose live job has settled, each
    in a transaction of its own under the schedule's lock; returns how many jobs started. A
    firing starts once: its row moves from waiting under that lock, and its job has its fire key."""
    started = 0
    schedule_ids = (
        ScheduleFiring.objects.filter(status=FiringStatus.WAITING, schedule__paused_at__isnull=True)
        .order_by("schedule_id")
        .values_list("schedule_id", flat=True)
        .distinct()[:BATCH]
    )
    for schedule_id in list(schedule_ids):
        started += _start_buffered(schedule_id, now or timezone.now())
    return started


def _start_buffered(schedule_id: int, moment: dt.datetime) -> int:
    with transaction.atomic():
        schedule = _lock_active(schedule_id)
        if schedule is None or _live_job(schedule) is not None or owner_unfit(schedule.created_by):
            return 0  # taken by another loop, still busy, or paused at its next firing
        firing = (
            ScheduleFiring.objects.filter(schedule=schedule, status=FiringStatus.WAITING)
            .order_by("fire_at")
            .first()
        )
        if firing is None:
            return 0
        paused = _jobs_failed_limit(schedule)
        if paused:
            # The firing keeps its place: it starts once the schedule is resumed.
            schedule.paused_at = moment
            schedule.last_error = paused
        else:
            try:
                job_id = firing_submit(schedule, fire_at=firing.fire_at, how="started from the buffer").job_id
            except SasError as exc:
                firing_record(
                    schedule, fire_at=firing.fire_at, status=FiringStatus.SKIPPED, reason=exc.message
                )
                schedule.last_error = exc.message
            else:
                firing_record(
                    schedule,
                    fire_at=firing.fire_at,
                    status=FiringStatus.STARTED,
                    reason=firing.reason,
                    job_id=job_id,
                )
                schedule.last_job_id = job_id
                schedule.last_fired_at = max(schedule.last_fired_at or firing.fire_at, firing.fire_at)
                schedule.last_error = ""
        schedule.save(update_fields=[f for f in _FIRED_FIELDS if not f.startswith("next_")])
        return 0 if paused or schedule.last_error else 1
