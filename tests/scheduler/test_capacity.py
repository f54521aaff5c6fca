"""The capacity pump (scheduler.services.capacity): which waiting steps it dispatches, which pools
it looks at and when, and what its pool lock lets through; pool limits (in flight, per second) and
job priorities, in-process and over the API."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from agents.fake import FakeRemote
from agents.models import AgentPool
from agents.services import pool_save
from scheduler.models import Attempt, Event, EventKind, Job, Step, StepStatus
from scheduler.services import capacity, job_submit
from scheduler.services.capacity import forget_limits_cache, pump, run_capacity
from scheduler.services.dispatch import step_dispatch
from supervisor.services import job_pause
from tests.api.support import V1, client_for, make_user
from tests.conftest import run_queued_tasks
from tests.factories import make_pool, make_workflow, step

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
    return run_capacity(lambda: next(turns, True), dispatch=step_dispatch, idle=0)


@pytest.fixture
def pumped(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The pools each pump was asked to look at (the pump itself does nothing)."""
    calls: list[Any] = []

    def spy(pool_ids: list[int] | None = None, *, dispatch: object) -> tuple[int, float | None]:
        calls.append(pool_ids)
        return 0, None

    monkeypatch.setattr(capacity, "pump", spy)
    return calls


@pytest.fixture(params=[True, False], ids=["fast-path", "python-path"])
def fast_path(request: pytest.FixtureRequest, settings: Any) -> bool:
    settings.SAS_FAST_PATH = request.param
    return bool(request.param)


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
    assert pump(dispatch=step_dispatch)[0] == 1
    assert Step.objects.get(job=other).status == D


def test_an_outcome_pumps_only_the_limited_pools_it_freed_or_filled(
    fake_remote: FakeRemote,
    fast_path: bool,
    pumped: list[Any],
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    slow = limited_pool(max_in_flight=1)
    limited_pool("elsewhere", max_in_flight=1)
    make_workflow("two", step("s1"), step("s2", "s1", pool="slow"))
    make_workflow("other", step("e1", pool="elsewhere"))
    job_submit(workflow="other", input={})  # a step waits in another limited pool
    job = job_submit(workflow="two", input={}).job
    pumped.clear()
    with django_capture_on_commit_callbacks(execute=True):
        # s1's pool has no limit: its call ending frees nothing; s2 becomes ready and waits.
        assert run_queued_tasks() == 1
    assert Step.objects.get(job=job, name="s2").status == W
    assert pumped == [[slow.pk]]


def test_a_submission_pumps_each_pool_it_parked_steps_in_once(
    fake_remote: FakeRemote,
    fast_path: bool,
    pumped: list[Any],
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    slow, other = limited_pool(max_in_flight=1), limited_pool("other", max_in_flight=1)
    limited_pool("elsewhere", max_in_flight=1)
    make_workflow(
        "fan",
        step("a", pool="slow"),
        step("b", pool="slow"),
        step("c", pool="slow"),
        step("d", pool="other"),
        step("e"),
    )
    make_workflow("unrelated", step("u1", pool="elsewhere"))
    job_submit(workflow="unrelated", input={})
    pumped.clear()
    with django_capture_on_commit_callbacks(execute=True):
        job_submit(workflow="fan", input={})
    assert sorted(pumped) == sorted([[slow.pk], [other.pk]])


def test_a_pump_registered_in_a_rolled_back_savepoint_is_registered_again(
    pumped: list[Any], django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    pool = limited_pool(max_in_flight=1)

    def rolled_back() -> None:
        with transaction.atomic():
            capacity.pump_after_commit(pool.pk, dispatch=step_dispatch)
            raise RuntimeError("rolled back")

    with django_capture_on_commit_callbacks(execute=True):
        with pytest.raises(RuntimeError):
            rolled_back()
        capacity.pump_after_commit(pool.pk, dispatch=step_dispatch)
        capacity.pump_after_commit(pool.pk, dispatch=step_dispatch)
    assert pumped == [[pool.pk]]


def test_a_call_ending_in_a_limited_pool_releases_the_next_waiting_step_on_commit(
    fake_remote: FakeRemote, fast_path: bool, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    limited_pool(max_in_flight=1)
    make_workflow("one", step("s1", pool="slow"))
    with django_capture_on_commit_callbacks(execute=True):
        first, second = (job_submit(workflow="one", input={"n": n}).job for n in range(2))
    assert (Step.objects.get(job=first).status, Step.objects.get(job=second).status) == (D, W)
    with django_capture_on_commit_callbacks(execute=True):
        assert run_queued_tasks() == 1
    assert Step.objects.get(job=first).status == StepStatus.SUCCEEDED
    assert Step.objects.get(job=second).status == D


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
            pump(dispatch=step_dispatch)
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


# --- limits and priorities ------------------------------------------------------------------------


@pytest.mark.sqlite
def test_steps_beyond_a_pools_limit_wait_and_go_out_highest_priority_first(
    fake_remote: FakeRemote, drain: Callable, settings: Any
) -> None:
    make_pool("slow", kind="python")
    AgentPool.objects.filter(name="slow").update(max_in_flight=2)
    forget_limits_cache()
    make_workflow("one", step("s1", pool="slow"))
    jobs = [job_submit(workflow="one", input={"n": n}, priority=n % 3).job for n in range(6)]
    assert set(Step.objects.values_list("status", flat=True)) == {StepStatus.WAITING}
    pump(dispatch=step_dispatch)  # what each submission's commit starts
    # Nothing was dispatched where it became ready; the pump took two, the rest wait.
    statuses = sorted(Step.objects.values_list("status", flat=True))
    assert statuses.count(StepStatus.DISPATCHED) == 2 and statuses.count(StepStatus.WAITING) == 4
    waiting = Step.objects.filter(status=StepStatus.WAITING)
    assert all(s.deadline is None and s.attempt == 0 for s in waiting)  # no attempt, no deadline
    first = set(Step.objects.filter(status=StepStatus.DISPATCHED).values_list("job__priority", flat=True))
    assert first == {2}  # the two jobs of priority 2 went first
    assert Event.objects.filter(kind=EventKind.STEP_WAITING).count() == 6
    drain()
    pump(dispatch=step_dispatch)
    drain()
    pump(dispatch=step_dispatch)
    drain()
    assert set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("status", flat=True)) == {
        "succeeded"
    }


def test_a_rate_limited_pool_starts_at_most_its_rate(fake_remote: FakeRemote) -> None:
    make_pool("rated", kind="python")
    AgentPool.objects.filter(name="rated").update(max_per_second=2)
    forget_limits_cache()
    make_workflow("one", step("s1", pool="rated"))
    for n in range(5):
        job_submit(workflow="one", input={"n": n})
    assert pump(dispatch=step_dispatch)[0] == 2
    assert Step.objects.filter(status=StepStatus.DISPATCHED).count() == 2
    # The two calls started just now (set again: the first pump's own time does not count).
    Attempt.objects.update(dispatched_at=timezone.now())
    count, wait = pump(dispatch=step_dispatch)
    assert count == 0 and wait is not None and 0 < wait <= 1
    # A second later the window has moved on: two more go.
    Attempt.objects.update(dispatched_at=timezone.now() - dt.timedelta(seconds=1.1))
    assert pump(dispatch=step_dispatch)[0] == 2


def test_a_paused_or_stopped_job_takes_no_slot(fake_remote: FakeRemote, drain: Callable) -> None:
    from supervisor.services import job_cancel, job_pause

    make_pool("slow", kind="python")
    AgentPool.objects.filter(name="slow").update(max_in_flight=1)
    forget_limits_cache()
    make_workflow("one", step("s1", pool="slow"))
    _first, second, third = (job_submit(workflow="one", input={"n": n}).job for n in range(3))
    pump(dispatch=step_dispatch)
    olga = make_user("olga", "operators")
    job_pause(actor=olga, job_id=second.pk)
    job_cancel(actor=olga, job_id=third.pk)
    assert Step.objects.get(job=third).status == StepStatus.SKIPPED
    drain()
    pump(dispatch=step_dispatch)
    assert Step.objects.get(job=second).status == StepStatus.WAITING  # paused: still waiting


def test_pool_limits_over_the_api(fake_remote: FakeRemote) -> None:
    admin = client_for(make_user("ada", "administrators"))
    created = admin.post(
        f"{V1}/pools/",
        {"name": "limited", "kind": "python", "max_in_flight": 5, "max_per_second": 2.5},
        format="json",
    )
    assert created.status_code == 201, created.json()
    assert (created.json()["max_in_flight"], created.json()["max_per_second"]) == (5, 2.5)
    assert (
        admin.patch(f"{V1}/pools/limited/", {"max_in_flight": None}, format="json").json()["max_in_flight"]
        is None
    )
    assert admin.patch(f"{V1}/pools/limited/", {"max_in_flight": 0}, format="json").status_code == 400
    assert admin.patch(f"{V1}/pools/limited/", {"max_per_second": -1}, format="json").status_code == 400
