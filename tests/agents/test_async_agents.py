"""Agents that do not hold a worker: the queue kind on a real Redis, HTTP 202 + callback, and the
python-agent allow-list.

Unit-level tests run in-process against a real `redis-server` and a real HTTP server; the end to
end tests run real `qcluster` processes, the web server (the callback URL), and the sandbox
remote consuming its queues and answering 202.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core import signing
from django.test import Client
from django.utils import timezone
from django_q.models import OrmQ

from agents.outcome import ACCEPTED, AttemptKind, CallSpec, Outcome
from agents.python import call_python
from agents.queue import BadReply, call_queue, parse_reply
from agents.validation import validate_python_agent
from sas_project.errors import InvalidInput
from scheduler.callback_tokens import token_for
from scheduler.models import Attempt, Event, EventKind, Job, JobStatus, Step, StepStatus
from scheduler.replies import record_reply, run_replies
from scheduler.services import job_submit
from scheduler.tasks import run_attempt
from testbed.processes import RedisProcess, free_port, wait_until
from tests.agents.test_http import Remote, _reply
from tests.api.support import V1, client_for, make_user
from tests.factories import make_policy, make_pool, make_workflow, step

pytestmark = pytest.mark.django_db


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisProcess]:
    server = RedisProcess(port=free_port(), log=tmp_path / "redis.log").start()
    yield server
    server.stop()


def queue_workflow(broker: str, *, timeout: float = 30) -> None:
    make_pool("mq", kind="queue", endpoints=[broker])
    make_policy("later", timeout_seconds=timeout, max_attempts=3)
    make_workflow(
        "queued",
        step(
            "ship",
            pool="mq",
            policy="later",
            path="shipping.schedule",
            compensation="shipping.cancel",
            status_path="shipping.status",
        ),
    )


def drain_queue(broker: str, name: str) -> list[Any]:
    from kombu import Connection, Queue

    got: list[Any] = []
    with Connection(broker) as conn, conn.SimpleQueue(Queue(name, routing_key=name, durable=True)) as queue:
        while True:
            try:
                message = queue.get(timeout=0.5)
            except queue.Empty:
                return got
            got.append(message.payload)
            message.ack()


def publish(broker: str, name: str, body: Any) -> None:
    from kombu import Connection, Queue

    with Connection(broker) as conn, conn.Producer(serializer="json") as producer:
        producer.publish(body, routing_key=name, declare=[Queue(name, routing_key=name, durable=True)])


def run_tasks() -> None:
    """The queued agent tasks, in this process (the real task, the real agent)."""
    from agents.broker import task_of

    while (row := OrmQ.objects.order_by("id").first()) is not None:
        row.delete()
        task = task_of(row.payload)
        run_attempt(*task["args"])


# --- the queue agent ------------------------------------------------------------------------------


def test_a_queue_step_publishes_its_message_and_frees_the_worker(redis: RedisProcess) -> None:
    queue_workflow(redis.url)
    job = job_submit(workflow="queued", input={"sku": "A1"}).job
    run_tasks()  # returns with the call still open: published, not waited for
    ship = job.steps.get(kind="action")
    assert (ship.status, ship.attempt) == (StepStatus.DISPATCHED, 1)
    attempt = Attempt.objects.get(step=ship)
    assert attempt.started_at is not None and attempt.finished_at is None
    assert Event.objects.filter(step=ship, kind=EventKind.CALL_ACCEPTED).count() == 1
    (message,) = drain_queue(redis.url, "shipping.schedule")
    assert message == {
        "operation_id": ship.operation_id,
        "job_id": str(job.pk),
        "step": "ship",
        "attempt": 1,
        "kind": "call",
        "input": {"sku": "A1"},
        "results": {},
        "reply_to": "sas.replies",
    }


def test_a_reply_completes_the_step_and_repeats_late_and_unknown_ones_change_nothing(
    redis: RedisProcess,
) -> None:
    queue_workflow(redis.url)
    job = job_submit(workflow="queued", input={}).job
    run_tasks()
    ship = job.steps.get(kind="action")
    reply = parse_reply(
        {"operation_id": ship.operation_id, "attempt": 1, "outcome": "succeeded", "output": {"id": 7}}
    )
    assert record_reply(reply) == "recorded"
    ship.refresh_from_db()
    job.refresh_from_db()
    assert ship.status == StepStatus.SUCCEEDED and ship.output == {"id": 7}
    assert job.status == JobStatus.SUCCEEDED
    events = Event.objects.count()
    assert record_reply(reply) == "duplicate"
    refused = parse_reply(
        {"operation_id": ship.operation_id, "attempt": 1, "outcome": "refused", "error": "x"}
    )
    assert record_reply(refused) == "duplicate"
    unknown = parse_reply({"operation_id": "nobody", "attempt": 1, "outcome": "succeeded"})
    assert record_reply(unknown) == "unknown"
    assert Event.objects.count() == events
    ship.refresh_from_db()
    assert ship.status == StepStatus.SUCCEEDED and ship.output == {"id": 7}


@pytest.mark.parametrize(
    "output",
    [{"note": "a\x00b"}, {"amount": float("nan")}, {"amount": float("inf")}, {"a": {"b": "\ud800"}}],
)
def test_a_reply_whose_output_the_database_cannot_store_holds_the_step_with_its_success_recorded(
    redis: RedisProcess, output: Any
) -> None:
    queue_workflow(redis.url)
    job = job_submit(workflow="queued", input={}).job
    run_tasks()
    ship = job.steps.get(kind="action")
    reply = parse_reply(
        {"operation_id": ship.operation_id, "attempt": 1, "outcome": "succeeded", "output": output}
    )
    assert record_reply(reply) == "recorded"
    ship.refresh_from_db()
    assert ship.status == StepStatus.HELD and ship.output is None
    assert ship.status_reason.startswith("the answer cannot be stored: ")
    attempt = Attempt.objects.get(step=ship, number=1)
    assert attempt.outcome == Outcome.SUCCEEDED and "the answer cannot be stored" in attempt.error


def test_a_reply_after_the_supervisor_gave_up_is_late_evidence(
    redis: RedisProcess, supervise: Callable[..., Any]
) -> None:
    queue_workflow(redis.url, timeout=0.5)
    job = job_submit(workflow="queued", input={}).job
    run_tasks()
    ship = job.steps.get(kind="action")
    assert ship.deadline is not None
    # The scan comes once the deadline has passed, however long that took on this machine.
    wait_until(lambda: timezone.now() > ship.deadline, timeout=30, message="the step's deadline passed")
    supervise()  # no reply in time: no answer; the policy retries with the same operation ID
    first = Attempt.objects.get(step=ship, number=1)
    assert first.outcome == Outcome.NO_ANSWER
    reply = parse_reply(
        {"operation_id": ship.operation_id, "attempt": 1, "outcome": "succeeded", "output": {}}
    )
    assert record_reply(reply) == "late"
    ship.refresh_from_db()
    assert ship.status == StepStatus.SUCCEEDED
    assert Event.objects.filter(step=ship, kind=EventKind.LATE_SUCCESS).count() == 1
    assert record_reply(reply) == "duplicate"


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"not json", "not JSON"),
        ([], "not a JSON object"),
        ({"attempt": 1, "outcome": "succeeded"}, "operation_id"),
        ({"operation_id": "x", "outcome": "succeeded"}, "attempt"),
        ({"operation_id": "x", "attempt": True, "outcome": "succeeded"}, "attempt"),
        ({"operation_id": "x", "attempt": 1, "outcome": "maybe"}, "outcome"),
    ],
)
def test_a_malformed_reply_is_refused_with_its_reason(body: Any, why: str) -> None:
    with pytest.raises(BadReply, match=why):
        parse_reply(body)


@pytest.mark.django_db(transaction=True)
def test_the_reply_consumer_records_replies_from_the_broker(redis: RedisProcess) -> None:
    queue_workflow(redis.url)
    jobs = [job_submit(workflow="queued", input={"n": n}).job for n in range(3)]
    run_tasks()
    # A reply that is not one and a reply nobody asked for come first: they are dropped, and the
    # consumer goes on.
    publish(redis.url, "sas.replies", "garbage")
    publish(redis.url, "sas.replies", {"operation_id": "nobody", "attempt": 1, "outcome": "succeeded"})
    for job in jobs:
        ship = job.steps.get(kind="action")
        publish(
            redis.url,
            "sas.replies",
            {"operation_id": ship.operation_id, "attempt": 1, "outcome": "succeeded", "output": {"n": 1}},
        )
    deadline = time.monotonic() + 20

    def done() -> bool:
        return time.monotonic() > deadline or all(
            Job.objects.get(pk=j.pk).status == JobStatus.SUCCEEDED for j in jobs
        )

    run_replies(done, refresh=1.0)
    assert {Job.objects.get(pk=j.pk).status for j in jobs} == {JobStatus.SUCCEEDED}
    assert drain_queue(redis.url, "sas.replies") == []  # every reply taken, the bad ones too


def queue_call(broker: str, queue: str, operation_id: str = "op") -> CallSpec:
    """A call of a queue step, as the claim makes it."""
    return CallSpec(
        job_id="j",
        step_id=1,
        attempt=1,
        operation_id=operation_id,
        kind=AttemptKind.CALL,
        agent_kind="queue",
        base_url=broker,
        path=queue,
        payload={"step": "s", "input": {}},
        timeout=5,
    )


def test_a_broker_that_is_down_is_a_transient_failure(tmp_path: Path) -> None:
    result = call_queue(queue_call(f"redis://127.0.0.1:{free_port()}/0", "q"))
    assert result.outcome == Outcome.TRANSIENT_FAILURE and "broker" in result.error


def test_a_kept_broker_connection_publishes_without_resolving_the_name_again(
    redis: RedisProcess, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """The guard checks the address when a connection is made; the connection then stays with
    that address, so a publish costs no name lookup."""
    lookups: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        lookups.append(host)
        return ["127.0.0.1"]

    monkeypatch.setattr("agents.validation.resolve", resolve)
    settings.SAS_OUTBOUND_INTERNAL_HOSTS = [*settings.SAS_OUTBOUND_INTERNAL_HOSTS, "mq.internal"]
    broker = f"redis://mq.internal:{redis.port}/0"
    outcomes = [call_queue(queue_call(broker, "resolved-once", f"op-{n}")).outcome for n in range(3)]
    assert outcomes == [ACCEPTED] * 3
    assert lookups == ["mq.internal"]
    assert len(drain_queue(redis.url, "resolved-once")) == 3


@pytest.mark.parametrize(
    "url",
    [
        "http://broker:6379/0",
        "redis://user:pw@broker:6379/0",
        "redis://broker:6379/x",
        "redis://",
        "redis://b/0?x=1",
    ],
)
def test_a_queue_pool_refuses_what_is_not_a_broker_url(url: str) -> None:
    client = client_for(make_user("ada", "administrators"))
    response = client.post(f"{V1}/pools/", {"name": "mq", "kind": "queue", "endpoints": [url]}, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["field"] == "endpoints"


def test_a_queue_step_needs_a_queue_name() -> None:
    make_pool("mq", kind="queue", endpoints=["redis://127.0.0.1:6379/0"])
    make_policy()
    client = client_for(make_user("ada", "administrators"))
    body = {"name": "w", "steps": [{"name": "a", "pool": "mq", "path": "/not a queue", "policy": "default"}]}
    response = client.post(f"{V1}/workflows/", body, format="json")
    assert response.status_code == 400 and "queue name" in response.json()["detail"]


# --- HTTP 202 + callback ---------------------------------------------------------------------------


def http_workflow(url: str, *, timeout: float = 30) -> None:
    make_pool("web", kind="http", endpoints=[url])
    make_policy("later", timeout_seconds=timeout, max_attempts=3)
    make_workflow("later", step("pay", pool="web", policy="later", path="/pay", compensation="/refund"))


@pytest.fixture
def accepting_remote() -> Iterator[Remote]:
    from agents import http

    remote = Remote()
    remote.handler = lambda h: _reply(h, 202, {"accepted": True})
    yield remote
    if http._client is not None:
        http._client.close()
        http._client = None
    remote.server.shutdown()
    remote.server.server_close()


def callback_path(remote: Remote) -> str:
    url = remote.requests[-1]["headers"]["X-SAS-Callback-URL"]
    assert url.startswith("http://testserver/api/v1/callbacks/")
    return url.removeprefix("http://testserver")


def test_a_202_leaves_the_attempt_in_flight_until_the_callback(
    accepting_remote: Remote, settings: Any
) -> None:
    settings.SAS_PUBLIC_URL = "http://testserver"
    http_workflow(accepting_remote.url)
    job = job_submit(workflow="later", input={}).job
    run_tasks()
    pay = job.steps.get(kind="action")
    assert pay.status == StepStatus.DISPATCHED
    assert Event.objects.filter(step=pay, kind=EventKind.CALL_ACCEPTED).count() == 1
    path = callback_path(accepting_remote)
    anonymous = Client()
    response = anonymous.post(
        path, {"outcome": "succeeded", "output": {"charge": 9}}, content_type="application/json"
    )
    assert response.status_code == 200 and response.json() == {"recorded": "recorded"}
    pay.refresh_from_db()
    assert pay.status == StepStatus.SUCCEEDED and pay.output == {"charge": 9}
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    attempt = Attempt.objects.get(step=pay)
    assert attempt.decided_by == "agent:callback" and attempt.latency_ms is not None
    # The first result wins: the same token again is a 409 and changes nothing.
    events = Event.objects.count()
    again = anonymous.post(path, {"outcome": "refused", "error": "no"}, content_type="application/json")
    assert again.status_code == 409 and again.json()["code"] == "already_recorded"
    assert Event.objects.count() == events
    pay.refresh_from_db()
    assert pay.status == StepStatus.SUCCEEDED


@pytest.mark.django_db(transaction=True)  # two threads, each committing on its own connection
def test_two_copies_of_one_callback_arriving_together_record_it_once(
    accepting_remote: Remote, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both copies get past their first look before either records, if they can: the recording
    waits (a little) for the other copy to get there too. Under the job lock the second copy
    cannot get that far until the first has committed, and is then refused."""
    import threading

    from django.db import connection

    from scheduler import callbacks
    from scheduler.callback_tokens import AlreadyRecorded
    from scheduler.services import outcomes

    settings.SAS_PUBLIC_URL = "http://testserver"
    http_workflow(accepting_remote.url)
    job = job_submit(workflow="later", input={}).job
    run_tasks()
    token = callback_path(accepting_remote).rstrip("/").rsplit("/", 1)[1]
    both_looked = threading.Barrier(2, timeout=3)
    record = outcomes.step_record_outcome

    def record_when_both_looked(*args: Any, **kwargs: Any) -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            both_looked.wait()
        record(*args, **kwargs)

    monkeypatch.setattr(outcomes, "step_record_outcome", record_when_both_looked)
    verdicts: list[str] = []

    def post() -> None:
        try:
            verdicts.append(callbacks.callback_record(token, {"outcome": "succeeded", "output": {"n": 1}}))
        except AlreadyRecorded:
            verdicts.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=post) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(verdicts) == ["recorded", "refused"]
    pay = Step.objects.get(job=job, kind="action")
    assert pay.status == StepStatus.SUCCEEDED
    assert Event.objects.filter(step=pay, kind=EventKind.STEP_SUCCEEDED).count() == 1
    assert not Event.objects.filter(step=pay, kind__startswith="late").exists()
    assert Attempt.objects.get(step=pay).late_outcome == ""


def test_a_refused_callback_is_a_business_failure(accepting_remote: Remote, settings: Any) -> None:
    settings.SAS_PUBLIC_URL = "http://testserver"
    http_workflow(accepting_remote.url)
    job = job_submit(workflow="later", input={}).job
    run_tasks()
    response = Client().post(
        callback_path(accepting_remote),
        {"outcome": "refused", "error": "card declined"},
        content_type="application/json",
    )
    assert response.status_code == 200
    pay = job.steps.get(kind="action")
    assert pay.last_outcome == Outcome.BUSINESS_FAILURE and "card declined" in pay.error


def test_a_late_failure_is_recorded_once_and_its_copies_are_409_without_an_event(
    accepting_remote: Remote, settings: Any, supervise: Callable[..., Any]
) -> None:
    settings.SAS_PUBLIC_URL = "http://testserver"
    http_workflow(accepting_remote.url, timeout=0.5)
    job = job_submit(workflow="later", input={}).job
    run_tasks()
    pay = job.steps.get(kind="action")
    path = callback_path(accepting_remote)
    assert pay.deadline is not None
    wait_until(lambda: timezone.now() > pay.deadline, timeout=30, message="the step's deadline passed")
    supervise()  # no result in time: the supervisor gives the attempt up
    assert Attempt.objects.get(step=pay, number=1).outcome == Outcome.NO_ANSWER
    anonymous = Client()
    first = anonymous.post(path, {"outcome": "failed", "error": "down"}, content_type="application/json")
    assert first.status_code == 200 and first.json() == {"recorded": "late"}
    attempt = Attempt.objects.get(step=pay, number=1)
    assert (attempt.outcome, attempt.late_outcome) == (Outcome.NO_ANSWER, Outcome.TRANSIENT_FAILURE)
    assert Event.objects.filter(step=pay, kind=EventKind.LATE_OUTCOME_IGNORED).count() == 1
    # A copy (the same token, again and again) is refused and writes nothing, not even on the job.
    archived = timezone.now()
    Job.objects.filter(pk=job.pk).update(archived_at=archived)
    events = Event.objects.count()
    for outcome in ("failed", "failed", "refused"):
        again = anonymous.post(path, {"outcome": outcome, "error": "down"}, content_type="application/json")
        assert again.status_code == 409 and again.json()["code"] == "already_recorded"
    assert Event.objects.count() == events
    assert Job.objects.get(pk=job.pk).archived_at == archived


def _a_live_attempt(accepting_remote: Remote, settings: Any) -> tuple[Step, str]:
    settings.SAS_PUBLIC_URL = "http://testserver"
    http_workflow(accepting_remote.url)
    job = job_submit(workflow="later", input={}).job
    run_tasks()
    return job.steps.get(kind="action"), callback_path(accepting_remote)


@pytest.mark.parametrize(
    ("mangle", "status", "code"),
    [
        (lambda token: "not-a-token", 403, "invalid_token"),
        (lambda token: token[:-2] + ("AA" if not token.endswith("AA") else "BB"), 403, "invalid_token"),
        (lambda token: signing.dumps({"s": 1, "n": 1, "o": "x"}, salt="another"), 403, "invalid_token"),
        (
            lambda token: signing.dumps(
                {"s": 1, "n": 1, "o": "x"}, salt="sas.attempt-callback", key="wrong" * 10
            ),
            403,
            "invalid_token",
        ),
    ],
    ids=["garbage", "altered", "other-salt", "other-key"],
)
def test_a_forged_token_is_refused_and_changes_nothing(
    accepting_remote: Remote, settings: Any, mangle: Callable[[str], str], status: int, code: str
) -> None:
    pay, path = _a_live_attempt(accepting_remote, settings)
    token = path.split("/")[-2]
    events = Event.objects.count()
    response = Client().post(
        f"{V1}/callbacks/{mangle(token)}/", {"outcome": "succeeded"}, content_type="application/json"
    )
    assert response.status_code == status and response.json()["code"] == code
    assert Event.objects.count() == events
    pay.refresh_from_db()
    assert pay.status == StepStatus.DISPATCHED


def test_an_expired_token_is_refused_and_changes_nothing(accepting_remote: Remote, settings: Any) -> None:
    pay, path = _a_live_attempt(accepting_remote, settings)
    settings.SAS_CALLBACK_TOKEN_MAX_AGE = -1
    response = Client().post(path, {"outcome": "succeeded"}, content_type="application/json")
    assert response.status_code == 410 and response.json()["code"] == "token_expired"
    pay.refresh_from_db()
    assert pay.status == StepStatus.DISPATCHED


def test_a_token_names_one_attempt_of_one_step(accepting_remote: Remote, settings: Any) -> None:
    pay, _ = _a_live_attempt(accepting_remote, settings)
    other = job_submit(workflow="later", input={"other": True}).job
    run_tasks()
    other_pay = other.steps.get(kind="action")
    # A token cannot be re-pointed: one naming the other step with this step's operation ID is
    # not one the service made...
    crossed = token_for(other_pay.pk, 1, pay.operation_id)
    response = Client().post(
        f"{V1}/callbacks/{crossed}/", {"outcome": "succeeded"}, content_type="application/json"
    )
    assert response.status_code == 403
    # ... and a token of an attempt that does not exist names nothing.
    future = token_for(pay.pk, 2, pay.operation_id)
    response = Client().post(
        f"{V1}/callbacks/{future}/", {"outcome": "succeeded"}, content_type="application/json"
    )
    assert response.status_code == 403
    for step_row in (pay, other_pay):
        step_row.refresh_from_db()
        assert step_row.status == StepStatus.DISPATCHED


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"outcome": "maybe"},
        {"outcome": "succeeded", "extra": 1},
        {"outcome": "failed", "error": "x" * 3000},
        "text",
    ],
)
def test_a_bad_callback_body_is_a_400_and_changes_nothing(
    accepting_remote: Remote, settings: Any, body: Any
) -> None:
    pay, path = _a_live_attempt(accepting_remote, settings)
    response = Client().post(path, json.dumps(body), content_type="application/json")
    assert response.status_code == 400
    pay.refresh_from_db()
    assert pay.status == StepStatus.DISPATCHED


def test_the_callback_url_is_sent_only_with_a_public_url(accepting_remote: Remote, settings: Any) -> None:
    settings.SAS_PUBLIC_URL = ""
    http_workflow(accepting_remote.url)
    job_submit(workflow="later", input={})
    run_tasks()
    assert "X-SAS-Callback-URL" not in accepting_remote.requests[-1]["headers"]


# --- the python-agent allow-list --------------------------------------------------------------------


@pytest.mark.sqlite
@pytest.mark.parametrize("path", ["os.system", "subprocess.run", "agents.builtin.not_there", "builtins.eval"])
def test_a_python_step_outside_the_allow_list_is_a_400(path: str) -> None:
    make_pool()
    make_policy()
    client = client_for(make_user("ada", "administrators"))
    body = {"name": "evil", "steps": [{"name": "a", "pool": "local", "path": path, "policy": "default"}]}
    response = client.post(f"{V1}/workflows/", body, format="json")
    assert response.status_code == 400, response.json()
    assert "SAS_PYTHON_AGENTS" in response.json()["detail"]
    for field in ("compensation_path", "status_path"):
        body = {
            "name": "evil",
            "steps": [
                {
                    "name": "a",
                    "pool": "local",
                    "path": "agents.builtin.noop",
                    field: path,
                    "policy": "default",
                }
            ],
        }
        assert client.post(f"{V1}/workflows/", body, format="json").status_code == 400


def test_a_module_entry_allows_its_callables(settings: Any) -> None:
    settings.SAS_PYTHON_AGENTS = ["agents.builtin.*"]
    make_workflow("echo", step("a", path="agents.builtin.echo"))


@pytest.mark.parametrize(
    "path",
    [
        "agents.python.import_string",  # a function the module imports, from django
        "agents.builtin.Any",  # a name the module imports, from typing
        "agents.builtin.annotations",
        "agents.builtin.__name__",
    ],
)
def test_a_module_entry_allows_only_the_public_functions_defined_in_that_module(
    settings: Any, path: str
) -> None:
    settings.SAS_PYTHON_AGENTS = ["agents.builtin.*", "agents.python.*"]
    with pytest.raises(InvalidInput, match="SAS_PYTHON_AGENTS"):
        validate_python_agent(path)
    result = call_python(
        CallSpec(
            job_id="j",
            step_id=1,
            attempt=1,
            operation_id="op-1",
            kind=AttemptKind.CALL,
            agent_kind="python",
            base_url="",
            path=path,
            payload={},
            timeout=2.0,
        )
    )
    assert result.outcome == Outcome.BUSINESS_FAILURE and "SAS_PYTHON_AGENTS" in result.error
    assert validate_python_agent("agents.python.call_python") == "agents.python.call_python"


def test_an_exact_entry_allows_what_it_names(settings: Any) -> None:
    settings.SAS_PYTHON_AGENTS = ["agents.python.import_string"]
    assert validate_python_agent("agents.python.import_string") == "agents.python.import_string"


def test_a_callable_removed_from_the_allow_list_is_refused_at_call_time(settings: Any) -> None:
    make_workflow("w", step("a", path="agents.builtin.echo"))
    settings.SAS_PYTHON_AGENTS = ["agents.builtin.noop"]
    job = job_submit(workflow="w", input={}).job
    run_tasks()
    attempt = Attempt.objects.get(step__job=job)
    assert attempt.outcome == Outcome.BUSINESS_FAILURE and "SAS_PYTHON_AGENTS" in attempt.error
