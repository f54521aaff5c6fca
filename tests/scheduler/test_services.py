"""The scheduler: submission, dispatch intent, the DAG advance, outcomes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django_q.models import OrmQ

from agents.fake import FakeRemote
from sas_project.errors import IdempotencyConflict, InvalidInput
from scheduler.models import Attempt, Event, Job, JobStatus, Outcome, Step, StepStatus
from scheduler.services import job_submit
from scheduler.tasks import run_attempt
from tests.factories import chain, diamond

pytestmark = pytest.mark.django_db


def steps_of(job: Job) -> dict[str, Step]:
    return {s.name: s for s in Step.objects.filter(job=job)}


@pytest.mark.sqlite
def test_a_submitted_job_dispatches_its_root_steps_with_intent_and_task_in_one_go(
    django_capture_on_commit_callbacks: Callable,
) -> None:
    diamond()
    job = job_submit(workflow="diamond", input={"n": 1}).job
    steps = steps_of(job)
    assert job.status == JobStatus.RUNNING
    assert steps["a"].status == StepStatus.DISPATCHED
    assert {steps[n].status for n in "bcd"} == {StepStatus.PENDING}
    a = steps["a"]
    attempt = Attempt.objects.get(step=a)
    assert (a.attempt, attempt.number, attempt.policy_version) == (1, 1, 1)
    assert a.deadline == attempt.deadline and a.deadline > attempt.dispatched_at
    # The agent task sits in the broker table, written by the same transaction as the intent.
    assert OrmQ.objects.count() == 1
    assert Event.objects.filter(job=job, kind="step_dispatched", step=a).count() == 1


@pytest.mark.usefixtures("one_delivery_per_task")
@pytest.mark.sqlite
def test_a_chain_runs_step_after_step_and_collects_the_outputs(
    drain: Callable, fake_remote: FakeRemote
) -> None:
    chain(n=3)
    job = job_submit(workflow="chain", input={}).job
    assert drain() == 3
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert job.result == {"s1": {"ok": "s1"}, "s2": {"ok": "s2"}, "s3": {"ok": "s3"}}
    assert [c.payload["step"] for c in fake_remote.calls] == ["s1", "s2", "s3"]
    # Each step sees the outputs of the steps before it.
    assert fake_remote.calls[2].payload["results"] == {"s1": {"ok": "s1"}, "s2": {"ok": "s2"}}


def test_the_call_carries_the_operation_id_the_attempt_and_the_job_input(
    drain: Callable, fake_remote: FakeRemote
) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={"sku": "X"}).job
    drain()
    (call,) = fake_remote.calls
    step = job.steps.get()
    assert call.operation_id == step.operation_id
    assert call.payload == {
        "job_id": str(job.pk),
        "step": "s1",
        "operation_id": step.operation_id,
        "attempt": 1,
        "input": {"sku": "X"},
        "results": {},
    }
    assert 0 < call.timeout <= 5


@pytest.mark.sqlite
def test_a_diamond_dispatches_its_join_exactly_once_after_both_branches(
    drain: Callable, fake_remote: FakeRemote
) -> None:
    diamond()
    job = job_submit(workflow="diamond", input={}).job
    drain()
    order = [c.payload["step"] for c in fake_remote.calls]
    assert order[0] == "a" and sorted(order[1:3]) == ["b", "c"] and order[3] == "d"
    assert len(order) == 4
    d = steps_of(job)["d"]
    assert Event.objects.filter(step=d, kind="step_dispatched").count() == 1
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED


@pytest.mark.usefixtures("one_delivery_per_task")
def test_both_branches_are_in_flight_together(drain: Callable, fake_remote: FakeRemote) -> None:
    diamond()
    job = job_submit(workflow="diamond", input={}).job
    run_attempt(steps_of(job)["a"].pk, 1)
    steps = steps_of(job)
    assert steps["b"].status == steps["c"].status == StepStatus.DISPATCHED
    assert steps["d"].status == StepStatus.PENDING


@pytest.mark.usefixtures("one_delivery_per_task")
@pytest.mark.django_db(transaction=True)
def test_branches_finishing_at_the_same_moment_dispatch_the_join_once(fake_remote: FakeRemote) -> None:
    diamond()
    for _ in range(5):
        job = job_submit(workflow="diamond", input={}).job
        run_attempt(steps_of(job)["a"].pk, 1)
        steps = steps_of(job)
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def finish(step: Step, barrier: threading.Barrier = barrier, errors: list = errors) -> None:
            try:
                barrier.wait()
                run_attempt(step.pk, 1)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=finish, args=(steps[n],)) for n in "bc"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        d = steps_of(job)["d"]
        assert d.status == StepStatus.DISPATCHED
        assert Event.objects.filter(step=d, kind="step_dispatched").count() == 1


@pytest.mark.sqlite
def test_the_same_idempotency_key_and_body_return_the_same_job() -> None:
    chain(n=1)
    user = User.objects.create_user("client")
    first = job_submit(workflow="chain", input={"a": 1}, submitter=user, idempotency_key="k-1")
    again = job_submit(workflow="chain", input={"a": 1}, submitter=user, idempotency_key="k-1")
    assert first.created and not again.created
    assert again.job.pk == first.job.pk
    assert Job.objects.count() == 1


def test_the_same_key_with_another_body_is_a_conflict() -> None:
    chain(n=1)
    user = User.objects.create_user("client")
    job_submit(workflow="chain", input={"a": 1}, submitter=user, idempotency_key="k-1")
    with pytest.raises(IdempotencyConflict, match="different request"):
        job_submit(workflow="chain", input={"a": 2}, submitter=user, idempotency_key="k-1")
    assert Job.objects.count() == 1


def test_one_key_belongs_to_one_submitter() -> None:
    chain(n=1)
    alice, bob = User.objects.create_user("alice"), User.objects.create_user("bob")
    a = job_submit(workflow="chain", input={}, submitter=alice, idempotency_key="same")
    b = job_submit(workflow="chain", input={}, submitter=bob, idempotency_key="same")
    assert a.job.pk != b.job.pk


@pytest.mark.django_db(transaction=True)
def test_concurrent_submissions_with_one_key_make_one_job() -> None:
    chain(n=1)
    user = User.objects.create_user("client")
    barrier = threading.Barrier(4)
    results: list[object] = []

    def submit() -> None:
        try:
            barrier.wait()
            results.append(
                job_submit(workflow="chain", input={"x": 1}, submitter=user, idempotency_key="race")
            )
        except BaseException as exc:  # noqa: BLE001 - reported below
            results.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Job.objects.count() == 1
    assert {r.job.pk for r in results} == {Job.objects.get().pk}  # type: ignore[attr-defined]
    assert sum(r.created for r in results) == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("workflow", "payload", "message"),
    [
        ("nope", {}, "unknown workflow"),
        ("chain", [1, 2], "must be a JSON object"),
        ("chain", "x", "JSON object"),
    ],
)
@pytest.mark.sqlite
def test_bad_submissions_are_refused_and_create_nothing(workflow: str, payload: object, message: str) -> None:
    chain(n=1)
    with pytest.raises(InvalidInput, match=message):
        job_submit(workflow=workflow, input=payload)
    assert Job.objects.count() == 0


@pytest.mark.sqlite
def test_a_duplicate_delivery_of_an_agent_task_makes_no_second_call(fake_remote: FakeRemote) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    step = job.steps.get()
    assert run_attempt(step.pk, 1) == Outcome.SUCCEEDED
    assert run_attempt(step.pk, 1) == "ignored"
    assert len(fake_remote.calls) == 1
    assert Event.objects.filter(job=job, kind="delivery_ignored").count() == 1


def test_a_delivery_while_the_first_is_still_calling_makes_no_second_call(fake_remote: FakeRemote) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    step = job.steps.get()
    from scheduler.services import attempt_claim

    assert attempt_claim(step.pk, number=1) is not None  # the first delivery claimed it and is calling
    assert run_attempt(step.pk, 1) == "ignored"
    assert fake_remote.calls == []


def test_a_delivery_of_a_superseded_attempt_is_ignored(fake_remote: FakeRemote) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    step = job.steps.get()
    Attempt.objects.filter(step=step).update(finished_at=step.deadline, outcome=Outcome.NO_ANSWER)
    assert run_attempt(step.pk, 1) == "ignored"
    assert fake_remote.calls == []


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        (Outcome.BUSINESS_FAILURE, StepStatus.ATTEMPT_FAILED),
        (Outcome.TRANSIENT_FAILURE, StepStatus.ATTEMPT_FAILED),
        (Outcome.NO_ANSWER, StepStatus.UNKNOWN),
    ],
)
@pytest.mark.sqlite
def test_a_failed_or_unanswered_call_is_recorded_and_left_for_the_supervisor(
    drain: Callable, fake_remote: FakeRemote, outcome: str, status: str
) -> None:
    chain(n=2)
    fake_remote.script("s1", outcome)
    job = job_submit(workflow="chain", input={}).job
    drain()
    s1 = steps_of(job)["s1"]
    assert s1.status == status
    assert s1.last_outcome == outcome
    attempt = Attempt.objects.get(step=s1)
    assert attempt.outcome == outcome and attempt.finished_at is not None and attempt.decided_by == "agent"
    assert steps_of(job)["s2"].status == StepStatus.PENDING
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING


@pytest.mark.django_db(transaction=True)
def test_an_outcome_waiting_for_the_job_lock_reads_the_steps_as_the_holder_left_them(
    fake_remote: FakeRemote, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """The general path (SAS_FAST_PATH off): b's outcome holds the job lock while c's waits."""
    from scheduler.services import outcomes

    settings.SAS_FAST_PATH = False
    diamond()
    job = job_submit(workflow="diamond", input={}).job
    run_attempt(steps_of(job)["a"].pk, 1)
    steps = steps_of(job)
    real_apply = outcomes._apply_outcome
    holding = threading.Event()
    waited: list[int] = []

    def held_apply(unit, state, step, result, **kwargs):  # type: ignore[no-untyped-def]
        if step.name == "b":
            # b holds the job lock: let c's outcome arrive, and go on only once c's transaction is
            # seen waiting for that lock (no sleep decides the order).
            holding.set()
            waited.append(wait_for_lock_waiters(1))
        return real_apply(unit, state, step, result, **kwargs)

    monkeypatch.setattr(outcomes, "_apply_outcome", held_apply)
    errors: list[BaseException] = []

    def finish(name: str) -> None:
        try:
            if name == "c":
                assert holding.wait(10)
            run_attempt(steps[name].pk, 1)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=finish, args=(n,)) for n in "bc"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert waited == [1]  # the race really happened: c waited on b's lock
    assert steps_of(job)["d"].status == StepStatus.DISPATCHED


@pytest.mark.usefixtures("one_delivery_per_task")
@pytest.mark.django_db(transaction=True)
def test_outcomes_queued_on_the_job_lock_in_the_database_function_dispatch_the_join_once(
    fake_remote: FakeRemote,
) -> None:
    """The PostgreSQL function: b's and c's outcomes both wait on the job's lock (held here until
    both are seen waiting), then run one after the other; the second sees the first's success."""
    from django.db import transaction

    diamond()
    job = job_submit(workflow="diamond", input={}).job
    run_attempt(steps_of(job)["a"].pk, 1)
    steps = steps_of(job)
    errors: list[BaseException] = []
    locked = threading.Event()
    release = threading.Event()

    def hold_the_job() -> None:
        try:
            with transaction.atomic():
                Job.objects.select_for_update().get(pk=job.pk)
                locked.set()
                wait_for_lock_waiters(2)
                release.wait(10)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    def finish(name: str) -> None:
        try:
            assert locked.wait(10)
            run_attempt(steps[name].pk, 1)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_job)
    holder.start()
    finishers = [threading.Thread(target=finish, args=(n,)) for n in "bc"]
    for t in finishers:
        t.start()
    release.set()
    for t in [holder, *finishers]:
        t.join()
    assert not errors
    d = steps_of(job)["d"]
    assert d.status == StepStatus.DISPATCHED
    assert Event.objects.filter(step=d, kind="step_dispatched").count() == 1


def wait_for_lock_waiters(count: int, timeout: float = 10) -> int:
    """Block until `count` sessions wait on a lock (this session's, or a place in the queue behind
    it: a second waiter for a row waits on the first); returns how many do."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            # pg_stat_activity is read once per transaction unless its snapshot is cleared.
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND cardinality(pg_blocking_pids(pid)) > 0"
            )
            waiting = int(cursor.fetchone()[0])
        if waiting >= count:
            return waiting
        time.sleep(0.01)
    raise AssertionError(f"no {count} session(s) waited on a lock within {timeout}s")


@pytest.mark.parametrize(
    ("payload", "message"),
    [({"a": "x\x00y"}, "NUL"), ({"a": float("nan")}, "not finite"), ({"a": float("inf")}, "not finite")],
)
def test_input_the_database_cannot_store_is_refused_and_creates_nothing(payload: dict, message: str) -> None:
    chain(n=1)
    with pytest.raises(InvalidInput, match=message):
        job_submit(workflow="chain", input=payload)
    assert Job.objects.count() == 0
