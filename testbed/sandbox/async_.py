"""The sandbox remote's asynchronous modes: the work is done after the request, and its result is
reported later.

* HTTP: `POST /async/<route>` (for example `/async/payments/charge`) answers `202 Accepted` at
  once; after `async_delay_ms` the operation is performed (once per Idempotency-Key, as
  synchronously) and its result POSTed to the request's `X-SAS-Callback-URL` as
  `{"outcome": "succeeded" | "refused" | "failed", "output", "error"}`.
* A message queue (`sandbox_remote --broker redis://...`): a consumer takes requests from one
  queue per route (`payments.charge`, `payments.refund`, ...; status queries on
  `<service>.status`) and replies on the message's `reply_to` queue with
  `{"operation_id", "attempt", "outcome", "output", "error"}` (testbed.sandbox.queue).

The faults of the synchronous routes apply to the request (503, slow, dropped), and these apply
to the report: lost (`reply_loss_rate`), sent twice (`reply_duplicate_rate`), sent late
(`reply_late_rate`, `reply_late_ms`), followed by a report for an operation nobody asked for
(`reply_unknown_rate`). While an operation waits to be performed, its status query answers 409
(in progress), as during a synchronous request.

A request whose input asks for a slow job (`input.slow`, testbed.sandbox.core.SlowJob) works
for `duration_ms` and meanwhile sends a heartbeat every `heartbeat_ms`: HTTP POSTs `{"details"}`
to `<X-SAS-Callback-URL>heartbeat/`, a queue publishes `{"operation_id", "attempt", "heartbeat":
true, "details"}` on `reply_to`. The details are `{"done_ms", "of_ms", "attempt"}`; a retry that
carries an earlier attempt's details resumes from `done_ms`, and its output says so
(`resumed_from`). It may fall silent (`silent_after_ms`: the result still comes) or die
(`die_after_ms`: nothing more comes), for the attempts `on_attempts` names. A heartbeat refused
with 410 (the caller gave the attempt up) stops the work unreported.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from testbed.sandbox.core import Answer, FaultPlan, OperationRequest, SandboxConfig, SlowJob
from testbed.sandbox.state import SandboxState

Report = Callable[[dict[str, Any]], None]
#: Sends one heartbeat with its details; False when the caller answered that it gave the attempt
#: up (the work can stop).
Beat = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class ReplyPlan:
    lost: bool = False
    duplicate: bool = False
    late_ms: int = 0
    unknown: bool = False
    #: The faults this report was given for sure (FIRST_FAULTS), empty for none.
    forced: frozenset[str] = frozenset()


#: The reply faults the first reports under faults receive for sure, in this order: the first
#: report is late, sent twice and followed by one for an unknown operation (they go together);
#: the second is lost. Two reports under faults, however few a loaded machine makes, see them all.
FIRST_FAULTS: tuple[frozenset[str], ...] = (frozenset({"duplicate", "late", "unknown"}), frozenset({"lost"}))


def plan_reply(remote: SandboxState, config: SandboxConfig) -> ReplyPlan:
    """Decide what happens to one report, from the live rates and the remote's seeded RNG.

    The first reports made while the faults' rates are above 0 get them for sure (FIRST_FAULTS),
    so that a short run sees every kind whatever the draws."""
    with remote._lock:
        rng = remote._rng
        lost = config.reply_loss_rate > 0 and rng.random() < config.reply_loss_rate
        duplicate = config.reply_duplicate_rate > 0 and rng.random() < config.reply_duplicate_rate
        late = config.reply_late_rate > 0 and rng.random() < config.reply_late_rate
        unknown = config.reply_unknown_rate > 0 and rng.random() < config.reply_unknown_rate
        rates = {
            "lost": config.reply_loss_rate,
            "duplicate": config.reply_duplicate_rate,
            "late": config.reply_late_rate,
            "unknown": config.reply_unknown_rate,
        }
        forced: set[frozenset[str]] = getattr(remote, "_reply_faults_forced", set())
        remote._reply_faults_forced = forced  # type: ignore[attr-defined]
        pending = [
            group for group in FIRST_FAULTS if all(rates[k] > 0 for k in group) and group not in forced
        ]
        group: frozenset[str] = frozenset()
        if pending:
            group = pending[0]
            forced.add(group)
            lost, duplicate, late, unknown = (k in group for k in ("lost", "duplicate", "late", "unknown"))
    return ReplyPlan(
        lost=lost,
        duplicate=duplicate,
        late_ms=config.reply_late_ms if late else 0,
        unknown=unknown,
        forced=group,
    )


def unforce(remote: SandboxState, group: frozenset[str]) -> None:
    """Forced faults whose report could not be made (the receiver was down): the next report
    gets them, so that a run sees every kind whatever the receiver's own faults did."""
    with remote._lock:
        getattr(remote, "_reply_faults_forced", set()).discard(group)


def result_of(answer: Answer) -> dict[str, Any]:
    """The reported result of an operation's answer."""
    payload = json.loads(answer.body) if answer.body else None
    if 200 <= answer.status < 300:
        return {"outcome": "succeeded", "output": payload, "error": ""}
    error = payload.get("error", "") if isinstance(payload, dict) else ""
    if answer.status >= 500:
        return {"outcome": "failed", "output": None, "error": str(error) or f"HTTP {answer.status}"}
    return {"outcome": "refused", "output": None, "error": str(error) or f"HTTP {answer.status}"}


def perform_later(
    remote: SandboxState,
    request: OperationRequest,
    config: SandboxConfig,
    plan: FaultPlan,
    *,
    report: Report,
    report_unknown: Callable[[], None],
) -> None:
    """Perform `request` after `async_delay_ms` (plus any injected slowness) in a thread of its
    own, then report the result as the reply faults say."""
    marker = remote.in_progress(request.key)
    marker.__enter__()  # released once performed, so status queries say "in progress" meanwhile

    def work() -> None:
        try:
            time.sleep((config.async_delay_ms + plan.delay_ms) / 1000)
            answer = remote.store.execute(request, config, force_decline=plan.decline)
        except Exception:  # noqa: BLE001 - the store was busy: as a crashed worker, nothing reported
            marker.__exit__(None, None, None)
            remote.store.bump("async_errors")
            return
        marker.__exit__(None, None, None)
        deliver(remote, config, result_of(answer), report=report, report_unknown=report_unknown)

    threading.Thread(target=work, name=f"sandbox-async-{request.key[:8]}", daemon=True).start()


def perform_slowly(
    remote: SandboxState,
    request: OperationRequest,
    slow: SlowJob,
    attempt: int | None,
    config: SandboxConfig,
    plan: FaultPlan,
    *,
    beat: Beat,
    report: Report,
    report_unknown: Callable[[], None],
) -> None:
    """Work on `request` for what is left of `slow.duration_ms`, sending heartbeats, in a thread
    of its own; then perform it and report the result, unless a fault or a refused heartbeat
    stopped it first."""
    marker = remote.in_progress(request.key)
    marker.__enter__()  # released when the work ends, however it ends

    def work() -> None:
        started = time.monotonic()
        done_before = slow.done_before(request.heartbeat_details)
        left = slow.duration_ms - done_before
        faulty = slow.faulty(attempt)
        die = slow.die_after_ms if faulty else None
        silent = slow.silent_after_ms if faulty else None
        next_beat = 0.0
        try:
            while (elapsed := (time.monotonic() - started) * 1000) < left:
                if die is not None and elapsed >= die:
                    remote.store.bump("slow_died")
                    return
                if elapsed >= next_beat and (silent is None or elapsed < silent):
                    done = done_before + int(elapsed)
                    details = {"done_ms": done, "of_ms": slow.duration_ms, "attempt": attempt}
                    remote.store.bump("heartbeats_sent")
                    if not beat(details):
                        remote.store.bump("heartbeats_refused")
                        return
                    next_beat = elapsed + slow.heartbeat_ms
                time.sleep(max(min(next_beat - elapsed, left - elapsed, 50) / 1000, 0.005))
            answer = remote.store.execute(request, config, force_decline=plan.decline)
        except Exception:  # noqa: BLE001 - the store was busy: as a crashed worker, nothing reported
            remote.store.bump("async_errors")
            return
        finally:
            marker.__exit__(None, None, None)
        result = result_of(answer)
        if result["outcome"] == "succeeded" and isinstance(result["output"], dict):
            result["output"] = {**result["output"], "resumed_from": request.heartbeat_details}
        deliver(remote, config, result, report=report, report_unknown=report_unknown)

    threading.Thread(target=work, name=f"sandbox-slow-{request.key[:8]}", daemon=True).start()


def deliver(
    remote: SandboxState,
    config: SandboxConfig,
    result: dict[str, Any],
    *,
    report: Report,
    report_unknown: Callable[[], None],
) -> None:
    """Report one result under the reply faults."""
    faults = plan_reply(remote, config)
    if faults.lost:
        remote.store.bump("fault_reply_lost")
        return
    try:
        if faults.late_ms:
            time.sleep(faults.late_ms / 1000)
        report(result)
    except Exception:
        if faults.forced:
            unforce(remote, faults.forced)
        raise
    if faults.late_ms:
        remote.store.bump("fault_reply_late")
    remote.store.bump("results_reported")
    if faults.duplicate:
        remote.store.bump("fault_reply_duplicate")
        report(result)
    if faults.unknown:
        remote.store.bump("fault_reply_unknown")
        report_unknown()


def post_json(url: str, payload: dict[str, Any], *, tries: int = 5) -> int | None:
    """POST a result to a callback URL, trying again on connection errors and 5xx; the status of
    the last answer (None if none came)."""
    if not url.startswith(("http://", "https://")):
        return None
    body = json.dumps(payload).encode()
    status: int | None = None
    for attempt in range(tries):
        request = urllib.request.Request(  # noqa: S310 - http(s) only, checked above
            url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the caller's own URL
                return int(response.status)
        except urllib.error.HTTPError as exc:
            status = exc.code
            if exc.code < 500:
                return status
        except (urllib.error.URLError, OSError):
            status = None
        time.sleep(0.5 * (attempt + 1))
    return status


def callback_beat(callback_url: str) -> Beat:
    """How an HTTP request's heartbeats are sent: POSTed to `<callback URL>heartbeat/`; a 410
    says the caller gave the attempt up."""

    def beat(details: dict[str, Any]) -> bool:
        return post_json(f"{callback_url.rstrip('/')}/heartbeat/", {"details": details}, tries=1) != 410

    return beat


def callback_reporters(callback_url: str) -> tuple[Report, Callable[[], None]]:
    """How a result of an HTTP request is reported: POSTed to its callback URL; and a report for
    an unknown operation, a made-up token beside it."""

    def report(result: dict[str, Any]) -> None:
        post_json(callback_url, result)

    def report_unknown() -> None:
        base = callback_url.rstrip("/").rsplit("/", 1)[0]
        post_json(f"{base}/{uuid.uuid4().hex}/", {"outcome": "succeeded", "output": {}}, tries=1)

    return report, report_unknown
