"""The project's django-q2 broker: a backlog drains at full speed whatever it heard, an idle pusher
wakes on an announcement, and compact task rows are only ever registered tasks."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.signing import BadSignature, SignedPackage

from agents.broker import ClaimByDeleteORM, _expand, compact_row, task_of
from scheduler.services.dispatch import AGENT_TASK

pytestmark = pytest.mark.django_db(transaction=True)

#: Longer than any test may take: a pusher that waits for an announcement it will never get
#: would block this long, so a test that finishes proves it did not wait.
LONG_POLL = 60


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[ClaimByDeleteORM]:
    monkeypatch.setattr(Conf, "POLL", LONG_POLL)
    monkeypatch.setattr(Conf, "BULK", 1)
    yield ClaimByDeleteORM(list_key=Conf.CLUSTER_NAME)
    connection.close()


def enqueue(broker: ClaimByDeleteORM, count: int) -> None:
    """`count` tasks in one transaction: PostgreSQL delivers at most one announcement for them."""
    with transaction.atomic():
        for n in range(count):
            broker.enqueue_compact(AGENT_TASK, (n + 1, 1), timeout=60)


def in_thread(fn: Any, timeout: float = 20) -> Any:
    """Run `fn` in a thread; fail the test if it is still running after `timeout` seconds."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"still running after {timeout}s: the pusher waited instead of looking"
    assert not errors, errors
    return result[0]


def drain(broker: ClaimByDeleteORM, *, recycle_after: int | None = None) -> list[Any]:
    """Look until a look comes back empty, as django-q2's pusher does while tasks remain."""
    taken: list[Any] = []
    while True:
        if recycle_after is not None and len(taken) == recycle_after:
            connection.close()  # what close_old_connections() does after CONN_MAX_AGE
        batch = broker.dequeue()
        if not batch:
            return taken
        taken.extend(batch)


def test_a_backlog_behind_one_merged_announcement_is_drained_without_waiting(
    broker: ClaimByDeleteORM,
) -> None:
    in_thread(lambda: broker.dequeue() or True)  # listening, nothing queued yet
    enqueue(broker, 25)
    taken = in_thread(lambda: drain(broker))
    assert len(taken) == 25
    assert OrmQ.objects.count() == 0


def test_a_listening_connection_recycled_mid_drain_does_not_slow_the_drain(broker: ClaimByDeleteORM) -> None:
    enqueue(broker, 25)
    taken = in_thread(lambda: drain(broker, recycle_after=7))
    assert len(taken) == 25
    assert [task_of(payload)["args"][0] for _, payload in taken] == list(range(1, 26))


def test_full_batches_are_taken_back_to_back(
    broker: ClaimByDeleteORM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Conf, "BULK", 4)
    enqueue(broker, 10)

    def looks() -> list[int]:
        sizes = [len(broker.dequeue() or [])]
        while sizes[-1] == 4:  # a full batch: more may wait, and the next look comes at once
            sizes.append(len(broker.dequeue() or []))
        return sizes

    assert in_thread(looks) == [4, 4, 2]


def test_a_pusher_listens_again_on_every_new_connection(broker: ClaimByDeleteORM) -> None:
    """A recycled connection's successor may be allocated where the old one was: the pusher
    must still LISTEN on it (else it waits out every poll, deaf to every announcement)."""
    from agents.broker import CHANNEL

    def look_then_channels() -> list[str]:
        broker.dequeue()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_listening_channels()")
            return [row[0] for row in cursor.fetchall()]

    for _ in range(20):  # each on a new connection, closed after it
        assert in_thread(look_then_channels) == [CHANNEL]


def test_an_idle_pusher_wakes_when_a_task_is_enqueued(broker: ClaimByDeleteORM) -> None:
    in_thread(lambda: broker.dequeue() or True)  # the queue is empty: the pusher is idle now
    started = threading.Event()

    def wait_for_one() -> Any:
        started.set()
        return broker.dequeue()

    result: list[Any] = []
    thread = threading.Thread(target=lambda: (result.append(wait_for_one()), connection.close()))
    thread.start()
    assert started.wait(10)
    enqueue(ClaimByDeleteORM(list_key=Conf.CLUSTER_NAME), 1)
    thread.join(LONG_POLL / 3)
    assert not thread.is_alive(), "the announcement did not wake the pusher"
    # The first look may come before the commit; then the announcement wakes the next one.
    if not result[0]:
        assert in_thread(broker.dequeue)


def test_a_compact_row_becomes_django_q2s_task() -> None:
    row = compact_row(AGENT_TASK, (12, 3), timeout=150)
    assert row == f"sas1 150 {AGENT_TASK} 12 3"
    task = SignedPackage.loads(_expand(row))
    assert (task["func"], task["args"], task["timeout"], task["name"]) == (
        AGENT_TASK,
        (12, 3),
        150,
        "step-12-attempt-3",
    )


@pytest.mark.parametrize(
    "row",
    ["sas1 60 os.system 1", "sas1 60 scheduler.tasks.run_attempt 1 rm", "sas1 60"],
    ids=["unregistered-function", "not-an-integer", "no-function"],
)
def test_a_compact_row_for_anything_else_is_dropped_by_the_pusher(row: str) -> None:
    with pytest.raises(ValueError, match=r"compact task|registered|invalid literal"):
        task_of(row)
    # The pusher's signature check refuses what the broker hands over unchanged.
    with pytest.raises((BadSignature, TypeError, ValueError)):
        SignedPackage.loads(_expand(row))
