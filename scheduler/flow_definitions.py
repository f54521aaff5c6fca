"""What a workflow and its call steps may say about flow control (docs/flow-control.md), checked
when a version is saved: a workflow's `concurrency`, `debounce` and `throttle` (applied by
scheduler.services.flow and scheduler.services.gates), a call step's `concurrency`, `rate` and
`cancel_path` (scheduler.services.capacity, scheduler.services.cancels). Each check returns the
value as stored, or raises InvalidInput naming the field; scheduler.definitions calls them."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from agents.models import AgentKind, AgentPool
from agents.services import rate_check
from sas_project.errors import InvalidInput
from sas_project.validation import is_count, object_of
from scheduler import expressions

# --- a call step's ---------------------------------------------------------------------------------


def step_concurrency_check(value: Any, *, step: str) -> dict[str, Any] | None:
    """A call step's `concurrency` as stored ({key, limit}), or None: at most `limit` calls of the
    step in flight at once per value of `key` (scheduler.services.capacity). Calls over the limit
    wait for their turn: a step's `on_limit` may be `queue` only (refusing or cancelling a call
    already decided would leave its job half done)."""
    if value is None:
        return None
    field = f"step {step!r} concurrency"
    object_of(value, where=field, members=("key", "limit", "on_limit"), field="steps")
    key = value.get("key")
    if not isinstance(key, str) or not key.strip():
        raise InvalidInput(f"{field}.key must be an expression over input and results", field="steps")
    limit = value.get("limit")
    if not is_count(limit, 1, 10_000):
        raise InvalidInput(f"{field}.limit must be an integer from 1 to 10000", field="steps")
    if (value.get("on_limit") or "queue") != "queue":
        raise InvalidInput(
            f"{field}.on_limit: a step's calls over the limit wait their turn (queue); "
            "cancel_newest and cancel_in_progress are for a workflow's concurrency",
            field="steps",
        )
    return {"key": key, "limit": limit}


def step_rate_check(value: Any, *, step: str) -> dict[str, Any] | None:
    """A call step's `rate` as stored ({key, per_second, burst}), or None (agents.services.rate_check
    says what a rate is; the key's expression is checked with the step's others)."""
    try:
        return rate_check(value, field=f"step {step!r} rate")
    except InvalidInput as exc:
        raise InvalidInput(exc.message, field="steps") from exc


#: The longest `cancel_path`, as for the step's other paths.
CANCEL_PATH_MAX = 300


def cancel_path_check(value: Any, *, step: str, pool: AgentPool) -> str:
    """A call step's `cancel_path` as stored ("" for none), or InvalidInput naming the field.

    A path only, appended to the endpoint's base URL (already vetted by the outbound-URL guard),
    so it may not move the request elsewhere: it starts with one "/", names no scheme or host, no
    query or fragment, no ".." segment (encoded or not), no space or control character, at most
    CANCEL_PATH_MAX characters. A python pool's calls run in the worker and cannot be cancelled;
    a queue step's cancel goes to its own request queue, the path only saying that the remote
    takes cancels (scheduler.services.cancels)."""
    if value in (None, ""):
        return ""
    where = f"step {step!r} cancel_path"
    if pool.kind == AgentKind.PYTHON:
        raise InvalidInput(f"{where}: a python pool's calls cannot be cancelled", field="steps")
    if not isinstance(value, str):
        raise InvalidInput(f"{where} must be a string", field="steps")
    if len(value) > CANCEL_PATH_MAX:
        raise InvalidInput(f"{where} is longer than {CANCEL_PATH_MAX} characters", field="steps")
    if not value.startswith("/") or value.startswith("//") or "://" in value:
        raise InvalidInput(
            f"{where} must be a path starting with a single '/' (no scheme or host)", field="steps"
        )
    if any(ch.isspace() or not ch.isprintable() or ch in "\\?#" for ch in value):
        raise InvalidInput(f"{where} must be a path only (no spaces, '\\', query or fragment)", field="steps")
    if ".." in unquote(value).split("/"):
        raise InvalidInput(f"{where} may not contain a '..' segment", field="steps")
    return value


# --- a workflow's ----------------------------------------------------------------------------------


#: What a workflow's concurrency does with a job over its key's limit (scheduler.services.flow).
ON_LIMIT = ("queue", "cancel_newest", "cancel_in_progress")


def concurrency_check(value: Any) -> dict[str, Any] | None:
    """A workflow's `concurrency` as stored, or None; InvalidInput saying what is wrong
    (scheduler.services.flow applies it)."""
    if value is None:
        return None
    field = "concurrency"
    object_of(value, where=field, members=("key", "limit", "on_limit"), field=field)
    key = _gate_key(value, field)
    limit = value.get("limit")
    if not is_count(limit, 1, 10_000):
        raise InvalidInput("concurrency.limit must be an integer from 1 to 10000", field=f"{field}.limit")
    on_limit = value.get("on_limit") or "queue"
    if on_limit not in ON_LIMIT:
        raise InvalidInput(
            f"concurrency.on_limit must be one of {', '.join(ON_LIMIT)}", field=f"{field}.on_limit"
        )
    return {"key": key, "limit": limit, "on_limit": on_limit}


#: The longest quiet period of a debounce and the longest window of a throttle: a day.
MAX_GATE_SECONDS = 86_400
#: The longest a debounce may hold back a chain of replacements (its `max_seconds`): a week.
MAX_DEBOUNCE_SECONDS = 7 * 86_400


def _gate_key(value: dict[str, Any], field: str) -> str:
    key = value.get("key")
    if not isinstance(key, str) or not key.strip():
        raise InvalidInput(f"{field}.key must be an expression over the input", field=f"{field}.key")
    expressions.check(key, where=f"{field}.key", ancestors=set(), roots=("input",))
    return key


def _gate_seconds(value: Any, *, field: str, high: float) -> float | int:
    # value != value: NaN, which JSON from Python may carry and no comparison refuses.
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or value != value
        or not 0 < value <= high
    ):
        raise InvalidInput(f"{field} must be a number of seconds above 0, at most {high:g}", field=field)
    return value


def debounce_check(value: Any) -> dict[str, Any] | None:
    """A workflow's `debounce` as stored, or None; InvalidInput saying what is wrong
    (scheduler.services.gates applies it)."""
    if value is None:
        return None
    field = "debounce"
    object_of(value, where=field, members=("key", "seconds", "max_seconds"), field=field)
    key = _gate_key(value, field)
    seconds = _gate_seconds(value.get("seconds"), field=f"{field}.seconds", high=MAX_GATE_SECONDS)
    stored: dict[str, Any] = {"key": key, "seconds": seconds}
    if value.get("max_seconds") is not None:
        bound = _gate_seconds(value["max_seconds"], field=f"{field}.max_seconds", high=MAX_DEBOUNCE_SECONDS)
        if bound < seconds:
            # A bound below the quiet period would cut every quiet period short.
            raise InvalidInput(
                f"debounce.max_seconds must be at least debounce.seconds ({seconds:g})",
                field=f"{field}.max_seconds",
            )
        stored["max_seconds"] = bound
    return stored


def throttle_check(value: Any) -> dict[str, Any] | None:
    """A workflow's `throttle` as stored, or None; InvalidInput saying what is wrong
    (scheduler.services.gates applies it)."""
    if value is None:
        return None
    field = "throttle"
    object_of(value, where=field, members=("key", "per_seconds", "limit"), field=field)
    key = _gate_key(value, field)
    per_seconds = _gate_seconds(value.get("per_seconds"), field=f"{field}.per_seconds", high=MAX_GATE_SECONDS)
    limit = value.get("limit")
    if not is_count(limit, 1, 10_000):
        raise InvalidInput("throttle.limit must be an integer from 1 to 10000", field=f"{field}.limit")
    return {"key": key, "per_seconds": per_seconds, "limit": limit}


def gates_combination_check(
    *, concurrency: dict[str, Any] | None, debounce: dict[str, Any] | None, throttle: dict[str, Any] | None
) -> None:
    """Refuse what a job held at a gate cannot honour: `cancel_newest` answers the submission with
    a 409, and a job that waited for its debounce or throttle has had its answer already."""
    if concurrency and concurrency["on_limit"] == "cancel_newest" and (debounce or throttle):
        raise InvalidInput(
            "concurrency.on_limit cancel_newest cannot be combined with debounce or throttle: a job that "
            "waited at them was accepted already (use queue or cancel_in_progress)",
            field="concurrency.on_limit",
        )
