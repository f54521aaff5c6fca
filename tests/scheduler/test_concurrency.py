"""Flow control by key (scheduler.services.flow): a workflow's `concurrency` holds its jobs to
`limit` live ones per key value; the rest wait (holding nothing, with no deadline yet) and start
in arrival order as the key frees, or are refused, or cancel the oldest holder."""

from __future__ import annotations

import datetime as dt
import itertools
import os
from collections.abc import Callable
from typing import Any

import pytest
from django.urls import reverse
from django_q.models import OrmQ

from agents.fake import FakeRemote
from sas_project.errors import KeyBusy
from scheduler.models import (
    Attempt,
    Event,
    EventKind,
    Job,
    JobStatus,
    Quarantine,
    QuarantineLoop,
    Step,
    StepStatus,
)
from scheduler.services import flow, job_submit
from scheduler.services.flow import waiting_keys
from supervisor.services import job_cancel
from tests.api.support import V1, client_for, make_user
from tests.factories import make_workflow, step

pytestmark = [pytest.mark.sqlite, pytest.mark.django_db(transaction=True)]

J = JobStatus


def is_postgresql_url() -> bool:
    return os.environ.get("DATABASE_URL", "").startswith("postgres")


def keyed(name: str = "orders", *, limit: int = 1, on_limit: str = "queue", **fields: Any) -> None:
    make_workflow(
        name,
        step("reserve"),
        step("charge", "reserve"),
        concurrency={"key": "input.account", "limit": limit, "on_limit": on_limit},
        **fields,
    )


def submit(account: Any, name: str = "orders", **extra: Any) -> Job:
    return job_submit(workflow=name, input={"account": account, **extra}).job


def status(job: Job) -> str:
    return Job.objects.get(pk=job.pk).status


def held_intervals(jobs: list[Job]) -> list[tuple[int, int]]:
    """Per job, the ids of the events that began and ended its hold of the key: its submission
    (or its start, when it waited) and its settling."""
    intervals = []
    for job in jobs:
        events = list(Event.objects.filter(job_id=job.pk).order_by("id"))
        waited = any(e.kind == EventKind.JOB_WAITING for e in events)
        start = next(
            e.id for e in events if e.kind == (EventKind.JOB_RUNNING if waited else EventKind.JOB_SUBMITTED)
        )
        end = next(e.id for e in events if e.to_status in (J.SUCCEEDED, J.COMPENSATED, J.CANCELLED))
        intervals.append((start, end))
    return intervals


def test_jobs_over_the_limit_wait_holding_nothing_and_start_in_arrival_order(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    keyed(deadline_seconds=600)
    a, b, c, d = submit("acct-1"), submit("acct-1"), submit("acct-2"), submit("acct-1")
    assert [status(j) for j in (a, b, c, d)] == [J.RUNNING, J.WAITING, J.RUNNING, J.WAITING]
    for waiting in (b, d):
        job = Job.objects.get(pk=waiting.pk)
        # Nothing dispatched, no queue row, no deadline running while it waits.
        assert job.deadline is None and job.concurrency_key == "acct-1"
        assert set(Step.objects.filter(job=job).values_list("status", flat=True)) == {StepStatus.PENDING}
        event = Event.objects.get(job_id=job.pk, kind=EventKind.JOB_WAITING)
        assert event.data["waiting_for"] == {"kind": "concurrency", "key": "acct-1", "limit": 1}
        assert "1 of 1 running" in event.reason
    assert OrmQ.objects.count() == 2  # a's and c's first calls only

    drain()
    assert [status(j) for j in (a, b, c, d)] == [J.SUCCEEDED] * 4
    # acct-1's jobs held the key one after the other, in the order they arrived.
    intervals = held_intervals([a, b, d])
    assert intervals == sorted(intervals)
    assert all(earlier[1] < later[0] for earlier, later in itertools.pairwise(intervals))
    started = Job.objects.get(pk=b.pk)
    assert started.deadline is not None and started.deadline > started.created_at


def test_a_key_that_reads_nothing_leaves_the_job_unlimited(fake_remote: FakeRemote) -> None:
    keyed()
    first, second = (job_submit(workflow="orders", input={}).job for _ in range(2))
    assert status(first) == status(second) == J.RUNNING
    assert Job.objects.get(pk=first.pk).concurrency_key == ""


def test_a_key_is_its_values_text_and_an_object_its_compact_json(fake_remote: FakeRemote) -> None:
    keyed()
    submit(7)
    assert status(submit("7")) == J.WAITING  # the number 7 and the text "7" are one key
    assert Job.objects.filter(concurrency_key="7").count() == 2
    submit({"b": 1, "a": 2})
    assert status(submit({"a": 2, "b": 1})) == J.WAITING
    assert Job.objects.filter(concurrency_key='{"a":2,"b":1}').count() == 2


def test_cancel_newest_refuses_the_newcomer_with_a_409_naming_the_holder(fake_remote: FakeRemote) -> None:
    keyed(on_limit="cancel_newest")
    holder = submit("acct-1")
    with pytest.raises(KeyBusy) as refused:
        submit("acct-1")
    assert str(holder.pk) in refused.value.message
    assert Job.objects.count() == 1
    client = client_for(make_user("sam", "submitters"))
    answer = client.post(f"{V1}/jobs/", {"workflow": "orders", "input": {"account": "acct-1"}}, format="json")
    assert answer.status_code == 409, answer.content
    problem = answer.json()
    assert problem["code"] == "concurrency_limit" and str(holder.pk) in problem["detail"]
    assert problem["running"] == [str(holder.pk)] and problem["key"] == "acct-1"
    assert Job.objects.count() == 1
    assert status(submit("acct-2")) == J.RUNNING


def test_cancel_in_progress_compensates_the_holder_and_the_newcomer_starts_after_it(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    keyed(on_limit="cancel_in_progress")
    running = submit("acct-1")  # its first call dispatched, not answered yet
    newer = submit("acct-1")
    assert status(running) == J.COMPENSATING and status(newer) == J.WAITING
    assert Job.objects.get(pk=running.pk).compensation_reason == "cancel"
    event = Event.objects.get(job_id=running.pk, kind=EventKind.JOB_COMPENSATING)
    assert "cancel_in_progress" in event.reason
    drain()
    assert status(running) == J.CANCELLED
    assert status(newer) == J.SUCCEEDED
    before, after = held_intervals([running, newer])
    assert before[1] < after[0]


def test_an_operator_cancels_a_waiting_job_and_nothing_is_called(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    keyed()
    holder = submit("acct-1")
    waiting = submit("acct-1")
    job_cancel(actor=make_user("olga", "operators"), job_id=waiting.pk, reason="not needed")
    assert status(waiting) == J.CANCELLED
    drain()
    assert status(holder) == J.SUCCEEDED
    holders_operations = set(Step.objects.filter(job_id=holder.pk).values_list("operation_id", flat=True))
    assert {c.operation_id for c in fake_remote.calls} == holders_operations


def test_a_release_lost_in_a_crash_is_made_by_the_scans_sweep(
    fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    keyed()
    holder = submit("acct-1")
    waiting = submit("acct-1")
    # The holder settles without its release (as if its process died at the commit).
    Job.objects.filter(pk=holder.pk).update(status=J.FAILED)
    assert waiting_keys() == [("orders", "acct-1")]
    report = supervise()
    assert report.decisions["key_released"] == 1
    assert status(waiting) == J.RUNNING
    assert waiting_keys() == []


def test_a_waiting_job_whose_start_raises_is_quarantined_and_the_others_start(
    fake_remote: FakeRemote, supervise: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    keyed()
    holders = [submit("acct-1"), submit("acct-2")]
    poisoned, behind, other = submit("acct-1", poison=True), submit("acct-1"), submit("acct-2")
    Job.objects.filter(pk__in=[h.pk for h in holders]).update(status=J.SUCCEEDED)
    advance = flow.job_advance

    def raising(unit: Any, *, state: Any, source: str) -> None:
        if state.job.input.get("poison"):
            raise ValueError("an impossible value in this job")
        advance(unit, state=state, source=source)

    monkeypatch.setattr(flow, "job_advance", raising)
    report = supervise()
    assert report.quarantined == 1 and report.decisions["key_released"] == 2
    assert status(poisoned) == J.WAITING
    assert status(behind) == status(other) == J.RUNNING
    quarantined = Quarantine.objects.get(job_id=poisoned.pk)
    assert quarantined.loop == QuarantineLoop.CONCURRENCY and "impossible value" in quarantined.error


def test_the_concurrency_of_a_workflow_is_checked_when_it_is_saved() -> None:
    client = client_for(make_user("ada", "administrators"))
    step_spec = step("s")
    make_workflow("base", step_spec)
    bad = [
        ({"key": "", "limit": 1}, "key"),
        ({"key": "input.a", "limit": 0}, "limit"),
        ({"key": "input.a", "limit": 1, "on_limit": "drop"}, "on_limit"),
        ({"key": "input.a", "limit": 1, "extra": 1}, "extra"),
        ({"key": "steps.x.output", "limit": 1}, "concurrency"),
        ({"key": "input.[", "limit": 1}, "concurrency"),
    ]
    for concurrency, said in bad:
        answer = client.post(
            f"{V1}/workflows/",
            {"name": "w", "steps": [step_spec], "concurrency": concurrency},
            format="json",
        )
        assert answer.status_code == 400, (concurrency, answer.content)
        assert said in answer.content.decode(), (concurrency, answer.content)
    created = client.post(
        f"{V1}/workflows/",
        {"name": "w", "steps": [step_spec], "concurrency": {"key": "input.account", "limit": 2}},
        format="json",
    )
    assert created.status_code == 201, created.content
    assert created.json()["concurrency"] == {"key": "input.account", "limit": 2, "on_limit": "queue"}
    patched = client.patch(f"{V1}/workflows/w/", {"description": "d"}, format="json")
    assert patched.json()["concurrency"]["limit"] == 2  # PATCH keeps it
    replaced = client.put(
        f"{V1}/workflows/w/",
        {"name": "w", "description": "", "deadline_seconds": None, "steps": [step_spec]},
        format="json",
    )
    assert replaced.json()["concurrency"] is None  # PUT states all of it


def test_a_waiting_job_reads_waiting_for_its_key(fake_remote: FakeRemote) -> None:
    keyed(limit=2)
    sam = make_user("sam", "submitters")
    client = client_for(sam)
    body = {"workflow": "orders", "input": {"account": "a"}}
    ids = [client.post(f"{V1}/jobs/", body, format="json").json()["id"] for _ in range(3)]
    documents = [client.get(f"{V1}/jobs/{job_id}/").json() for job_id in ids]
    assert [d["status"] for d in documents] == [J.RUNNING, J.RUNNING, J.WAITING]
    assert [d["waiting_for"] for d in documents] == [
        None,
        None,
        {"kind": "concurrency", "key": "a", "limit": 2},
    ]
    assert documents[2]["deadline"] is None
    listed = client.get(f"{V1}/jobs/", {"status": "waiting"}).json()
    assert [j["id"] for j in listed["results"]] == [ids[2]]


def test_the_console_says_which_key_a_waiting_job_waits_for_and_behind_whom(
    fake_remote: FakeRemote, client: Any
) -> None:
    keyed()
    holder = submit("acct-7")
    submit("acct-7")
    last = submit("acct-7")
    client.force_login(make_user("olga", "operators"))
    page = client.get(reverse("ops:job", args=[last.pk])).content.decode()
    assert 'id="job-key-wait"' in page
    text = " ".join(page.split("job-key-wait", 1)[1].split("</p>", 1)[0].split())
    assert "acct-7</span>: 1 of 1 running, behind job" in text
    assert str(holder.pk)[:8] in text and "1 waiting ahead of it" in text
    assert "Not dispatched: the job waits for its concurrency key." in page
    assert 'id="job-key-wait"' not in client.get(reverse("ops:job", args=[holder.pk])).content.decode()


def test_a_child_refused_by_its_key_fails_the_parents_step_by_its_policy(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    keyed("refund", on_limit="cancel_newest")
    make_workflow(
        "order",
        step("take"),
        {"name": "undo", "kind": "workflow", "workflow": "refund", "depends_on": ["take"]},
    )
    holder = submit("acct-1", name="refund")
    OrmQ.objects.all().delete()  # its call stays in flight: it holds the key throughout
    parent = job_submit(workflow="order", input={"account": "acct-1"}).job
    drain()
    undo = Step.objects.get(job=parent, name="undo")
    assert undo.status == StepStatus.FAILED
    failed = Event.objects.get(step=undo, kind=EventKind.STEP_FAILED)
    assert "no child job started" in failed.reason and str(holder.pk) in failed.reason
    assert status(parent) == J.COMPENSATED
    assert not Job.objects.filter(parent_job=parent).exists()


def test_metrics_count_the_jobs_waiting_for_a_key_and_the_endpoints_asked_to_wait(
    fake_remote: FakeRemote,
) -> None:
    from django.test import Client
    from django.utils import timezone

    from agents.models import AgentEndpoint
    from tests.factories import make_pool
    from tests.supervisor.test_operations import metrics, total

    keyed()
    for _ in range(3):
        submit("acct-1")
    make_pool("remote", kind="http", endpoints=["http://a.example:1", "http://b.example:1"])
    AgentEndpoint.objects.filter(url="http://a.example:1").update(
        wait_asked_until=timezone.now() + dt.timedelta(minutes=5)
    )
    found = metrics(Client())
    assert total(found, "sas_jobs_waiting_for_key") == 2
    assert total(found, "sas_endpoints_asked_to_wait") == 1


@pytest.mark.skipif(not is_postgresql_url(), reason="the SQL fast path")
def test_the_fast_path_admits_a_key_with_room_and_leaves_the_rest_to_python(
    fake_remote: FakeRemote, drain: Callable[[], int]
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    keyed()

    def made_by_the_orm(account: Any) -> tuple[Job, bool]:
        with CaptureQueriesContext(connection) as queries:
            job = submit(account)
        return job, any('INSERT INTO "scheduler_job"' in q["sql"] for q in queries)

    first, by_orm = made_by_the_orm("acct-1")
    assert not by_orm and status(first) == J.RUNNING  # sas_submit admitted it
    assert Job.objects.get(pk=first.pk).concurrency_key == "acct-1"
    second, by_orm = made_by_the_orm("acct-1")
    assert by_orm and status(second) == J.WAITING  # no room: the general path made it wait
    number, by_orm = made_by_the_orm(7)
    assert by_orm and Job.objects.get(pk=number.pk).concurrency_key == "7"  # a number is Python's
    drain()
    assert {status(j) for j in (first, second, number)} == {J.SUCCEEDED}


def test_the_keys_page_lists_the_keys_held_and_waited_for_most_waiting_first(
    fake_remote: FakeRemote, client: Any
) -> None:
    keyed()
    for account in ("acct-1", "acct-1", "acct-1", "acct-2"):
        submit(account)
    client.force_login(make_user("vera", "operators"))
    page = client.get(reverse("ops:keys")).content.decode()
    rows = page.split('data-workflow="orders"')[1:]
    assert [row.split('data-key="', 1)[1].split('"', 1)[0] for row in rows] == ["acct-1", "acct-2"]
    first = " ".join(rows[0].split("</tr>", 1)[0].split())
    assert "1 / 1" in first and "status=waiting" in first and ">2</a>" in first
    assert 'href="/ops/keys/"' in page


def test_a_limited_pool_takes_waiting_calls_round_robin_across_keys(
    fake_remote: FakeRemote, drain: Callable[[], int]
) -> None:
    from agents.models import AgentPool
    from scheduler.services.capacity import forget_limits_cache
    from tests.factories import make_pool

    make_pool("slow", kind="python")
    AgentPool.objects.filter(name="slow").update(max_in_flight=1)
    forget_limits_cache()
    # The key's limit never binds: the pool's does.
    make_workflow("fair", step("call", pool="slow"), concurrency={"key": "input.account", "limit": 100})
    jobs = [submit(account, name="fair") for account in ("A", "A", "A", "A", "B")]
    assert Step.objects.filter(status=StepStatus.WAITING).count() == 4  # the pool takes one at a time
    drain()
    order = [
        Job.objects.get(pk=a.step.job_id).concurrency_key
        for a in Attempt.objects.filter(step__job__in=jobs).select_related("step").order_by("id")
    ]
    # B's call went second, not behind A's backlog; then A's in turn.
    assert order == ["A", "B", "A", "A", "A"]


def test_the_job_page_says_a_skipped_step_was_never_called_and_a_pending_one_what_it_awaits(
    fake_remote: FakeRemote, drain: Callable[[], int], client: Any
) -> None:
    make_workflow(
        "conditional",
        step("first"),
        {**step("maybe", "first"), "when": "input.go"},
        step("last", "maybe"),
    )
    skipped = job_submit(workflow="conditional", input={"go": False}).job
    drain()
    pending = job_submit(workflow="conditional", input={"go": True}).job  # its first call queued
    client.force_login(make_user("olga", "operators"))
    page = client.get(reverse("ops:job", args=[skipped.pk])).content.decode()
    assert "Skipped: never called." in page and "Not dispatched yet." not in page
    page = client.get(reverse("ops:job", args=[pending.pk])).content.decode()
    assert "Not dispatched yet: waiting for the steps it depends on." in page
