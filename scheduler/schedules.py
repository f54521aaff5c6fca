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
SAS_SCHEDULE_MAX_FAILURES firings in a row that raised it pauses itself.
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
from sas_project.validation import json_storable, valid_name
from scheduler import contracts
from scheduler.models import CatchUp, EventKind, QuarantineLoop, Schedule, Workflow
from scheduler.services import job_submit, valid_business_key, valid_priority
from scheduler.services.quarantine import Quarantiner, error_text, is_item_fault
from scheduler.services.waits import timers_check_input
from scheduler.unit import unit_of_work

logger = logging.getLogger("scheduler.schedules")

SOURCE = "schedule"
#: What a schedule holds besides its name.
SCHEDULE_FIELDS = ("workflow", "input", "business_key", "priority", "run_at", "cron", "timezone", "catch_up")
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
    return clean


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
    schedule.next_fire_at = next_fire(schedule, timezone.now())
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
        schedule.next_fire_at = next_fire(schedule, timezone.now())
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
    latest firing missed while paused, fired at the next turn of the loop)."""
    schedule = locked_one(Schedule.objects.filter(name=name), f"schedule {name!r} does not exist")
    if paused == (schedule.paused_at is not None):
        raise ActionNotAllowed(f"schedule {name!r} is already {'paused' if paused else 'running'}")
    now = timezone.now()
    schedule.paused_at = now if paused else None
    if (
        not paused
        and schedule.catch_up == CatchUp.SKIP
        and schedule.next_fire_at
        and schedule.next_fire_at < now
    ):
        schedule.next_fire_at = next_fire(schedule, now)
    schedule.save(update_fields=["paused_at", "next_fire_at", "updated_at"])
    definition_logged(actor, schedule, created=False, changes={"paused": [not paused, paused]})
    return schedule


def schedules_fire(now: dt.datetime | None = None) -> int:
    """Fire every schedule that is due; returns how many jobs were submitted. A schedule whose
    firing raises is quarantined (scheduler.services.quarantine): its `last_error` says why, it
    moves on to its next firing and, after SAS_SCHEDULE_MAX_FAILURES in a row, pauses itself; the
    schedules after it fire in the same pass."""
    submitted = 0
    quarantine = Quarantiner(QuarantineLoop.SCHEDULES, source=SOURCE)
    for schedule_id in (
        Schedule.objects.filter(paused_at__isnull=True, next_fire_at__lte=now or timezone.now())
        .order_by("next_fire_at")
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
    if schedule.failures >= sas_settings.schedule_max_failures:
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
            schedule.next_fire_at = next_fire(schedule, moment)
        except Exception:
            logger.exception("schedule %s: its next firing cannot be read", schedule.name)
            schedule.paused_at = moment
        schedule.save(update_fields=["last_error", "failures", "paused_at", "next_fire_at", "updated_at"])


def _owner_unfit(owner: Any) -> str:
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


def _fire_one(schedule_id: int, now: dt.datetime | None, quarantine: Quarantiner) -> int:
    with transaction.atomic():
        schedule = (
            Schedule.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(pk=schedule_id, paused_at__isnull=True)
            .select_related("created_by")
            .first()
        )
        moment = now or timezone.now()
        if schedule is None or schedule.next_fire_at is None or schedule.next_fire_at > moment:
            return 0  # another loop took it, or fired it already
        due = schedule.next_fire_at
        fire_at: dt.datetime | None = due
        if schedule.cron and moment - due > LATE_GRACE:
            # Fired late: the loop was down. One job for the latest firing missed, or none.
            fire_at = latest_fire(schedule, moment) if schedule.catch_up == CatchUp.ONCE else None
        job_id = None
        error = ""
        unfit = _owner_unfit(schedule.created_by)
        if fire_at is not None and unfit:
            # A schedule submits as its owner: an owner who may no longer submit stops it until
            # someone looks (the reason is its last error, and the console shows it paused).
            error = f"not submitted for {fire_at.isoformat()} and paused: {unfit}"
            logger.warning("schedule %s did not submit: %s", schedule.name, error)
            schedule.paused_at = moment
            fire_at = None
        if fire_at is not None:
            try:
                with transaction.atomic():
                    submission = job_submit(
                        workflow=schedule.workflow,
                        input=schedule.input,
                        submitter=schedule.created_by,
                        idempotency_key=f"schedule:{schedule.pk}:{fire_at.isoformat()}",
                        business_key=schedule.business_key,
                        priority=schedule.priority,
                    )
                    job_id = submission.job_id
                    with unit_of_work() as unit:
                        unit.event(
                            job_id=job_id,
                            kind=EventKind.JOB_SCHEDULED,
                            source=f"{SOURCE}:{schedule.name}",
                            reason=f"schedule {schedule.name} fired for {fire_at.isoformat()}",
                            data={"schedule": schedule.name, "fire_at": fire_at.isoformat()},
                        )
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
        schedule.last_fired_at = fire_at or schedule.last_fired_at
        schedule.last_job_id = job_id or schedule.last_job_id
        schedule.last_error = error
        schedule.next_fire_at = next_fire(schedule, max(moment, fire_at or moment))
        schedule.save(
            update_fields=[
                "last_fired_at",
                "last_job",
                "last_error",
                "failures",
                "paused_at",
                "next_fire_at",
                "updated_at",
            ]
        )
        return 1 if job_id is not None else 0
