"""What a signal or approval step may say about the decision it waits for (docs/workflow-language.md,
"Waits that escalate"), checked when a version is saved: its `escalation` ladder, and who may give
the decision (`allow_self_approval` for an approval, `sender_group` for a named signal). Each check
returns the value as stored, or raises InvalidInput; scheduler.definitions calls them.

A rung is `{"after_seconds", "do", "group"}`: `after_seconds` counts from when the step began
waiting, the rungs in strictly increasing time and all before the wait's timeout (a rung after it
would never be reached); `do` is `remind` (an alert), `reassign` (`group` may now decide, besides
those who could), or one that ends the wait: `hold` (for an operator), `fail` (the job
compensates) or `continue` (the step succeeds with its `default_output`), which is the last rung.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sas_project.errors import InvalidInput
from scheduler.models import StepDefinition, StepDefinitionKind

#: The most rungs one ladder may have.
MAX_RUNGS = 10
#: What a rung does; the last three end the wait (and the ladder).
RUNG_ACTIONS = ("remind", "reassign", "hold", "fail", "continue")
ENDING = frozenset({"hold", "fail", "continue"})
RUNG_KEYS = frozenset({"after_seconds", "do", "group"})
#: The longest a rung may wait (ten years, as any wait).
MAX_AFTER = 10 * 366 * 24 * 3600.0


def escalation_check(
    value: Any, *, step: str, kind: str, timeout: float | None, groups: set[str]
) -> list[dict[str, Any]]:
    """A wait step's `escalation` as stored (a list of rungs; [] for none)."""
    if value in (None, []):
        return []
    where = f"step {step!r} escalation"
    if kind not in (StepDefinitionKind.SIGNAL, StepDefinitionKind.APPROVAL):
        raise InvalidInput(f"{where}: only signal and approval steps escalate", field="steps")
    if not isinstance(value, list) or len(value) > MAX_RUNGS:
        raise InvalidInput(f"{where} must be a list of at most {MAX_RUNGS} rungs", field="steps")
    rungs: list[dict[str, Any]] = []
    for index, rung in enumerate(value):
        at = f"{where}[{index}]"
        if not isinstance(rung, dict) or set(rung) - RUNG_KEYS:
            raise InvalidInput(f"{at} must be an object of {', '.join(sorted(RUNG_KEYS))}", field="steps")
        after = rung.get("after_seconds")
        if isinstance(after, bool) or not isinstance(after, int | float) or not 0 < after <= MAX_AFTER:
            raise InvalidInput(f"{at}.after_seconds must be a number above 0", field="steps")
        if rungs and after <= rungs[-1]["after_seconds"]:
            raise InvalidInput(f"{at}.after_seconds must be later than the rung before", field="steps")
        if timeout is not None and after >= timeout:
            raise InvalidInput(
                f"{at}.after_seconds must come before the step's timeout_seconds ({timeout:g})", field="steps"
            )
        do = rung.get("do")
        if do not in RUNG_ACTIONS:
            raise InvalidInput(f"{at}.do must be one of {', '.join(RUNG_ACTIONS)}", field="steps")
        if rungs and rungs[-1]["do"] in ENDING:
            raise InvalidInput(f"{at}: nothing comes after a {rungs[-1]['do']} rung", field="steps")
        group = rung.get("group") or ""
        if do == "reassign" and not group:
            raise InvalidInput(f"{at}: a reassign rung names the group that may decide", field="steps")
        if do == "reassign" and kind != StepDefinitionKind.APPROVAL:
            raise InvalidInput(
                f"{at}: only an approval is reassigned (a signal has no decider)", field="steps"
            )
        if not isinstance(group, str) or (group and group not in groups):
            raise InvalidInput(f"{at}: unknown group {rung.get('group')!r}", field="steps")
        rungs.append({"after_seconds": float(after), "do": do, "group": group})
    return rungs


def duties_check(spec: dict[str, Any], *, step: str, kind: str, groups: set[str]) -> dict[str, Any]:
    """Who may decide: `allow_self_approval` (an approval's; false: the job's submitter may not
    approve its own job) and `sender_group` (a named signal's), as stored."""
    allow = spec.get("allow_self_approval")
    if allow is not None and not isinstance(allow, bool):
        raise InvalidInput(f"step {step!r}: allow_self_approval must be true or false", field="steps")
    sender_group = spec.get("sender_group") or ""
    if sender_group and (kind != StepDefinitionKind.SIGNAL or spec.get("event") not in (None, "")):
        raise InvalidInput(f"step {step!r}: sender_group is a named signal's", field="steps")
    if not isinstance(sender_group, str) or (sender_group and sender_group not in groups):
        raise InvalidInput(f"step {step!r}: unknown group {spec.get('sender_group')!r}", field="steps")
    return {"allow_self_approval": bool(allow), "sender_group": sender_group}


# --- when its rungs come -------------------------------------------------------------------------


def due_after(since: dt.datetime, *, seconds: float) -> dt.datetime:
    """When a waiting step is due that waits `seconds` from `since`: its timeout, a rung of its
    ladder, a timer's `wait_seconds`, a repeat's next iteration (scheduler.services.repeat)."""
    return since + dt.timedelta(seconds=seconds)


def timeout_at(definition: StepDefinition, *, since: dt.datetime) -> dt.datetime | None:
    """When a wait that began at `since` times out (None: it never does)."""
    if not definition.timeout_seconds:
        return None
    return due_after(since, seconds=definition.timeout_seconds)


def next_rung(definition: StepDefinition, *, rung: int) -> dict[str, Any] | None:
    """The rung after the `rung` walked so far, or None when none is left."""
    rungs = definition.escalation or []
    return rungs[rung] if rung < len(rungs) else None


def rung_at(definition: StepDefinition, *, since: dt.datetime, rung: int) -> dt.datetime | None:
    """When the next rung is due (None: no rung is left)."""
    found = next_rung(definition, rung=rung)
    return due_after(since, seconds=found["after_seconds"]) if found is not None else None


def wait_deadline(definition: StepDefinition, *, since: dt.datetime, rung: int = 0) -> dt.datetime | None:
    """What the waits' sweep watches for a waiting signal or approval: the sooner of its next rung
    and its timeout (the rungs all come before the timeout: scheduler.wait_definitions)."""
    times = [
        t for t in (rung_at(definition, since=since, rung=rung), timeout_at(definition, since=since)) if t
    ]
    return min(times) if times else None
