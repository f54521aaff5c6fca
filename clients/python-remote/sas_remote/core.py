"""The remote's core, free of any web framework: `Remote.handle(method, path, headers, body)`
answers one HTTP request of the scheduler's HTTP agent with a `Response`.

What the scheduler sends and reads (its docs/architecture.md, "How one step runs"): a POST of a
JSON object with `Idempotency-Key: <operation ID>` (the same on every attempt of one operation),
`X-SAS-Attempt` and `X-SAS-Callback-URL`; 2xx is a success (the JSON body is the step's output),
202 "accepted, the result comes to the callback URL", 408/429/5xx a transient failure (tried
again), any other 4xx a business failure; a GET of the step's status path (it carries the same
`Idempotency-Key`) asks whether the operation happened: 200 yes, 404 no, anything else unknown.

The promises, per operation ID:

* the handler runs once: a repeat gets the recorded answer again (`Idempotent-Replayed: true`),
  a business failure (`Refused`) included; the same key with another request gets 422;
* a repeat that arrives while the first delivery is still running waits for its answer, up to
  `wait_seconds`, then gets 503 with `Retry-After` (a transient failure: the scheduler tries
  again later). Waiting, because the usual cause is the scheduler's own retry after its deadline
  passed while the first call still ran: the wait hands that retry the first call's answer instead
  of costing another round of backoff. Bounded, because the caller's own deadline is short and a
  parked server thread is not free;
* a run holds the operation for `lease_seconds`; a delivery that finds a run older than that
  takes it over (its process is taken for dead) and runs the handler again. A crash between the
  handler's effect and the record of its answer is the one case where a handler runs twice:
  a handler that must never is idempotent on `request.operation_id` itself;
* an unexpected exception or `TryLater` records nothing: 500 or 503, and the next delivery runs
  the handler again;
* a handler that returns `later(work)` gets 202 at once; `work(heartbeat)` runs on a worker
  thread, its result is recorded, then POSTed to the callback URL of the latest delivery
  (sas_remote.callbacks). A repeat while it works gets 202 again (and its callback URL becomes
  where the result goes); a repeat after it finished gets the recorded answer. Work that runs
  longer than `lease_seconds` must call `heartbeat`, which also renews the lease.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hmac
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

from sas_remote.callbacks import CallbackClient, Delivery
from sas_remote.messages import (
    MAX_KEY_LENGTH,
    REPLAYED,
    Accepted,
    AttemptGivenUp,
    Handler,
    Heartbeat,
    Refused,
    Request,
    Response,
    TryLater,
    error_response,
    fingerprint,
    no_constants,
)
from sas_remote.store import DONE, PENDING, MemoryStore, Record, Store

log = logging.getLogger("sas_remote")


class Remote:
    """A handler, the store that remembers its operations, and the workers of its accepted work.

    `handler(request)` returns the step's output (any JSON value), raises `Refused` or
    `TryLater`, or returns `later(work)`. `store` is any `sas_remote.store.Store` (a
    `MemoryStore` when not given). `executor` runs accepted work (a thread pool of `max_workers`
    when not given); `callbacks` reports it.

    Who may call: with `secret_header=(name, value)` (the endpoint's secret header in the
    scheduler's pool), a request without that header and value gets 401 and reaches nothing.

    Where results go: `callback_origins` names the scheduler's callback URLs, each an origin
    and a path (for example `("https://scheduler.example.com/api/v1/callbacks/",)`). A request
    whose `X-SAS-Callback-URL` is not on one of them (the same scheme, host and port, a path
    under that path, no `..` segment) gets 400, so results are only ever POSTed to the
    scheduler, never to an address a caller made up. Work a handler accepts (`later`) with a
    callback URL needs them: without any, it is answered 500 `callback_origins_required` and not
    run (without a callback URL it runs at once, reporting nowhere).
    (`callback_prefixes`, the former name, is read the same way, as origins and paths.)
    """

    def __init__(
        self,
        handler: Handler,
        store: Store | None = None,
        *,
        lease_seconds: float = 60.0,
        wait_seconds: float = 2.0,
        executor: concurrent.futures.Executor | None = None,
        max_workers: int = 8,
        callbacks: CallbackClient | None = None,
        clock: Callable[[], float] = time.time,
        secret_header: tuple[str, str] | None = None,
        callback_origins: Sequence[str] = (),
        callback_prefixes: Sequence[str] = (),
    ) -> None:
        self.handler = handler
        self.secret_header = (secret_header[0].lower(), secret_header[1]) if secret_header else None
        self.callback_origins = tuple(
            _callback_origin(url) for url in (*callback_origins, *callback_prefixes)
        )
        self.store: Store = store if store is not None else MemoryStore()
        self.lease_seconds = lease_seconds
        self.wait_seconds = wait_seconds
        self._executor = executor or concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="sas-remote-work"
        )
        self._callbacks = callbacks or CallbackClient()
        self._clock = clock
        self._working: set[concurrent.futures.Future[None]] = set()
        self._lock = threading.Lock()

    def close(self, *, wait: bool = True) -> None:
        """Stop taking accepted work; with `wait`, finish what runs (and report it) first."""
        self._executor.shutdown(wait=wait)
        self._callbacks.close()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no accepted work runs; False if some still does after `timeout` seconds."""
        with self._lock:
            running = list(self._working)
        _, pending = concurrent.futures.wait(running, timeout=timeout)
        return not pending

    # --- one HTTP request

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Response:
        """The answer to one request. Never raises for bad input: a clear 4xx instead."""
        lowered = {name.lower(): value for name, value in headers.items()}
        if self.secret_header is not None:
            name, value = self.secret_header
            if not hmac.compare_digest(lowered.get(name, "").encode(), value.encode()):
                return error_response(401, "unauthorized", f"the {name} header is missing or wrong")
        if method in ("GET", "HEAD"):
            return self.status(path, lowered)
        if method != "POST":
            return error_response(
                405, "method_not_allowed", f"{method} is not served: POST a call, GET a status"
            )
        key = lowered.get("idempotency-key", "").strip()
        if not key:
            return error_response(400, "idempotency_key_missing", "Idempotency-Key header required")
        if len(key) > MAX_KEY_LENGTH or not key.isprintable():
            return error_response(
                400, "idempotency_key_invalid", f"Idempotency-Key: 1-{MAX_KEY_LENGTH} printable characters"
            )
        try:
            data = json.loads(body, parse_constant=no_constants)
        except (ValueError, RecursionError):
            return error_response(400, "invalid_json", "the body is not JSON")
        if not isinstance(data, dict):
            return error_response(400, "invalid_json", "the body is not a JSON object")
        callback = lowered.get("x-sas-callback-url", "").strip()
        if callback and self.callback_origins and not self.callback_allowed(callback):
            return error_response(400, "callback_not_allowed", "X-SAS-Callback-URL is not the scheduler's")
        lowered["idempotency-key"] = key
        return self.deliver(Request(method=method, path=path, headers=lowered, body=body, data=data))

    def callback_allowed(self, url: str) -> bool:
        """Whether results may be POSTed to `url`: on one of `callback_origins`, compared as
        parsed URLs (a string prefix would let `https://scheduler.example.com.evil.test/` by)."""
        try:
            target = _parsed(url)
        except ValueError:
            return False
        if ".." in target.path.split("/") or target.username or target.password:
            return False
        return any(
            (target.scheme, target.hostname, _port(target))
            == (allowed.scheme, allowed.hostname, _port(allowed))
            and target.path.startswith(allowed.path)
            for allowed in self.callback_origins
        )

    def status(self, path: str, headers: Mapping[str, str]) -> Response:
        """A status query: 200 with the recorded output if the operation succeeded here, 404 if
        it did not happen (unknown, or refused: a refusal has no effect), 409 while it runs. The
        operation ID is the `Idempotency-Key` the scheduler sends, else the path's last segment."""
        key = headers.get("idempotency-key", "").strip() or unquote(path.rstrip("/").rsplit("/", 1)[-1])
        record = self.store.get(key) if key else None
        if record is None:
            return error_response(404, "unknown_operation", "no record of this operation")
        if record.state == PENDING:
            return error_response(409, "in_progress", "the operation is in progress")
        if 200 <= record.status < 300:
            return Response.raw(200, record.body)
        return error_response(404, "not_happened", "the operation was refused: it did not happen")

    def deliver(self, request: Request) -> Response:
        """One delivery of an operation: run it, replay it, wait for it, or say it is running."""
        key = request.operation_id
        mark = fingerprint(request.path, request.data)
        give_up_at = time.monotonic() + self.wait_seconds
        pause = 0.02
        while True:
            now = self._clock()
            fresh = Record(
                key=key,
                fingerprint=mark,
                state=PENDING,
                token=secrets.token_hex(16),
                lease_until=now + self.lease_seconds,
            )
            if self.store.add(fresh):
                return self._run(request, fresh)
            record = self.store.get(key)
            if record is None:
                continue  # released between the two calls: try to take it again
            if record.fingerprint != mark:
                return error_response(
                    422, "idempotency_key_reused", "this Idempotency-Key was used for another request"
                )
            if record.state == DONE:
                return Response.raw(record.status, record.body, REPLAYED)
            if record.lease_until <= now:
                taken = record.but(token=fresh.token, lease_until=fresh.lease_until, accepted=False)
                if self.store.swap(record, taken):
                    log.warning("operation %s: its run held it past its lease; running it again", key)
                    return self._run(request, taken)
                continue
            if record.accepted:
                # Worked on in the background. This delivery is the scheduler's latest attempt:
                # the result goes to its callback URL.
                url = request.callback_url
                if (
                    url
                    and url != record.callback_url
                    and not self.store.swap(record, record.but(callback_url=url))
                ):
                    continue
                return Response.json(202, {"accepted": True, "operation_id": key})
            if time.monotonic() >= give_up_at:
                return error_response(
                    503, "in_progress", "the operation is in progress", ("Retry-After", "1")
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.2)

    # --- running the handler

    def _run(self, request: Request, record: Record) -> Response:
        return self._settle(record, lambda: self.handler(request), request.callback_url)

    def _settle(self, record: Record, produce: Callable[[], Any], callback_url: str) -> Response:
        """Run `produce` (the handler, or accepted work run inline) for `record` and answer."""
        try:
            result = produce()
        except Refused as exc:
            return self._answer(record, exc.status, _refusal(exc))
        except TryLater as exc:
            self._release(record)
            return error_response(503, "try_later", exc.message, ("Retry-After", str(exc.retry_after)))
        except Exception:
            log.exception("operation %s: the handler failed", record.key)
            self._release(record)
            return error_response(500, "handler_failed", "the handler failed")
        if isinstance(result, Accepted):
            if not callback_url:
                # Nowhere to report to later: the work runs now, its heartbeats going nowhere.
                return self._settle(record, lambda: result.work(_nowhere), "")
            if not self.callback_origins:
                # Unchecked, a callback URL is an address any caller chooses for the result.
                log.error(
                    "operation %s: the handler accepted work, but no callback_origins name where "
                    "its result may go; set them to the scheduler's callback URL",
                    record.key,
                )
                self._release(record)
                return error_response(
                    500,
                    "callback_origins_required",
                    "accepted work needs the remote's callback_origins (the scheduler's callback URL)",
                )
            return self._accept(record, result, callback_url)
        try:
            text = json.dumps(result, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError):
            log.exception("operation %s: the handler's output is not JSON", record.key)
            self._release(record)
            return error_response(500, "handler_failed", "the handler's output is not JSON")
        return self._answer(record, 200, text)

    def _answer(self, record: Record, status: int, text: str) -> Response:
        standing = self._record(record, status, text)
        if standing.token == record.token and standing.body == text:
            return Response.raw(standing.status, standing.body)
        return Response.raw(standing.status, standing.body, REPLAYED)

    def _record(self, record: Record, status: int, text: str) -> Record:
        """Record the answer of the run `record` began, unless an answer is there already (the
        first writer wins). Returns the answer that stands."""
        current = record
        while True:
            done = current.but(state=DONE, status=status, body=text, lease_until=0.0)
            if self.store.swap(current, done):
                return done
            found = self.store.get(record.key)
            if found is None:
                # Released by a run that took ours over and failed: ours still happened.
                again = dataclasses.replace(done, version=1)
                if self.store.add(again):
                    return again
                continue
            if found.state == DONE:
                return found
            current = found  # renewed, redirected, or taken over and still running: ours is first

    def _release(self, record: Record) -> None:
        """Forget the run `record` began (nothing recorded), unless another run holds it now."""
        current: Record | None = record
        while current is not None and current.token == record.token and current.state == PENDING:
            if self.store.remove(current):
                return
            current = self.store.get(record.key)

    # --- accepted work

    def _accept(self, record: Record, accepted: Accepted, callback_url: str) -> Response:
        held = record.but(
            accepted=True, callback_url=callback_url, lease_until=self._clock() + self.lease_seconds
        )
        if not self.store.swap(record, held):
            # Our lease ran out while the handler ran and another delivery took the operation.
            return error_response(503, "in_progress", "the operation is in progress", ("Retry-After", "1"))
        try:
            future = self._executor.submit(self._work, held, accepted.work)
        except RuntimeError:
            # The remote is closing: nothing will run it, so nothing is held for it.
            self._release(held)
            return error_response(503, "closing", "the remote is shutting down", ("Retry-After", "1"))
        with self._lock:
            self._working.add(future)
        future.add_done_callback(self._forget)
        return Response.json(202, {"accepted": True, "operation_id": record.key})

    def _forget(self, future: concurrent.futures.Future[None]) -> None:
        with self._lock:
            self._working.discard(future)

    def _heartbeat(self, record: Record) -> Heartbeat:
        key, token = record.key, record.token

        def heartbeat(details: Any = None) -> None:
            while True:
                current = self.store.get(key)
                if current is None or current.token != token or current.state != PENDING:
                    raise AttemptGivenUp(f"operation {key} is no longer this run's")
                status = self._callbacks.post_heartbeat(current.callback_url, details)
                if status == 410:
                    # Given up on. Unless a newer delivery brought a newer callback URL meanwhile
                    # (the swap fails), the operation is forgotten for the next attempt to run.
                    if self.store.remove(current):
                        raise AttemptGivenUp(f"the scheduler gave up the attempt of operation {key}")
                    continue
                now = self._clock()
                if current.lease_until - now < self.lease_seconds / 2:
                    self.store.swap(current, current.but(lease_until=now + self.lease_seconds))
                return

        return heartbeat

    def _work(self, record: Record, work: Callable[[Heartbeat], Any]) -> None:
        try:
            output = work(self._heartbeat(record))
            text = json.dumps(output, separators=(",", ":"), allow_nan=False)
        except AttemptGivenUp:
            log.info("operation %s: stopped, the scheduler gave the attempt up", record.key)
            return
        except Refused as exc:
            standing = self._record(self._mine(record), exc.status, _refusal(exc))
            self._report(standing)
            return
        except Exception as exc:
            log.exception("operation %s: the accepted work failed", record.key)
            current = self._mine(record)
            self._release(current)
            message = exc.message if isinstance(exc, TryLater) else "the work failed"
            self._callbacks.post_result(lambda: current.callback_url, {"outcome": "failed", "error": message})
            return
        self._report(self._record(self._mine(record), 200, text))

    def _mine(self, record: Record) -> Record:
        """The latest version of the record this run began (renewed or redirected since)."""
        found = self.store.get(record.key)
        return found if found is not None and found.token == record.token else record

    def _report(self, done: Record) -> None:
        """POST the recorded answer to the latest delivery's callback URL."""
        if 200 <= done.status < 300:
            result: dict[str, Any] = {"outcome": "succeeded", "output": json.loads(done.body)}
        else:
            payload = json.loads(done.body)
            error = payload.get("error", "") if isinstance(payload, dict) else ""
            result = {"outcome": "refused", "error": str(error)[:2000]}

        def url() -> str:
            found = self.store.get(done.key)
            return found.callback_url if found is not None and found.callback_url else done.callback_url

        verdict = self._callbacks.post_result(url, result)
        if verdict is not Delivery.DELIVERED:
            # Recorded all the same: the scheduler's next attempt gets it as a replay.
            log.warning("operation %s: result %s", done.key, verdict.value)


def _refusal(exc: Refused) -> str:
    return json.dumps({"error": exc.message, "code": exc.code}, separators=(",", ":"))


def _nowhere(details: Any = None) -> None:
    """The heartbeat of work run inline: there is no callback URL to send it to."""


def _parsed(url: str) -> SplitResult:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    return parts


def _callback_origin(url: str) -> SplitResult:
    """An allowed callback origin and path; its path ends with "/" so that it matches whole
    segments (`/api/v1/callbacks/` never lets `/api/v1/callbacks-evil/` by)."""
    parts = _parsed(url)
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    return parts._replace(path=path)


def _port(parts: SplitResult) -> int:
    return parts.port or (443 if parts.scheme == "https" else 80)
