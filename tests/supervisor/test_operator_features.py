"""What operators and submitters ask for once the basics work: rerun from a step, a retry with an
edited input, schedules, pool limits and priorities, search, a viewer role, and the console's
lists and actions in the API."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.utils import timezone

from agents.fake import FakeRemote
from agents.models import AgentPool
from sas_project.errors import InvalidInput
from scheduler.models import Attempt, Event, EventKind, Job, JobStatus, Outcome, Schedule, Step, StepStatus
from scheduler.schedules import next_fire, schedule_create, schedule_update, schedules_fire
from scheduler.services import job_submit
from scheduler.services.capacity import forget_limits_cache, pump
from tests.api.support import V1, client_for, make_user
from tests.factories import chain, make_policy, make_pool, make_workflow, step

pytestmark = pytest.mark.django_db
Supervise = Callable[..., Any]


@pytest.fixture(autouse=True)
def _fresh_limits() -> None:
    forget_limits_cache()


def steps_of(job: Job) -> dict[str, Step]:
    return {s.name: s for s in Step.objects.filter(job=job, kind="action")}


# --- rerun ------------------------------------------------------------------------------------------


def _failed_at_s2(drain: Callable, fake_remote: FakeRemote, supervise: Supervise) -> Job:
    make_policy("once", max_attempts=1, on_exhausted="fail")
    make_workflow("three", step("s1"), step("s2", "s1", policy="once"), step("s3", "s2"))
    fake_remote.script("s2", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="three", input={"order": 1}).job
    drain()
    supervise()
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    return job


@pytest.mark.sqlite
def test_a_rerun_reuses_what_came_before_and_runs_the_rest_with_new_operation_ids(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    original = _failed_at_s2(drain, fake_remote, supervise)
    before = steps_of(original)
    ops = client_for(make_user("olga", "operators"))
    response = ops.post(
        f"{V1}/jobs/{original.pk}/rerun/",
        {"from_step": "s2", "input": {"order": 1, "card": "new"}, "reason": "card replaced"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["rerun_of"] == str(original.pk) and response["Location"] == f"{V1}/jobs/{body['id']}/"
    rerun = Job.objects.get(pk=body["id"])
    assert rerun.input == {"order": 1, "card": "new"}
    drain()
    rerun.refresh_from_db()
    assert rerun.status == JobStatus.SUCCEEDED
    after = steps_of(rerun)
    # s1 was reused: not called again, its output kept; s2 and s3 ran with new operation IDs.
    assert after["s1"].reused_from_id == before["s1"].pk and after["s1"].output == before["s1"].output
    assert after["s1"].attempt == 0
    assert [c.payload["step"] for c in fake_remote.calls].count("s1") == 1
    assert after["s2"].operation_id != before["s2"].operation_id
    assert {after["s2"].operation_id, after["s3"].operation_id}.isdisjoint(
        {s.operation_id for s in before.values()}
    )
    # Both jobs record who and why; the original lists its rerun.
    submitted = Event.objects.get(job=rerun, kind=EventKind.JOB_SUBMITTED)
    assert submitted.actor.username == "olga" and submitted.reason == "card replaced"
    assert submitted.data["rerun_of"] == str(original.pk) and submitted.data["reused"] == ["s1"]
    noted = Event.objects.get(job=original, kind=EventKind.OPERATOR_RERUN)
    assert noted.actor.username == "olga" and noted.data["rerun_job"] == str(rerun.pk)
    assert ops.get(f"{V1}/jobs/{original.pk}/").json()["reruns"] == [str(rerun.pk)]


def test_a_rerun_does_not_compensate_what_it_reused(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    original = _failed_at_s2(drain, fake_remote, supervise)
    from supervisor.services import job_compensate, job_rerun

    olga = make_user("olga", "operators")
    fake_remote.script("s2", Outcome.BUSINESS_FAILURE)
    rerun = job_rerun(actor=olga, job_id=original.pk, from_step="s2")
    drain()
    job_compensate(actor=olga, job_id=rerun.pk, reason="give up")
    drain()
    rerun.refresh_from_db()
    assert rerun.status == JobStatus.COMPENSATED
    assert fake_remote.compensations() == []  # s1's effect is the original job's


@pytest.mark.parametrize(
    ("body", "status"),
    [({"from_step": "nope"}, 400), ({}, 400), ({"from_step": "s2", "input": [1]}, 400)],
)
def test_a_bad_rerun_is_refused_and_changes_nothing(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise, body: dict[str, Any], status: int
) -> None:
    original = _failed_at_s2(drain, fake_remote, supervise)
    ops = client_for(make_user("olga", "operators"))
    jobs = Job.objects.count()
    assert ops.post(f"{V1}/jobs/{original.pk}/rerun/", body, format="json").status_code == status
    assert Job.objects.count() == jobs


def test_a_live_job_is_not_rerun(fake_remote: FakeRemote) -> None:
    chain(n=2)
    job = job_submit(workflow="chain", input={}).job
    ops = client_for(make_user("olga", "operators"))
    response = ops.post(f"{V1}/jobs/{job.pk}/rerun/", {"from_step": "s1"}, format="json")
    assert response.status_code == 409 and "settled" in response.json()["detail"]


def test_only_operators_rerun(drain: Callable, fake_remote: FakeRemote, supervise: Supervise) -> None:
    original = _failed_at_s2(drain, fake_remote, supervise)
    for role in ("submitters", "viewers"):
        client = client_for(make_user(f"u-{role}", role))
        assert (
            client.post(f"{V1}/jobs/{original.pk}/rerun/", {"from_step": "s2"}, format="json").status_code
            == 403
        )


# --- retry with an edited input ---------------------------------------------------------------------


@pytest.mark.sqlite
def test_a_refused_step_is_retried_with_an_edited_input_and_a_new_operation_id(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_policy("holding", max_attempts=1, on_exhausted="hold", retry_on=["transient_failure"])
    make_workflow("pay", step("charge", policy="holding"))
    fake_remote.script("charge", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="pay", input={"card": "old"}).job
    drain()
    supervise()
    charge = job.steps.get()
    assert charge.status == StepStatus.HELD
    old_operation = charge.operation_id
    ops = client_for(make_user("olga", "operators"))
    response = ops.post(
        f"{V1}/steps/{charge.pk}/retry/", {"input": {"card": "new"}, "reason": "card updated"}, format="json"
    )
    assert response.status_code == 200, response.json()
    drain()
    charge.refresh_from_db()
    assert charge.status == StepStatus.SUCCEEDED and charge.operation_id != old_operation
    assert fake_remote.calls[-1].payload["input"] == {"card": "new"}
    assert fake_remote.calls[-1].operation_id == charge.operation_id
    event = Event.objects.get(step=charge, kind=EventKind.OPERATOR_RETRY)
    assert event.data["input"] == {"old": {"card": "old"}, "new": {"card": "new"}}
    assert event.data["operation_id"]["old"] == old_operation and event.actor.username == "olga"


def test_the_undo_of_a_step_retried_with_an_edited_input_gets_that_input(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_policy("holding", max_attempts=1, on_exhausted="hold", retry_on=["transient_failure"])
    make_workflow("pay", step("charge", policy="holding"), step("ship", "charge"))
    fake_remote.script("charge", Outcome.BUSINESS_FAILURE)
    fake_remote.script("ship", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="pay", input={"card": "old"}).job
    drain()
    supervise()
    charge = job.steps.get(name="charge")
    ops = client_for(make_user("olga", "operators"))
    ops.post(f"{V1}/steps/{charge.pk}/retry/", {"input": {"card": "new"}}, format="json")
    drain()
    assert job.steps.get(name="charge").status == StepStatus.SUCCEEDED
    for _ in range(3):  # ship is refused: the job is compensated
        supervise()
        drain()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPENSATED
    refund = [c for c in fake_remote.calls if c.payload.get("compensates")]
    assert refund and refund[-1].payload["input"] == {"card": "new"}  # what was charged is undone


def test_an_edited_retry_is_refused_when_the_old_request_may_have_happened(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_policy("holding", max_attempts=1, on_exhausted="hold")
    make_workflow("pay", step("charge", policy="holding"))
    fake_remote.script("charge", Outcome.NO_ANSWER)
    job = job_submit(workflow="pay", input={}).job
    drain()
    supervise()
    charge = job.steps.get()
    ops = client_for(make_user("olga", "operators"))
    response = ops.post(f"{V1}/steps/{charge.pk}/retry/", {"input": {"x": 1}}, format="json")
    assert response.status_code == 409 and "may have taken effect" in response.json()["detail"]
    charge.refresh_from_db()
    assert charge.input_override is None and charge.status == StepStatus.HELD


# --- schedules ----------------------------------------------------------------------------------------


@pytest.mark.sqlite
def test_a_schedule_fires_once_per_firing_even_when_two_loops_fire(fake_remote: FakeRemote) -> None:
    chain(n=1)
    sam = make_user("sam", "submitters")
    schedule = schedule_create(
        name="every-minute", actor=sam, workflow="chain", input={"k": 1}, cron="* * * * *"
    )
    assert schedule.next_fire_at is not None
    fire_at = schedule.next_fire_at
    later = fire_at + dt.timedelta(seconds=5)
    assert schedules_fire(later) == 1
    assert schedules_fire(later) == 0  # the second loop finds it fired
    job = Job.objects.get()
    assert job.idempotency_key == f"schedule:{schedule.pk}:{fire_at.isoformat()}" and job.submitter == sam
    assert Event.objects.filter(job=job, kind=EventKind.JOB_SCHEDULED).count() == 1
    schedule.refresh_from_db()
    assert schedule.last_job_id == job.pk and schedule.next_fire_at == fire_at + dt.timedelta(minutes=1)


@pytest.mark.parametrize(("catch_up", "jobs"), [("once", 1), ("skip", 0)])
def test_firings_missed_during_downtime_are_caught_up_once_or_skipped(
    fake_remote: FakeRemote, catch_up: str, jobs: int
) -> None:
    chain(n=1)
    schedule = schedule_create(
        name="hourly", actor=None, workflow="chain", cron="0 * * * *", catch_up=catch_up
    )
    assert schedule.next_fire_at is not None
    after_downtime = schedule.next_fire_at + dt.timedelta(hours=5, minutes=3)
    assert schedules_fire(after_downtime) == jobs
    schedule.refresh_from_db()
    assert schedule.next_fire_at > after_downtime
    if jobs:
        latest = after_downtime.replace(minute=0, second=0, microsecond=0)
        assert Job.objects.get().idempotency_key.endswith(latest.isoformat())


def test_a_cron_schedule_follows_its_time_zone() -> None:
    schedule = Schedule(name="x", workflow="chain", cron="0 9 * * *", timezone="Europe/Paris")
    after = dt.datetime(2026, 7, 1, 12, 0, tzinfo=dt.UTC)
    assert next_fire(schedule, after) == dt.datetime(2026, 7, 2, 7, 0, tzinfo=dt.UTC)  # 09:00 CEST
    winter = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
    assert next_fire(schedule, winter) == dt.datetime(2026, 12, 2, 8, 0, tzinfo=dt.UTC)  # 09:00 CET


def test_a_one_off_schedule_fires_once_and_a_paused_one_not_at_all(fake_remote: FakeRemote) -> None:
    chain(n=1)
    sam = make_user("sam", "submitters")
    client = client_for(sam)
    run_at = (timezone.now() + dt.timedelta(minutes=5)).isoformat()
    created = client.post(
        f"{V1}/schedules/", {"name": "once", "workflow": "chain", "run_at": run_at}, format="json"
    )
    assert created.status_code == 201, created.json()
    client.post(
        f"{V1}/schedules/", {"name": "paused", "workflow": "chain", "cron": "* * * * *"}, format="json"
    )
    assert client.post(f"{V1}/schedules/paused/pause/").json()["paused"] is True
    assert client.post(f"{V1}/schedules/paused/pause/").status_code == 409
    later = timezone.now() + dt.timedelta(minutes=6)
    assert schedules_fire(later) == 1
    assert Schedule.objects.get(name="once").next_fire_at is None
    assert schedules_fire(later + dt.timedelta(minutes=10)) == 0
    assert client.post(f"{V1}/schedules/paused/resume/").json()["paused"] is False


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "a", "workflow": "nope", "cron": "* * * * *"}, "workflow"),
        ({"name": "a", "workflow": "chain", "cron": "61 * * * *"}, "cron"),
        ({"name": "a", "workflow": "chain"}, "run_at"),
        ({"name": "a", "workflow": "chain", "cron": "* * * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"name": "a", "workflow": "chain", "cron": "* * * * *", "run_at": "2030-01-01T00:00:00Z"}, "cron"),
        ({"name": "a", "workflow": "chain", "cron": "* * * * *", "input": [1]}, "input"),
    ],
)
def test_a_bad_schedule_is_a_400_naming_the_field(body: dict[str, Any], field: str) -> None:
    chain(n=1)
    client = client_for(make_user("sam", "submitters"))
    response = client.post(f"{V1}/schedules/", body, format="json")
    assert response.status_code == 400, response.json()
    assert response.json().get("field") == field or field in response.json(), response.json()
    assert not Schedule.objects.exists()


@pytest.mark.sqlite
def test_a_schedule_with_a_nul_in_its_business_key_is_refused_and_nothing_is_created() -> None:
    chain(n=1)
    sam = make_user("sam", "submitters")
    values = {"workflow": "chain", "cron": "* * * * *", "business_key": "order\x001"}
    response = client_for(sam).post(f"{V1}/schedules/", {"name": "s", **values}, format="json")
    assert response.status_code == 400, response.json()
    # The service refuses it too (the admin's and the API's one path), as a submission would.
    with pytest.raises(InvalidInput) as refused:
        schedule_create(name="s", actor=sam, **values)
    assert refused.value.detail == {"field": "business_key"}
    assert not Schedule.objects.exists()
    schedule_create(name="s", actor=sam, **{**values, "business_key": "order 1"})
    with pytest.raises(InvalidInput):
        schedule_update("s", actor=sam, changes={"business_key": "order\x002"})
    assert Schedule.objects.get().business_key == "order 1"


def test_a_schedule_is_its_creators_to_change(fake_remote: FakeRemote) -> None:
    chain(n=1)
    sam, eve = make_user("sam", "submitters"), make_user("eve", "submitters")
    client_for(sam).post(
        f"{V1}/schedules/", {"name": "s", "workflow": "chain", "cron": "* * * * *"}, format="json"
    )
    assert client_for(eve).get(f"{V1}/schedules/s/").status_code == 404
    assert client_for(eve).get(f"{V1}/schedules/").json()["count"] == 0
    ops = client_for(make_user("olga", "operators"))
    assert ops.patch(f"{V1}/schedules/s/", {"cron": "5 * * * *"}, format="json").status_code == 200
    assert client_for(sam).delete(f"{V1}/schedules/s/").status_code == 204
    assert LogEntry.objects.filter(object_repr="s").count() == 3  # added, changed, deleted


# --- limits and priorities ---------------------------------------------------------------------------


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
    pump()  # what each submission's commit starts
    # Nothing was dispatched where it became ready; the pump took two, the rest wait.
    statuses = sorted(Step.objects.values_list("status", flat=True))
    assert statuses.count(StepStatus.DISPATCHED) == 2 and statuses.count(StepStatus.WAITING) == 4
    waiting = Step.objects.filter(status=StepStatus.WAITING)
    assert all(s.deadline is None and s.attempt == 0 for s in waiting)  # no attempt, no deadline
    first = set(Step.objects.filter(status=StepStatus.DISPATCHED).values_list("job__priority", flat=True))
    assert first == {2}  # the two jobs of priority 2 went first
    assert Event.objects.filter(kind=EventKind.STEP_WAITING).count() == 6
    drain()
    pump()
    drain()
    pump()
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
    assert pump()[0] == 2
    assert Step.objects.filter(status=StepStatus.DISPATCHED).count() == 2
    # The two calls started just now (set again: the first pump's own time does not count).
    Attempt.objects.update(dispatched_at=timezone.now())
    count, wait = pump()
    assert count == 0 and wait is not None and 0 < wait <= 1
    # A second later the window has moved on: two more go.
    Attempt.objects.update(dispatched_at=timezone.now() - dt.timedelta(seconds=1.1))
    assert pump()[0] == 2


def test_a_paused_or_stopped_job_takes_no_slot(fake_remote: FakeRemote, drain: Callable) -> None:
    from supervisor.services import job_cancel, job_pause

    make_pool("slow", kind="python")
    AgentPool.objects.filter(name="slow").update(max_in_flight=1)
    forget_limits_cache()
    make_workflow("one", step("s1", pool="slow"))
    _first, second, third = (job_submit(workflow="one", input={"n": n}).job for n in range(3))
    pump()
    olga = make_user("olga", "operators")
    job_pause(actor=olga, job_id=second.pk)
    job_cancel(actor=olga, job_id=third.pk)
    assert Step.objects.get(job=third).status == StepStatus.SKIPPED
    drain()
    pump()
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


# --- search -------------------------------------------------------------------------------------------


@pytest.mark.sqlite
def test_jobs_are_found_by_business_key_idempotency_key_and_input_field(fake_remote: FakeRemote) -> None:
    chain(n=1)
    make_workflow("other", step("a"))
    sam = make_user("sam", "submitters")
    client = client_for(sam)
    one = client.post(
        f"{V1}/jobs/",
        {"workflow": "chain", "input": {"customer": 42, "tier": "gold"}, "business_key": "order 1001"},
        format="json",
        headers={"Idempotency-Key": "k-1"},
    ).json()
    client.post(f"{V1}/jobs/", {"workflow": "chain", "input": {"customer": 7}}, format="json")
    client.post(f"{V1}/jobs/", {"workflow": "other", "input": {"customer": 42}}, format="json")

    def ids(query: str) -> list[str]:
        response = client.get(f"{V1}/jobs/?{query}")
        assert response.status_code == 200, response.json()
        return [j["id"] for j in response.json()["results"]]

    assert ids("business_key=order%201001") == [one["id"]]
    assert ids("idempotency_key=k-1") == [one["id"]]
    assert ids("workflow=chain&input.customer=42") == [one["id"]]
    assert ids("workflow=chain&input.tier=gold") == [one["id"]]
    assert ids("workflow=chain&input.customer=8") == []
    assert one["business_key"] == "order 1001"
    assert client.get(f"{V1}/jobs/?input.customer=42").status_code == 400  # needs a workflow
    assert client.get(f"{V1}/jobs/?workflow=chain&input.a__b=1").status_code == 400


# --- the viewer role ------------------------------------------------------------------------------------


@pytest.mark.sqlite
def test_a_viewer_reads_everything_and_changes_nothing(fake_remote: FakeRemote, drain: Callable) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}, submitter=make_user("sam", "submitters")).job
    viewer = client_for(make_user("vic", "viewers"))
    for path in (
        "/jobs/",
        f"/jobs/{job.pk}/",
        f"/jobs/{job.pk}/events/",
        "/workflows/",
        "/pools/",
        "/policies/",
        "/attention/",
        "/supervisor/",
    ):
        assert viewer.get(f"{V1}{path}").status_code == 200, path
    assert viewer.get(f"{V1}/jobs/").json()["count"] == 1
    for method, path, body in [
        ("post", "/jobs/", {"workflow": "chain", "input": {}}),
        ("post", f"/jobs/{job.pk}/cancel/", {}),
        ("post", f"/steps/{job.steps.get().pk}/retry/", {}),
        ("post", "/attention/bulk/", {"action": "retry", "step_ids": [1], "dry_run": True}),
        ("post", "/policies/", {"name": "p"}),
    ]:
        assert getattr(viewer, method)(f"{V1}{path}", body, format="json").status_code == 403, path
    assert Job.objects.count() == 1


# --- the console's lists and actions in the API -----------------------------------------------------------


def test_attention_supervisor_and_bulk_actions_in_the_api(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_policy("holding", on_exhausted="hold", max_attempts=1)
    make_workflow("h", step("s1", policy="holding"))
    fake_remote.script("s1", Outcome.TRANSIENT_FAILURE, Outcome.TRANSIENT_FAILURE)
    jobs = [job_submit(workflow="h", input={"n": n}).job for n in range(2)]
    drain()
    supervise()
    ops = client_for(make_user("olga", "operators"))
    listed = ops.get(f"{V1}/attention/?workflow=h").json()
    assert listed["count"] == 2
    item = listed["results"][0]
    assert item["step"]["status"] == "held" and item["why"] and item["can_retry"] is True
    assert ops.get(f"{V1}/attention/?workflow=nothing").json()["count"] == 0
    status = ops.get(f"{V1}/supervisor/").json()
    assert status["lease"]["holder"] == "test-supervisor" and status["stale"] is False
    step_ids = [i["step"]["id"] for i in listed["results"]]
    preview = ops.post(
        f"{V1}/attention/bulk/", {"action": "retry", "step_ids": step_ids, "dry_run": True}, format="json"
    ).json()
    assert preview["dry_run"] is True and preview["done"] == 2
    assert set(Step.objects.filter(pk__in=step_ids).values_list("status", flat=True)) == {"held"}
    ran = ops.post(f"{V1}/attention/bulk/", {"action": "cancel", "step_ids": step_ids}, format="json").json()
    assert ran["done"] == 2 and {i["detail"] for i in ran["items"]} == {"cancelled"}
    drain()
    assert set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("status", flat=True)) == {
        "cancelled"
    }


def test_definitions_no_job_uses_are_deleted_and_used_ones_name_a_job(fake_remote: FakeRemote) -> None:
    chain(n=1)
    make_workflow("unused", step("a"))
    make_policy("spare")
    admin = client_for(make_user("ada", "administrators"))
    job = job_submit(workflow="chain", input={}).job
    assert admin.delete(f"{V1}/workflows/unused/").status_code == 204
    refused = admin.delete(f"{V1}/workflows/chain/")
    assert refused.status_code == 409 and str(job.pk) in refused.json()["detail"]
    assert admin.delete(f"{V1}/policies/spare/").status_code == 204
    assert admin.delete(f"{V1}/policies/default/").status_code == 409
    pool = admin.delete(f"{V1}/pools/local/")
    assert pool.status_code == 409 and "job" in pool.json()["detail"]
    admin.post(f"{V1}/pools/", {"name": "spare", "kind": "python"}, format="json")
    assert admin.delete(f"{V1}/pools/spare/").status_code == 204


@pytest.mark.sqlite
def test_optional_definition_fields_accept_null(fake_remote: FakeRemote) -> None:
    make_pool()
    make_policy()
    admin = client_for(make_user("ada", "administrators"))
    body = {
        "name": "nulls",
        "description": None,
        "deadline_seconds": None,
        "steps": [
            {
                "name": "a",
                "pool": "local",
                "path": "agents.builtin.noop",
                "policy": "default",
                "status_path": None,
                "compensation_path": None,
                "depends_on": None,
            }
        ],
    }
    response = admin.post(f"{V1}/workflows/", body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["steps"][0]["status_path"] == ""
    assert (
        admin.post(
            f"{V1}/pools/",
            {"name": "p2", "kind": "python", "alternate": None, "endpoints": None},
            format="json",
        ).status_code
        == 201
    )
    # A required field is still required.
    assert admin.post(f"{V1}/workflows/", {**body, "name": None}, format="json").status_code == 400


# --- a pool limit against a real remote, through a real cluster ---------------------------------------


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_burst_never_has_more_calls_in_flight_than_the_pools_limit(
    sandbox: Any, clusters: Callable[..., Any]
) -> None:
    from testbed.definitions import ensure_policy, ensure_pool, ensure_workflow
    from tests.processes import wait_until

    ensure_pool("limited", kind="http", endpoints=[sandbox.url], max_in_flight=5)
    ensure_policy("plain", timeout_seconds=30, max_attempts=3)
    ensure_workflow(
        "burst", [{"name": "reserve", "pool": "limited", "path": "/inventory/reserve", "policy": "plain"}]
    )
    sandbox.config(latency_ms=50)
    clusters("c1", SAS_Q_WORKERS=8)
    ids = [job_submit(workflow="burst", input={"n": n}, priority=n % 2).job_id for n in range(200)]

    def done() -> bool:
        return Job.objects.filter(pk__in=ids, status=JobStatus.SUCCEEDED).count() == len(ids)

    wait_until(done, timeout=180, interval=0.5, message="every job of the burst succeeded")
    stats = sandbox.stats()
    assert stats["max_concurrent"]["/inventory/reserve"] == 5  # the limit was reached, never passed
    assert stats["duplicates"] == 0


# --- the console's operator features (the browser tests drive the same views) -----------------------


def console_for(user: Any) -> Any:
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


def test_the_console_is_read_by_viewers_and_its_actions_refuse_them(
    fake_remote: FakeRemote, drain: Callable, supervise: Supervise
) -> None:
    job = _failed_at_s2(drain, fake_remote, supervise)
    schedule_create(name="s", actor=None, workflow="three", cron="* * * * *")
    viewer = console_for(make_user("vera", "viewers"))
    for path in ("/ops/", "/ops/attention/", "/ops/jobs/", f"/ops/jobs/{job.pk}/", "/ops/schedules/"):
        page = viewer.get(path)
        assert page.status_code == 200, path
        assert b'method="post" action="/ops/' not in page.content, path
    s2 = Step.objects.get(job=job, name="s2")
    for path, body in (
        (f"/ops/jobs/{job.pk}/rerun/", {"from_step": "s2"}),
        (f"/ops/steps/{s2.pk}/retry/", {}),
        (f"/ops/jobs/{job.pk}/act/", {"action": "compensate"}),
        ("/ops/schedules/s/act/", {"action": "pause"}),
    ):
        assert viewer.post(path, body).status_code == 403, path
    assert not Job.objects.filter(rerun_of=job).exists()
    assert Schedule.objects.get(name="s").paused_at is None
    # A user with no role reads nothing.
    assert console_for(make_user("nobody")).get("/ops/jobs/").status_code == 403


def test_a_console_rerun_with_bad_input_or_of_a_live_job_changes_nothing(
    fake_remote: FakeRemote, drain: Callable, supervise: Supervise
) -> None:
    job = _failed_at_s2(drain, fake_remote, supervise)
    ops = console_for(make_user("olga", "operators"))
    bad_json = ops.post(
        f"/ops/jobs/{job.pk}/rerun/", {"from_step": "s2", "input": "{nope"}, HTTP_HX_REQUEST="true"
    )
    assert bad_json.status_code == 400 and b"input is not valid JSON" in bad_json.content
    unknown = ops.post(f"/ops/jobs/{job.pk}/rerun/", {"from_step": "zz"}, HTTP_HX_REQUEST="true")
    assert unknown.status_code == 400
    live = job_submit(workflow="three", input={"order": 2}).job
    refused = ops.post(f"/ops/jobs/{live.pk}/rerun/", {"from_step": "s1"}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 409 and b"once it has settled" in refused.content
    assert not Job.objects.filter(rerun_of__isnull=False).exists()
    done = ops.post(f"/ops/jobs/{job.pk}/rerun/", {"from_step": "s2", "reason": "again"})
    rerun = Job.objects.get(rerun_of=job)
    assert done.status_code == 302 and done["Location"] == f"/ops/jobs/{rerun.pk}/"


def test_the_console_finds_jobs_by_business_or_idempotency_key(fake_remote: FakeRemote) -> None:
    chain(n=1)
    one = job_submit(workflow="chain", input={}, business_key="order-1001").job
    two = job_submit(workflow="chain", input={}, idempotency_key="client-key-7").job
    ops = console_for(make_user("olga", "operators"))
    page = ops.get("/ops/jobs/", {"key": "order-1001"}).content.decode()
    assert str(one.pk) in page and str(two.pk) not in page
    page = ops.get("/ops/jobs/", {"key": "client-key-7"}).content.decode()
    assert str(two.pk) in page and str(one.pk) not in page


def test_schedules_are_administered_through_the_same_rules(fake_remote: FakeRemote) -> None:
    chain(n=1)
    ada = make_user("ada", "administrators")
    ada.is_staff = True
    ada.save(update_fields=["is_staff"])
    admin = console_for(ada)
    form = {
        "name": "nightly",
        "workflow": "chain",
        "input": "{}",
        "business_key": "",
        "priority": "0",
        "cron": "61 * * * *",
        "timezone": "UTC",
        "catch_up": "once",
    }
    refused = admin.post("/admin/scheduler/schedule/add/", form)
    errors = re.findall(r"errorlist[^>]*>(.*?)</ul>", refused.content.decode(), re.S)
    assert refused.status_code == 200 and any("is not a cron expression" in e for e in errors), errors
    assert not Schedule.objects.exists()
    saved = admin.post("/admin/scheduler/schedule/add/", {**form, "cron": "0 3 * * *"})
    assert saved.status_code == 302, saved.content[:2000]
    schedule = Schedule.objects.get(name="nightly")
    assert schedule.next_fire_at is not None and schedule.created_by.username == "ada"
    assert LogEntry.objects.filter(object_repr="nightly").count() == 1
