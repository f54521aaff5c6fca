"""What a workflow may say about inbound events (docs/events.md, "Inbound events" and "Waiting for
an event"), checked when a version is saved: the workflow's `triggers` (scheduler.services.events
starts its jobs by them) and a signal step's `event` and `match`. Each check returns the value as
stored, or raises InvalidInput naming the field; scheduler.definitions calls them."""

from __future__ import annotations

import re
from typing import Any

from sas_project.errors import InvalidInput
from sas_project.validation import object_of
from scheduler import expressions

#: An event's type or source: 1-100 letters, digits, '-', '_', '.', ':' or '/' (`order.paid`,
#: `shop:payments`), starting with a letter or digit.
EVENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,99}$")
#: The prefix of the signal name an event wait takes (a signal's own name has no colon).
EVENT_SIGNAL_PREFIX = "event:"
#: The most triggers one workflow may carry.
MAX_TRIGGERS = 20
#: What a trigger's expressions read: the event, as {"type", "id", "source", "data"}.
TRIGGER_ROOTS = ("event",)
#: What an event wait's `match` reads: the event and the job's input.
MATCH_ROOTS = ("event", "input")
TRIGGER_KEYS = ("event", "when", "input", "business_key")


def valid_event_name(value: Any, field: str) -> str:
    """An event's type or source (see EVENT_NAME)."""
    if not isinstance(value, str) or not EVENT_NAME.match(value):
        raise InvalidInput(
            f"{field} must be 1-100 letters, digits, '-', '_', '.', ':' or '/', starting with a letter "
            "or digit",
            field=field,
        )
    return value


def event_signal(event_type: str) -> str:
    """The name of the signals an event of `event_type` is buffered as, for a step waiting for it."""
    return f"{EVENT_SIGNAL_PREFIX}{event_type}"


def event_of_signal(name: str) -> str | None:
    """The event type a signal step waits for (its signal name `event:<type>`), or None."""
    return name.removeprefix(EVENT_SIGNAL_PREFIX) if name.startswith(EVENT_SIGNAL_PREFIX) else None


def _expression(value: Any, *, where: str, roots: tuple[str, ...], field: str) -> str:
    try:
        return expressions.check(value, where=where, ancestors=set(), roots=roots)
    except InvalidInput as exc:
        raise InvalidInput(exc.message, field=field) from exc


def event_wait_check(spec: dict[str, Any], *, step: str) -> dict[str, Any]:
    """A signal step waiting for an event: {"event": "<type>", "match": "<expression>"} as stored
    (`signal` `event:<type>`, `event_match`). `match` is required: an event reaches the jobs it
    names, never every job waiting for its type by accident."""
    where = f"step {step!r}"
    if spec.get("signal") not in (None, ""):
        raise InvalidInput(f"{where}: a signal step waits for either a signal or an event", field="steps")
    event_type = valid_event_name(spec.get("event"), f"{where} event")
    match = spec.get("match")
    if match in (None, ""):
        raise InvalidInput(
            f"{where}: a wait for an event needs match, an expression over event and input saying which "
            "events are this job's (e.g. event.data.order_id == input.order_id)",
            field="steps",
        )
    _expression(match, where=f"{where} match", roots=MATCH_ROOTS, field="steps")
    return {"signal": event_signal(event_type), "event_match": match}


def triggers_check(value: Any) -> list[dict[str, Any]] | None:
    """A workflow's `triggers` as stored ([{event, when, input, business_key}], the last three
    None when absent), or None for none."""
    if value is None or value == []:
        return None
    if not isinstance(value, list):
        raise InvalidInput("triggers must be a list of {event, when, input, business_key}", field="triggers")
    if len(value) > MAX_TRIGGERS:
        raise InvalidInput(f"a workflow has at most {MAX_TRIGGERS} triggers", field="triggers")
    stored = []
    for index, trigger in enumerate(value):
        where = f"triggers[{index}]"
        object_of(trigger, where=where, members=TRIGGER_KEYS, field="triggers")
        event_type = valid_event_name(trigger.get("event"), f"{where}.event")
        cleaned: dict[str, Any] = {"event": event_type, "when": None, "input": None, "business_key": None}
        for name in ("when", "business_key"):
            if trigger.get(name) not in (None, ""):
                cleaned[name] = _expression(
                    trigger[name], where=f"{where}.{name}", roots=TRIGGER_ROOTS, field="triggers"
                )
        if trigger.get("input") is not None:
            try:
                cleaned["input"] = expressions.check_template(
                    trigger["input"], where=f"{where}.input", ancestors=set(), roots=TRIGGER_ROOTS
                )
            except InvalidInput as exc:
                raise InvalidInput(exc.message, field="triggers") from exc
        stored.append(cleaned)
    return stored
