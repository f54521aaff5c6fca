"""POST /api/v1/schedules/{name}/backfill/ and the schedules' new fields over the API: a backfill
answers every fire time of its range with its job, a second one starts nothing, a bad range is a
400 that starts nothing, and only the schedule's owner or an operator may backfill it."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry

from agents.fake import FakeRemote
from scheduler.models import Job, Schedule
from tests.api.support import V1, client_for, make_user
from tests.factories import chain

pytestmark = pytest.mark.django_db

RANGE = {"start": "2026-03-01T09:30:00Z", "end": "2026-03-01T12:30:00Z"}


@pytest.fixture
def sam() -> Any:
    chain(n=1)
    owner = make_user("sam", "submitters")
    created = client_for(owner).post(
        f"{V1}/schedules/",
        {"name": "hourly", "workflow": "chain", "cron": "0 * * * *", "overlap": "skip", "jitter_seconds": 30},
        format="json",
    )
    assert created.status_code == 201, created.json()
    return owner


def test_a_schedule_is_created_and_read_with_its_overlap_jitter_and_failure_limit(sam: Any) -> None:
    body = client_for(sam).get(f"{V1}/schedules/hourly/").json()
    assert body["overlap"] == "skip" and body["jitter_seconds"] == 30 and body["pause_after_failures"] is None
    assert body["next_due_at"] is not None and body["job_failures"] == 0
    changed = client_for(sam).patch(
        f"{V1}/schedules/hourly/", {"overlap": "buffer_all", "pause_after_failures": 3}, format="json"
    )
    assert changed.status_code == 200 and changed.json()["overlap"] == "buffer_all"
    refused = client_for(sam).patch(f"{V1}/schedules/hourly/", {"overlap": "sometimes"}, format="json")
    assert refused.status_code == 400 and Schedule.objects.get().overlap == "buffer_all"


def test_a_backfill_answers_its_fire_times_and_a_second_one_starts_nothing(
    sam: Any, fake_remote: FakeRemote
) -> None:
    first = client_for(sam).post(f"{V1}/schedules/hourly/backfill/", RANGE, format="json")
    assert first.status_code == 200, first.json()
    answer = first.json()
    assert [f["fire_at"][11:16] for f in answer["fire_times"]] == ["10:00", "11:00", "12:00"]
    assert answer["started"] == 3 and answer["already_fired"] == 0
    assert {str(pk) for pk in Job.objects.values_list("pk", flat=True)} == {
        f["job"] for f in answer["fire_times"]
    }
    second = client_for(sam).post(f"{V1}/schedules/hourly/backfill/", RANGE, format="json").json()
    assert second["started"] == 0 and second["already_fired"] == 3
    assert [f["job"] for f in second["fire_times"]] == [f["job"] for f in answer["fire_times"]]
    assert Job.objects.count() == 3


@pytest.mark.parametrize(
    "body",
    [
        {"start": "2026-03-01T12:00:00Z", "end": "2026-03-01T11:00:00Z"},
        {"start": "2026-03-01T12:00:00Z", "end": "2999-01-01T00:00:00Z"},
        {"start": "2026-01-01T00:00:00Z", "end": "2026-03-01T00:00:00Z"},
        {"start": "not a time", "end": "2026-03-01T00:00:00Z"},
        {"start": "2026-03-01T12:00:00Z"},
        {**RANGE, "overlap": "skip"},
    ],
)
def test_a_bad_backfill_is_a_400_that_starts_nothing(
    sam: Any, settings: Any, fake_remote: FakeRemote, body: dict[str, Any]
) -> None:
    settings.SAS_SCHEDULE_BACKFILL_MAX = 100
    logged = LogEntry.objects.count()
    response = client_for(sam).post(f"{V1}/schedules/hourly/backfill/", body, format="json")
    assert response.status_code == 400, response.json()
    assert not Job.objects.exists() and LogEntry.objects.count() == logged


def test_only_the_owner_or_an_operator_may_backfill_a_schedule(sam: Any, fake_remote: FakeRemote) -> None:
    eve = client_for(make_user("eve", "submitters"))
    assert eve.post(f"{V1}/schedules/hourly/backfill/", RANGE, format="json").status_code == 404
    viewer = client_for(make_user("vera", "viewers"))
    assert viewer.post(f"{V1}/schedules/hourly/backfill/", RANGE, format="json").status_code == 403
    assert client_for(None).post(f"{V1}/schedules/hourly/backfill/", RANGE, format="json").status_code == 401
    assert not Job.objects.exists()
    olga = make_user("olga", "operators")
    done = client_for(olga).post(f"{V1}/schedules/hourly/backfill/", RANGE, format="json")
    assert done.status_code == 200 and done.json()["started"] == 3
    assert all(job.submitter == sam for job in Job.objects.all())  # a schedule's jobs are its owner's
    entry = LogEntry.objects.filter(object_repr="hourly").latest("id")
    assert entry.user == olga and "backfill" in entry.change_message


def test_a_backfill_of_an_unknown_schedule_is_a_404(fake_remote: FakeRemote) -> None:
    ops = client_for(make_user("olga", "operators"))
    assert ops.post(f"{V1}/schedules/nope/backfill/", RANGE, format="json").status_code == 404


def test_a_backfill_reaches_past_a_range_end_given_without_an_offset_as_utc(
    sam: Any, fake_remote: FakeRemote
) -> None:
    body = {"start": "2026-03-01T10:00:00", "end": "2026-03-01T10:00:00"}
    answer = client_for(sam).post(f"{V1}/schedules/hourly/backfill/", body, format="json").json()
    assert [f["fire_at"] for f in answer["fire_times"]] == ["2026-03-01T10:00:00Z"]
    assert dt.datetime.fromisoformat(answer["fire_times"][0]["fire_at"]).tzinfo is not None
