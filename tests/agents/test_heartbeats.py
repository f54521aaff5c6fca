"""Heartbeats of calls that answer later: an HTTP remote that answered 202 POSTs them to
`<callback URL>heartbeat/`, a queue remote publishes them on the reply queue. A heartbeat moves
the attempt's deadline (not its status), a missed one is an ordinary no-answer for the scan, and
the next attempt of the operation carries the last details reported.

In-process against a loopback HTTP server and (for the queue) a real `redis-server`; time passes
by moving the rows' times back, never by sleeping.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db.models import F
from django.test import Client
from django.utils import timezone
from django_q.models import OrmQ

from agents.outcome import HEARTBEAT_DETAILS_MAX_BYTES, Outcome
from agents.queue import BadReply, Heartbeat, Reply, parse_reply
from scheduler.models import Attempt, Event, EventKind, Job, Step, StepStatus
from scheduler.replies import record_heartbeat, record_reply, run_replies
from scheduler.services import job_submit
from testbed.processes import RedisProcess, free_port, wait_until
from tests.agents.test_async_agents import callback_path, drain_queue, publish, run_tasks
from tests.agents.test_http import Remote, _reply
from tests.api.support import V1, client_for, make_user
from tests.factories import make_policy, make_pool, make_workflow, step

pytestmark = pytest.mark.django_db

HEARTBEAT = 2.0


@pytest.fixture
def accepting(settings: Any) -> Iterator[Remote]:
    """A remote that answers every call 202, with the service's callback URLs under testserver."""
    from agents import http

    settings.SAS_PUBLIC_URL = "http://testserver"
    remote = Remote()
    remote.handler = lambda h: _reply(h, 202, {"accepted": True})
    yield remote
    if http._client is not None:
        http._client.close()
        http._client = None
    remote.server.shutdown()
    remote.server.server_close()


def long_workflow(url: str, **policy: Any) -> None:
    make_pool("web", kind="http", endpoints=[url])
    make_policy("beating", **{"timeout_seconds": 30, "heartbeat_seconds": HEARTBEAT, **policy})
    make_workflow("long", step("work", pool="web", policy="beating", path="/work", compensation=""))


def start(remote: Remote, **policy: Any) -> tuple[Step, str]:
    """A job whose call the remote accepted; its step and heartbeat URL (a path on testserver)."""
    long_workflow(remote.url, **policy)
    job = job_submit(workflow="long", input={"n": 1}).job
    run_tasks()
    return job.steps.get(kind="action"), callback_path(remote) + "heartbeat/"


def beat(path: str, body: Any = None) -> Any:
    return Client().post(path, json.dumps({} if body is None else body), content_type="application/json")


def live_attempt(work: Step) -> Attempt:
    work.refresh_from_db()
    return Attempt.objects.get(step=work, number=work.attempt)


def time_passes(work: Step, seconds: float) -> None:
    """Move the step's and its attempts' times `seconds` back: as if that long had passed."""
    back = dt.timedelta(seconds=seconds)
    Step.objects.filter(pk=work.pk).update(
        deadline=F("deadline") - back, first_dispatched_at=F("first_dispatched_at") - back
    )
    Attempt.objects.filter(step=work).update(
        dispatched_at=F("dispatched_at") - back, deadline=F("deadline") - back
    )
    Attempt.objects.filter(step=work, started_at__isnull=False).update(started_at=F("started_at") - back)
    Attempt.objects.filter(step=work, heartbeat_at__isnull=False).update(
        heartbeat_at=F("heartbeat_at") - back
    )


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def extended(work: Step) -> list[Event]:
    return list(Event.objects.filter(step=work, kind=EventKind.DEADLINE_EXTENDED).order_by("id"))


# --- acceptance and the heartbeat URL ------------------------------------------------------------


@pytest.mark.sqlite
def test_an_accepted_call_is_due_one_heartbeat_after_its_acceptance(accepting: Remote) -> None:
    work, _ = start(accepting)
    accepted = Event.objects.get(step=work, kind=EventKind.CALL_ACCEPTED)
    attempt = live_attempt(work)
    due = accepted.created_at + dt.timedelta(seconds=HEARTBEAT)
    assert work.deadline == attempt.deadline == due  # not dispatch + timeout_seconds (30 s)
    assert accepted.data["heartbeat_seconds"] == HEARTBEAT
    assert "a heartbeat is due every 2 s" in accepted.reason


@pytest.mark.sqlite
def test_without_a_heartbeat_interval_an_accepted_call_keeps_its_timeout(accepting: Remote) -> None:
    work, _ = start(accepting, heartbeat_seconds=None)
    attempt = live_attempt(work)
    assert attempt.deadline == attempt.dispatched_at + dt.timedelta(seconds=30)
    assert "heartbeat" not in Event.objects.get(step=work, kind=EventKind.CALL_ACCEPTED).reason


@pytest.mark.sqlite
def test_a_heartbeat_records_its_details_and_moves_both_deadlines(accepting: Remote) -> None:
    work, path = start(accepting)
    response = beat(path, {"details": {"done": 40, "of": 100}})
    assert response.status_code == 200, response.json()
    attempt = live_attempt(work)
    assert attempt.heartbeat_details == {"done": 40, "of": 100}
    assert attempt.heartbeat_at is not None
    assert work.deadline == attempt.deadline == attempt.heartbeat_at + dt.timedelta(seconds=HEARTBEAT)
    assert response.json()["recorded"] is True
    assert parse_time(response.json()["deadline"]) == attempt.deadline
    assert (work.status, attempt.finished_at) == (StepStatus.DISPATCHED, None)


@pytest.mark.sqlite
def test_heartbeats_carry_a_call_past_its_timeout(accepting: Remote) -> None:
    work, path = start(accepting, timeout_seconds=3)
    for _ in range(3):
        time_passes(work, 1.5)  # 4.5 s after dispatch: past the 3 s timeout, and still alive
        assert beat(path).status_code == 200
    attempt = live_attempt(work)
    assert attempt.deadline > attempt.dispatched_at + dt.timedelta(seconds=3)
    assert work.status == StepStatus.DISPATCHED


@pytest.mark.sqlite
def test_only_the_first_heartbeat_and_the_one_past_the_timeout_write_an_event(accepting: Remote) -> None:
    work, path = start(accepting)
    assert beat(path, {"details": 1}).status_code == 200
    assert beat(path, {"details": 2}).status_code == 200
    time_passes(work, 29)  # the next deadline (now + 2 s) is past dispatch + 30 s
    assert beat(path, {"details": 3}).status_code == 200
    assert beat(path, {"details": 4}).status_code == 200
    first, past = extended(work)
    assert first.reason.startswith("first heartbeat of attempt 1")
    assert past.reason == "heartbeats carry attempt 1 past its timeout of 30 s"
    assert live_attempt(work).heartbeat_details == 4


@pytest.mark.sqlite
def test_a_heartbeat_without_details_keeps_the_last_ones(accepting: Remote) -> None:
    work, path = start(accepting)
    beat(path, {"details": {"page": 7}})
    before = live_attempt(work).heartbeat_at
    assert beat(path).status_code == 200
    assert beat(path, {"details": None}).status_code == 200
    attempt = live_attempt(work)
    assert attempt.heartbeat_details == {"page": 7}
    assert before is not None and attempt.heartbeat_at is not None and attempt.heartbeat_at >= before


@pytest.mark.sqlite
def test_a_heartbeat_never_moves_the_deadline_past_the_jobs_deadline(accepting: Remote) -> None:
    work, path = start(accepting)
    job_deadline = live_attempt(work).dispatched_at + dt.timedelta(seconds=1)
    Job.objects.filter(pk=work.job_id).update(deadline=job_deadline)
    assert beat(path).status_code == 200
    attempt = live_attempt(work)
    assert work.deadline == attempt.deadline == job_deadline
    (event,) = extended(work)
    assert "the deadline stops at the job's deadline" in event.reason


@pytest.mark.sqlite
def test_the_step_budget_caps_the_deadline_of_an_accepted_call(accepting: Remote) -> None:
    work, path = start(accepting, step_budget_seconds=1)
    assert work.first_dispatched_at is not None
    budget_end = work.first_dispatched_at + dt.timedelta(seconds=1)
    assert work.deadline == budget_end
    assert "the step's budget" in Event.objects.get(step=work, kind=EventKind.CALL_ACCEPTED).reason
    assert beat(path).status_code == 200
    assert live_attempt(work).deadline == budget_end


@pytest.mark.sqlite
def test_a_heartbeat_after_the_result_is_a_410_and_changes_nothing(accepting: Remote) -> None:
    work, path = start(accepting)
    result = Client().post(
        path.removesuffix("heartbeat/"),
        {"outcome": "succeeded", "output": {}},
        content_type="application/json",
    )
    assert result.status_code == 200
    events = Event.objects.count()
    response = beat(path, {"details": {"late": True}})
    assert response.status_code == 410 and response.json()["code"] == "attempt_given_up"
    attempt = Attempt.objects.get(step=work)
    assert (attempt.heartbeat_at, attempt.heartbeat_details) == (None, None)
    assert Event.objects.count() == events


@pytest.mark.sqlite
def test_a_heartbeat_for_an_attempt_the_supervisor_gave_up_is_a_410(
    accepting: Remote, supervise: Callable[..., Any]
) -> None:
    work, path = start(accepting)
    time_passes(work, 60)
    supervise()  # no heartbeat in time: timed out, retried at once (attempt 2)
    second = live_attempt(work)
    assert second.number == 2
    response = beat(path, {"details": "late"})
    assert response.status_code == 410
    first = Attempt.objects.get(step=work, number=1)
    assert first.outcome == Outcome.NO_ANSWER and first.heartbeat_at is None
    assert live_attempt(work).deadline == second.deadline


@pytest.mark.sqlite
@pytest.mark.parametrize(
    ("mangle", "body", "status"),
    [
        (lambda path: path.replace("/callbacks/", "/callbacks/x"), {}, 403),
        (lambda path: path, {"details": "x" * (HEARTBEAT_DETAILS_MAX_BYTES + 1)}, 400),
        (lambda path: path, {"details": 1, "progress": 2}, 400),
    ],
    ids=["bad-token", "details-too-large", "unknown-field"],
)
def test_a_bad_heartbeat_is_refused_and_changes_nothing(
    accepting: Remote, mangle: Callable[[str], str], body: Any, status: int
) -> None:
    work, path = start(accepting)
    deadline = live_attempt(work).deadline
    assert beat(mangle(path), body).status_code == status
    attempt = live_attempt(work)
    assert (attempt.heartbeat_at, attempt.deadline) == (None, deadline)


# --- the scan: a missed heartbeat is no answer -----------------------------------------------------


@pytest.mark.parametrize("fast_path", [True, False], ids=["set-wise", "per-step"])
def test_a_missed_heartbeat_is_timed_out_as_such_and_retried_by_policy(
    accepting: Remote, supervise: Callable[..., Any], settings: Any, fast_path: bool
) -> None:
    settings.SAS_FAST_PATH = fast_path
    # A backoff, so that the set-wise path takes the retry (a retry at once goes per step).
    work, path = start(accepting, backoff_initial_seconds=5, backoff_max_seconds=5)
    beat(path)
    time_passes(work, 3)
    supervise()
    work.refresh_from_db()
    assert work.status == StepStatus.RETRY_WAIT
    timed_out = Event.objects.get(step=work, kind=EventKind.STEP_TIMED_OUT)
    assert timed_out.reason == "no heartbeat within 2 s"
    assert timed_out.data["heartbeat_seconds"] == HEARTBEAT
    assert Attempt.objects.get(step=work).outcome == Outcome.NO_ANSWER


@pytest.mark.sqlite
def test_an_accepted_call_that_never_sent_a_heartbeat_missed_its_first(
    accepting: Remote, supervise: Callable[..., Any]
) -> None:
    work, _ = start(accepting)
    time_passes(work, 3)
    supervise()
    reason = Event.objects.get(step=work, kind=EventKind.STEP_TIMED_OUT).reason
    assert reason == "no heartbeat within 2 s"


@pytest.mark.sqlite
def test_a_call_the_remote_never_accepted_times_out_as_any_other(
    accepting: Remote, supervise: Callable[..., Any]
) -> None:
    long_workflow(accepting.url)
    job = job_submit(workflow="long", input={}).job
    OrmQ.objects.all().delete()  # its task lost: nothing was ever sent
    work = job.steps.get(kind="action")
    time_passes(work, 60)
    supervise()
    assert (
        Event.objects.get(step=work, kind=EventKind.STEP_TIMED_OUT).reason == "no outcome before the deadline"
    )


# --- the next attempt resumes ------------------------------------------------------------------------


def sent_bodies(remote: Remote) -> list[dict[str, Any]]:
    return [json.loads(r["body"]) for r in remote.requests if r["method"] == "POST"]


@pytest.mark.sqlite
def test_the_next_attempts_carry_the_last_details_any_earlier_attempt_reported(
    accepting: Remote, supervise: Callable[..., Any]
) -> None:
    work, path = start(accepting)
    beat(path, {"details": {"done_ms": 100}})
    beat(path, {"details": {"done_ms": 200}})
    for _ in range(2):  # attempt 1 and then attempt 2 (which sends no heartbeat) go silent
        time_passes(work, 60)
        supervise()
        run_tasks()
    first, second, third = sent_bodies(accepting)
    assert "heartbeat_details" not in first
    assert second["heartbeat_details"] == third["heartbeat_details"] == {"done_ms": 200}
    assert first["operation_id"] == second["operation_id"] == third["operation_id"]
    assert [b["attempt"] for b in (first, second, third)] == [1, 2, 3]


# --- where heartbeats are shown --------------------------------------------------------------------


@pytest.mark.sqlite
def test_the_api_shows_the_last_heartbeat_of_each_attempt(accepting: Remote) -> None:
    work, path = start(accepting)
    beat(path, {"details": {"rows": 12}})
    body = client_for(make_user("olga", "operators")).get(f"{V1}/jobs/{work.job_id}/").json()
    (attempt,) = body["steps"][0]["attempts"]
    assert attempt["heartbeat_details"] == {"rows": 12}
    stored = live_attempt(work).heartbeat_at
    assert parse_time(attempt["heartbeat_at"]) == stored


@pytest.mark.sqlite
def test_the_job_page_shows_the_last_heartbeat_of_each_attempt(accepting: Remote) -> None:
    work, path = start(accepting)
    beat(path, {"details": {"rows": 12}})
    console = Client()
    console.force_login(make_user("olga", "operators"))
    page = console.get(f"/ops/jobs/{work.job_id}/").content.decode()
    assert "last heartbeat" in page and "rows" in page


# --- queue remotes -------------------------------------------------------------------------------------


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisProcess]:
    server = RedisProcess(port=free_port(), log=tmp_path / "redis.log").start()
    yield server
    server.stop()


def queue_start(broker: str) -> Step:
    make_pool("mq", kind="queue", endpoints=[broker])
    make_policy("beating", timeout_seconds=30, heartbeat_seconds=HEARTBEAT, max_attempts=3)
    make_workflow(
        "queued", step("ship", pool="mq", policy="beating", path="shipping.schedule", compensation="")
    )
    job = job_submit(workflow="queued", input={}).job
    run_tasks()
    return job.steps.get(kind="action")


def test_a_heartbeat_message_is_read_beside_the_replies() -> None:
    assert parse_reply({"operation_id": "op", "attempt": 2, "heartbeat": True, "details": {"n": 1}}) == (
        Heartbeat(operation_id="op", attempt=2, details={"n": 1})
    )
    assert parse_reply({"operation_id": "op", "attempt": 2, "heartbeat": True}) == Heartbeat("op", 2)
    with pytest.raises(BadReply, match="larger than"):
        parse_reply({"operation_id": "op", "attempt": 1, "heartbeat": True, "details": "x" * 20000})
    with pytest.raises(BadReply, match="NUL"):
        parse_reply({"operation_id": "op", "attempt": 1, "heartbeat": True, "details": "a\x00"})


def test_a_queue_heartbeat_moves_the_deadline_until_the_reply(redis: RedisProcess) -> None:
    ship = queue_start(redis.url)
    heartbeat = Heartbeat(operation_id=ship.operation_id, attempt=1, details={"parcels": 3})
    assert record_heartbeat(heartbeat) == "recorded"
    attempt = live_attempt(ship)
    assert attempt.heartbeat_details == {"parcels": 3}
    assert attempt.heartbeat_at is not None
    assert attempt.deadline == attempt.heartbeat_at + dt.timedelta(seconds=HEARTBEAT)
    reply = parse_reply(
        {"operation_id": ship.operation_id, "attempt": 1, "outcome": "succeeded", "output": {}}
    )
    assert isinstance(reply, Reply) and record_reply(reply) == "recorded"
    assert record_heartbeat(heartbeat) == "gone"
    assert record_heartbeat(Heartbeat(operation_id="nobody", attempt=1)) == "unknown"


def test_the_next_queue_message_carries_the_last_heartbeat_details(
    redis: RedisProcess, supervise: Callable[..., Any]
) -> None:
    ship = queue_start(redis.url)
    record_heartbeat(Heartbeat(operation_id=ship.operation_id, attempt=1, details={"parcels": 3}))
    time_passes(ship, 60)
    supervise()
    run_tasks()
    first, second = drain_queue(redis.url, "shipping.schedule")
    assert "heartbeat_details" not in first
    assert second["heartbeat_details"] == {"parcels": 3} and second["attempt"] == 2


@pytest.mark.django_db(transaction=True)
def test_the_reply_consumer_records_heartbeats_from_the_broker(redis: RedisProcess) -> None:
    ship = queue_start(redis.url)
    publish(
        redis.url,
        "sas.replies",
        {"operation_id": ship.operation_id, "attempt": 1, "heartbeat": True, "details": {"step": "a"}},
    )
    started = timezone.now()

    def heard() -> bool:
        return Attempt.objects.filter(step=ship, heartbeat_details={"step": "a"}).exists()

    run_replies(lambda: heard() or (timezone.now() - started).total_seconds() > 20, refresh=1.0)
    wait_until(heard, timeout=5, message="the heartbeat was recorded")
    assert live_attempt(ship).finished_at is None
