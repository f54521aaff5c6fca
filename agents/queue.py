"""The queue agent: publish one message to a request queue on a broker; the remote replies later.

A pool of kind `queue` has broker URLs as its endpoints (`redis://host:6379/0`, `amqp://host/`;
kombu speaks both with one API); a step's operation path names the request queue, its status
path the queue that answers status queries, its compensation path the queue of its undo. The
agent publishes and returns at once (ACCEPTED): no worker waits for the remote. The reply comes
on the reply queue (SAS_REPLY_QUEUE) of the same broker, where the reply consumer
(scheduler.replies) records it; no reply before the attempt's deadline is a `no_answer`, which
the supervisor handles by policy as for HTTP.

Request (JSON):

    {"operation_id", "job_id", "step", "attempt", "kind": "call" | "status",
     "input", "results", "reply_to", ["compensates", "original_output"], ["heartbeat_details"]}

Reply (JSON, on `reply_to`):

    {"operation_id", "attempt", "outcome": "succeeded" | "refused" | "failed" | "not_happened",
     "output", "error"}

`refused` is a business failure, `failed` a transient one; a status query answers `succeeded`
(with the operation's output) or `not_happened`. The remote de-duplicates on `operation_id`:
every retry of a step carries the same one.

Cancel (on the step's request queue when its job stops while a call is out and the step names a
`cancel_path`; no reply asked; scheduler.services.cancels): `{"type": "cancel", "kind": "cancel",
"operation_id", "job_id", "step", "attempt"}`, `attempt` being the call's.

Heartbeat (JSON, on `reply_to`, as often as the remote likes while it works):

    {"operation_id", "attempt", "heartbeat": true, ["details"]}

It says the attempt is alive and, optionally, how far it got (`details`, any JSON up to
HEARTBEAT_DETAILS_MAX_BYTES); it carries no outcome. A later attempt of the same operation finds
the last details in its request (`heartbeat_details`), so that it can resume.

Messages are persistent (delivery mode 2) and use kombu's JSON serialisation, so any kombu (or
Celery-compatible) consumer reads them, and on AMQP they are plain messages with a JSON body.

What the reply consumer cannot record (a message it cannot decode, one that is not a reply, one
larger than SAS_MAX_RESPONSE_BYTES, a compressed one, one whose reading raises, a reply refused at
each of SAS_REPLY_MAX_TRIES tries) goes to the dead-letter queue `<reply queue>.dead` on the same
broker (consume_replies); kombu never inflates a compressed one first (uninflated). Connections to
`rediss://` and `amqps://` brokers verify the certificate and the host name (tls_options).
"""

from __future__ import annotations

import codecs
import functools
import json
import logging
import os
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from agents.outcome import ACCEPTED, HEARTBEAT_DETAILS_MAX_BYTES, AttemptKind, CallResult, CallSpec, Outcome
from agents.validation import OutboundRefused, pinned_broker_url, validate_broker_url, validate_queue_name
from sas_project.conf import sas_settings
from sas_project.errors import InvalidInput
from sas_project.validation import json_storable

logger = logging.getLogger("agents.queue")

#: Reply outcomes and what they are.
REPLY_OUTCOMES: dict[str, str] = {
    "succeeded": Outcome.SUCCEEDED,
    "refused": Outcome.BUSINESS_FAILURE,
    "failed": Outcome.TRANSIENT_FAILURE,
    "not_happened": Outcome.NOT_HAPPENED,
}
#: Broker connection and publish time limit, seconds: a broker that does not take a message in
#: this time is a transient failure (nothing was sent).
PUBLISH_TIMEOUT = 5.0

#: One quick second try on a dropped connection, then the attempt is a transient failure.
RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}

_connections: dict[tuple[str, str, str], Any] = {}
_connections_pid: int | None = None


def _connection(url: str, credentials: tuple[str, str]) -> Any:
    """This process's connection to a broker (a new one after a fork). A new connection is made
    to the address the outbound-URL guard checks now (`broker_connection`: OutboundRefused or
    OSError when it cannot be); a kept one stays with the address checked when it was made, so
    a publish resolves the broker's name only when it connects."""
    global _connections_pid

    if _connections_pid != os.getpid():
        _connections.clear()
        _connections_pid = os.getpid()
    key = (url, *credentials)
    conn = _connections.get(key)
    if conn is None:
        conn = broker_connection(url, credentials)
        _connections[key] = conn
    return conn


def broker_connection(url: str, credentials: tuple[str, str]) -> Any:
    """A kombu connection (not yet connected) to the saved broker URL `url`, for the publisher
    and the reply consumer alike: to the address the outbound-URL guard checks now
    (`pinned_broker_url`; OutboundRefused or OSError when it cannot be), with the TLS checks of
    `tls_options`, and time limits on connecting and on every socket operation."""
    from kombu import Connection

    user, password = credentials
    return Connection(
        pinned_broker_url(url),
        userid=user or None,
        password=password or None,
        ssl=tls_options(url),
        connect_timeout=PUBLISH_TIMEOUT,
        transport_options={"socket_timeout": PUBLISH_TIMEOUT, "socket_connect_timeout": PUBLISH_TIMEOUT},
    )


def tls_options(url: str) -> dict[str, Any] | bool:
    """The TLS arguments of a connection to the saved broker URL `url` (False for the plain
    schemes): the broker's certificate must chain to a trusted authority (SAS_BROKER_CA_FILE, or
    the system's trust store) and name the host of `url`, the name the pool was saved with, even
    when the connection goes to an address checked for it. Left to themselves, kombu verifies no
    `rediss://` certificate (CERT_NONE) and py-amqp checks no `amqps://` host name."""
    parts = urlsplit(url)
    ca_file = sas_settings.broker_ca_file or None
    if parts.scheme == "rediss":
        # redis-py checks the name it connects to, which pinned_broker_url keeps for rediss.
        return {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_check_hostname": True, "ssl_ca_certs": ca_file}
    if parts.scheme == "amqps":
        return {"cert_reqs": ssl.CERT_REQUIRED, "server_hostname": parts.hostname, "ca_certs": ca_file}
    return False


def _forget(url: str, credentials: tuple[str, str]) -> None:
    conn = _connections.pop((url, *credentials), None)
    if conn is not None:
        try:
            conn.release()
        except Exception:
            logger.debug("closing a broken broker connection failed", exc_info=True)


def credentials_of(spec: CallSpec) -> tuple[str, str]:
    """The broker user name and password the claim put in the spec's headers (never logged)."""
    return spec.headers.get("username", ""), spec.headers.get("password", "")


def message_of(spec: CallSpec) -> dict[str, Any]:
    """The request message of one attempt, or of a cancel (see "Cancel" above)."""
    if spec.is_cancel:  # its payload is the message (scheduler.services.cancels.cancel_claim)
        return {**spec.payload, "kind": "cancel"}
    message = {
        "operation_id": spec.operation_id,
        "job_id": spec.job_id,
        "step": spec.payload.get("step"),
        "attempt": spec.attempt,
        "kind": "status" if spec.kind == AttemptKind.RECONCILE else "call",
        "input": spec.payload.get("input", {}),
        "results": spec.payload.get("results", {}),
        "reply_to": sas_settings.reply_queue,
    }
    # A fan-out item's element and position, as the HTTP body has them: without them the items
    # of one step (no input mapping) would be the same message but for the operation ID.
    for extra in ("item", "index", "compensates", "original_output", "heartbeat_details"):
        if extra in spec.payload:
            message[extra] = spec.payload[extra]
    return message


def call_queue(spec: CallSpec) -> CallResult:
    """Publish the attempt's message; ACCEPTED once the broker has it."""
    started = time.monotonic()

    def elapsed_ms() -> int:
        return int((time.monotonic() - started) * 1000)

    try:
        queue_name = validate_queue_name(spec.path)
        url = validate_broker_url(spec.base_url, resolve=False)
        credentials = credentials_of(spec)
        # The outbound-URL guard at connect time, when a connection is made (_connection).
        conn = _connection(url, credentials)
    except InvalidInput as exc:  # OutboundRefused included: an internal broker not allow-listed
        return CallResult(Outcome.BUSINESS_FAILURE, error=f"endpoint refused: {exc.message}")
    except OSError as exc:  # the name does not resolve now: nothing was sent
        return CallResult(Outcome.TRANSIENT_FAILURE, error=f"broker host not resolved: {exc}"[:1000])
    from kombu import Queue

    body = message_of(spec)
    try:
        queue = Queue(queue_name, routing_key=queue_name, durable=True)
        with conn.Producer(serializer="json") as producer:
            producer.publish(
                body,
                routing_key=queue_name,
                declare=[queue],
                delivery_mode=2,
                correlation_id=spec.operation_id,
                reply_to=sas_settings.reply_queue,
                retry=True,
                retry_policy=RETRY_POLICY,
            )
    except Exception as exc:  # noqa: BLE001 - every broker or network error: nothing was taken
        _forget(url, credentials)
        return CallResult(
            Outcome.TRANSIENT_FAILURE,
            latency_ms=elapsed_ms(),
            error=f"broker refused the message: {type(exc).__name__}: {exc}"[:1000],
        )
    return CallResult(
        Outcome.SUCCEEDED if spec.is_cancel else ACCEPTED,  # a cancel asks for no reply
        latency_ms=elapsed_ms(),
        excerpt=json.dumps({"queue": queue_name, "reply_to": body.get("reply_to")}),
    )


# --- replies ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """A remote's reply: which attempt of which operation, and its result."""

    operation_id: str
    attempt: int
    result: CallResult


@dataclass(frozen=True)
class Heartbeat:
    """A remote's heartbeat: the attempt it works on is alive; `details` (any JSON, or None)
    say how far it got."""

    operation_id: str
    attempt: int
    details: Any = None


class BadReply(ValueError):
    """A reply that names no attempt or no known outcome; it goes to the dead-letter queue."""


def parse_reply(body: Any) -> Reply | Heartbeat:
    if isinstance(body, bytes | str):
        try:
            body = json.loads(body)
        except ValueError as exc:
            raise BadReply("the reply is not JSON") from exc
        except RecursionError as exc:  # json's scanner spends the recursion limit on nesting
            raise BadReply("the reply's JSON is nested too deeply to read") from exc
    if not isinstance(body, dict):
        raise BadReply("the reply is not a JSON object")
    operation_id = body.get("operation_id")
    attempt = body.get("attempt")
    outcome = body.get("outcome")
    if not isinstance(operation_id, str) or not _printable_id(operation_id):
        raise BadReply("the reply has no operation_id (1-200 printable characters)")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or not 0 < attempt < 2**31:
        raise BadReply("the reply has no attempt number")
    if body.get("heartbeat") is True:
        return Heartbeat(operation_id=operation_id, attempt=attempt, details=_details(body.get("details")))
    if outcome not in REPLY_OUTCOMES:
        raise BadReply(f"the reply's outcome {str(outcome)[:50]!r} is not one of {', '.join(REPLY_OUTCOMES)}")
    error = body.get("error") or ""
    result = CallResult(
        REPLY_OUTCOMES[outcome],
        output=body.get("output") if outcome == "succeeded" else None,
        excerpt=json.dumps(body, default=str)[: sas_settings.response_excerpt_bytes],
        error=str(error)[:1000] if outcome != "succeeded" else "",
    )
    return Reply(operation_id=operation_id, attempt=attempt, result=result)


def _details(details: Any) -> Any:
    """A heartbeat's details, refused (BadReply) when the database could not keep them or they
    are larger than HEARTBEAT_DETAILS_MAX_BYTES."""
    try:
        json_storable(details, "details")
    except InvalidInput as exc:
        raise BadReply(f"the heartbeat's {exc.message}") from exc
    if len(json.dumps(details, ensure_ascii=False).encode()) > HEARTBEAT_DETAILS_MAX_BYTES:
        raise BadReply(f"the heartbeat's details are larger than {HEARTBEAT_DETAILS_MAX_BYTES} bytes")
    return details


#: Why a reply went to the dead-letter queue (the `x-sas-dead-reason` header, the metric's label).
DEAD_REASONS: dict[str, str] = {
    "undecodable": "not JSON, or a content type other than JSON",
    "too_large": "larger than SAS_MAX_RESPONSE_BYTES",
    "invalid": "JSON that is not a reply (BadReply)",
    "compressed": "compressed (a `compression` header, or a content encoding that is not a character set)",
    "unclassified": "reading it raised an error the consumer does not classify",
    "refused": "not recorded at any of SAS_REPLY_MAX_TRIES tries while the database answered",
}
#: The headers a dead letter carries, beside the message's own.
DEAD_REASON = "x-sas-dead-reason"
DEAD_ERROR = "x-sas-dead-error"
#: How many tries a reply has had (set when it is put back at the end of the queue).
TRIES_HEADER = "x-sas-tries"
#: The size of a message cut to SAS_MAX_RESPONSE_BYTES in the dead-letter queue.
BYTES_HEADER = "x-sas-bytes"
#: How a compressed message said it was compressed (its `compression` header or content encoding),
#: in its dead letter, which carries neither: whoever replays a dead letter does not inflate it.
COMPRESSION_HEADER = "x-sas-compression"


def dead_letter_queue(reply_queue: str) -> str:
    """The dead-letter queue beside a reply queue, on the same broker."""
    return f"{reply_queue}.dead"


@dataclass(frozen=True)
class DeadLetter:
    """A message of the reply queue sent to the dead-letter queue: why, and the attempt it names
    when it names one (operation ID and attempt number read from it, or None)."""

    reason: str  # one of DEAD_REASONS
    error: str
    queue: str
    tries: int = 1
    operation_id: str | None = None
    attempt: int | None = None


class HandlerUnavailable(Exception):
    """Raised by a reply handler that cannot record anything now (its database is away): the
    reply is put back where it was and the try is not counted."""


def consume_replies(
    brokers: list[tuple[str, tuple[str, str]]],
    handle: Callable[[Reply | Heartbeat], None],
    *,
    should_stop: Callable[[], bool],
    on_dead_letter: Callable[[DeadLetter], None] | None = None,
    poll: float = 0.5,
    pause: float = 1.0,
) -> Iterator[int]:
    """Consume the reply queue of every broker until `should_stop()`, calling `handle` with each
    reply; yields the number of replies handled at each turn, so that the caller can look at its
    brokers again between turns.

    A reply is acknowledged once `handle` returns (after its transaction committed): a consumer
    that dies first leaves it to be delivered again, which is harmless (the first result of an
    attempt wins; a heartbeat only moves a deadline). Heartbeats come through `handle` too.

    No message holds up the ones behind it. What `read_message` sets aside (a message larger than
    SAS_MAX_RESPONSE_BYTES, a compressed one, one that cannot be decoded, one that is not a reply)
    and a message whose reading raises anything else ("unclassified") go to the broker's
    dead-letter queue (`dead_letter_queue`) at once, with their raw body (cut to the limit when
    too large) and the reason in their headers: never is a message's fault taken for a lost
    broker. kombu never inflates a compressed body here (`uninflated`). When `handle` raises
    HandlerUnavailable (the database is away), the reply is put back and the consumer pauses;
    when it raises anything else, the reply goes to the end of the queue with its tries counted
    in a header (TRIES_HEADER), and after SAS_REPLY_MAX_TRIES to the dead-letter queue. The
    message is acknowledged only once its dead letter is published; `on_dead_letter` is then told
    (to record an event and count it): when it fails, that is logged and the message stays dead.
    Only the broker's own errors make the consumer reconnect to it.
    """
    reader = _ReplyReader(handle, on_dead_letter=on_dead_letter, pause=pause)
    opened: list[tuple[Any, Any]] = []
    try:
        _open_consumers(brokers, reader=reader, opened=opened)
        connected: set[int] = set()
        while not should_stop():
            reader.handled = 0
            _drain_turn(opened, connected=connected, poll=poll)
            yield reader.handled
    finally:
        for conn, _consumer in opened:
            _release(conn)


class _ReplyReader:
    """What `consume_replies` does with each message of the reply queue: read it, hand a reply to
    `handle`, and set aside (dead-letter) or put back what cannot be recorded. `handled` counts
    the replies handled since the caller last reset it (once per turn)."""

    def __init__(
        self,
        handle: Callable[[Reply | Heartbeat], None],
        *,
        on_dead_letter: Callable[[DeadLetter], None] | None,
        pause: float,
    ) -> None:
        self.handle = handle
        self.on_dead_letter = on_dead_letter
        self.pause = pause
        self.queue_name = sas_settings.reply_queue
        self.dead_name = dead_letter_queue(self.queue_name)
        self.handled = 0

    def set_aside(self, message: Any, dead: DeadLetter, raw: bytes) -> None:
        """Publish `raw` to the dead-letter queue (raises when the broker does not take it: the
        message is then not acknowledged, and comes back), acknowledge, and tell the caller."""
        limit = sas_settings.max_response_bytes
        headers = {
            **{name: value for name, value in _headers(message).items() if name != "compression"},
            DEAD_REASON: dead.reason,
            DEAD_ERROR: dead.error[:500],
            TRIES_HEADER: dead.tries,
        }
        if len(raw) > limit:
            headers[BYTES_HEADER] = len(raw)
        compression = _compression(message)
        if compression is not None:
            headers[COMPRESSION_HEADER] = compression
        _publish_raw(message, raw[:limit], self.dead_name, headers, binary=compression is not None)
        message.ack()
        logger.warning(
            "reply dead-lettered: %s",
            dead.error,
            extra={"reason": dead.reason, "operation_id": dead.operation_id, "queue": self.dead_name},
        )
        if self.on_dead_letter is not None:
            try:
                self.on_dead_letter(dead)
            except Exception:
                logger.exception("a dead-lettered reply was not counted", extra={"reason": dead.reason})

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        error = f"the reply cannot be decoded: {type(exc).__name__}: {exc}"[:1000]
        self.set_aside(message, DeadLetter("undecodable", error, self.dead_name), _raw(message))

    def on_message(self, message: Any) -> None:
        raw = _raw(message)
        read = self._read(message, raw)
        if isinstance(read, DeadLetter):
            self.set_aside(message, read, raw)
            return
        reply = read
        try:
            self.handle(reply)
        except HandlerUnavailable:
            logger.warning("reply not recorded; put back", extra={"operation_id": reply.operation_id})
            message.requeue()
            time.sleep(self.pause)
            return
        except Exception as exc:  # the reply's own fault (the database answers): counted
            tries = _tries(message) + 1
            logger.exception(
                "reply not recorded (try %d of %d)",
                tries,
                sas_settings.reply_max_tries,
                extra={"operation_id": reply.operation_id},
            )
            error = f"not recorded: {type(exc).__name__}: {exc}"[:1000]
            self._not_recorded(message, reply, raw, error=error, tries=tries)
            time.sleep(self.pause)
            return
        message.ack()
        self.handled += 1

    def _read(self, message: Any, raw: bytes) -> Reply | Heartbeat | DeadLetter:
        try:
            return read_message(message, raw, dead_queue=self.dead_name)
        except Exception as exc:  # a poison nobody foresaw must not stop the replies
            logger.exception("reply not read", extra={"queue": self.queue_name})
            error = f"reading the reply raised {type(exc).__name__}: {exc}"[:1000]
            return DeadLetter("unclassified", error, self.dead_name, tries=_tries(message) + 1)

    def _not_recorded(
        self, message: Any, reply: Reply | Heartbeat, raw: bytes, *, error: str, tries: int
    ) -> None:
        """`handle` failed on the reply for the `tries`-th time: send it to the end of the queue
        with its tries counted, or to the dead-letter queue after the last try."""
        if tries >= sas_settings.reply_max_tries:
            dead = DeadLetter(
                "refused",
                error,
                self.dead_name,
                tries=tries,
                operation_id=reply.operation_id,
                attempt=reply.attempt,
            )
            self.set_aside(message, dead, raw)
        else:
            _publish_raw(message, raw, self.queue_name, {**_headers(message), TRIES_HEADER: tries})
            message.ack()


def _open_consumers(
    brokers: list[tuple[str, tuple[str, str]]], *, reader: _ReplyReader, opened: list[tuple[Any, Any]]
) -> None:
    """Append to `opened` a connection and a consumer of the reply queue for each broker the
    outbound guard lets through (appended one by one, so that the caller releases those opened
    before one raised)."""
    from kombu import Consumer, Queue

    for saved, credentials in brokers:
        try:
            conn = broker_connection(saved, credentials)
        except (OutboundRefused, OSError) as exc:
            logger.warning("reply consumer skips broker %s: %s", saved, exc)
            continue
        queue = Queue(reader.queue_name, routing_key=reader.queue_name, durable=True)
        consumer = Consumer(
            conn,
            queues=[queue],
            on_message=reader.on_message,
            on_decode_error=reader.on_decode_error,
            accept=["json"],
            prefetch_count=50,
        )
        opened.append((conn, consumer))


def _drain_turn(opened: list[tuple[Any, Any]], *, connected: set[int], poll: float) -> None:
    """One turn over the brokers: (re)connect those not in `connected` and drain each for its
    share of `poll`. A broker away is dropped from `connected` and tried again next turn."""
    if not opened:  # every broker refused by the guard: nothing to drain
        time.sleep(poll)
    for index, (conn, consumer) in enumerate(opened):
        try:
            if index not in connected:
                conn.ensure_connection(max_retries=1)
                consumer.revive(_uninflating(conn.channel()))
                consumer.consume()
                connected.add(index)
            conn.drain_events(timeout=poll / max(len(opened), 1))
        except TimeoutError:
            continue
        except Exception as exc:  # a broker away (try again next turn), or kombu on an item
            if index in connected and not _broker_error(conn, exc):
                # kombu failed on an item before on_message saw it (an item that is not
                # a kombu message, taken off the queue): the connection is sound, and
                # dropping it would only give back the unacknowledged replies.
                logger.exception("reply consumer: a message failed before it was read (%s)", _safe(conn))
                continue
            if index in connected:
                logger.warning("reply consumer lost broker %s: %s", _safe(conn), exc)
            connected.discard(index)
            _release(conn)
            time.sleep(poll)


def read_message(message: Any, raw: bytes, *, dead_queue: str) -> Reply | Heartbeat | DeadLetter:
    """What a message of the reply queue is (`raw` its body as it came): a reply or heartbeat to
    record, or why it goes to `dead_queue`. A compressed body is refused as it is, before anything
    decodes it; the size is that of the body as it came."""
    tries = _tries(message) + 1
    compression = _compression(message)
    if compression is not None:
        error = f"the reply is compressed ({compression[:100]}); it is not inflated"
        return DeadLetter("compressed", error, dead_queue, tries=tries)
    limit = sas_settings.max_response_bytes
    if len(raw) > limit:
        return DeadLetter(
            "too_large", f"the reply is {len(raw)} bytes, more than {limit}", dead_queue, tries=tries
        )
    try:
        body = message.decode()
    except Exception as exc:  # noqa: BLE001 - whatever the serialiser raises: not decodable
        error = f"the reply cannot be decoded: {type(exc).__name__}: {exc}"[:1000]
        return DeadLetter("undecodable", error, dead_queue, tries=tries)
    try:
        return parse_reply(body)
    except BadReply as exc:
        operation_id, attempt = _names(body)
        return DeadLetter(
            "invalid", str(exc), dead_queue, tries=tries, operation_id=operation_id, attempt=attempt
        )


def _compression(message: Any) -> str | None:
    """How `message` says its body is compressed, or None: its `compression` header, or a content
    encoding that is a codec but not a character set (zlib, bz2: kombu's decoding gives the body
    to codecs.decode, which inflates it). An unknown encoding is left to decoding to refuse."""
    compression = _headers(message).get("compression")
    if compression:
        return str(compression)
    encoding = message.content_encoding
    if not isinstance(encoding, str) or encoding.lower() in ("binary", "ascii-8bit"):  # kombu's raw
        return None
    try:
        codecs.lookup(encoding)
    except LookupError:
        return None
    try:
        b"0".decode(encoding)
    except LookupError:  # "... is not a text encoding"
        return encoding
    except ValueError:  # a character set this byte is no text in
        return None
    return None


def _uninflating(channel: Any) -> Any:
    """`channel`, making its messages with `uninflated`."""
    channel.Message = uninflated(type(channel).Message)
    return channel


@functools.cache
def uninflated(message_class: type[Any]) -> type[Any]:
    """`message_class` (a kombu transport's Message) that leaves a compressed body as it came.

    kombu's own Message.__init__ inflates the body by its `compression` header (zlib, bz2, lzma)
    while the transport makes the message, before any callback sees it: a size cap applied later
    is too late (a few hundred bytes of bz2 are 64 MiB inflated). Every transport's Message hands
    the headers to kombu's by keyword; the class made here sits between the two in the method
    resolution order, hides the header from kombu's and puts it back, so the consumer sees it."""
    from kombu.message import Message

    class KeepCompressed(Message):
        # kombu.message.Message.__init__'s arguments, each transport's Message passes by keyword.
        def __init__(self, *, headers: dict[str, Any] | None = None, **kwargs: Any) -> None:
            headers = dict(headers or {})
            compression = headers.pop("compression", None)
            super().__init__(headers=headers, **kwargs)
            if compression is not None:
                self.headers["compression"] = compression

    return type(f"Uninflated{message_class.__name__}", (message_class, KeepCompressed), {})


def _broker_error(conn: Any, exc: Exception) -> bool:
    """Whether `exc` is the broker's (its connection or channel failed), not a message's."""
    from kombu.exceptions import OperationalError

    return isinstance(exc, (*conn.connection_errors, *conn.channel_errors, OperationalError))


def _raw(message: Any) -> bytes:
    body = message.body
    if isinstance(body, bytes):
        return body
    return str(body if body is not None else "").encode("utf-8", "surrogateescape")


def _headers(message: Any) -> dict[str, Any]:
    headers = message.headers
    return dict(headers) if isinstance(headers, dict) else {}


def _tries(message: Any) -> int:
    tries = _headers(message).get(TRIES_HEADER)
    return tries if isinstance(tries, int) and not isinstance(tries, bool) and tries > 0 else 0


def _names(body: Any) -> tuple[str | None, int | None]:
    """The operation ID and attempt a message that is not a reply names, when it names them in
    a form a reply would (nothing is looked up for anything else)."""
    if isinstance(body, bytes | str):
        try:
            body = json.loads(body)
        except (ValueError, RecursionError):
            return None, None
    if not isinstance(body, dict):
        return None, None
    operation_id, attempt = body.get("operation_id"), body.get("attempt")
    if not isinstance(operation_id, str) or not _printable_id(operation_id):
        return None, None
    if not isinstance(attempt, int) or isinstance(attempt, bool) or not 0 < attempt < 2**31:
        attempt = None
    return operation_id, attempt


def _printable_id(operation_id: str) -> bool:
    return 0 < len(operation_id) <= 200 and operation_id.isprintable()


def _publish_raw(
    message: Any, raw: bytes, queue_name: str, headers: dict[str, Any], *, binary: bool = False
) -> None:
    """Publish `raw` as it came (its content type and encoding; "binary" when `binary`) to
    `queue_name` on the broker `message` came from, persistent."""
    from kombu import Producer, Queue

    producer = Producer(message.channel)
    producer.publish(
        raw,
        routing_key=queue_name,
        declare=[Queue(queue_name, routing_key=queue_name, durable=True)],
        content_type=message.content_type or "application/data",
        content_encoding="binary" if binary else message.content_encoding or "binary",
        headers=headers,
        delivery_mode=2,
    )


def _safe(conn: Any) -> str:
    try:
        return str(conn.as_uri())  # kombu masks the password
    except Exception:  # noqa: BLE001
        return "?"


def _release(conn: Any) -> None:
    try:
        conn.release()
    except Exception:
        logger.debug("closing a broker connection failed", exc_info=True)
