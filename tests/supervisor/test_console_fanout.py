"""Fan-outs in the console: the job page shows a fan-out step's items' counts (never the items
as rows) with a link to its items, which are listed a page at a time and by status; the DAG draws
the step as a stack of cards with how many items succeeded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from agents.fake import FakeRemote
from scheduler.models import Outcome
from scheduler.services import job_submit
from tests.api.support import make_user
from tests.factories import make_policy, make_workflow, step

pytestmark = pytest.mark.django_db


@pytest.fixture
def olga() -> Client:
    client = Client()
    client.force_login(make_user("olga", "operators"))
    return client


@pytest.mark.sqlite
def test_the_job_page_counts_a_fan_outs_items_and_the_items_page_lists_them_by_status(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any], olga: Client
) -> None:
    make_policy("once", max_attempts=1)
    make_workflow(
        "lines",
        {
            **step("ship", policy="once"),
            "for_each": "input.lines",
            "join": {"mode": "at_least", "count": 59},
            "max_parallel": 1,
        },
    )
    fake_remote.script("ship", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="lines", input={"lines": [f"L{n}" for n in range(60)]}).job
    drain()
    supervise()
    drain()
    page = olga.get(f"/ops/jobs/{job.pk}/").content.decode()
    assert 'Fan-out over <span class="mono">input.lines</span>: 60 items' in page
    assert "1 failed" in page and "59 succeeded" in page
    assert f'href="/ops/jobs/{job.pk}/steps/ship/items/"' in page
    assert 'data-step="ship[' not in page  # the items are not job rows (their events are history)
    assert 'data-step="ship" data-status="succeeded" data-kind="fan-out"' in page
    assert "59/60 items succeeded" in page
    first = olga.get(f"/ops/jobs/{job.pk}/steps/ship/items/").content.decode()
    assert first.count('<tr id="item-') == 50 and "page 1 of 2" in first
    assert 'id="item-0" data-status="failed"' in first
    second = olga.get(f"/ops/jobs/{job.pk}/steps/ship/items/?page=2").content.decode()
    assert second.count('<tr id="item-') == 10 and 'id="item-59"' in second
    failed = olga.get(f"/ops/jobs/{job.pk}/steps/ship/items/?status=failed").content.decode()
    assert failed.count('<tr id="item-') == 1 and "scripted business_failure" in failed


def test_a_step_without_items_has_no_items_page(
    drain: Callable[[], int], fake_remote: FakeRemote, olga: Client
) -> None:
    make_workflow("plain", step("a"))
    job = job_submit(workflow="plain", input={}).job
    drain()
    assert olga.get(f"/ops/jobs/{job.pk}/steps/a/items/").status_code == 404
    assert olga.get(f"/ops/jobs/{job.pk}/steps/nope/items/").status_code == 404
