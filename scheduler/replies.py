"""The reply consumer: records what the remotes of queue pools reply (agents.queue).

It runs in every `qcluster` (a thread beside the supervisor loop; SAS_REPLIES_IN_CLUSTER) and on
its own (`manage.py agent_replies`). Several consumers share each broker's reply queue: each
reply is taken by one of them. It looks at which brokers the queue pools name every
`REFRESH` seconds; with no queue pool it connects to nothing, so a service without queue pools
needs no broker.

A reply names its attempt by operation ID and attempt number. The first result of an attempt
wins: a duplicate changes nothing; a reply after the supervisor gave up on its attempt (no answer
before the deadline) is late evidence, as a late HTTP answer is; a reply for an unknown operation
is logged and dropped. Each reply is acknowledged after its transaction commits.

What cannot be recorded goes to the broker's dead-letter queue (`<SAS_REPLY_QUEUE>.dead`,
agents.queue.consume_replies): a message that is not JSON or not a reply, one larger than
SAS_MAX_RESPONSE_BYTES, and a reply whose recording fails SAS_REPLY_MAX_TRIES times while the
database answers. A failure while the database does not answer is an outage, not the reply's
fault: the reply is put back and the try is not counted. Each dead letter is counted
(`sas_queue_replies_dead_lettered_total{reason}`) and, when it names a step, recorded on its job
(`reply_dead_lettered`).

A heartbeat message (`{"operation_id", "attempt", "heartbeat": true, "details"}`, agents.queue)
on the same queue says the attempt is alive: it moves the attempt's deadline when the policy sets
a heartbeat interval (scheduler.services.heartbeats); one for an attempt already given up on, or
for an unknown operation, changes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from uuid import UUID

from django.db import close_old_connections, connection

from agents.models import AgentEndpoint, AgentKind
from agents.queue import DeadLetter, HandlerUnavailable, Heartbeat, Reply, consume_replies
from scheduler.models import Step
from scheduler.services import async_result_record, attempt_heartbeat, reply_dead_letter_record

logger = logging.getLogger("scheduler.replies")

SOURCE = "agent:reply"
#: Seconds between two looks at the brokers the queue pools name.
REFRESH = 10.0

Broker = tuple[str, tuple[str, str]]


def brokers() -> list[Broker]:
    """The brokers (URL, (user, password)) of the enabled endpoints of queue pools."""
    rows = AgentEndpoint.objects.filter(pool__kind=AgentKind.QUEUE, enabled=True).values_list(
        "url", "secret_header_name", "secret_header_value"
    )
    return sorted({(url, (user or "", password or "")) for url, user, password in rows})


def record_reply(reply: Reply) -> str:
    """Record one reply; returns "recorded", "late", "duplicate" or "unknown"."""
    step_id = Step.objects.filter(operation_id=reply.operation_id).values_list("pk", flat=True).first()
    verdict = (
        "unknown"
        if step_id is None
        else async_result_record(step_id, number=reply.attempt, result=reply.result, source=SOURCE)
    )
    level = logging.INFO if verdict in ("recorded", "late") else logging.WARNING
    logger.log(
        level,
        "reply %s",
        verdict,
        extra={
            "operation_id": reply.operation_id,
            "attempt": reply.attempt,
            "outcome": reply.result.outcome,
            "verdict": verdict,
        },
    )
    return verdict


def record_heartbeat(heartbeat: Heartbeat) -> str:
    """Record one heartbeat message; returns "recorded", "gone" (the attempt was given up on) or
    "unknown"."""
    step_id = Step.objects.filter(operation_id=heartbeat.operation_id).values_list("pk", flat=True).first()
    verdict = (
        "unknown"
        if step_id is None
        else attempt_heartbeat(
            step_id, number=heartbeat.attempt, details=heartbeat.details, source=SOURCE
        ).verdict
    )
    # A heartbeat is routine: only one that names nothing is worth a warning.
    logger.log(
        logging.WARNING if verdict == "unknown" else logging.DEBUG,
        "heartbeat %s",
        verdict,
        extra={"operation_id": heartbeat.operation_id, "attempt": heartbeat.attempt, "verdict": verdict},
    )
    return verdict


def record_dead_letter(dead: DeadLetter) -> UUID | None:
    """Count a reply sent to the dead-letter queue (agents.queue logged it) and, when it names a
    step, record it on the step's job; returns the job's id, or None."""
    return reply_dead_letter_record(dead, source=SOURCE)


def record_message(reply: Reply | Heartbeat) -> None:
    """Record a reply or a heartbeat (the consumer's handler). Raises HandlerUnavailable when it
    failed and the database does not answer (an outage: the reply waits, using no try); any other
    failure is raised as it is (the database refused this reply: a try is counted)."""
    try:
        if isinstance(reply, Heartbeat):
            record_heartbeat(reply)
        else:
            record_reply(reply)
    except Exception as exc:
        # The reply is put back; the next one starts on a fresh database connection. Whether
        # the database answers tells an outage (the try is not counted) from a reply it refuses.
        connection.close()
        if not _database_answers():
            raise HandlerUnavailable("the database does not answer") from exc
        raise


def _database_answers() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:  # noqa: BLE001 - any failure to reach it is an outage
        connection.close()
        return False
    return True


def run_replies(should_stop: Callable[[], bool], *, refresh: float = REFRESH) -> int:
    """Consume the replies of every broker the queue pools name until `should_stop()`; returns
    how many were handled. Survives database and broker outages."""
    total = 0
    while not should_stop():
        try:
            close_old_connections()
            current = brokers()
        except Exception:
            logger.exception("reply consumer: cannot read the queue pools")
            connection.close()
            _sleep(refresh, should_stop)
            continue
        if not current:
            _sleep(refresh, should_stop)
            continue

        def turn_over(until: float = time.monotonic() + refresh) -> bool:
            return should_stop() or time.monotonic() > until

        try:
            for handled in consume_replies(
                current, record_message, should_stop=turn_over, on_dead_letter=_dead_letter
            ):
                total += handled
        except Exception:
            logger.exception("reply consumer failed; starting again")
            connection.close()
            _sleep(1.0, should_stop)
    return total


def _dead_letter(dead: DeadLetter) -> None:
    try:
        record_dead_letter(dead)
    except Exception:
        connection.close()
        raise


def _sleep(seconds: float, should_stop: Callable[[], bool]) -> None:
    until = time.monotonic() + seconds
    while not should_stop() and time.monotonic() < until:
        time.sleep(min(0.2, max(until - time.monotonic(), 0)))
