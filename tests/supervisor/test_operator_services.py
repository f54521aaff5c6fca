"""Operator actions: state checks under the job lock, one effect per double click, the user named."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.db import connection

from agents.fake import FakeRemote
from sas_project.errors import ActionNotAllowed, InvalidInput, NotFound
from scheduler.models import Attempt, Event, Job, JobStatus, Outcome, Step, StepStatus
from scheduler.services import job_submit
from supervisor.services import (
    job_cancel,
    job_compensate,
    job_pause,
    job_resume,
    step_resolve,
    step_retry,
)
from tests.factories import chain, make_policy, make_pool, make_workflow, step

pytestmark = pytest.mark.django_db


@pytest.fixture
def olga() -> User:
    return User.objects.create_user("olga")


def held_job(drain: Callable, fake_remote: FakeRemote, supervise: Callable) -> Job:
    make_policy("holding", on_exhausted="hold", max_attempts=1)
    make_workflow("h", step("s1", policy="holding"), step("s2", "s1"))
    fake_remote.script("s1", Outcome.TRANSIENT_FAILURE)
    job = job_submit(workflow="h", input={}).job
    drain()
    supervise()
    job.refresh_from_db()
    assert job.status == JobStatus.NEEDS_ATTENTION
    return job


@pytest.mark.sqlite
def test_a_double_click_on_retry_makes_one_attempt(
    drain: Callable, fake_remote: FakeRemote, supervise: Callable, olga: User
) -> None:
    job = held_job(drain, fake_remote, supervise)
    s1 = job.steps.get(name="s1")
    step_retry(actor=olga, step_id=s1.pk)
    with pytest.raises(ActionNotAllowed, match="nothing to retry"):
        step_retry(actor=olga, step_id=s1.pk)
    assert Attempt.objects.filter(step=s1).count() == 2


@pytest.mark.django_db(transaction=True)
def test_two_retries_at_the_same_moment_make_one_attempt(fake_remote: FakeRemote, olga: User) -> None:
    from supervisor.scan import scan
    from tests.conftest import run_queued_tasks

    job = held_job(run_queued_tasks, fake_remote, lambda: scan(holder="t", draw=lambda: 0.0))
    s1 = job.steps.get(name="s1")
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def click() -> None:
        try:
            barrier.wait()
            step_retry(actor=olga, step_id=s1.pk)
            outcomes.append("ok")
        except ActionNotAllowed:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=click) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok", "refused"]
    assert Attempt.objects.filter(step=s1).count() == 2


def test_retry_on_another_pool_moves_the_step_and_keeps_its_operation_id(
    drain: Callable, fake_remote: FakeRemote, supervise: Callable, olga: User
) -> None:
    job = held_job(drain, fake_remote, supervise)
    make_pool("spare")
    s1 = job.steps.get(name="s1")
    step_retry(actor=olga, step_id=s1.pk, pool="spare", reason="primary is down")
    s1.refresh_from_db()
    assert s1.pool.name == "spare"
    drain()
    assert {c.operation_id for c in fake_remote.calls_for("s1")} == {s1.operation_id}
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED


def test_retry_on_an_unknown_pool_is_refused_and_changes_nothing(
    drain: Callable, fake_remote: FakeRemote, supervise: Callable, olga: User
) -> None:
    job = held_job(drain, fake_remote, supervise)
    s1 = job.steps.get(name="s1")
    with pytest.raises(InvalidInput, match="unknown pool"):
        step_retry(actor=olga, step_id=s1.pk, pool="nowhere")
    s1.refresh_from_db()
    assert s1.status == StepStatus.HELD
    assert not Event.objects.filter(job=job, kind="operator_retry").exists()


def test_a_step_in_flight_cannot_be_retried(olga: User) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    with pytest.raises(ActionNotAllowed, match="dispatched"):
        step_retry(actor=olga, step_id=job.steps.get().pk)


@pytest.mark.sqlite
def test_resolve_completes_a_held_step_with_the_operators_output_and_reason(
    drain: Callable, fake_remote: FakeRemote, supervise: Callable, olga: User
) -> None:
    job = held_job(drain, fake_remote, supervise)
    s1 = job.steps.get(name="s1")
    step_resolve(actor=olga, step_id=s1.pk, output={"ref": "manual-42"}, reason="confirmed by phone")
    s1.refresh_from_db()
    assert s1.status == StepStatus.SUCCEEDED and s1.output == {"ref": "manual-42"}
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    resolved = Event.objects.get(step=s1, kind="step_resolved")
    assert resolved.actor == olga and resolved.reason == "confirmed by phone"
    assert fake_remote.calls_for("s2")[0].payload["results"] == {"s1": {"ref": "manual-42"}}


def test_resolve_of_a_finished_step_is_refused(olga: User, fake_remote: FakeRemote, drain: Callable) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    drain()
    with pytest.raises(ActionNotAllowed):
        step_resolve(actor=olga, step_id=job.steps.get().pk, output={})


def test_resolve_needs_an_object_as_output(olga: User) -> None:
    with pytest.raises(InvalidInput, match="JSON object"):
        step_resolve(actor=olga, step_id=1, output=[1, 2])


@pytest.mark.usefixtures("one_delivery_per_task")
@pytest.mark.sqlite
def test_compensate_undoes_what_ran_and_a_second_click_is_refused(
    drain: Callable, fake_remote: FakeRemote, olga: User
) -> None:
    chain(n=3)
    job = job_submit(workflow="chain", input={}).job
    from scheduler.tasks import run_attempt

    run_attempt(job.steps.get(name="s1").pk, 1)
    job_compensate(actor=olga, job_id=job.pk, reason="wrong address")
    with pytest.raises(ActionNotAllowed):
        job_compensate(actor=olga, job_id=job.pk)
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPENSATED
    assert job.compensation_reason == "operator"
    assert fake_remote.compensations() == ["s1"]


def test_a_finished_job_cannot_be_cancelled(drain: Callable, fake_remote: FakeRemote, olga: User) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    drain()
    with pytest.raises(ActionNotAllowed, match="succeeded"):
        job_cancel(actor=olga, job_id=job.pk)


def test_pause_and_resume_are_refused_when_already_in_that_state(olga: User) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    with pytest.raises(ActionNotAllowed, match="not paused"):
        job_resume(actor=olga, job_id=job.pk)
    job_pause(actor=olga, job_id=job.pk)
    with pytest.raises(ActionNotAllowed, match="already paused"):
        job_pause(actor=olga, job_id=job.pk)


def test_a_paused_jobs_step_is_not_retried_by_hand(
    drain: Callable, fake_remote: FakeRemote, supervise: Callable, olga: User
) -> None:
    job = held_job(drain, fake_remote, supervise)
    job_pause(actor=olga, job_id=job.pk)
    with pytest.raises(ActionNotAllowed, match="paused"):
        step_retry(actor=olga, step_id=job.steps.get(name="s1").pk)


@pytest.mark.parametrize("actor", [None, AnonymousUser()])
def test_an_action_without_a_signed_in_user_is_refused(actor: object) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    with pytest.raises(ActionNotAllowed, match="signed-in user"):
        job_cancel(actor=actor, job_id=job.pk)  # type: ignore[arg-type]
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING


def test_unknown_ids_are_not_found(olga: User) -> None:
    with pytest.raises(NotFound):
        step_retry(actor=olga, step_id=999_999)
    with pytest.raises(NotFound):
        job_cancel(actor=olga, job_id="00000000-0000-0000-0000-000000000000")


@pytest.mark.sqlite
def test_a_job_failed_by_policy_can_be_reopened_by_retrying_its_step(
    drain: Callable, fake_remote: FakeRemote, supervise: Callable, olga: User
) -> None:
    make_policy("failing", on_exhausted="fail", max_attempts=1)
    make_workflow("f", step("s1", policy="failing"))
    fake_remote.script("s1", Outcome.TRANSIENT_FAILURE)
    job = job_submit(workflow="f", input={}).job
    drain()
    supervise()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    step_retry(actor=olga, step_id=Step.objects.get(job=job).pk, reason="remote fixed")
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    reopened = Event.objects.get(job=job, kind="job_running", from_status=JobStatus.FAILED)
    assert reopened.actor == olga


def test_a_bulk_preview_says_what_would_happen_and_changes_nothing(
    drain: Callable, fake_remote: FakeRemote, supervise: Callable, olga: User
) -> None:
    from supervisor.services import bulk_preview

    job = held_job(drain, fake_remote, supervise)
    held, pending = job.steps.get(name="s1"), job.steps.get(name="s2")
    before = Event.objects.count()
    items = {i.step: i for i in bulk_preview(action="retry", step_ids=[held.pk, pending.pk])}
    assert items["s1"].allowed and "dispatch attempt 2" in items["s1"].detail
    assert not items["s2"].allowed and "pending" in items["s2"].detail
    assert Event.objects.count() == before


def test_a_bulk_retry_reports_each_item_and_one_refusal_does_not_stop_the_rest(
    drain: Callable, fake_remote: FakeRemote, supervise: Callable, olga: User
) -> None:
    from supervisor.services import bulk_run

    make_policy("holding", on_exhausted="hold", max_attempts=1)
    make_workflow("h", step("s1", policy="holding"))
    fake_remote.script("s1", *[Outcome.TRANSIENT_FAILURE] * 3)
    jobs = [job_submit(workflow="h", input={"n": n}).job for n in range(3)]
    drain()
    supervise()
    ids = [Step.objects.get(job=j).pk for j in jobs]
    done = Step.objects.get(pk=ids[0])
    step_retry(actor=olga, step_id=done.pk)  # somebody else acted first on one of them
    results = bulk_run(actor=olga, action="retry", step_ids=ids)
    assert [r.allowed for r in results] == [False, True, True]
    assert "dispatched" in results[0].detail
    assert Attempt.objects.filter(step_id__in=ids).count() == 3 + 3


def test_bulk_actions_refuse_an_unknown_action(olga: User) -> None:
    from supervisor.services import bulk_preview, bulk_run

    with pytest.raises(InvalidInput):
        bulk_preview(action="explode", step_ids=[])
    with pytest.raises(InvalidInput):
        bulk_run(actor=olga, action="explode", step_ids=[])


@pytest.mark.parametrize("step_id", ["abc", None, 2**70, -1, "1; drop"])
def test_a_malformed_step_id_is_not_found(olga: User, step_id: object) -> None:
    with pytest.raises(NotFound):
        step_retry(actor=olga, step_id=step_id)


def test_a_resolve_output_the_database_cannot_store_is_refused(
    drain: Callable, fake_remote: FakeRemote, supervise: Callable, olga: User
) -> None:
    job = held_job(drain, fake_remote, supervise)
    s1 = job.steps.get(name="s1")
    with pytest.raises(InvalidInput, match="NUL"):
        step_resolve(actor=olga, step_id=s1.pk, output={"note": "a\x00b"})
    s1.refresh_from_db()
    assert s1.status == StepStatus.HELD


def test_the_job_transition_caused_by_an_operator_names_the_operator(
    drain: Callable, fake_remote: FakeRemote, supervise: Callable, olga: User
) -> None:
    job = held_job(drain, fake_remote, supervise)
    step_retry(actor=olga, step_id=job.steps.get(name="s1").pk)
    assert Event.objects.get(job=job, kind="job_running", from_status=JobStatus.NEEDS_ATTENTION).actor == olga
