"""The sandbox remote as a message-queue consumer (`sandbox_remote --broker redis://...`).

One request queue per route: the route's path with dots (`inventory.reserve`, `payments.charge`,
`payments.refund`, ...), and one status queue per service (`inventory.status`, ...). A request is
the service's message (agents.queue): it is performed after `async_delay_ms`, once per
`operation_id` (the same store as the HTTP routes), and its result published on its `reply_to`
queue; a status query is answered at once. The faults of the HTTP routes and of the asynchronous
reports apply (testbed.sandbox.async_): an injected error replies `failed` without doing anything,
a dropped request is done and never replied to. A slow job (`input.slow`) publishes heartbeats on
`reply_to` while it works (testbed.sandbox.async_.perform_slowly).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import uuid
from typing import Any

from testbed.sandbox.async_ import deliver, perform_later, perform_slowly
from testbed.sandbox.core import ROUTES, BadRequest, read_caller, read_operation_request
from testbed.sandbox.state import SandboxState

logger = logging.getLogger("testbed.sandbox.queue")

#: Queue name -> route path.
REQUEST_QUEUES = {path.strip("/").replace("/", "."): path for path in ROUTES}
#: Outputs a reply may carry that the database cannot store (a NUL character, NaN, infinity).
UNSTORABLE_OUTPUTS: tuple[dict[str, Any], ...] = (
    {"note": "nul \u0000 here"},
    {"ratio": float("nan")},
    {"amount": float("inf")},
)
#: Queue name -> service, for status queries.
STATUS_QUEUES = {f"{route.service}.status": route.service for route in ROUTES.values()}


class QueueConsumer:
    """Consumes the sandbox's request queues on one broker, in a thread, until `stop()`."""

    def __init__(self, remote: SandboxState, broker_url: str) -> None:
        self.remote = remote
        self.broker_url = broker_url
        self._stop = threading.Event()
        self._publish_lock = threading.Lock()
        self._publisher: Any = None
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sandbox-queue", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with contextlib.suppress(Exception):
            if self._publisher is not None:
                self._publisher.release()

    # -- consuming

    def _run(self) -> None:
        from kombu import Connection, Consumer, Queue

        while not self._stop.is_set():
            try:
                with Connection(self.broker_url, connect_timeout=5) as conn:
                    queues = [
                        Queue(n, routing_key=n, durable=True) for n in (*REQUEST_QUEUES, *STATUS_QUEUES)
                    ]
                    with Consumer(conn, queues=queues, callbacks=[self._on_message], accept=["json"]):
                        self.ready.set()
                        while not self._stop.is_set():
                            with contextlib.suppress(TimeoutError):
                                conn.drain_events(timeout=0.5)
            except Exception as exc:  # noqa: BLE001 - the broker went away: connect again
                logger.warning("sandbox queue consumer: %s; reconnecting", exc)
                self._stop.wait(0.5)

    def _on_message(self, body: Any, message: Any) -> None:
        # Taken at once: this remote keeps its own promises (a lost message is a lost request).
        message.ack()
        queue = message.delivery_info.get("routing_key", "")
        try:
            if queue in STATUS_QUEUES:
                self._status(STATUS_QUEUES[queue], body)
            elif queue in REQUEST_QUEUES:
                self._request(queue, body)
        except Exception:
            logger.exception("sandbox queue consumer: a message failed")

    def _request(self, queue: str, body: Any) -> None:
        if not isinstance(body, dict) or not isinstance(body.get("operation_id"), str):
            self.remote.store.bump("bad_messages")
            return
        key = body["operation_id"]
        reply_to = str(body.get("reply_to") or "")
        attempt = body.get("attempt") if isinstance(body.get("attempt"), int) else None
        path = f"queue:{queue}"
        self.remote.store.log_delivery(key, "POST", path, attempt, read_caller(body))

        def report(result: dict[str, Any]) -> None:
            self.publish(reply_to, {"operation_id": key, "attempt": attempt, **result})

        def report_unknown() -> None:
            self.publish(
                reply_to,
                {
                    "operation_id": f"unknown-{uuid.uuid4()}",
                    "attempt": 1,
                    "outcome": "succeeded",
                    "output": {},
                },
            )

        try:
            request = read_operation_request(ROUTES[REQUEST_QUEUES[queue]], path, key, body)
        except BadRequest as exc:
            report({"outcome": "refused", "output": None, "error": str(exc)})
            return
        plan, config = self.remote.plan_faults(path)
        if plan.error:
            self.remote.store.bump("fault_error")
            deliver(
                self.remote,
                config,
                {"outcome": "failed", "output": None, "error": "injected failure"},
                report=report,
                report_unknown=report_unknown,
            )
            return
        if plan.drop:
            # Done, and the reply lost.
            self.remote.store.bump("fault_drop")
            perform_later(self.remote, request, config, plan, report=_nothing, report_unknown=_nothing)
            return
        if plan.delay_ms:
            self.remote.store.bump("fault_slow")
        if plan.hostile and request.slow is None:
            # The work done, its reply's output is one the database cannot store.
            self.remote.store.bump("hostile_unstorable")
            turn = self.remote.store.counter("hostile_unstorable")
            plain_report = report

            def report(result: dict[str, Any]) -> None:
                if result.get("outcome") == "succeeded":
                    result = {**result, "output": UNSTORABLE_OUTPUTS[turn % len(UNSTORABLE_OUTPUTS)]}
                plain_report(result)

        if request.slow is not None:

            def beat(details: dict[str, Any]) -> bool:
                heartbeat = {"operation_id": key, "attempt": attempt, "heartbeat": True, "details": details}
                self.publish(reply_to, heartbeat)
                return True  # a queue says nothing back: the work goes on

            perform_slowly(
                self.remote,
                request,
                request.slow,
                attempt,
                config,
                plan,
                beat=beat,
                report=report,
                report_unknown=report_unknown,
            )
            return
        perform_later(self.remote, request, config, plan, report=report, report_unknown=report_unknown)

    def _status(self, service: str, body: Any) -> None:
        if not isinstance(body, dict) or not isinstance(body.get("operation_id"), str):
            self.remote.store.bump("bad_messages")
            return
        key = body["operation_id"]
        attempt = body.get("attempt") if isinstance(body.get("attempt"), int) else None
        self.remote.store.log_delivery(key, "GET", f"queue:{service}.status", attempt)
        if self.remote.is_in_progress(key):
            result = {"outcome": "failed", "output": None, "error": "operation in progress"}
        else:
            answer = self.remote.store.status_of(service, key)
            if answer.status == 200:
                result = {"outcome": "succeeded", "output": json.loads(answer.body), "error": ""}
            else:
                result = {"outcome": "not_happened", "output": None, "error": "no record of this operation"}
        self.publish(str(body.get("reply_to") or ""), {"operation_id": key, "attempt": attempt, **result})

    # -- replying

    def publish(self, queue: str, body: dict[str, Any]) -> None:
        if not queue:
            return
        from kombu import Connection, Queue

        with self._publish_lock:
            for _ in range(3):
                try:
                    if self._publisher is None:
                        self._publisher = Connection(self.broker_url, connect_timeout=5)
                    with self._publisher.Producer(serializer="json") as producer:
                        producer.publish(
                            body,
                            routing_key=queue,
                            declare=[Queue(queue, routing_key=queue, durable=True)],
                            delivery_mode=2,
                            retry=True,
                            retry_policy={"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5},
                        )
                    return
                except Exception as exc:  # noqa: BLE001 - the broker away: the reply is lost
                    logger.warning("sandbox queue consumer: reply not published: %s", exc)
                    with contextlib.suppress(Exception):
                        self._publisher.release()
                    self._publisher = None
            self.remote.store.bump("replies_unpublished")


def _nothing(*args: Any) -> None:
    """A report nobody receives (a dropped request)."""
