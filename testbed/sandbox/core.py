"""The sandbox's vocabulary, shared by all its modes: its configuration and faults, its routes,
the requests it accepts and the answers it gives. No I/O here."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any
from urllib.parse import unquote

#: Upper bound for any configured delay, so a typo cannot park a server thread for hours.
MAX_DELAY_MS = 600_000
#: Body fields left out of the request fingerprint: they legitimately change across retries of
#: one operation, and a retry must still count as the same request (a retry carries where the
#: attempts before it got to, by their heartbeats).
VOLATILE_FIELDS = frozenset({"attempt", "heartbeat_details"})
FAULT_KINDS = ("error", "drop", "slow", "decline", "throttle")
SCRIPT_ACTIONS = ("ok", "error", "drop", "decline", "slow:<ms>", "throttle:<seconds>")
RATE_FIELDS = (
    "error_rate",
    "latency_rate",
    "drop_rate",
    "reply_loss_rate",
    "reply_duplicate_rate",
    "reply_late_rate",
    "reply_unknown_rate",
    "hostile_rate",
)
DELAY_FIELDS = ("latency_ms", "drop_hold_ms", "async_delay_ms", "reply_late_ms", "trickle_ms")
#: Faults of the asynchronous modes (a result reported later, by callback or reply message).
REPLY_FAULTS = ("reply_lost", "reply_duplicate", "reply_late", "reply_unknown")
#: Hostile answers (`hostile_rate`): the work is done and committed, then the answer is one a
#: careless client cannot survive. `trickle`: the headers, then one byte every `trickle_ms`;
#: `huge`: a 50 MB body; `bomb`: a small gzip body that inflates to 50 MB; `unstorable`: JSON the
#: database cannot store (a NUL character, NaN, 1e999) or nests too deeply to parse; `bad_header`:
#: a header value HTTP forbids. On the queue, `unstorable` replies carry such an output.
HOSTILE_KINDS = ("trickle", "huge", "bomb", "unstorable", "bad_header")
#: A planned hostile answer whose kind is the next in turn, chosen when a success is answered.
HOSTILE_IN_TURN = "in_turn"
#: Poison a request asks for by its `input.answer_with` (the campaign's `--poison`): the work is
#: done and its success answer carries these fields beside its own, stored and replayed like any
#: answer (a status query gets them too). Impossible times for a timer's `until` to read (a day
#: that does not exist, a month 13, an offset PostgreSQL refuses), "NaN" for an expression's
#: `to_number`, and an unpaired surrogate (escaped in the JSON, as `\ud800`).
POISON_ANSWERS: dict[str, dict[str, str]] = {
    "feb30": {"ready_at": "2024-02-30T00:00:00Z"},
    "month13": {"ready_at": "2024-13-01T00:00:00Z"},
    "offset": {"ready_at": "2024-03-01T00:00:00+20:00"},
    "nan_text": {"note": "NaN"},
    "surrogate": {"note": "\ud800"},
}


class ConfigError(ValueError):
    """A configuration value or script outside what the sandbox accepts; the message names it."""


class BadRequest(ValueError):
    """A request the sandbox refuses with 400 before processing it; nothing is stored."""


# --- configuration ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SandboxConfig:
    """The live fault and behaviour settings. Immutable: a change replaces the whole value, so a
    request always sees one consistent configuration."""

    #: Share of POSTs answered 503 without processing.
    error_rate: float = 0.0
    #: Delay before processing, applied to a `latency_rate` share of POSTs (0 = none).
    latency_ms: int = 0
    latency_rate: float = 1.0
    #: Share of POSTs processed and committed whose answer is then never sent.
    drop_rate: float = 0.0
    #: How long a dropped request holds the connection open before closing it.
    drop_hold_ms: int = 0
    #: Payments decline charges whose amount is above this; None = no limit.
    decline_over: float | None = None
    #: Inventory refuses reservations, and shipping schedules, whose quantity is above this
    #: (out of stock, no slot); None = no limit.
    decline_quantity_over: int | None = None
    #: False = process every request anew, ignoring stored keys (duplicates become visible).
    honor_keys: bool = True
    #: Asynchronous modes (POST /async/<route> answers 202 and calls back; the queue consumer
    #: replies on the reply queue): how long the work takes before its result is reported.
    async_delay_ms: int = 0
    #: Share of results never reported (the work is done; the caller must ask or retry).
    reply_loss_rate: float = 0.0
    #: Share of results reported twice.
    reply_duplicate_rate: float = 0.0
    #: Share of results reported `reply_late_ms` later than the work finished.
    reply_late_rate: float = 0.0
    reply_late_ms: int = 0
    #: Share of results followed by a result for an operation nobody asked for.
    reply_unknown_rate: float = 0.0
    #: Share of answers that are hostile (HOSTILE_KINDS, chosen in turn), the work done first.
    hostile_rate: float = 0.0
    #: A trickling answer's pause between two bytes.
    trickle_ms: int = 1000

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def merged(self, patch: Mapping[str, Any]) -> SandboxConfig:
        """A copy with `patch` applied, all fields validated.

        Raises ConfigError naming the first bad field. Unknown fields are refused rather than
        ignored, so that a misspelt fault cannot silently stay switched off.
        """
        known = {f.name for f in fields(self)}
        values = self.to_dict()
        for name, value in patch.items():
            if name not in known:
                raise ConfigError(f"unknown config field {name!r}")
            values[name] = _validated_field(name, value)
        return SandboxConfig(**values)


def _is_number(value: object) -> bool:
    # bool is an int subclass, but `true` is never meant as a number here.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _validated_field(name: str, value: Any) -> Any:
    if name in RATE_FIELDS:
        if not _is_number(value) or not 0.0 <= value <= 1.0:
            raise ConfigError(f"{name} must be a number between 0 and 1")
        return float(value)
    if name in DELAY_FIELDS:
        if not _is_number(value) or not 0 <= value <= MAX_DELAY_MS:
            raise ConfigError(f"{name} must be a number of milliseconds between 0 and {MAX_DELAY_MS}")
        return int(value)
    if name == "decline_over":
        if value is not None and (not _is_number(value) or not math.isfinite(value)):
            raise ConfigError("decline_over must be a finite number or null")
        return value
    if name == "decline_quantity_over":
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ConfigError("decline_quantity_over must be an integer or null")
        return value
    if name == "honor_keys":
        if not isinstance(value, bool):
            raise ConfigError("honor_keys must be true or false")
        return value
    raise ConfigError(f"unknown config field {name!r}")


@dataclass(frozen=True)
class FaultPlan:
    """What happens to one POST besides being processed."""

    #: Answer 503 and do nothing else.
    error: bool = False
    #: Sleep this long before processing.
    delay_ms: int = 0
    #: Commit, then hold the connection this long and close it without answering.
    drop: bool = False
    hold_ms: int = 0
    #: Refuse with the route's stored business failure (402) whatever the input.
    decline: bool = False
    #: Answer with this hostile kind (HOSTILE_KINDS) instead of the answer, the work done first.
    hostile: str = ""
    #: Answer 429 with `Retry-After: <seconds>` and do nothing else (None: not throttled).
    throttle: int | None = None


def parse_script_action(action: object) -> str:
    """Validate one script entry ("ok", "error", "drop", "decline", "slow:<ms>" or
    "throttle:<seconds>") and return it."""
    if action in ("ok", "error", "drop", "decline"):
        return str(action)
    if isinstance(action, str) and action.startswith("slow:"):
        digits = action.removeprefix("slow:")
        if digits.isascii() and digits.isdigit() and int(digits) <= MAX_DELAY_MS:
            return action
    if isinstance(action, str) and action.startswith("throttle:"):
        digits = action.removeprefix("throttle:")
        if digits.isascii() and digits.isdigit() and int(digits) <= 3600:
            return action
    raise ConfigError(f"script action {action!r} is not one of {', '.join(SCRIPT_ACTIONS)}")


def parse_script(script: object) -> dict[str, list[str]]:
    """Validate a `script` config value: an object mapping a path to a list of actions."""
    if not isinstance(script, dict):
        raise ConfigError("script must be an object mapping a path to a list of actions")
    parsed: dict[str, list[str]] = {}
    for path, actions in script.items():
        if not path.startswith("/"):
            raise ConfigError(f"script path {path!r} must start with '/'")
        if not isinstance(actions, list):
            raise ConfigError(f"script for {path!r} must be a list of actions")
        parsed[path] = [parse_script_action(a) for a in actions]
    return parsed


def plan_for_action(action: str, config: SandboxConfig) -> FaultPlan:
    if action == "error":
        return FaultPlan(error=True)
    if action == "drop":
        return FaultPlan(drop=True, hold_ms=config.drop_hold_ms)
    if action == "decline":
        return FaultPlan(decline=True)
    if action.startswith("slow:"):
        return FaultPlan(delay_ms=int(action.removeprefix("slow:")))
    if action.startswith("throttle:"):
        return FaultPlan(throttle=int(action.removeprefix("throttle:")))
    return FaultPlan()


# --- routes -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    """One POST route of one service: an action, or the compensation of one (`undoes` set)."""

    service: str
    kind: str
    #: The business failure a declined request answers with.
    refusal: str
    #: For a compensation, the kind of the action it undoes.
    undoes: str | None = None


ROUTES: dict[str, Route] = {
    "/inventory/reserve": Route("inventory", "reserve", refusal="out of stock"),
    "/inventory/release": Route("inventory", "release", refusal="release refused", undoes="reserve"),
    "/payments/charge": Route("payments", "charge", refusal="card declined"),
    "/payments/refund": Route("payments", "refund", refusal="refund refused", undoes="charge"),
    "/shipping/schedule": Route("shipping", "schedule", refusal="no shipping slot available"),
    "/shipping/cancel": Route("shipping", "cancel", refusal="cancellation refused", undoes="schedule"),
}

#: GET `<prefix><operation_id>` asks a service about one of its operations.
STATUS_PREFIXES: tuple[tuple[str, str], ...] = (
    ("/inventory/reservations/", "inventory"),
    ("/shipping/shipments/", "shipping"),
    ("/payments/", "payments"),
)


def status_route(path: str) -> tuple[str, str] | None:
    """(service, operation id) for a status query path, or None if `path` is not one."""
    for prefix, service in STATUS_PREFIXES:
        if path.startswith(prefix):
            # One segment as sent; an operation ID may hold a "/" (a child job's step), quoted.
            segment = path.removeprefix(prefix)
            if segment and "/" not in segment:
                return service, unquote(segment)
    return None


#: The route kinds whose requests `decline_quantity_over` refuses.
QUANTITY_KINDS = frozenset({"reserve", "schedule"})


@dataclass(frozen=True)
class Caller:
    """Whom a request says it comes from, as the scheduler's body names it: the job, the step,
    the item of a fan-out (its index), and the operation a compensation undoes. Recorded with
    each delivery, so that a checker can tell whether one item was ever called under two keys."""

    job_id: str
    step: str
    item_index: int | None = None
    compensates: str | None = None


def read_caller(body: object) -> Caller | None:
    """The caller a body names, or None when it names no job and step (read leniently: a
    malformed body is still a delivery)."""
    if not isinstance(body, dict):
        return None
    job_id, step = body.get("job_id"), body.get("step")
    if not isinstance(job_id, str) or not isinstance(step, str):
        return None
    index = body.get("index")
    compensates = body.get("compensates")
    return Caller(
        job_id=job_id,
        step=step,
        item_index=index if isinstance(index, int) and not isinstance(index, bool) else None,
        compensates=compensates if isinstance(compensates, str) else None,
    )


def request_fingerprint(body: Mapping[str, Any]) -> str:
    """Hash of a request body that is equal for every retry of one request (see VOLATILE_FIELDS)."""
    stable = {k: v for k, v in body.items() if k not in VOLATILE_FIELDS}
    canonical = json.dumps(stable, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(raw: bytes) -> Any:
    """Strict JSON (no NaN or Infinity, which would make amount comparisons meaningless).

    Raises BadRequest.
    """
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise BadRequest("body is not valid JSON") from exc


@dataclass(frozen=True)
class SlowJob:
    """A long job, asked for by the request's `input.slow` (an asynchronous route or a queue):
    the work takes `duration_ms`, a heartbeat reports progress every `heartbeat_ms` meanwhile,
    then the result is reported. Faults, for the attempts `on_attempts` names (all when absent):
    `silent_after_ms` stops the heartbeats (the work goes on and its result still comes);
    `die_after_ms` stops everything (no more heartbeats, no result), as a worker that died.

    A request carrying `heartbeat_details` with `done_ms` (what an earlier attempt reported)
    resumes from there: only the rest of the work is left.
    """

    duration_ms: int
    heartbeat_ms: int = 1000
    silent_after_ms: int | None = None
    die_after_ms: int | None = None
    on_attempts: frozenset[int] | None = None

    def faulty(self, attempt: int | None) -> bool:
        """Whether the faults apply to this attempt."""
        return self.on_attempts is None or attempt in self.on_attempts

    def done_before(self, heartbeat_details: Any) -> int:
        """The work an earlier attempt reported done (`done_ms` of its details), at most all."""
        done = heartbeat_details.get("done_ms") if isinstance(heartbeat_details, dict) else None
        if not isinstance(done, int | float) or isinstance(done, bool) or not 0 < done < math.inf:
            return 0
        return min(int(done), self.duration_ms)


def read_slow_job(value: object) -> SlowJob | None:
    """Validate `input.slow`; None when absent. Raises BadRequest."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("input.slow must be an object")
    unknown = set(value) - {f.name for f in fields(SlowJob)}
    if unknown:
        raise BadRequest(f"input.slow has unknown fields: {', '.join(sorted(unknown))}")

    def delay(name: str, *, required: bool = False, minimum: int = 0) -> int | None:
        got = value.get(name)
        if got is None and not required:
            return None
        if not isinstance(got, int | float) or isinstance(got, bool) or not minimum <= got <= MAX_DELAY_MS:
            raise BadRequest(f"input.slow.{name} must be milliseconds between {minimum} and {MAX_DELAY_MS}")
        return int(got)

    attempts = value.get("on_attempts")
    if attempts is not None and (
        not isinstance(attempts, list) or not all(_is_number(a) and isinstance(a, int) for a in attempts)
    ):
        raise BadRequest("input.slow.on_attempts must be a list of attempt numbers")
    return SlowJob(
        duration_ms=delay("duration_ms", required=True) or 0,
        heartbeat_ms=delay("heartbeat_ms", minimum=10) or 1000,
        silent_after_ms=delay("silent_after_ms"),
        die_after_ms=delay("die_after_ms"),
        on_attempts=frozenset(attempts) if attempts is not None else None,
    )


@dataclass(frozen=True)
class OperationRequest:
    """A validated POST to a service route."""

    route: Route
    path: str
    key: str
    fingerprint: str
    sku: str
    quantity: int
    amount: float
    #: For a compensation: the operation it undoes (None = nothing identified, so nothing to undo).
    compensates: str | None
    #: A long job with heartbeats (`input.slow`), on the asynchronous routes and the queues.
    slow: SlowJob | None = None
    #: Where earlier attempts of the operation got to, by their last heartbeat.
    heartbeat_details: Any = None
    #: The poison its success answer carries (POISON_ANSWERS), from `input.answer_with`.
    answer_with: str = ""
    #: How long a synchronous call takes at the remote (`input.hold_ms`), counted in flight.
    hold_ms: int = 0
    #: A charge's account (`input.account`, else its `sku`) declines this many charges, each a
    #: new operation, before one goes through (`input.declines`): a card topped up at last.
    declines: int = 0
    account: str = ""
    #: The first this many deliveries of the operation are done and their answers lost
    #: (`input.drops`): a call certain to come due unanswered, whatever the remote's fault rates.
    drops: int = 0


#: The most charges `input.declines` may ask an account to decline first.
MAX_DECLINES = 10
#: The most deliveries of one operation `input.drops` may ask to lose the answer of.
MAX_DROPS = 3


def read_operation_request(route: Route, path: str, key: str, body: object) -> OperationRequest:
    """Validate a service POST body. Missing fields take defaults; wrong types raise BadRequest."""
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    job_input = body.get("input")
    if job_input is None:
        job_input = {}
    if not isinstance(job_input, dict):
        raise BadRequest("input must be a JSON object")
    sku = job_input.get("sku", "unknown")
    if not isinstance(sku, str):
        raise BadRequest("input.sku must be a string")
    quantity = job_input.get("quantity", 1)
    if not isinstance(quantity, int) or isinstance(quantity, bool):
        raise BadRequest("input.quantity must be an integer")
    amount = job_input.get("amount", 0)
    if not _is_number(amount):
        raise BadRequest("input.amount must be a number")
    compensates = body.get("compensates")
    if compensates is not None and not isinstance(compensates, str):
        raise BadRequest("compensates must be an operation id")
    slow = read_slow_job(job_input.get("slow"))
    answer_with = job_input.get("answer_with", "")
    if answer_with not in ("", *POISON_ANSWERS):
        raise BadRequest(f"input.answer_with must be one of {', '.join(POISON_ANSWERS)}")
    hold_ms = job_input.get("hold_ms", 0)
    if not isinstance(hold_ms, int) or isinstance(hold_ms, bool) or not 0 <= hold_ms <= MAX_DELAY_MS:
        raise BadRequest(f"input.hold_ms must be milliseconds between 0 and {MAX_DELAY_MS}")
    declines = job_input.get("declines", 0)
    if not isinstance(declines, int) or isinstance(declines, bool) or not 0 <= declines <= MAX_DECLINES:
        raise BadRequest(f"input.declines must be an integer between 0 and {MAX_DECLINES}")
    account = job_input.get("account", sku)
    if not isinstance(account, str):
        raise BadRequest("input.account must be a string")
    drops = job_input.get("drops", 0)
    if not isinstance(drops, int) or isinstance(drops, bool) or not 0 <= drops <= MAX_DROPS:
        raise BadRequest(f"input.drops must be an integer between 0 and {MAX_DROPS}")
    return OperationRequest(
        route=route,
        path=path,
        key=key,
        fingerprint=request_fingerprint(body),
        sku=sku,
        quantity=quantity,
        amount=amount,
        compensates=compensates or None,
        slow=slow,
        heartbeat_details=body.get("heartbeat_details"),
        answer_with=answer_with,
        hold_ms=hold_ms,
        declines=declines,
        account=account,
        drops=drops,
    )


# --- answers ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: status, JSON body bytes, and whether it is a stored one replayed."""

    status: int
    body: bytes
    replayed: bool = False

    @classmethod
    def json(cls, status: int, payload: Any) -> Answer:
        return cls(status, json.dumps(payload).encode())


KEY_REUSED = Answer.json(422, {"error": "idempotency key reused with a different request"})
UNKNOWN_OPERATION = Answer.json(404, {"error": "unknown operation"})
