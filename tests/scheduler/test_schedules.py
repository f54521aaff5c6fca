"""Schedules (scheduler.schedules): a firing makes one job whichever loops fire it, firings missed
while down are caught up once or skipped, cron follows the schedule's time zone, one-off and paused
schedules, bad schedules refused naming the field, and a schedule is its creator's to change."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, User
from django.utils import timezone

from agents.fake import FakeRemote
from sas_project.errors import ActionNotAllowed, InvalidInput
from scheduler.models import Event, EventKind, Job, Schedule
from scheduler.schedules import (
    next_fire,
    schedule_create,
    schedule_set_paused,
    schedule_update,
    schedules_fire,
)
from tests.api.support import V1, client_for, make_user
from tests.factories import chain, make_workflow, step

pytestmark = pytest.mark.django_db


@pytest.mark.sqlite
def test_a_schedule_fires_once_per_firing_even_when_two_loops_fire(fake_remote: FakeRemote) -> None:
    chain(n=1)
    sam = make_user("sam", "submitters")
    schedule = schedule_create(
        name="every-minute", actor=sam, workflow="chain", input={"k": 1}, cron="* * * * *"
    )
    assert schedule.next_fire_at is not None
    fire_at = schedule.next_fire_at
    later = fire_at + dt.timedelta(seconds=5)
    assert schedules_fire(later) == 1
    assert schedules_fire(later) == 0  # the second loop finds it fired
    job = Job.objects.get()
    assert job.idempotency_key == f"schedule:{schedule.pk}:{fire_at.isoformat()}" and job.submitter == sam
    assert Event.objects.filter(job=job, kind=EventKind.JOB_SCHEDULED).count() == 1
    schedule.refresh_from_db()
    assert schedule.last_job_id == job.pk and schedule.next_fire_at == fire_at + dt.timedelta(minutes=1)


@pytest.mark.parametrize(("catch_up", "jobs"), [("once", 1), ("skip", 0)])
def test_firings_missed_during_downtime_are_caught_up_once_or_skipped(
    fake_remote: FakeRemote, catch_up: str, jobs: int
) -> None:
    chain(n=1)
    schedule = schedule_create(
        name="hourly",
        actor=make_user("sam", "submitters"),
        workflow="chain",
        cron="0 * * * *",
        catch_up=catch_up,
    )
    assert schedule.next_fire_at is not None
    after_downtime = schedule.next_fire_at + dt.timedelta(hours=5, minutes=3)
    assert schedules_fire(after_downtime) == jobs
    schedule.refresh_from_db()
    assert schedule.next_fire_at > after_downtime
    if jobs:
        latest = after_downtime.replace(minute=0, second=0, microsecond=0)
        assert Job.objects.get().idempotency_key.endswith(latest.isoformat())


def test_a_cron_schedule_follows_its_time_zone() -> None:
    schedule = Schedule(name="x", workflow="chain", cron="0 9 * * *", timezone="Europe/Paris")
    after = dt.datetime(2026, 7, 1, 12, 0, tzinfo=dt.UTC)
    assert next_fire(schedule, after) == dt.datetime(2026, 7, 2, 7, 0, tzinfo=dt.UTC)  # 09:00 CEST
    winter = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
    assert next_fire(schedule, winter) == dt.datetime(2026, 12, 2, 8, 0, tzinfo=dt.UTC)  # 09:00 CET


def test_a_one_off_schedule_fires_once_and_a_paused_one_not_at_all(fake_remote: FakeRemote) -> None:
    chain(n=1)
    sam = make_user("sam", "submitters")
    client = client_for(sam)
    run_at = (timezone.now() + dt.timedelta(minutes=5)).isoformat()
    created = client.post(
        f"{V1}/schedules/", {"name": "once", "workflow": "chain", "run_at": run_at}, format="json"
    )
    assert created.status_code == 201, created.json()
    client.post(
        f"{V1}/schedules/", {"name": "paused", "workflow": "chain", "cron": "* * * * *"}, format="json"
    )
    assert client.post(f"{V1}/schedules/paused/pause/").json()["paused"] is True
    assert client.post(f"{V1}/schedules/paused/pause/").status_code == 409
    later = timezone.now() + dt.timedelta(minutes=6)
    assert schedules_fire(later) == 1
    assert Schedule.objects.get(name="once").next_fire_at is None
    assert schedules_fire(later + dt.timedelta(minutes=10)) == 0
    assert client.post(f"{V1}/schedules/paused/resume/").json()["paused"] is False


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "a", "workflow": "nope", "cron": "* * * * *"}, "workflow"),
        ({"name": "a", "workflow": "chain", "cron": "61 * * * *"}, "cron"),
        ({"name": "a", "workflow": "chain"}, "run_at"),
        ({"name": "a", "workflow": "chain", "cron": "* * * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"name": "a", "workflow": "chain", "cron": "* * * * *", "run_at": "2030-01-01T00:00:00Z"}, "cron"),
        ({"name": "a", "workflow": "chain", "cron": "* * * * *", "input": [1]}, "input"),
    ],
)
def test_a_bad_schedule_is_a_400_naming_the_field(body: dict[str, Any], field: str) -> None:
    chain(n=1)
    client = client_for(make_user("sam", "submitters"))
    response = client.post(f"{V1}/schedules/", body, format="json")
    assert response.status_code == 400, response.json()
    assert response.json().get("field") == field or field in response.json(), response.json()
    assert not Schedule.objects.exists()


@pytest.mark.sqlite
def test_a_schedule_with_a_nul_in_its_business_key_is_refused_and_nothing_is_created() -> None:
    chain(n=1)
    sam = make_user("sam", "submitters")
    values = {"workflow": "chain", "cron": "* * * * *", "business_key": "order\x001"}
    response = client_for(sam).post(f"{V1}/schedules/", {"name": "s", **values}, format="json")
    assert response.status_code == 400, response.json()
    # The service refuses it too (the admin's and the API's one path), as a submission would.
    with pytest.raises(InvalidInput) as refused:
        schedule_create(name="s", actor=sam, **values)
    assert refused.value.detail == {"field": "business_key"}
    assert not Schedule.objects.exists()
    schedule_create(name="s", actor=sam, **{**values, "business_key": "order 1"})
    with pytest.raises(InvalidInput):
        schedule_update("s", actor=sam, changes={"business_key": "order\x002"})
    assert Schedule.objects.get().business_key == "order 1"


def test_a_schedule_is_its_creators_to_change(fake_remote: FakeRemote) -> None:
    chain(n=1)
    sam, eve = make_user("sam", "submitters"), make_user("eve", "submitters")
    client_for(sam).post(
        f"{V1}/schedules/", {"name": "s", "workflow": "chain", "cron": "* * * * *"}, format="json"
    )
    assert client_for(eve).get(f"{V1}/schedules/s/").status_code == 404
    assert client_for(eve).get(f"{V1}/schedules/").json()["count"] == 0
    ops = client_for(make_user("olga", "operators"))
    assert ops.patch(f"{V1}/schedules/s/", {"cron": "5 * * * *"}, format="json").status_code == 200
    assert client_for(sam).delete(f"{V1}/schedules/s/").status_code == 204
    assert LogEntry.objects.filter(object_repr="s").count() == 3  # added, changed, deleted


@pytest.mark.sqlite
def test_a_schedule_beyond_its_owners_limit_is_a_409_naming_the_setting(settings: Any) -> None:
    settings.SAS_SCHEDULES_PER_USER = 2
    chain(n=1)
    sam = client_for(make_user("sam", "submitters"))
    body = {"workflow": "chain", "cron": "* * * * *"}
    for name in ("a", "b"):
        assert sam.post(f"{V1}/schedules/", {"name": name, **body}, format="json").status_code == 201
    refused = sam.post(f"{V1}/schedules/", {"name": "c", **body}, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "limit_reached"
    assert "SAS_SCHEDULES_PER_USER=2" in refused.json()["detail"]
    assert not Schedule.objects.filter(name="c").exists()
    # The limit is per owner, operators included; deleting one makes room; 0 lifts it.
    olga = client_for(make_user("olga", "operators"))
    assert olga.post(f"{V1}/schedules/", {"name": "o", **body}, format="json").status_code == 201
    assert sam.delete(f"{V1}/schedules/a/").status_code == 204
    assert sam.post(f"{V1}/schedules/", {"name": "c", **body}, format="json").status_code == 201
    settings.SAS_SCHEDULES_PER_USER = 0
    assert sam.post(f"{V1}/schedules/", {"name": "d", **body}, format="json").status_code == 201


def _deactivate(user: Any) -> None:
    user.is_active = False
    user.save(update_fields=["is_active"])


def _reactivate(user: Any) -> None:
    user.is_active = True
    user.save(update_fields=["is_active"])


def _demote(user: Any) -> None:
    user.groups.clear()


def _promote(user: Any) -> None:
    user.groups.add(Group.objects.get(name="submitters"))


@pytest.mark.sqlite
@pytest.mark.parametrize(
    ("lose", "regain", "said"),
    [
        (_deactivate, _reactivate, "its owner sam is deactivated"),
        (_demote, _promote, "its owner sam may no longer submit jobs"),
    ],
)
def test_a_schedule_whose_owner_may_no_longer_submit_pauses_and_says_why(
    fake_remote: FakeRemote, lose: Callable[[Any], None], regain: Callable[[Any], None], said: str
) -> None:
    """A schedule submits as its owner, so the owner's standing is read at every firing, as the
    API reads a submitter's at every request."""
    chain(n=1)
    sam = make_user("sam", "submitters")
    schedule = schedule_create(name="every-minute", actor=sam, workflow="chain", cron="* * * * *")
    assert schedule.next_fire_at is not None
    lose(User.objects.get(pk=sam.pk))
    first = schedule.next_fire_at + dt.timedelta(seconds=5)
    assert schedules_fire(first) == 0
    assert not Job.objects.exists()
    schedule.refresh_from_db()
    assert said in schedule.last_error and schedule.paused_at is not None
    assert schedules_fire(first + dt.timedelta(minutes=5)) == 0  # paused: it waits for someone
    # Once the owner may submit again and someone resumes it, it fires at its next turn.
    regain(User.objects.get(pk=sam.pk))
    schedule_set_paused("every-minute", actor=make_user("ada", "administrators"), paused=False)
    schedule.refresh_from_db()
    assert schedule.next_fire_at is not None
    assert schedules_fire(schedule.next_fire_at + dt.timedelta(seconds=5)) == 1
    schedule.refresh_from_db()
    assert schedule.last_error == "" and Job.objects.get().submitter == sam


@pytest.mark.sqlite
def test_a_schedule_whose_owner_was_deleted_pauses_instead_of_firing_as_nobody(
    fake_remote: FakeRemote,
) -> None:
    chain(n=1)
    sam = make_user("sam", "submitters")
    schedule = schedule_create(name="nightly", actor=sam, workflow="chain", cron="* * * * *")
    assert schedule.next_fire_at is not None
    sam.delete()
    schedule.refresh_from_db()
    assert schedule.created_by is None
    assert schedules_fire(schedule.next_fire_at + dt.timedelta(seconds=5)) == 0
    schedule.refresh_from_db()
    assert "its owner was deleted" in schedule.last_error and schedule.paused_at is not None
    assert not Job.objects.exists()


@pytest.mark.sqlite
def test_a_schedule_needs_an_owner() -> None:
    chain(n=1)
    with pytest.raises(ActionNotAllowed, match="a schedule needs an owner"):
        schedule_create(name="orphan", actor=None, workflow="chain", cron="* * * * *")
    assert not Schedule.objects.exists()


@pytest.mark.sqlite
def test_a_schedule_whose_input_holds_a_time_its_timer_cannot_read_is_refused_naming_the_field() -> None:
    make_workflow("at", {"name": "wait", "kind": "timer", "until": "input.when"}, step("b", "wait"))
    with pytest.raises(InvalidInput) as refused:
        schedule_create(
            name="bad",
            actor=make_user("sam", "submitters"),
            workflow="at",
            input={"when": "2024-02-30T00:00:00Z"},
            cron="* * * * *",
        )
    assert refused.value.detail["field"] == "input.when" and "2024-02-30" in refused.value.message
    assert not Schedule.objects.exists()
