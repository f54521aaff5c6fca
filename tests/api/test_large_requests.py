"""One user's large requests in flight (sas_project.inflight): while a user has the most large
bodies being served, one more is answered 429 with Retry-After at once and changes nothing;
small requests and other users go on; a request's row goes with its answer, a dead one expires,
and the limit can be turned off."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from sas_project.tokens.models import LargeRequest
from scheduler.models import Job
from tests.api.support import client_for, make_user, submit
from tests.factories import make_policy, make_pool, make_workflow, step

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

LARGE = {"lines": [{"sku": f"S{i:05d}", "note": "x" * 40} for i in range(1000)]}  # some 60 KB


@pytest.fixture(autouse=True)
def orders(settings: Any) -> None:
    settings.SAS_LARGE_REQUESTS_PER_USER = 1
    settings.SAS_LARGE_REQUEST_BYTES = 32768
    make_pool()
    make_policy("once", max_attempts=1, on_exhausted="hold")
    make_workflow("order", step("charge", policy="once"))


def in_flight(user_pk: int, expires_in: dt.timedelta) -> None:
    """A large request of the user being served, as another web process counted it."""
    LargeRequest.objects.create(key=f"user:{user_pk}", expires_at=timezone.now() + expires_in)


def test_a_large_request_while_the_user_has_one_in_flight_is_refused_and_changes_nothing() -> None:
    sam_user = make_user("sam", "submitters")
    sam, tom = client_for(sam_user), client_for(make_user("tom", "submitters"))
    # Sam's first large request is being served (its row, as another web process wrote it).
    LargeRequest.objects.create(
        key=f"user:{sam_user.pk}", expires_at=timezone.now() + dt.timedelta(minutes=1)
    )
    before = Job.objects.count()
    refused = submit(sam, "order", LARGE)
    assert refused.status_code == 429
    assert refused["Retry-After"] == "1"
    assert refused.json()["code"] == "throttled" and "SAS_LARGE_REQUESTS_PER_USER" in refused.json()["detail"]
    assert Job.objects.count() == before
    assert LargeRequest.objects.count() == 1  # the refused one left no row
    # A small request of Sam's, and another user's large one, go on.
    assert submit(sam, "order", {"lines": []}).status_code == 201
    assert submit(tom, "order", LARGE).status_code == 201


def test_a_large_requests_row_goes_with_its_answer_and_a_dead_ones_expires() -> None:
    sam_user = make_user("sam", "submitters")
    sam = client_for(sam_user)
    assert submit(sam, "order", LARGE).status_code == 201
    assert submit(sam, "order", LARGE).status_code == 201  # the first one's row went with it
    assert not LargeRequest.objects.exists()
    # A row whose process died before its answer counts until it expires.
    LargeRequest.objects.create(
        key=f"user:{sam_user.pk}", expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    assert submit(sam, "order", LARGE).status_code == 201
    assert not LargeRequest.objects.exists()


def test_the_limit_can_be_turned_off(settings: Any) -> None:
    settings.SAS_LARGE_REQUESTS_PER_USER = 0
    sam_user = make_user("sam", "submitters")
    LargeRequest.objects.create(
        key=f"user:{sam_user.pk}", expires_at=timezone.now() + dt.timedelta(minutes=1)
    )
    assert submit(client_for(sam_user), "order", LARGE).status_code == 201
