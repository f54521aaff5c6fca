"""The fault campaign waits for the cancels of its flow jobs as long as they may still finish: a
try lost with a killed worker is sent again only once its `due_at` (the task's whole room) has
passed, so a fixed wait would judge such a cancel unfinished while it is still on its way."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from scheduler.models import RemoteCancel
from scheduler.services import job_submit
from scheduler.unit import db_now
from supervisor.services import job_cancel
from testbed.campaign_flow import wait_for_cancels
from tests.scheduler.test_cancel_path import charge_workflow, in_flight, olga

pytestmark = pytest.mark.django_db


def cancelled_in_flight() -> tuple[str, RemoteCancel]:
    charge_workflow()
    job = job_submit(workflow="order", input={}).job
    charge = in_flight(job)
    job_cancel(actor=olga(), job_id=job.pk, reason="the campaign")
    return str(job.pk), RemoteCancel.objects.get(step=charge)


def waited(job_id: str, *, slack: float, most: float) -> float:
    started = time.monotonic()
    wait_for_cancels([job_id], slack=slack, most=most)
    return time.monotonic() - started


def test_the_wait_lasts_past_an_unfinished_cancels_due_time(fake_remote: object) -> None:
    job_id, cancel = cancelled_in_flight()
    RemoteCancel.objects.filter(pk=cancel.pk).update(due_at=db_now() + dt.timedelta(seconds=1.0))
    assert waited(job_id, slack=0.5, most=30.0) >= 1.5


def test_the_wait_ends_once_a_cancel_is_overdue_by_the_slack(fake_remote: object) -> None:
    job_id, cancel = cancelled_in_flight()
    RemoteCancel.objects.filter(pk=cancel.pk).update(due_at=db_now() - dt.timedelta(seconds=60))
    assert waited(job_id, slack=5.0, most=30.0) < 5.0


def test_the_wait_never_passes_its_bound(fake_remote: object) -> None:
    job_id, cancel = cancelled_in_flight()
    RemoteCancel.objects.filter(pk=cancel.pk).update(due_at=db_now() + dt.timedelta(seconds=3600))
    assert waited(job_id, slack=0.0, most=1.0) < 5.0


def test_no_wait_when_every_cancel_finished(fake_remote: object) -> None:
    job_id, cancel = cancelled_in_flight()
    RemoteCancel.objects.filter(pk=cancel.pk).update(finished_at=db_now(), due_at=None)
    assert waited(job_id, slack=60.0, most=60.0) < 5.0
