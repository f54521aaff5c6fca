"""The console's Schedules page: each schedule's overlap policy, jitter, live job, buffered
firings and last skip; an operator's backfill from the page, said in a message and recorded with
its user; a viewer's backfill refused."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client

from agents.fake import FakeRemote
from scheduler.models import Job
from scheduler.schedules import schedule_create, schedules_fire
from tests.api.support import make_user
from tests.factories import chain

pytestmark = pytest.mark.django_db


def console_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_schedules_page_shows_overlap_jitter_the_live_job_buffered_firings_and_the_last_skip(
    fake_remote: FakeRemote,
) -> None:
    chain(n=1)
    owner = make_user("sam", "submitters")
    buffered = schedule_create(
        name="buffered",
        actor=owner,
        workflow="chain",
        cron="* * * * *",
        overlap="buffer_one",
        jitter_seconds=20,
    )
    assert buffered.next_fire_at is not None
    first = buffered.next_fire_at
    for minute in range(3):  # started, buffered, skipped: the first job is still live
        schedules_fire(first + dt.timedelta(minutes=minute, seconds=25))
    live = Job.objects.get()
    page = console_for(make_user("vera", "viewers")).get("/ops/schedules/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-overlap="buffer_one"' in html and "Buffer one" in html and "jitter up to 20 s" in html
    assert "live job <a" in html and str(live.pk)[:8] in html
    assert "1 firing waiting" in html
    assert "last skip" in html and "already wait in the buffer" in html
    assert 'action="/ops/schedules/buffered/backfill/"' not in html  # viewers do not act


def test_an_operator_backfills_from_the_schedules_page_and_a_viewer_cannot(fake_remote: FakeRemote) -> None:
    chain(n=1)
    schedule_create(name="hourly", actor=make_user("sam", "submitters"), workflow="chain", cron="0 * * * *")
    body = {"start": "2026-03-01T09:30", "end": "2026-03-01T12:30"}
    viewer = console_for(make_user("vera", "viewers"))
    assert viewer.post("/ops/schedules/hourly/backfill/", body).status_code == 403
    assert not Job.objects.exists()
    olga = make_user("olga", "operators")
    ops = console_for(olga)
    assert 'action="/ops/schedules/hourly/backfill/"' in ops.get("/ops/schedules/").content.decode()
    done = ops.post("/ops/schedules/hourly/backfill/", body, follow=True)
    assert "Backfill of hourly: 3 fire times, 3 jobs started, 0 had fired already." in done.content.decode()
    again = ops.post("/ops/schedules/hourly/backfill/", body, follow=True)
    assert "0 jobs started, 3 had fired already" in again.content.decode()
    assert Job.objects.count() == 3
    assert LogEntry.objects.filter(object_repr="hourly", user=olga).count() == 2


def test_a_bad_backfill_from_the_console_says_why_and_starts_nothing(fake_remote: FakeRemote) -> None:
    chain(n=1)
    schedule_create(name="hourly", actor=make_user("sam", "submitters"), workflow="chain", cron="0 * * * *")
    ops = console_for(make_user("olga", "operators"))
    later = ops.post(
        "/ops/schedules/hourly/backfill/",
        {"start": "2026-03-01T12:00", "end": "2026-03-01T10:00"},
        follow=True,
    )
    assert "Backfill of hourly: end is before start" in later.content.decode()
    garbled = ops.post("/ops/schedules/hourly/backfill/", {"start": "soon", "end": ""}, follow=True)
    assert garbled.status_code == 200 and "start" in garbled.content.decode()
    assert not Job.objects.exists()
