"""The capacity pump (scheduler.services.capacity): which waiting steps it dispatches, which pools
it looks at and when, and what its pool lock lets through."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import OperationalError, connection

from agents.fake import FakeRemote
from agents.models import AgentPool
from agents.services import pool_save
from scheduler.models import Step, StepStatus
from scheduler.services import capacity, job_submit
from scheduler.services.capacity import forget_limits_cache, pump, run_capacity
from supervisor.services import job_pause
from tests.factories import make_pool, make_workflow, step
from tests.test_api_support import make_user

pytestmark = pytest.mark.django_db

W = StepStatus.WAITING
D = StepStatus.DISPATCHED


@pytest.fixture(autouse=True)
def _fresh_limits() -> None:
    forget_limits_cache()


def limited_pool(name: str = "slow", **limits: Any) -> AgentPool:
    make_pool(name, kind="python")
    AgentPool.objects.filter(name=name).update(**limits)
    forget_limits_cache()
    return AgentPool.objects.get(name=name)


def one_round() -> int:
    """One turn of the qcluster's capacity thread."""
    turns = iter([False])
    return run_capacity(lambda: next(turns, True), idle=0)


@pytest.mark.sqlite
@pytest.mark.django_db(transaction=True)
def test_steps_left_waiting_when_a_pools_limits_are_removed_are_dispatched(fake_remote: FakeRemote) -> None:
    pool = limited_pool(max_in_flight=1)
    make_workflow("one", step("s1", pool="slow"))
    for n in range(3):
        job_submit(workflow="one", input={"n": n})  # each commit pumps: one goes, two wait
    assert Step.objects.filter(status=W).count() == 2
    pool_save(name="slow", kind="python", pool=pool, max_in_flight=None)
    # A few seconds on, every process has read the limits again: no pool is limited any more.
    forget_limits_cache()
    assert one_round() == 2
    assert Step.objects.filter(status=W).count() == 0


def test_waiting_steps_of_paused_jobs_do_not_crowd_out_the_others(fake_remote: FakeRemote) -> None:
    limited_pool(max_in_flight=1)
    make_workflow("wide", *(step(f"s{n}", pool="slow") for n in range(100)))
    make_workflow("one", step("s1", pool="slow"))
    olga = make_user("olga", "operators")
    # More waiting steps of paused jobs, all older, than the pump looks at in one go.
    paused = [job_submit(workflow="wide", input={"n": n}).job for n in range(3)]
    assert Step.objects.filter(status=W).count() > capacity.BATCH
    for job in paused:
        job_pause(actor=olga, job_id=job.pk)
    other = job_submit(workflow="one", input={}).job
    assert pump()[0] == 1
    assert Step.objects.get(job=other).status == D


@pytest.mark.django_db(transaction=True)
def test_new_steps_of_a_pool_are_not_blocked_while_a_pump_holds_it(
    fake_remote: FakeRemote, monkeypatch: pytest.MonkeyPatch
) -> None:
    limited_pool(max_in_flight=1)
    make_workflow("one", step("s1", pool="slow"))
    for n in range(2):
        job_submit(workflow="one", input={"n": n})  # one goes, one waits: the pump has work
    holding, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    free_slots = capacity.free_slots

    def slow_count(pool: AgentPool) -> tuple[int, float | None]:
        holding.set()  # the pump has the pool's row lock
        release.wait(10)
        return free_slots(pool)

    def run() -> None:
        try:
            pump()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    monkeypatch.setattr(capacity, "free_slots", slow_count)
    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert holding.wait(10)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")  # a blocked insert fails the test, not hangs it
        try:
            # Inserting a step of the pool checks its foreign key: a share lock on the pool's row.
            job_submit(workflow="one", input={"n": 2})
        except OperationalError as exc:
            pytest.fail(f"a submission waited for the pump's lock on its pool: {exc}")
    finally:
        release.set()
        thread.join()
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    assert not errors
    assert Step.objects.count() == 3
