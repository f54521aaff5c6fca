"""The outcome's PostgreSQL function and the general path leave the same rows behind.

Each scenario runs twice, once with the function (SAS_FAST_PATH on) and once through the Python
services alone, on jobs of the same shape; the jobs, steps, attempts and events they leave are
compared field by field (timestamps as their offsets from the job's creation).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.db.models import F
from django_q.models import OrmQ

from agents.broker import task_of
from agents.health import choose_endpoint
from agents.models import AgentEndpoint, AgentPool
from agents.outcome import CallResult, Outcome
from scheduler.models import Attempt, Delivery, Event, Job, Step, Workflow
from scheduler.services import hotpath, job_submit, step_record_outcome
from scheduler.tasks import run_attempt
from tests.factories import chain, diamond, make_pool, make_workflow, step

pytestmark = pytest.mark.django_db


def _offset(value: dt.datetime | None, origin: dt.datetime) -> Any:
    return None if value is None else value >= origin


def snapshot(job: Job) -> dict[str, Any]:
    """What a job left behind, without ids, times or queue rows (they differ between runs)."""
    job.refresh_from_db()
    origin = job.created_at
    names = {s.pk: s.name for s in Step.objects.filter(job=job)}
    steps = [
        {
            "name": s.name,
            "kind": s.kind,
            "status": s.status,
            "attempt": s.attempt,
            "calls": s.calls,
            "last_outcome": s.last_outcome,
            "output": s.output,
            "error": s.error,
            "pool": s.pool.name if s.pool else None,
            "endpoint": s.endpoint.url if s.endpoint else None,
            "deadline_after_dispatch": (s.deadline - s.first_dispatched_at) if s.deadline else None,
            "first_dispatched": _offset(s.first_dispatched_at, origin),
            "finished": s.finished_at is not None,
        }
        for s in Step.objects.filter(job=job).select_related("pool", "endpoint").order_by("id")
    ]
    attempts = [
        {
            "step": names[a.step_id],
            "number": a.number,
            "kind": a.kind,
            "pool": a.pool.name,
            "endpoint_url": a.endpoint_url,
            "policy_version": a.policy_version,
            "timeout": a.deadline - a.dispatched_at,
            "started": a.started_at is not None,
            "queued": a.queue_row is not None,
            "finished": a.finished_at is not None,
            "outcome": a.outcome,
            "decided_by": a.decided_by,
            "status_code": a.status_code,
            "latency_ms": a.latency_ms,
            "response_excerpt": a.response_excerpt,
            "error": a.error,
            "late_outcome": a.late_outcome,
            "late": a.late_at is not None,
        }
        for a in Attempt.objects.filter(step__job=job).select_related("pool").order_by("step_id", "number")
    ]
    events = []
    for e in Event.objects.filter(job=job).order_by("id"):
        data = dict(e.data)
        if "deadline" in data:
            data["deadline"] = dt.datetime.fromisoformat(data["deadline"]) - e.created_at
        events.append(
            {
                "kind": e.kind,
                "step": names.get(e.step_id),
                "from": e.from_status,
                "to": e.to_status,
                "attempt": e.attempt,
                "source": e.source,
                "reason": e.reason,
                "data": data,
                "actor": e.actor_id,
            }
        )
    return {
        "job": {
            "status": job.status,
            "result": job.result,
            "finished": job.finished_at is not None,
            "deadline_after_creation": (job.deadline - origin) if job.deadline else None,
            "input": job.input,
            "request_hash": job.request_hash,
        },
        "steps": steps,
        "attempts": attempts,
        "events": events,
        "callbacks": [
            {"kind": d.kind, "target": d.target, "receiver": d.receiver, "status": d.status}
            for d in Delivery.objects.filter(job=job).order_by("id")
        ],
    }


def run_both(settings: Any, scenario: Callable[[], Job]) -> tuple[dict[str, Any], dict[str, Any]]:
    settings.SAS_FAST_PATH = True
    assert hotpath.enabled()
    taken: list[bool] = []
    real = hotpath.record_outcome

    def counting(*args: Any, **kwargs: Any) -> bool:
        taken.append(real(*args, **kwargs))
        return taken[-1]

    submitted: list[Any] = []
    real_submit = hotpath.submit

    def counting_submit(*args: Any, **kwargs: Any) -> Any:
        submitted.append(real_submit(*args, **kwargs))
        return submitted[-1]

    with pytest.MonkeyPatch.context() as patch:  # the fast run only
        patch.setattr(hotpath, "record_outcome", counting)
        patch.setattr(hotpath, "submit", counting_submit)
        fast = snapshot(scenario())
    assert submitted and all(submitted), "the fast run must have submitted through sas_submit"
    assert taken and all(taken), "the function must have recorded every outcome of the fast run"
    settings.SAS_FAST_PATH = False
    assert not hotpath.enabled()
    general = snapshot(scenario())
    return fast, general


def run_queue() -> None:
    """Run the queued agent tasks in this process until none is left."""
    while (row := OrmQ.objects.order_by("id").first()) is not None:
        row.delete()
        task = task_of(row.payload)
        run_attempt(*task["args"])


def test_the_function_is_installed_and_used(fake_remote: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    chain("one", n=1)
    job = job_submit(workflow="one", input={}).job
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_proc WHERE proname = 'sas_record_outcome'")
        assert cursor.fetchone()[0] == 1
    calls: list[int] = []
    real = hotpath.record_outcome

    def spy(*args: Any, **kwargs: Any) -> bool:
        taken = real(*args, **kwargs)
        calls.append(taken)
        return taken

    monkeypatch.setattr(hotpath, "record_outcome", spy)
    run_queue()
    assert calls == [True]
    job.refresh_from_db()
    assert job.status == "succeeded"


@pytest.mark.parametrize("shape", ["chain", "diamond"])
def test_a_job_that_succeeds_leaves_the_same_rows(settings: Any, fake_remote: Any, shape: str) -> None:
    chain("c", n=3)
    diamond("d")

    def scenario() -> Job:
        job = job_submit(workflow={"chain": "c", "diamond": "d"}[shape], input={"n": 1}).job
        run_queue()
        return job

    fast, general = run_both(settings, scenario)
    assert fast["job"]["status"] == "succeeded"
    assert fast == general


def test_a_job_with_a_callback_leaves_the_same_callback_naming_its_receiver(
    settings: Any, fake_remote: Any
) -> None:
    chain("c", n=1)

    def scenario() -> Job:
        job = job_submit(workflow="c", input={}, callback_url="https://Hooks.Example.com./done").job
        run_queue()
        return job

    fast, general = run_both(settings, scenario)
    assert fast["callbacks"] == [
        {
            "kind": "callback",
            "target": "https://Hooks.Example.com./done",
            "receiver": "hooks.example.com:443",
            "status": "pending",
        }
    ]
    assert fast == general


@pytest.mark.parametrize("join", [{"mode": "all"}, {"mode": "at_least", "count": 2}])
def test_a_fan_outs_items_leave_the_same_rows_and_the_function_takes_those_that_settle_nothing(
    settings: Any, fake_remote: Any, join: dict[str, Any]
) -> None:
    """The function records an item's success while other items are unsettled; the last one (the
    join) and a failure's decision stay with the general path. The rows are the same."""
    make_workflow(
        "fan", step("reserve"), {**step("ship", "reserve"), "for_each": "input.lines", "join": join}
    )
    fake_remote.script("ship", Outcome.SUCCEEDED, CallResult(Outcome.BUSINESS_FAILURE, error="refused"))

    def scenario() -> Job:
        job = job_submit(workflow="fan", input={"lines": [1, 2, 3, 4]}).job
        run_queue()
        fake_remote.script("ship", Outcome.SUCCEEDED, CallResult(Outcome.BUSINESS_FAILURE, error="refused"))
        return job

    settings.SAS_FAST_PATH = True
    taken: list[bool] = []
    real = hotpath.record_outcome

    def counting(*args: Any, **kwargs: Any) -> bool:
        taken.append(real(*args, **kwargs))
        return taken[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hotpath, "record_outcome", counting)
        fast = snapshot(scenario())
    # reserve (submitted on the general path: a fan-out job), items 0-2 (unsettled siblings
    # left), item 3 (the last: the join) and the refusal (recorded by the function).
    assert taken.count(True) >= 3 and taken.count(False) >= 1
    settings.SAS_FAST_PATH = False
    general = snapshot(scenario())
    assert fast == general
    assert fast["steps"][1]["name"] == "ship"


@pytest.mark.parametrize(
    "result",
    [
        CallResult(
            Outcome.TRANSIENT_FAILURE, status_code=503, latency_ms=12, excerpt="busy", error="HTTP 503"
        ),
        CallResult(Outcome.BUSINESS_FAILURE, status_code=409, latency_ms=3, excerpt="{}", error="HTTP 409"),
        CallResult(Outcome.NO_ANSWER, latency_ms=5000, error="no answer in time"),
    ],
    ids=["transient", "business", "no-answer"],
)
def test_a_failed_call_leaves_the_same_rows(settings: Any, fake_remote: Any, result: CallResult) -> None:
    chain("c", n=2)

    def scenario() -> Job:
        job = job_submit(workflow="c", input={}).job
        fake_remote.script("s1", result)
        run_queue()
        return job

    fast, general = run_both(settings, scenario)
    assert fast["steps"][0]["status"] in ("attempt_failed", "unknown")
    assert fast == general


def test_a_submission_with_a_deadline_and_an_http_root_leaves_the_same_rows(
    settings: Any, fake_remote: Any
) -> None:
    make_pool("web", kind="http", endpoints=["http://a.example:1", "http://b.example:1"])
    make_workflow(
        "timed",
        step("root", pool="web", path="/r", compensation="/undo"),
        step("local"),
        step("after", "root", "local"),
        deadline_seconds=600,
    )

    def scenario() -> Job:
        return job_submit(workflow="timed", input={"order": 7}).job

    settings.SAS_FAST_PATH = True
    fast = snapshot(scenario())
    settings.SAS_FAST_PATH = False
    general = snapshot(scenario())
    # The endpoint follows the step's id (spread): compare where each run's choice rule sends it.
    for run in (fast, general):
        for row in run["steps"] + run["attempts"]:
            row.pop("endpoint", None)
            row.pop("endpoint_url", None)
        for event in run["events"]:
            event["data"].pop("endpoint", None)
    assert fast["steps"][0]["status"] == fast["steps"][1]["status"] == "dispatched"
    assert fast == general


def test_a_success_after_the_deadline_is_noted_alike(settings: Any, fake_remote: Any) -> None:
    chain("c", n=2)

    def scenario() -> Job:
        job = job_submit(workflow="c", input={}).job
        first = job.steps.get(name="s1")
        Attempt.objects.filter(step=first).update(deadline=F("deadline") - dt.timedelta(hours=1))
        step_record_outcome(
            first.pk, number=1, result=CallResult(Outcome.SUCCEEDED, output={"late": 1}, latency_ms=7)
        )
        OrmQ.objects.all().delete()
        return job

    fast, general = run_both(settings, scenario)
    assert fast["attempts"][0]["late_outcome"] == "succeeded"
    assert fast["events"][2]["data"] == {"latency_ms": 7, "status_code": None, "late": True}
    assert fast == general


def test_the_function_declines_what_it_does_not_cover_and_writes_nothing(settings: Any) -> None:
    """A paused job: the function answers 'fallback' without a write; the general path records."""
    chain("c", n=1)
    job = job_submit(workflow="c", input={}).job
    Job.objects.filter(pk=job.pk).update(paused_at=F("created_at"))
    first = job.steps.get()
    before = (Event.objects.count(), Attempt.objects.filter(finished_at__isnull=False).count())
    assert not hotpath.record_outcome(
        first.pk, number=1, result=CallResult(Outcome.SUCCEEDED, output={}), source="agent"
    )
    assert (Event.objects.count(), Attempt.objects.filter(finished_at__isnull=False).count()) == before
    step_record_outcome(first.pk, number=1, result=CallResult(Outcome.SUCCEEDED, output={}))
    first.refresh_from_db()
    assert first.status == "succeeded"


def test_the_functions_leave_the_jobs_of_a_version_that_is_not_plain_to_the_general_path(
    settings: Any,
) -> None:
    """sas_submit and sas_record_outcome test the version's flag (scheduler.definitions.step_plain),
    not the language's features: a step they do not run (here a condition) makes the version not
    plain, and the general path submits and advances its jobs."""
    settings.SAS_FAST_PATH = True
    plain = chain("c", n=1)
    make_workflow("w", step("a"), {**step("b", "a"), "when": "input.go"})
    assert (
        hotpath.submit(workflow="w", payload={}, user=None, key=None, request_hash="h", source="test") is None
    )
    job = job_submit(workflow="w", input={"go": True}).job  # by the general path
    first = job.steps.get(name="a")
    assert first.status == "dispatched"
    success = CallResult(Outcome.SUCCEEDED, output={})
    assert not hotpath.record_outcome(step_id=first.pk, number=1, result=success, source="agent")
    # The flag alone decides: a plain version marked otherwise is left to the general path too.
    plain_job = job_submit(workflow="c", input={}).job
    Workflow.objects.filter(pk=plain.pk).update(plain=False)
    only = plain_job.steps.get()
    assert not hotpath.record_outcome(step_id=only.pk, number=1, result=success, source="agent")
    assert (
        hotpath.submit(workflow="c", payload={}, user=None, key=None, request_hash="h2", source="test")
        is None
    )


def test_the_function_picks_the_endpoint_the_python_choice_picks(settings: Any, fake_remote: Any) -> None:
    """Three endpoints, one cooling down: each dispatch by the function lands where
    agents.health.choose_endpoint would have sent it."""
    make_pool(
        "web",
        kind="http",
        endpoints=["http://a.example:1", "http://b.example:1", "http://c.example:1"],
    )
    AgentEndpoint.objects.filter(url="http://b.example:1").update(
        circuit_open_until=F("created_at") + dt.timedelta(days=3650)
    )
    make_workflow(
        "fan",
        step("root"),
        *[step(f"leaf{i}", "root", pool="web", path="/x", compensation="/undo") for i in range(6)],
    )
    settings.SAS_FAST_PATH = True
    job = job_submit(workflow="fan", input={}).job
    run_attempt(job.steps.get(name="root").pk, 1)
    pool = AgentPool.objects.get(name="web")
    leaves = Step.objects.filter(job=job, name__startswith="leaf").select_related("endpoint")
    from django.utils import timezone

    for leaf in leaves:
        expected = choose_endpoint(pool, now=timezone.now(), spread=leaf.pk)
        assert leaf.endpoint == expected
    assert {leaf.endpoint.url for leaf in leaves} == {"http://a.example:1", "http://c.example:1"}


@pytest.mark.django_db(transaction=True)  # two connections: the unwind's and the claim's
def test_a_claim_waits_for_a_compensation_holding_the_job_and_then_does_not_call() -> None:
    """The claim reads the job's status from its locked row: a compensation that holds the job
    when the claim comes is seen once it commits, so nothing is called for a step the unwind
    did not count as sent (the fault campaign found a fan-out item called and never undone)."""
    import threading
    import time

    from django.db import transaction

    from sas_project.database import is_postgresql
    from scheduler.models import JobStatus
    from scheduler.services.claims import NOT_CALLED, attempt_claim

    if not is_postgresql():
        pytest.skip("the claim's single statement")
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    one = Step.objects.get(job=job)
    claimed: list[Any] = []
    holding = threading.Event()

    def claim() -> None:
        try:
            holding.wait(10)
            claimed.append(attempt_claim(one.pk, number=one.attempt))
        finally:
            connection.close()

    thread = threading.Thread(target=claim)
    thread.start()
    with transaction.atomic():
        Job.objects.select_for_update().get(pk=job.pk)  # as the unwind holds it
        Job.objects.filter(pk=job.pk).update(status=JobStatus.COMPENSATING)
        holding.set()
        time.sleep(0.5)  # the claim is waiting on the job's row meanwhile
        assert not claimed
    thread.join(10)
    assert claimed == [NOT_CALLED]


def test_an_attempt_whose_endpoint_row_is_gone_is_claimed_as_one_whose_endpoint_was_cleared(
    settings: Any,
) -> None:
    """An endpoint removed from its pool while an attempt is dispatched to it leaves the attempt
    pointing at no row (the pointer is no constraint): the claim reads it as the ORM's SET_NULL
    leaves it, the call to the attempt's URL with no pool secret, and the job still reads."""
    from scheduler.selectors import job_for_reading
    from scheduler.services.claims import _claim_row

    make_pool(
        "web",
        kind="http",
        endpoints=[{"url": "http://a.example:1", "secret_header_name": "X-Key", "secret_header_value": "s3"}],
    )
    make_workflow("one", step("call", pool="web", path="/x", compensation="/undo"))
    settings.SAS_FAST_PATH = True
    job = job_submit(workflow="one", input={}).job
    call = Step.objects.get(job=job)
    attempt = Attempt.objects.get(step=call)
    assert attempt.endpoint_id is not None and attempt.endpoint_url == "http://a.example:1"
    with connection.cursor() as cursor:  # as the race leaves it: past the ORM's SET_NULL
        cursor.execute("DELETE FROM agents_agentendpoint WHERE id = %s", [attempt.endpoint_id])
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # what a commit would check
    row = _claim_row(call.pk, call.attempt)
    assert row is not None and row["claimed"] == 1
    assert row["endpoint_url"] == "http://a.example:1"
    assert row["secret_header_name"] in (None, "") and row["secret_header_value"] in (None, "")
    from django.contrib.auth.models import User

    reader = User.objects.create_superuser("reader", password="x")
    read = job_for_reading(user=reader, job_id=job.pk)
    assert [a.endpoint_url for a in read.steps[0].attempts] == ["http://a.example:1"]


@pytest.mark.django_db(transaction=True)  # two connections: the pool's editor's and the submitter's
def test_a_step_is_dispatched_while_an_edit_of_its_pool_holds_the_pool_row() -> None:
    """Dispatching a step writes pointers to its pool and endpoint without locking their rows:
    an administrator's edit or deletion of the pool (which holds the pool's row) does not stall
    every dispatch to it until the edit ends."""
    import threading

    from django.db import transaction

    from sas_project.database import is_postgresql

    if not is_postgresql():
        pytest.skip("row locks")
    make_pool("web", kind="http", endpoints=["http://a.example:1"])
    make_workflow("one", step("call", pool="web", path="/x", compensation="/undo"))
    dispatched = threading.Event()
    errors: list[BaseException] = []

    def submit() -> None:
        try:
            job_submit(workflow="one", input={})
            dispatched.set()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=submit)
    with transaction.atomic():
        AgentPool.objects.select_for_update().get(name="web")  # as pool_delete and an edit hold it
        thread.start()
        # With a foreign key to the pool the submission's commit waits here for the lock.
        done_while_held = dispatched.wait(10)
    thread.join(10)
    assert not errors
    assert done_while_held
    assert Attempt.objects.filter(
        step__job__workflow__name="one", endpoint__url="http://a.example:1"
    ).exists()


@pytest.mark.django_db(transaction=True)  # an announcement is sent when its transaction commits
def test_a_dispatch_announces_its_task_into_an_empty_queue_and_not_behind_a_waiting_one() -> None:
    """sas_dispatch_ready wakes an idle pusher (the queue had nothing else waiting) and leaves a
    busy one alone, also when the rows taken before it are still in the table's dead tuples."""
    import psycopg

    from agents.broker import CHANNEL

    assert hotpath.enabled()
    chain("one", n=1)
    params = {k: v for k, v in connection.get_connection_params().items() if k != "context"}
    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")

        def announced(wait: float) -> int:
            return len(list(listener.notifies(timeout=wait, stop_after=1)))

        job_submit(workflow="one", input={})
        assert announced(5) == 1  # into an empty queue
        job_submit(workflow="one", input={})
        assert announced(0.5) == 0  # behind the task still waiting
        taken = OrmQ.objects.order_by("id").first()
        assert taken is not None
        taken.delete()  # a pusher took the older one; the newer still waits
        job_submit(workflow="one", input={})
        assert announced(0.5) == 0
        OrmQ.objects.all().delete()  # every task taken: the pusher is idle again
        job_submit(workflow="one", input={})
        assert announced(5) == 1
