"""Fan-out over items: `for_each` makes one item per element, each with its own operation ID,
attempts and retries; `max_parallel` bounds the items in flight; the join (all, at least N, any)
settles the step; a join that cannot be met undoes the items that succeeded, highest index first,
before the step's policy decides the job; a list longer than the limit fails the step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from django.utils.module_loading import import_string
from django_q.models import OrmQ

from agents.broker import task_of
from agents.fake import FakeRemote
from agents.outcome import CallResult, CallSpec, Outcome
from scheduler.models import Event, EventKind, Job, JobStatus, Step, StepKind, StepStatus
from scheduler.services import job_submit
from supervisor.services import job_cancel
from tests.factories import make_policy, make_workflow, step

pytestmark = pytest.mark.django_db
S = StepStatus


def items_of(job: Job, name: str = "ship") -> list[Step]:
    return list(Step.objects.filter(job=job, parent__name=name, kind=StepKind.ITEM).order_by("item_index"))


def named(job: Job, name: str) -> Step:
    return Step.objects.get(job=job, name=name)


def order(**ship: Any) -> None:
    make_policy("once", max_attempts=1)
    make_workflow(
        "order",
        step("reserve"),
        {**step("ship", "reserve", policy="once"), "for_each": "input.lines", **ship},
        step("notify", "ship"),
    )


@pytest.mark.sqlite
def test_each_element_is_an_item_called_with_its_own_operation_id_and_the_step_outputs_their_list(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    order()
    job = job_submit(workflow="order", input={"lines": ["a", "b", "c"]}).job
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    ship = named(job, "ship")
    calls = fake_remote.calls_for("ship")
    assert sorted((c.payload["index"], c.payload["item"]) for c in calls) == [(0, "a"), (1, "b"), (2, "c")]
    assert sorted(c.operation_id for c in calls) == [f"{ship.operation_id}:{i}" for i in range(3)]
    assert all(c.payload["input"] == {"lines": ["a", "b", "c"]} for c in calls)
    assert ship.status == S.SUCCEEDED and ship.output == [{"ok": "ship"}] * 3
    assert [i.status for i in items_of(job)] == [S.SUCCEEDED] * 3
    started = Event.objects.get(step=ship, kind=EventKind.ITEMS_STARTED)
    assert started.data == {"items": 3, "max_parallel": None, "join": "all"}
    assert Event.objects.filter(step=ship, kind=EventKind.JOIN_MET).count() == 1
    # The step after the fan-out sees its outputs as results.
    (notify,) = fake_remote.calls_for("notify")
    assert notify.payload["results"]["ship"] == [{"ok": "ship"}] * 3


@pytest.mark.sqlite
def test_a_join_past_its_size_limit_refers_to_its_items_and_the_job_still_succeeds(
    drain: Callable[[], int], fake_remote: FakeRemote, settings: Any
) -> None:
    """Items' outputs together past SAS_MAX_JOIN_BYTES would travel in every later step's body and
    in the job document (or fail the write past PostgreSQL's limit, compensating a fan-out whose
    every item succeeded): the join refers to the items route instead."""
    settings.SAS_MAX_JOIN_BYTES = 200
    order()
    label = CallResult(Outcome.SUCCEEDED, output={"label": "x" * 100})
    fake_remote.script("ship", label, label, label)
    job = job_submit(workflow="order", input={"lines": ["a", "b", "c"]}).job
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    ship = named(job, "ship")
    assert ship.output["items"] == f"/api/v1/jobs/{job.pk}/steps/ship/items/"
    assert ship.output["total"] == 3 and ship.output["succeeded"] == 3 and ship.output["output_bytes"] > 200
    met = Event.objects.get(step=ship, kind=EventKind.JOIN_MET)
    assert met.data["by_reference"] is True
    (notify,) = fake_remote.calls_for("notify")
    assert notify.payload["results"]["ship"] == ship.output  # the reference, not 300 bytes of labels
    assert [i.output for i in items_of(job)] == [{"label": "x" * 100}] * 3  # kept on the items
    # Under the limit, the list itself.
    settings.SAS_MAX_JOIN_BYTES = 10_000
    fake_remote.script("ship", label)
    again = job_submit(workflow="order", input={"lines": ["a"]}).job
    drain()
    assert named(again, "ship").output == [{"label": "x" * 100}]


def test_max_parallel_bounds_the_items_in_flight(
    drain: Callable[[], int], fake_remote: FakeRemote, monkeypatch: pytest.MonkeyPatch
) -> None:
    order(max_parallel=2)
    seen: list[int] = []

    def remote(spec: CallSpec) -> CallResult:
        if spec.payload["step"] == "ship":
            seen.append(Step.objects.filter(kind=StepKind.ITEM, status=S.DISPATCHED).count())
        return fake_remote(spec)

    monkeypatch.setattr("agents.calls.run_call", remote)
    job = job_submit(workflow="order", input={"lines": list(range(7))}).job
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert len(seen) == 7 and max(seen) == 2


def test_a_failed_join_undoes_the_items_that_succeeded_once_highest_index_first(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    order(max_parallel=1)
    fake_remote.script("ship", Outcome.SUCCEEDED, Outcome.SUCCEEDED, Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="order", input={"lines": ["a", "b", "c", "d"]}).job
    drain()
    supervise()  # the refusal is not retried (max_attempts 1)
    drain()
    job.refresh_from_db()
    ship = named(job, "ship")
    assert [i.status for i in items_of(job)] == [S.COMPENSATED, S.COMPENSATED, S.FAILED, S.SKIPPED]
    undone = [c.payload.get("index") for c in fake_remote.calls if c.payload.get("compensates")]
    assert undone == [1, 0, None]  # the items, highest index first, then the step before the fan-out
    assert fake_remote.compensations() == ["ship", "ship", "reserve"]
    assert ship.status == S.FAILED and "join all cannot be met" in ship.error
    assert Event.objects.filter(step=ship, kind=EventKind.JOIN_FAILED).count() == 1
    assert job.status == JobStatus.COMPENSATED
    assert not fake_remote.calls_for("notify")


def test_join_at_least_succeeds_with_enough_items_and_keeps_the_failures_as_null(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    order(join={"mode": "at_least", "count": 2}, max_parallel=1)
    fake_remote.script("ship", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="order", input={"lines": ["a", "b", "c"]}).job
    drain()
    supervise()
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert named(job, "ship").output == [None, {"ok": "ship"}, {"ok": "ship"}]


def test_join_at_least_runs_every_item_and_tolerates_the_failures(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    order(join={"mode": "at_least", "count": 1}, max_parallel=1)
    fake_remote.script("ship", CallResult(Outcome.SUCCEEDED, output="first"), Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="order", input={"lines": ["a", "b", "c"]}).job
    drain()
    supervise()
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert [i.status for i in items_of(job)] == [S.SUCCEEDED, S.FAILED, S.SUCCEEDED]
    assert named(job, "ship").output == ["first", None, {"ok": "ship"}]


def test_a_met_join_undoes_the_failed_items_that_may_have_had_an_effect_before_it_succeeds(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    """An item that failed with no answer may have happened (the answer lost): the join met
    without it must not leave its effect behind. A refused item is not undone (a refusal is the
    operation's fate)."""
    order(join={"mode": "at_least", "count": 2}, max_parallel=1)
    fake_remote.script("ship", Outcome.SUCCEEDED, Outcome.NO_ANSWER, Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="order", input={"lines": ["a", "b", "c", "d"]}).job
    for _ in range(4):
        drain()
        supervise()  # the no answer and the refusal are not retried (max_attempts 1)
    drain()
    job.refresh_from_db()
    assert [i.status for i in items_of(job)] == [S.SUCCEEDED, S.COMPENSATED, S.FAILED, S.SUCCEEDED]
    undone = [c.payload.get("index") for c in fake_remote.calls if c.payload.get("compensates")]
    assert undone == [1]
    ship = named(job, "ship")
    assert ship.status == S.SUCCEEDED and ship.output[1:] == [None, None, {"ok": "ship"}]
    assert job.status == JobStatus.SUCCEEDED
    assert fake_remote.calls_for("notify")


def test_join_any_stops_starting_items_once_one_succeeded(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    order(join={"mode": "any"}, max_parallel=1)
    job = job_submit(workflow="order", input={"lines": ["a", "b", "c"]}).job
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert [i.status for i in items_of(job)] == [S.SUCCEEDED, S.SKIPPED, S.SKIPPED]
    assert len(fake_remote.calls_for("ship")) == 1


def test_a_list_longer_than_the_limit_fails_the_step_naming_the_limit(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    order()
    with override_settings(SAS_MAX_FANOUT_ITEMS=3):
        job = job_submit(workflow="order", input={"lines": [1, 2, 3, 4]}).job
        drain()
    job.refresh_from_db()
    ship = named(job, "ship")
    assert ship.status == S.FAILED
    assert ship.error == "for_each yielded 4 items: the limit is 3 (SAS_MAX_FANOUT_ITEMS)"
    assert not items_of(job) and not fake_remote.calls_for("ship")
    assert job.status == JobStatus.COMPENSATED


def test_an_item_key_names_the_items_in_their_operation_ids_and_must_be_unique(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    order(item_key="item.sku")
    job = job_submit(workflow="order", input={"lines": [{"sku": "A-1"}, {"sku": "B-2"}]}).job
    twice = job_submit(workflow="order", input={"lines": [{"sku": "A-1"}, {"sku": "A-1"}]}).job
    drain()
    ship = named(job, "ship")
    assert [i.operation_id for i in items_of(job)] == [f"{ship.operation_id}:A-1", f"{ship.operation_id}:B-2"]
    assert named(twice, "ship").error == "item_key gives two items the key 'A-1': keys name items uniquely"


def test_a_later_failure_undoes_the_fan_outs_items_in_their_place(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    make_policy("once", max_attempts=1)
    make_workflow(
        "order",
        step("reserve"),
        {**step("ship", "reserve"), "for_each": "input.lines"},
        step("notify", "ship", policy="once"),
    )
    fake_remote.script("notify", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="order", input={"lines": ["a", "b"]}).job
    drain()
    supervise()
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPENSATED
    assert named(job, "ship").status == S.COMPENSATED
    assert [i.status for i in items_of(job)] == [S.COMPENSATED, S.COMPENSATED]
    assert fake_remote.compensations() == ["ship", "ship", "reserve"]


def run_tasks(n: int) -> None:
    """Run the next `n` agent tasks (oldest first), and no more."""
    for _ in range(n):
        row = OrmQ.objects.order_by("id").first()
        assert row is not None
        row.delete()
        task = task_of(row.payload)
        import_string(task["func"])(*task["args"], **task["kwargs"])


@pytest.mark.usefixtures("one_delivery_per_task")
def test_cancelling_a_job_mid_fan_out_stops_its_items_and_undoes_those_that_ran(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    order(max_parallel=1)
    job = job_submit(workflow="order", input={"lines": ["a", "b", "c"]}).job
    run_tasks(2)  # reserve, then item 0; item 1 is dispatched, its task still queued
    job_cancel(actor=User.objects.create_user("olga"), job_id=job.pk, reason="changed their mind")
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert [i.status for i in items_of(job)] == [S.COMPENSATED, S.FAILED, S.SKIPPED]
    assert named(job, "ship").status == S.FAILED
    # Item 1's task found the job stopping and called nothing: nothing of it to undo.
    assert sorted(c.payload["index"] for c in fake_remote.calls_for("ship")) == [0]
    assert fake_remote.compensations() == ["ship", "reserve"]


@pytest.mark.usefixtures("one_delivery_per_task")
def test_items_stop_skips_the_items_not_started_abandons_those_awaiting_and_waits_for_calls_in_flight(
    fake_remote: FakeRemote,
) -> None:
    from scheduler.services import lock_job
    from scheduler.services.fanout import items_stop
    from scheduler.unit import unit_of_work

    order(max_parallel=1)
    fake_remote.script("ship", Outcome.SUCCEEDED, Outcome.TRANSIENT_FAILURE)
    job = job_submit(workflow="order", input={"lines": ["a", "b", "c", "d"]}).job
    run_tasks(2)  # reserve, then item 0; item 1 is dispatched, its task still queued

    def stop() -> bool:
        with unit_of_work() as unit:
            state = lock_job(unit, job_id=job.pk)
            ship = next(s for s in state.steps if s.name == "ship")
            return items_stop(unit, state=state, step=ship, source="test")

    assert stop() is False  # item 1's call is in flight
    assert [i.status for i in items_of(job)] == [S.SUCCEEDED, S.DISPATCHED, S.SKIPPED, S.SKIPPED]
    run_tasks(1)  # item 1's call fails, and awaits the policy's decision
    assert items_of(job)[1].status == S.ATTEMPT_FAILED
    assert stop() is True
    assert [i.status for i in items_of(job)] == [S.SUCCEEDED, S.FAILED, S.SKIPPED, S.SKIPPED]
    abandoned = Event.objects.get(step=items_of(job)[1], kind=EventKind.STEP_ABANDONED)
    assert abandoned.reason == "ship stops: no further attempts"


def test_an_operator_retries_a_fan_outs_items_not_the_fan_out(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    from sas_project.errors import ActionNotAllowed
    from supervisor.services import step_retry

    make_policy("holding", max_attempts=1, on_exhausted="hold")
    make_workflow("held", {**step("ship", policy="holding"), "for_each": "input.lines"})
    fake_remote.script("ship", Outcome.TRANSIENT_FAILURE)
    job = job_submit(workflow="held", input={"lines": ["a", "b"]}).job
    drain()
    supervise()
    drain()
    olga = User.objects.create_user("olga")
    held = [i for i in items_of(job) if i.status == S.HELD]
    assert len(held) == 1 and Job.objects.get(pk=job.pk).status == JobStatus.NEEDS_ATTENTION
    with pytest.raises(ActionNotAllowed, match="step ship is waiting: nothing to retry"):
        step_retry(actor=olga, step_id=named(job, "ship").pk)
    # A fan-out held by its policy (its list was refused) is not made again by a retry either.
    refused = job_submit(workflow="held", input={"lines": "not a list"}).job
    drain()
    assert named(refused, "ship").status == S.HELD
    with pytest.raises(ActionNotAllowed, match="fans out over items"):
        step_retry(actor=olga, step_id=named(refused, "ship").pk)
    step_retry(actor=olga, step_id=held[0].pk)
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert [i.status for i in items_of(job)] == [S.SUCCEEDED, S.SUCCEEDED]


def test_a_held_undo_of_a_failed_joins_item_makes_the_job_need_attention_until_it_is_retried(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    from supervisor.services import step_retry

    order()
    # Item 0 succeeds, item 1 is refused: the join fails and item 0 is undone; its undo fails
    # once, and the policy allows one attempt.
    fake_remote.script("ship", Outcome.SUCCEEDED, Outcome.BUSINESS_FAILURE)
    fake_remote.script("ship.compensate", Outcome.TRANSIENT_FAILURE)
    job = job_submit(workflow="order", input={"lines": ["a", "b"]}).job
    drain()
    for _ in range(3):
        supervise()
        drain()
    job.refresh_from_db()
    undo = named(job, "ship[0].compensate")
    assert undo.status == S.HELD
    assert named(job, "ship").status == S.WAITING
    assert job.status == JobStatus.NEEDS_ATTENTION
    attention = Event.objects.filter(job=job, kind=EventKind.JOB_NEEDS_ATTENTION).latest("id")
    assert attention.reason == "held: ship[0].compensate"
    step_retry(actor=User.objects.create_user("olga"), step_id=undo.pk)
    drain()
    for _ in range(2):
        supervise()
        drain()
    job.refresh_from_db()
    assert named(job, "ship[0].compensate").status == S.SUCCEEDED
    assert [i.status for i in items_of(job)] == [S.COMPENSATED, S.FAILED]
    assert named(job, "ship").status == S.FAILED
    assert job.status == JobStatus.COMPENSATED


def test_a_failed_join_undoes_an_item_it_stops_whose_call_got_no_answer(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    make_policy("thrice", max_attempts=3)
    make_workflow(
        "order",
        step("reserve"),
        {**step("ship", "reserve", policy="thrice"), "for_each": "input.lines", "max_parallel": 2},
    )
    # Item 0 is refused; item 1's call gets no answer (it may have been done) and awaits its
    # retry when the join fails: stopping it must not forget that its call may have had an effect.
    fake_remote.script("ship", Outcome.BUSINESS_FAILURE, Outcome.NO_ANSWER)
    job = job_submit(workflow="order", input={"lines": ["a", "b", "c"]}).job
    drain()
    assert [i.status for i in items_of(job)][:2] == [S.ATTEMPT_FAILED, S.UNKNOWN]
    for _ in range(3):
        supervise()
        drain()
    job.refresh_from_db()
    assert Event.objects.filter(step=named(job, "ship[1]"), kind=EventKind.STEP_ABANDONED).exists()
    assert [i.status for i in items_of(job)] == [S.FAILED, S.COMPENSATED, S.SKIPPED]
    assert [c.payload.get("index") for c in fake_remote.calls if c.payload.get("compensates")] == [1, None]
    assert job.status == JobStatus.COMPENSATED
