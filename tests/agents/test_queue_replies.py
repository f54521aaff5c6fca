"""The reply consumer of queue pools against a real Redis: what cannot be recorded is set aside.

A reply that cannot be decoded, that is not a reply, that is larger than an answer may be, or that
the database keeps refusing goes to the dead-letter queue (`<reply queue>.dead`) on its broker,
with the reason, and never holds up the replies behind it.
"""

from __future__ import annotations

import bz2
import logging
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import DataError, connection

from agents import queue as agent_queue
from agents.models import ReplyDeadLetters
from agents.outcome import CallResult, Outcome
from agents.queue import (
    COMPRESSION_HEADER,
    DEAD_REASON,
    TRIES_HEADER,
    DeadLetter,
    HandlerUnavailable,
    Heartbeat,
    Reply,
    consume_replies,
)
from scheduler import replies
from scheduler.models import Attempt, Event, EventKind, Job, JobStatus, Step, StepStatus
from scheduler.replies import run_replies
from scheduler.services import job_submit
from testbed.processes import RedisProcess, free_port
from tests.agents.test_async_agents import drain_queue, publish, queue_workflow, run_tasks

pytestmark = pytest.mark.django_db(transaction=True)

REPLIES = "sas.replies"
DEAD = "sas.replies.dead"


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisProcess]:
    server = RedisProcess(port=free_port(), log=tmp_path / "redis.log").start()
    yield server
    server.stop()


def publish_raw(
    broker: str,
    body: bytes,
    *,
    content_type: str,
    content_encoding: str = "utf-8",
    headers: dict[str, Any] | None = None,
    name: str = REPLIES,
) -> None:
    """A message as any producer may send it: these bytes, this content type and encoding, these
    headers, no serialiser."""
    from kombu import Connection, Queue

    with Connection(broker) as conn, conn.Producer() as producer:
        producer.publish(
            body,
            routing_key=name,
            content_type=content_type,
            content_encoding=content_encoding,
            headers=headers or {},
            declare=[Queue(name, routing_key=name, durable=True)],
        )


def dead_letters(broker: str) -> list[tuple[bytes, dict[str, Any]]]:
    """The raw bodies and headers of the dead-letter queue's messages (taken off it)."""
    from kombu import Connection, Queue

    got: list[tuple[bytes, dict[str, Any]]] = []
    with Connection(broker) as conn:
        queue = Queue(DEAD, routing_key=DEAD, durable=True)(conn.default_channel)
        queue.declare()
        while (message := queue.get(no_ack=True)) is not None:  # taken as it is, not decoded
            body = message.body
            got.append((body if isinstance(body, bytes) else str(body).encode(), dict(message.headers or {})))
    return got


def one_job(broker: str) -> tuple[Job, Step]:
    queue_workflow(broker)
    job = job_submit(workflow="queued", input={}).job
    run_tasks()
    return job, job.steps.get(kind="action")


def succeeded(ship: Step) -> dict[str, Any]:
    return {"operation_id": ship.operation_id, "attempt": 1, "outcome": "succeeded", "output": {"ok": 1}}


def consume_until(done: Callable[[], bool], *, limit: float = 20) -> None:
    """Runs the reply consumer (scheduler.replies, the real one) until `done()`, at most `limit` s."""
    deadline = time.monotonic() + limit
    run_replies(lambda: done() or time.monotonic() > deadline, refresh=1.0)


def job_done(job: Job) -> Callable[[], bool]:
    return lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED


# --- what the consumer cannot decode --------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "content_type"),
    [(b"{not json", "application/json"), (b"hello", "text/plain"), (b"\xff\xfe", "application/json")],
)
def test_a_reply_that_cannot_be_decoded_is_dead_lettered_and_the_replies_behind_it_are_recorded(
    redis: RedisProcess, body: bytes, content_type: str
) -> None:
    job, ship = one_job(redis.url)
    publish_raw(redis.url, body, content_type=content_type)
    publish(redis.url, REPLIES, succeeded(ship))
    consume_until(job_done(job))
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    ((kept, headers),) = dead_letters(redis.url)
    assert kept == body
    assert headers[DEAD_REASON] == "undecodable"
    assert drain_queue(redis.url, REPLIES) == []
    assert dict(ReplyDeadLetters.objects.values_list("reason", "count")) == {"undecodable": 1}


def test_a_reply_larger_than_an_answer_may_be_is_dead_lettered_cut_to_the_limit(
    redis: RedisProcess, settings: Any
) -> None:
    settings.SAS_MAX_RESPONSE_BYTES = 1000
    job, ship = one_job(redis.url)
    publish(redis.url, REPLIES, {**succeeded(ship), "output": {"blob": "x" * 5000}})
    publish(redis.url, REPLIES, succeeded(ship))
    consume_until(job_done(job))
    assert Step.objects.get(pk=ship.pk).output == {"ok": 1}
    ((kept, headers),) = dead_letters(redis.url)
    assert headers[DEAD_REASON] == "too_large" and len(kept) == 1000
    assert headers["x-sas-bytes"] > 5000


# --- what must not be inflated -------------------------------------------------------------------

#: What a compression bomb inflates to: 64 MiB of one byte.
BOMB_BYTES = 64 * 2**20


def bomb(compressor: Any) -> bytes:
    """BOMB_BYTES of one byte through `compressor` (a bz2 or zlib compressor object), fed a MiB at
    a time: the test itself never holds the inflated body."""
    chunk = b"0" * 2**20
    return b"".join(compressor.compress(chunk) for _ in range(BOMB_BYTES // len(chunk))) + compressor.flush()


@pytest.mark.parametrize(
    ("compressor", "content_type", "content_encoding", "headers"),
    [
        (bz2.BZ2Compressor, "application/json", "utf-8", {"compression": "application/x-bz2"}),
        (zlib.compressobj, "application/json", "utf-8", {"compression": "application/x-gzip"}),
        # kombu inflates this one while decoding: application/data passes any `accept`, and its
        # content encoding goes to codecs.decode, which knows zlib.
        (zlib.compressobj, "application/data", "zlib", {}),
    ],
    ids=["bz2-header", "zlib-header", "zlib-content-encoding"],
)
def test_a_compressed_reply_is_dead_lettered_as_it_came_never_inflated_and_the_replies_behind_it_recorded(
    redis: RedisProcess, compressor: Any, content_type: str, content_encoding: str, headers: dict[str, Any]
) -> None:
    body = bomb(compressor())
    assert len(body) < 100_000  # a small message, well under SAS_MAX_RESPONSE_BYTES
    job, ship = one_job(redis.url)
    publish_raw(
        redis.url, body, content_type=content_type, content_encoding=content_encoding, headers=headers
    )
    publish(redis.url, REPLIES, succeeded(ship))
    tracemalloc.start()
    try:
        consume_until(job_done(job))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    assert peak < BOMB_BYTES // 4  # never inflated, not even for a moment
    ((kept, dead_headers),) = dead_letters(redis.url)
    assert kept == body  # the compressed bytes, as they came
    assert dead_headers[DEAD_REASON] == "compressed"
    assert "compression" not in dead_headers  # whoever replays it does not inflate it
    assert dead_headers[COMPRESSION_HEADER] == headers.get("compression", content_encoding)
    assert drain_queue(redis.url, REPLIES) == []
    assert dict(ReplyDeadLetters.objects.values_list("reason", "count")) == {"compressed": 1}


def test_kombu_does_not_inflate_a_reply_by_its_compression_header_on_amqp_either() -> None:
    import amqp
    from kombu.transport import pyamqp

    body = bomb(bz2.BZ2Compressor())
    raw = amqp.Message(
        body, content_type="application/json", application_headers={"compression": "application/x-bz2"}
    )
    raw.delivery_info = {"delivery_tag": 1}
    message = agent_queue.uninflated(pyamqp.Channel.Message)(raw, channel=None)
    assert message.body == body and message.errors == []
    assert message.headers == {"compression": "application/x-bz2"}


# --- what is not a reply ---------------------------------------------------------------------------


def test_a_reply_naming_a_known_step_that_is_not_a_reply_is_dead_lettered_with_an_event_on_its_job(
    redis: RedisProcess,
) -> None:
    job, ship = one_job(redis.url)
    publish(redis.url, REPLIES, {"operation_id": ship.operation_id, "attempt": 1, "outcome": "maybe"})
    publish(redis.url, REPLIES, succeeded(ship))
    consume_until(job_done(job))
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    event = Event.objects.get(job=job, kind=EventKind.REPLY_DEAD_LETTERED)
    assert event.step_id == ship.pk and event.attempt == 1
    assert event.data["reason"] == "invalid" and event.data["queue"] == DEAD
    assert "'maybe'" in event.reason
    ((_kept, headers),) = dead_letters(redis.url)
    assert headers[DEAD_REASON] == "invalid"


def test_a_string_of_deep_nesting_is_dead_lettered_once_and_the_replies_behind_it_are_recorded(
    redis: RedisProcess, caplog: pytest.LogCaptureFixture
) -> None:
    job, ship = one_job(redis.url)
    publish(redis.url, REPLIES, "[" * 100_000)  # JSON: a string, which is JSON nested too deep to read
    publish(redis.url, REPLIES, succeeded(ship))
    with caplog.at_level(logging.WARNING, logger="agents.queue"):
        consume_until(job_done(job))
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    ((_kept, headers),) = dead_letters(redis.url)
    assert headers[DEAD_REASON] == "invalid" and headers[TRIES_HEADER] == 1
    assert "nested too deeply" in headers["x-sas-dead-error"]
    assert not [r for r in caplog.records if "lost broker" in r.getMessage()]
    assert dict(ReplyDeadLetters.objects.values_list("reason", "count")) == {"invalid": 1}


def test_a_reply_whose_reading_raises_an_unclassified_error_is_dead_lettered_not_taken_for_a_lost_broker(
    redis: RedisProcess, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    job, ship = one_job(redis.url)
    real = agent_queue.parse_reply

    def parse_with_a_bug(body: Any) -> Reply | Heartbeat:
        if body == {"poison": 1}:
            raise ZeroDivisionError("a bug in the reply's reading")
        return real(body)

    monkeypatch.setattr(agent_queue, "parse_reply", parse_with_a_bug)
    publish(redis.url, REPLIES, {"poison": 1})
    publish(redis.url, REPLIES, succeeded(ship))
    with caplog.at_level(logging.WARNING, logger="agents.queue"):
        consume_until(job_done(job))
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    ((kept, headers),) = dead_letters(redis.url)
    assert kept == b'{"poison": 1}'
    assert headers[DEAD_REASON] == "unclassified" and headers[TRIES_HEADER] == 1
    assert "ZeroDivisionError: a bug in the reply's reading" in headers["x-sas-dead-error"]
    assert not [r for r in caplog.records if "lost broker" in r.getMessage()]
    assert dict(ReplyDeadLetters.objects.values_list("reason", "count")) == {"unclassified": 1}


def test_an_item_that_is_not_a_kombu_message_costs_no_reconnect_and_the_replies_behind_it_are_recorded(
    redis: RedisProcess, caplog: pytest.LogCaptureFixture
) -> None:
    import redis as redis_client

    job, ship = one_job(redis.url)
    # Pushed as kombu pushes a message, but not one: kombu fails on it before the consumer sees it.
    redis_client.Redis.from_url(redis.url).lpush(REPLIES, b"not a kombu message")
    publish(redis.url, REPLIES, succeeded(ship))
    with caplog.at_level(logging.WARNING, logger="agents.queue"):
        consume_until(job_done(job))
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    assert not [r for r in caplog.records if "lost broker" in r.getMessage()]
    assert [r for r in caplog.records if "failed before it was read" in r.getMessage()]


def test_a_reply_whose_operation_id_holds_a_nul_is_dead_lettered_not_put_back_forever(
    redis: RedisProcess,
) -> None:
    job, ship = one_job(redis.url)
    publish(redis.url, REPLIES, {**succeeded(ship), "operation_id": "op\x00x"})
    publish(redis.url, REPLIES, succeeded(ship))
    consume_until(job_done(job))
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    ((_kept, headers),) = dead_letters(redis.url)
    assert headers[DEAD_REASON] == "invalid"
    assert not Event.objects.filter(kind=EventKind.REPLY_DEAD_LETTERED).exists()  # it names no step
    assert dict(ReplyDeadLetters.objects.values_list("reason", "count")) == {"invalid": 1}


@pytest.mark.parametrize(
    "output",
    [{"note": "a\x00b"}, {"amount": float("nan")}, {"amount": float("inf")}, {"a": {"b": "\ud800"}}],
)
def test_a_reply_the_database_cannot_store_keeps_its_success_and_holds_the_step(
    redis: RedisProcess, output: Any
) -> None:
    job, ship = one_job(redis.url)
    publish(redis.url, REPLIES, {**succeeded(ship), "output": output})
    consume_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.NEEDS_ATTENTION)
    ship.refresh_from_db()
    assert ship.status == StepStatus.HELD and ship.output is None
    assert ship.status_reason.startswith("the answer cannot be stored: ")
    assert Attempt.objects.get(step=ship, number=1).outcome == Outcome.SUCCEEDED
    assert dead_letters(redis.url) == []


# --- what the database keeps refusing -----------------------------------------------------------


def test_a_reply_the_database_keeps_refusing_is_dead_lettered_after_the_tries_with_an_event(
    redis: RedisProcess, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.SAS_REPLY_MAX_TRIES = 3
    job, ship = one_job(redis.url)
    other, other_ship = one_job_more(redis.url)
    real = replies.record_reply
    tries: list[str] = []

    def refusing(reply: Reply) -> str:
        if reply.operation_id == ship.operation_id:
            tries.append(reply.operation_id)
            raise ValueError("the database refuses this one")
        return real(reply)

    monkeypatch.setattr(replies, "record_reply", refusing)
    publish(redis.url, REPLIES, succeeded(ship))
    publish(redis.url, REPLIES, succeeded(other_ship))
    consume_until(lambda: Event.objects.filter(job=job, kind=EventKind.REPLY_DEAD_LETTERED).exists())
    assert len(tries) == 3
    assert Job.objects.get(pk=other.pk).status == JobStatus.SUCCEEDED  # not held up behind it
    event = Event.objects.get(job=job, kind=EventKind.REPLY_DEAD_LETTERED)
    assert event.data["reason"] == "refused" and event.data["tries"] == 3
    assert "the database refuses this one" in event.reason
    ((_kept, headers),) = dead_letters(redis.url)
    assert headers[DEAD_REASON] == "refused" and headers[TRIES_HEADER] == 3
    assert Job.objects.get(pk=job.pk).status != JobStatus.SUCCEEDED


def one_job_more(broker: str) -> tuple[Job, Step]:
    job = job_submit(workflow="queued", input={"n": 2}).job
    run_tasks()
    return job, job.steps.get(kind="action")


def test_a_handler_whose_database_is_away_puts_the_reply_back_without_counting_a_try(
    redis: RedisProcess, settings: Any
) -> None:
    settings.SAS_REPLY_MAX_TRIES = 2
    publish(redis.url, REPLIES, {"operation_id": "op", "attempt": 1, "outcome": "succeeded"})
    handled: list[Reply | Heartbeat] = []
    dead: list[DeadLetter] = []

    def handle(reply: Reply | Heartbeat) -> None:
        if len(handled) < 5:
            handled.append(reply)
            raise HandlerUnavailable("the database is away")
        handled.append(reply)

    deadline = time.monotonic() + 20
    for _ in consume_replies(
        [(redis.url, ("", ""))],
        handle,
        should_stop=lambda: len(handled) > 5 or time.monotonic() > deadline,
        on_dead_letter=dead.append,
        pause=0.05,
    ):
        pass
    assert len(handled) == 6 and dead == []
    assert dead_letters(redis.url) == [] and drain_queue(redis.url, REPLIES) == []


def test_a_reply_the_database_refuses_is_a_counted_try_and_a_database_away_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refused = Reply(operation_id="op\x00x", attempt=1, result=CallResult(Outcome.SUCCEEDED))
    with pytest.raises(DataError):  # PostgreSQL refuses the NUL: the database answers
        replies.record_message(refused)
    reply = Reply(operation_id="op", attempt=1, result=CallResult(Outcome.SUCCEEDED))
    connection.close()
    monkeypatch.setitem(connection.settings_dict, "PORT", str(free_port()))  # nothing listens
    with pytest.raises(HandlerUnavailable):
        replies.record_message(reply)
    monkeypatch.undo()
    connection.close()
    assert replies.record_message(reply) is None  # the database is back


# --- the metric ----------------------------------------------------------------------------------------


def test_dead_lettered_replies_are_counted_by_reason_in_the_metrics(redis: RedisProcess) -> None:
    from django.test import Client

    from tests.supervisor.test_operations import metrics

    job, ship = one_job(redis.url)
    publish_raw(redis.url, b"{", content_type="application/json")
    publish(redis.url, REPLIES, {"operation_id": "x", "outcome": "succeeded"})
    publish(redis.url, REPLIES, {"operation_id": "y", "outcome": "succeeded"})
    publish(redis.url, REPLIES, succeeded(ship))
    consume_until(job_done(job))
    found = metrics(Client())
    assert found["sas_queue_replies_dead_lettered_total", (("reason", "invalid"),)] == 2
    assert found["sas_queue_replies_dead_lettered_total", (("reason", "undecodable"),)] == 1
