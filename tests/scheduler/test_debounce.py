"""Debounce and throttle of job starts by key (scheduler.services.gates): a debounced job waits
its quiet period and is replaced by a newer job of its key meanwhile (the newest input wins); a
throttled key starts at most `limit` jobs per window, the rest in arrival order as it allows;
both come before the concurrency key."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from typing import Any

import pytest
from django.db.models import F
from django.urls import reverse
from django_q.models import OrmQ

from agents.fake import FakeRemote
from scheduler.models import Event, EventKind, Job, JobStatus, Quarantine, QuarantineLoop, Step, StepStatus
from scheduler.services import gates, job_submit
from scheduler.services.gates import gates_due, job_pass
from tests.api.support import V1, client_for, make_user
from tests.factories import make_workflow, step

pytestmark = [pytest.mark.sqlite, pytest.mark.django_db(transaction=True)]

J = JobStatus


def is_postgresql_url() -> bool:
    return os.environ.get("DATABASE_URL", "").startswith("postgres")


def debounced(
    name: str = "index", *, seconds: float = 30, max_seconds: float | None = None, **fields: Any
) -> None:
    spec: dict[str, Any] = {"key": "input.document", "seconds": seconds}
    if max_seconds is not None:
        spec["max_seconds"] = max_seconds
    make_workflow(name, step("fetch"), step("store", "fetch"), debounce=spec, **fields)


def throttled(name: str = "notify", *, limit: int = 2, per_seconds: float = 60, **fields: Any) -> None:
    make_workflow(
        name,
        step("send"),
        throttle={"key": "input.account", "per_seconds": per_seconds, "limit": limit},
        **fields,
    )


def submit(name: str, **payload: Any) -> Job:
    return job_submit(workflow=name, input=payload).job


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def elapse(seconds: float) -> None:
    """As if `seconds` passed: every time the gates read lies that much further in the past."""
    delta = dt.timedelta(seconds=seconds)
    Job.objects.update(created_at=F("created_at") - delta)
    Job.objects.filter(start_at__isnull=False).update(start_at=F("start_at") - delta)
    Job.objects.filter(debounce_since__isnull=False).update(debounce_since=F("debounce_since") - delta)
    Job.objects.filter(throttle_slot__isnull=False).update(throttle_slot=F("throttle_slot") - delta)


def pass_due() -> list[str]:
    """What the supervisor does when gates open: each due job passed in its own transaction."""
    return [job_pass(job_id, source="test") for job_id in gates_due(dt.datetime.now(dt.UTC), limit=100)]


def seconds_between(later: dt.datetime | None, earlier: dt.datetime | None) -> float:
    assert later is not None and earlier is not None
    return (later - earlier).total_seconds()


# --- debounce -------------------------------------------------------------------------------------


def test_a_newer_job_of_the_key_replaces_one_not_started_and_the_newest_input_wins(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    debounced()
    first, second, last = (submit("index", document="d-1", version=n) for n in range(3))
    other = submit("index", document="d-2", version=9)
    assert [fresh(j).status for j in (first, second, last, other)] == [
        J.CANCELLED,
        J.CANCELLED,
        J.WAITING,
        J.WAITING,
    ]
    # The replaced job's cancellation names its successor; nothing of it ever ran.
    for replaced, successor in ((first, second), (second, last)):
        event = Event.objects.get(job_id=replaced.pk, kind=EventKind.JOB_CANCELLED)
        assert event.from_status == J.WAITING and event.data["replaced_by"] == str(successor.pk)
        assert str(successor.pk) in event.reason and "newest input wins" in event.reason
        assert set(Step.objects.filter(job_id=replaced.pk).values_list("status", flat=True)) == {
            StepStatus.SKIPPED
        }
        waiting = Event.objects.get(job_id=successor.pk, kind=EventKind.JOB_WAITING)
        assert waiting.data["replaced"] == str(replaced.pk) and str(replaced.pk) in waiting.reason
    job = fresh(last)
    # It waits its quiet period from its own submission, holding nothing.
    assert job.start_gate == "debounce" and job.debounce_key == "d-1" and job.deadline is None
    assert seconds_between(job.start_at, job.created_at) == pytest.approx(30, abs=0.5)
    assert job.debounce_since == fresh(first).created_at
    assert OrmQ.objects.count() == 0

    assert pass_due() == []  # its time has not come
    elapse(31)
    assert sorted(pass_due()) == ["started", "started"]
    drain()
    assert fresh(last).status == fresh(other).status == J.SUCCEEDED
    assert sorted(c.payload["input"]["version"] for c in fake_remote.calls) == [2, 2, 9, 9]


def test_each_replacement_restarts_the_quiet_period_from_the_newest_submission(
    fake_remote: FakeRemote,
) -> None:
    debounced(seconds=30)
    first = submit("index", document="d")
    elapse(20)
    second = submit("index", document="d")
    assert fresh(first).status == J.CANCELLED
    assert seconds_between(fresh(second).start_at, fresh(second).created_at) == pytest.approx(30, abs=0.5)
    elapse(20)  # 40 s after the first: it would have started by now, not the second
    assert pass_due() == []
    elapse(11)
    assert pass_due() == ["started"] and fresh(second).status == J.RUNNING


def test_max_seconds_bounds_the_wait_of_a_chain_of_replacements(fake_remote: FakeRemote) -> None:
    debounced(seconds=60, max_seconds=90)
    first = submit("index", document="d")
    elapse(50)
    second = submit("index", document="d")
    assert seconds_between(fresh(second).start_at, fresh(first).created_at) == pytest.approx(90, abs=0.5)
    elapse(30)
    third = submit("index", document="d")
    # 80 s into the chain: 10 s left of its 90, not another 60.
    assert seconds_between(fresh(third).start_at, fresh(third).created_at) == pytest.approx(10, abs=0.5)
    event = Event.objects.get(job_id=third.pk, kind=EventKind.JOB_WAITING)
    assert "at most 90s after the first submission" in event.reason
    elapse(11)
    # Its time came, though no pass has started it yet: a newcomer does not replace it, it starts
    # a chain of its own.
    fourth = submit("index", document="d")
    assert fresh(third).status == J.WAITING and fresh(fourth).debounce_since == fresh(fourth).created_at
    assert pass_due() == ["started"]
    assert fresh(third).status == J.RUNNING and fresh(fourth).status == J.WAITING


def test_a_job_whose_debounce_key_reads_nothing_is_not_debounced(fake_remote: FakeRemote) -> None:
    debounced()
    first, second = submit("index"), submit("index")
    assert fresh(first).status == fresh(second).status == J.RUNNING
    assert fresh(first).start_gate == "" and fresh(first).debounce_key == ""


def test_the_idempotency_key_of_a_replaced_job_answers_with_it_cancelled(fake_remote: FakeRemote) -> None:
    debounced()
    client = client_for(make_user("sam", "submitters"))

    def post(version: int, key: str) -> Any:
        body = {"workflow": "index", "input": {"document": "d", "version": version}}
        return client.post(f"{V1}/jobs/", body, format="json", headers={"Idempotency-Key": key})

    first = post(1, "k-1")
    assert first.status_code == 201, first.content
    assert first.json()["waiting_for"]["kind"] == "debounce"
    second = post(2, "k-2")
    again = post(1, "k-1")
    assert again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"] and again.json()["status"] == J.CANCELLED
    assert Job.objects.count() == 2
    assert post(2, "k-2").json()["id"] == second.json()["id"]


def test_a_job_at_a_gate_reads_what_it_waits_for_and_until_when(fake_remote: FakeRemote) -> None:
    debounced()
    throttled(limit=1)
    client = client_for(make_user("sam", "submitters"))
    body = {"workflow": "index", "input": {"document": "d-7"}}
    document = client.get(f"{V1}/jobs/{client.post(f'{V1}/jobs/', body, format='json').json()['id']}/").json()
    job = Job.objects.get(pk=document["id"])
    assert job.start_at is not None
    until = job.start_at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    assert document["waiting_for"] == {"kind": "debounce", "key": "d-7", "until": until}
    ids = [
        client.post(f"{V1}/jobs/", {"workflow": "notify", "input": {"account": "a"}}, format="json").json()[
            "id"
        ]
        for _ in range(2)
    ]
    documents = [client.get(f"{V1}/jobs/{job_id}/").json() for job_id in ids]
    assert [d["status"] for d in documents] == [J.RUNNING, J.WAITING]
    assert documents[0]["waiting_for"] is None
    assert documents[1]["waiting_for"]["kind"] == "throttle" and documents[1]["waiting_for"]["key"] == "a"
    assert documents[1]["deadline"] is None


# --- throttle -------------------------------------------------------------------------------------


def test_a_throttled_key_starts_at_most_limit_jobs_per_window_and_the_rest_in_arrival_order(
    fake_remote: FakeRemote,
) -> None:
    throttled(limit=2, per_seconds=60)
    burst = [submit("notify", account="a", n=n) for n in range(5)]
    elsewhere = submit("notify", account="b")
    assert [fresh(j).status for j in burst] == [J.RUNNING, J.RUNNING, J.WAITING, J.WAITING, J.WAITING]
    assert fresh(elsewhere).status == J.RUNNING  # keys are independent
    start = fresh(burst[0]).throttle_slot
    places = [seconds_between(fresh(j).start_at, start) for j in burst[2:]]
    assert places == pytest.approx([60, 60, 120], abs=0.5)
    event = Event.objects.get(job_id=burst[2].pk, kind=EventKind.JOB_WAITING)
    assert event.data["waiting_for"]["kind"] == "throttle" and "2 per 60s" in event.reason

    assert pass_due() == []
    elapse(60)
    assert pass_due() == ["started", "started"]
    assert [fresh(j).status for j in burst] == [J.RUNNING] * 4 + [J.WAITING]
    running = [Event.objects.get(job_id=j.pk, kind=EventKind.JOB_RUNNING).pk for j in burst[2:4]]
    assert running == sorted(running)  # in the order they arrived
    # A newcomer queues behind the one waiting, even though it came after the window moved.
    late = submit("notify", account="a")
    assert fresh(late).status == J.WAITING
    assert fresh(late).start_at >= fresh(burst[4]).start_at  # type: ignore[operator]
    elapse(60)
    assert pass_due() == ["started", "started"]


def test_a_throttle_counts_the_starts_of_the_window_in_the_database(fake_remote: FakeRemote) -> None:
    throttled(limit=1, per_seconds=10)
    first = submit("notify", account="a")
    elapse(9)
    # Another process sees the same places: the window is not over.
    second = submit("notify", account="a")
    assert fresh(second).status == J.WAITING
    assert seconds_between(fresh(second).start_at, fresh(first).throttle_slot) == pytest.approx(10, abs=0.5)
    elapse(20)
    third = submit("notify", account="a")
    assert fresh(third).status == J.WAITING  # behind the second, which waits still
    # Its place had come, but the second started only now: the window counts the starts made,
    # so the third's place moves to a window after the second's start.
    assert pass_due() == ["started", ""]
    assert fresh(second).status == J.RUNNING and fresh(third).status == J.WAITING
    assert seconds_between(fresh(third).start_at, fresh(second).throttle_slot) == pytest.approx(10, abs=0.5)


def test_a_debounced_throttled_and_keyed_job_passes_each_gate_in_turn(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    make_workflow(
        "sync",
        step("push"),
        debounce={"key": "input.account", "seconds": 10},
        throttle={"key": "input.account", "per_seconds": 60, "limit": 1},
        concurrency={"key": "input.account", "limit": 1},
    )
    submit("sync", account="a")
    first = submit("sync", account="a")
    elapse(11)
    assert pass_due() == ["started"]  # the throttle had room, the key too
    assert fresh(first).concurrency_key == "a" and fresh(first).throttle_slot is not None
    second = submit("sync", account="a")
    elapse(11)
    assert pass_due() == ["throttled"]  # quiet, but the window holds one start per 60 s
    job = fresh(second)
    assert job.start_gate == "throttle" and job.concurrency_key == ""
    assert seconds_between(job.start_at, fresh(first).throttle_slot) == pytest.approx(60, abs=0.5)
    elapse(60)
    assert pass_due() == ["waiting_for_key"]  # the first still holds the key
    job = fresh(second)
    assert job.start_gate == "" and job.concurrency_key == "a" and job.status == J.WAITING
    event = Event.objects.filter(job_id=job.pk, kind=EventKind.JOB_WAITING).order_by("-id").first()
    assert event is not None and event.data["waiting_for"] == {"kind": "concurrency", "key": "a", "limit": 1}
    drain()
    assert fresh(first).status == fresh(second).status == J.SUCCEEDED


def test_a_gated_job_whose_pass_raises_is_quarantined_and_the_others_start(
    fake_remote: FakeRemote, supervise: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    debounced(seconds=5)
    poisoned, other = submit("index", document="p", poison=True), submit("index", document="q")
    elapse(6)
    admit = gates.job_admit_waiting

    def raising(unit: Any, *, state: Any, **kwargs: Any) -> str:
        if state.job.input.get("poison"):
            raise ValueError("an impossible value in this job")
        return admit(unit, state=state, **kwargs)

    monkeypatch.setattr(gates, "job_admit_waiting", raising)
    report = supervise()
    assert report.quarantined == 1 and report.decisions["gate_started"] == 1
    assert fresh(poisoned).status == J.WAITING and fresh(other).status == J.RUNNING
    quarantined = Quarantine.objects.get(job_id=poisoned.pk)
    assert quarantined.loop == QuarantineLoop.CONCURRENCY and "impossible value" in quarantined.error
    assert gates_due(dt.datetime.now(dt.UTC), limit=10) == []  # set aside, not tried at every pass


def test_the_supervisor_loop_starts_a_gated_job_within_a_tick_of_its_time(fake_remote: FakeRemote) -> None:
    from supervisor.loop import run_loop

    debounced(seconds=0.6)
    job = submit("index", document="d")
    # One scan at once (the job is not due), then the loop sleeps out its interval in ticks.
    run_loop(holder="test-loop", should_stop=lambda: False, interval=2.0, max_scans=1)
    started = Event.objects.get(job_id=job.pk, kind=EventKind.JOB_RUNNING)
    late = seconds_between(started.created_at, fresh(job).created_at) - 0.6
    assert 0 <= late < 0.6, late


def test_the_job_page_says_when_a_debounced_or_throttled_job_starts(
    fake_remote: FakeRemote, client: Any
) -> None:
    debounced()
    throttled(limit=1)
    waiting = submit("index", document="d")
    submit("notify", account="a")
    queued = submit("notify", account="a")
    client.force_login(make_user("olga", "operators"))
    page = " ".join(client.get(reverse("ops:job", args=[waiting.pk])).content.decode().split())
    assert 'debounced: key <span class="mono">d</span>, starts at' in page and "unless replaced" in page
    assert "Not dispatched: the job waits at its debounce." in page
    page = " ".join(client.get(reverse("ops:job", args=[queued.pk])).content.decode().split())
    assert 'throttled: key <span class="mono">a</span>, 1 per 60 s, starts at' in page


@pytest.mark.skipif(not is_postgresql_url(), reason="the SQL fast path")
def test_the_fast_path_leaves_every_job_of_a_gated_workflow_to_python(fake_remote: FakeRemote) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    throttled(limit=100)
    with CaptureQueriesContext(connection) as queries:
        job = submit("notify", account="a")
    assert any('INSERT INTO "scheduler_job"' in q["sql"] for q in queries)
    assert fresh(job).status == J.RUNNING and fresh(job).throttle_slot is not None


# --- validation -----------------------------------------------------------------------------------


def test_debounce_and_throttle_are_checked_when_a_workflow_is_saved() -> None:
    client = client_for(make_user("ada", "administrators"))
    step_spec = step("s")
    make_workflow("base", step_spec)
    bad = [
        ({"debounce": {"key": "", "seconds": 1}}, "debounce.key"),
        ({"debounce": {"key": "steps.x.output", "seconds": 1}}, "debounce.key"),
        ({"debounce": {"key": "input.a", "seconds": 0}}, "debounce.seconds"),
        ({"debounce": {"key": "input.a", "seconds": 86401}}, "debounce.seconds"),
        ({"debounce": {"key": "input.a", "seconds": 10, "max_seconds": 5}}, "debounce.max_seconds"),
        ({"debounce": {"key": "input.a", "seconds": 10, "extra": 1}}, "extra"),
        ({"throttle": {"key": "input.a", "per_seconds": 1, "limit": 0}}, "limit"),
        ({"throttle": {"key": "input.a", "per_seconds": 0, "limit": 1}}, "throttle.per_seconds"),
        ({"throttle": {"key": "input.a", "per_seconds": 90000, "limit": 1}}, "throttle.per_seconds"),
        ({"throttle": {"key": "input.[", "per_seconds": 1, "limit": 1}}, "throttle.key"),
        (
            {
                "debounce": {"key": "input.a", "seconds": 1},
                "concurrency": {"key": "input.a", "limit": 1, "on_limit": "cancel_newest"},
            },
            "cancel_newest",
        ),
    ]
    for fields, said in bad:
        answer = client.post(f"{V1}/workflows/", {"name": "w", "steps": [step_spec], **fields}, format="json")
        assert answer.status_code == 400, (fields, answer.content)
        assert said in answer.content.decode(), (fields, answer.content)
    gates_spec = {
        "debounce": {"key": "input.a", "seconds": 2.5, "max_seconds": 60},
        "throttle": {"key": "input.b", "per_seconds": 60, "limit": 10},
    }
    created = client.post(
        f"{V1}/workflows/", {"name": "w", "steps": [step_spec], **gates_spec}, format="json"
    )
    assert created.status_code == 201, created.content
    assert created.json()["debounce"] == gates_spec["debounce"]
    assert created.json()["throttle"] == gates_spec["throttle"]
    assert client.get(f"{V1}/workflows/base/").json()["debounce"] is None
    patched = client.patch(f"{V1}/workflows/w/", {"description": "d"}, format="json")
    assert patched.json()["throttle"]["limit"] == 10  # PATCH keeps it
    replaced = client.put(
        f"{V1}/workflows/w/",
        {"name": "w", "description": "", "deadline_seconds": None, "steps": [step_spec]},
        format="json",
    )
    assert replaced.json()["debounce"] is None and replaced.json()["throttle"] is None  # PUT states all
