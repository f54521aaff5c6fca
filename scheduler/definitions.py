"""Workflow definitions: validated, versioned DAGs of steps.

A version never changes once created (running jobs keep the version they started with); saving
a workflow under an existing name creates the next version.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from graphlib import CycleError, TopologicalSorter
from typing import Any, cast

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError

from agents.models import AgentKind, AgentPool
from agents.validation import validate_operation_path, validate_python_agent, validate_queue_name
from sas_project.audit import definition_deleted, definition_logged
from sas_project.errors import ActionNotAllowed, InvalidInput, NotFound, StaleWrite
from sas_project.validation import is_count, json_storable, valid_name
from scheduler import contracts, expressions
from scheduler.event_definitions import event_wait_check, triggers_check
from scheduler.flow_definitions import (
    cancel_path_check,
    concurrency_check,
    debounce_check,
    gates_combination_check,
    step_concurrency_check,
    step_rate_check,
    throttle_check,
)
from scheduler.models import (
    CANARY_WORKFLOW,
    Job,
    JoinMode,
    OnTimeout,
    RemediationPolicy,
    Schedule,
    StepDefinition,
    StepDefinitionKind,
    Workflow,
)
from scheduler.unit import User
from scheduler.wait_definitions import duties_check, escalation_check

#: The fields each kind of step takes (`kind` absent means a call, as before wait steps).
COMMON_KEYS = {"name", "kind", "depends_on", "when", "run_if_skipped"}
#: Fan-out over items (a call's).
FAN_OUT_KEYS = {"for_each", "item_key", "max_parallel", "join"}
CALL_KEYS = COMMON_KEYS | {"pool", "path", "status_path", "compensation_path", "policy", "input", "output"}
CALL_KEYS |= FAN_OUT_KEYS | {"concurrency", "rate", "cancel_path"}
WORKFLOW_KEYS = COMMON_KEYS | {"workflow", "policy", "input", "output"}
WAIT_KEYS: dict[str, set[str]] = {
    StepDefinitionKind.SIGNAL: COMMON_KEYS
    | {"signal", "event", "match", "timeout_seconds", "on_timeout", "default_output", "policy"}
    | {"escalation", "sender_group"},
    StepDefinitionKind.APPROVAL: COMMON_KEYS
    | {"group", "timeout_seconds", "on_timeout", "default_output", "policy"}
    | {"escalation", "allow_self_approval"},
    StepDefinitionKind.TIMER: COMMON_KEYS | {"wait_seconds", "until"},
    StepDefinitionKind.WORKFLOW: WORKFLOW_KEYS,
    StepDefinitionKind.REPEAT: COMMON_KEYS
    | {"call", "until", "interval_seconds", "max_iterations", "on_exhausted"},
}
#: The fields of a repeat's `call`: a call step's, less what a loop has no use for.
REPEAT_CALL_KEYS = {"pool", "path", "status_path", "compensation_path", "policy", "input"}
#: What a repeat does when `max_iterations` ran without its `until` holding.
REPEAT_ON_EXHAUSTED = ("hold", "fail", "continue")
#: The most iterations a repeat may run (each is a step row with its own operation ID).
MAX_ITERATIONS = 1000
#: What a repeat's `until` reads: the iteration's answer, the job's input, the iteration's number.
REPEAT_ROOTS = ("output", "input", "iteration")
#: A timer's `until`: `input.<path>` or `<step>.<path>`, dotted names (no expressions).
UNTIL_PATTERN = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)+")
#: The longest wait or timeout a definition may name (ten years): beyond it, say none.
MAX_WAIT_SECONDS = 10 * 366 * 24 * 3600.0
#: The most items a fan-out may bound its calls in flight to (larger means no bound).
MAX_PARALLEL = 1000
#: The fields of a cleaned step the SQL fast path runs (`scheduler/sql/postgresql/sas_submit.sql`,
#: `scheduler/sql/postgresql/sas_record_outcome.sql`, which test the flags made of it): a call to
#: its pool after its dependencies, its input mapped at the call, its compensation left to the
#: Python saga (`run_if_skipped` says nothing where no step is skipped). A step setting any other
#: field (a condition, a fan-out, a projection, a wait's or a child's, or one a later feature
#: adds) is not plain, so a new feature of the language changes nothing in SQL.
PLAIN_FIELDS = frozenset(
    {
        *("name", "kind", "depends_on", "run_if_skipped"),
        *("pool", "policy", "path", "status_path", "compensation_path", "input_map"),
    }
)


def _path_for(kind: str, value: Any) -> str:
    """An operation path as the pool's kind reads it: an HTTP path, a queue name, or a registered
    python callable."""
    if kind == AgentKind.QUEUE:
        return validate_queue_name(value)
    if kind == AgentKind.PYTHON:
        return validate_python_agent(value)
    return validate_operation_path(value, http=True)


def _optional_path(value: Any, field: str, *, kind: str) -> str:
    if value in (None, ""):
        return ""
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be a string", field=field)
    try:
        return _path_for(kind, value)
    except InvalidInput as exc:
        raise InvalidInput(f"{field}: {exc.message}", field=field) from exc


def _seconds(value: Any, field: str, *, zero: bool = False) -> float | None:
    """An optional number of seconds: above 0 (or at least 0 with `zero`), at most ten years."""
    if value is None:
        return None
    low_ok = value >= 0 if zero else value > 0
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not low_ok
        or value > MAX_WAIT_SECONDS
    ):
        bound = "at least 0" if zero else "greater than 0"
        raise InvalidInput(
            f"{field} must be a number {bound} and at most {int(MAX_WAIT_SECONDS)}", field="steps"
        )
    return float(value)


def _call_spec(name: str, spec: dict[str, Any], pools: dict[str, AgentPool], policy: Any) -> dict[str, Any]:
    pool = pools.get(str(spec.get("pool"))) if isinstance(spec.get("pool"), str) else None
    if pool is None:
        raise InvalidInput(f"step {name!r}: unknown pool {spec.get('pool')!r}", field="steps")
    if policy is None:
        raise InvalidInput(f"step {name!r}: unknown policy {spec.get('policy')!r}", field="steps")
    try:
        path = _path_for(pool.kind, spec.get("path", ""))
    except InvalidInput as exc:
        raise InvalidInput(f"step {name!r}: {exc.message}", field="steps") from exc
    return {
        "pool": pool,
        "policy": policy,
        "path": path,
        "concurrency": step_concurrency_check(spec.get("concurrency"), step=name),
        "rate": step_rate_check(spec.get("rate"), step=name),
        "status_path": _optional_path(spec.get("status_path"), f"step {name!r} status_path", kind=pool.kind),
        "compensation_path": _optional_path(
            spec.get("compensation_path"), f"step {name!r} compensation_path", kind=pool.kind
        ),
        "cancel_path": cancel_path_check(spec.get("cancel_path"), step=name, pool=pool),
    }


def _wait_spec(name: str, kind: str, spec: dict[str, Any], groups: set[str], policy: Any) -> dict[str, Any]:
    """The fields of a signal, approval or timer step, checked."""
    if spec.get("policy") is not None and policy is None:
        raise InvalidInput(f"step {name!r}: unknown policy {spec.get('policy')!r}", field="steps")
    cleaned: dict[str, Any] = {"pool": None, "policy": policy, "path": ""}
    if kind == StepDefinitionKind.TIMER:
        wait_seconds = _seconds(spec.get("wait_seconds"), f"step {name!r} wait_seconds", zero=True)
        until = spec.get("until")
        if (wait_seconds is None) == (until in (None, "")):
            raise InvalidInput(
                f"step {name!r}: a timer names either wait_seconds or until "
                "(a field holding an ISO 8601 time)",
                field="steps",
            )
        if until not in (None, "") and (not isinstance(until, str) or not UNTIL_PATTERN.fullmatch(until)):
            raise InvalidInput(
                f"step {name!r}: until must be input.<field> or <earlier step>.<field> (dotted), "
                f"not {until!r}",
                field="steps",
            )
        return {**cleaned, "wait_seconds": wait_seconds, "until": until or ""}
    if kind == StepDefinitionKind.SIGNAL and spec.get("event") not in (None, ""):
        cleaned.update(event_wait_check(spec, step=name))
    elif kind == StepDefinitionKind.SIGNAL:
        if spec.get("match") not in (None, ""):
            raise InvalidInput(f"step {name!r}: match goes with event (a wait for an event)", field="steps")
        cleaned["signal"] = valid_name(spec.get("signal"), f"step {name!r} signal", "steps")
    else:
        group = spec.get("group") or ""
        if not isinstance(group, str) or (group and group not in groups):
            raise InvalidInput(f"step {name!r}: unknown group {spec.get('group')!r}", field="steps")
        cleaned["group"] = group
    timeout = _seconds(spec.get("timeout_seconds"), f"step {name!r} timeout_seconds")
    on_timeout = spec.get("on_timeout") or ""
    if on_timeout and on_timeout not in OnTimeout.values:
        raise InvalidInput(
            f"step {name!r}: on_timeout must be one of {', '.join(OnTimeout.values)}", field="steps"
        )
    if on_timeout and timeout is None:
        raise InvalidInput(f"step {name!r}: on_timeout needs timeout_seconds", field="steps")
    if timeout is not None and not on_timeout:
        on_timeout = OnTimeout.HOLD
    escalation = escalation_check(
        spec.get("escalation"), step=name, kind=kind, timeout=timeout, groups=groups
    )
    cleaned.update(duties_check(spec, step=name, kind=kind, groups=groups))
    default_output = spec.get("default_output")
    continues = on_timeout == OnTimeout.CONTINUE or any(r["do"] == "continue" for r in escalation)
    if default_output is not None and not continues:
        raise InvalidInput(
            f"step {name!r}: default_output is the output of on_timeout continue (or a continue rung)",
            field="steps",
        )
    json_storable(default_output, "default_output")
    return {
        **cleaned,
        "timeout_seconds": timeout,
        "on_timeout": on_timeout,
        "default_output": default_output,
        "escalation": escalation,
    }


def _repeat_spec(
    name: str, spec: dict[str, Any], pools: dict[str, AgentPool], policies: dict[str, RemediationPolicy]
) -> dict[str, Any]:
    """A repeat step: its `call` checked as a call step's fields are (they become the step's own
    pool, path, policy and input), its loop's bounds, and what exhausting them does (`until` is
    checked with the other expressions)."""
    call = spec.get("call")
    if not isinstance(call, dict):
        raise InvalidInput(
            f"step {name!r}: call must be an object with a call step's fields "
            f"({', '.join(sorted(REPEAT_CALL_KEYS))})",
            field="steps",
        )
    extra = sorted(key for key in set(call) - REPEAT_CALL_KEYS if call[key] not in (None, ""))
    if extra:
        raise InvalidInput(f"step {name!r}: unknown fields for call: {', '.join(extra)}", field="steps")
    policy = policies.get(call["policy"]) if isinstance(call.get("policy"), str) else None
    cleaned = _call_spec(name, call, pools, policy)
    until = spec.get("until")
    if not isinstance(until, str) or not until.strip():
        raise InvalidInput(
            f"step {name!r}: until must be a JMESPath expression over output, input and iteration",
            field="steps",
        )
    interval = spec.get("interval_seconds")
    if interval is None:
        raise InvalidInput(f"step {name!r}: interval_seconds is required", field="steps")
    interval = _seconds(interval, f"step {name!r} interval_seconds", zero=True)
    most = spec.get("max_iterations")
    if not is_count(most, 1, MAX_ITERATIONS):
        raise InvalidInput(
            f"step {name!r}: max_iterations must be a whole number from 1 to {MAX_ITERATIONS}", field="steps"
        )
    on_exhausted = spec.get("on_exhausted") or "hold"
    if on_exhausted not in REPEAT_ON_EXHAUSTED:
        raise InvalidInput(
            f"step {name!r}: on_exhausted must be one of {', '.join(REPEAT_ON_EXHAUSTED)}", field="steps"
        )
    repeat = {
        "until": until,
        "interval_seconds": interval,
        "max_iterations": most,
        "on_exhausted": on_exhausted,
    }
    fields = {**cleaned, "repeat": repeat}
    if call.get("input") is not None:
        fields["input_map"] = call["input"]
    return fields


def _workflow_spec(name: str, spec: dict[str, Any], policy: Any, parent: str | None) -> dict[str, Any]:
    """A sub-workflow step: the child workflow exists (any version; the latest runs), is not the
    workflow being saved, and an optional policy says what the child's failure does."""
    if spec.get("policy") is not None and policy is None:
        raise InvalidInput(f"step {name!r}: unknown policy {spec.get('policy')!r}", field="steps")
    child = valid_name(spec.get("workflow"), f"step {name!r} workflow", "steps")
    if parent is not None and child == parent:
        raise InvalidInput(f"step {name!r}: a workflow cannot run itself as a sub-workflow", field="steps")
    if not Workflow.objects.filter(name=child).exists():
        raise InvalidInput(f"step {name!r}: unknown workflow {child!r}", field="steps")
    return {"pool": None, "policy": policy, "path": "", "child_workflow": child}


def _fan_out_spec(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """`for_each` and what goes with it: `item_key`, `max_parallel`, `join` (checked here; the
    expressions with the others, once the dependencies are known)."""
    for_each = spec.get("for_each") or ""
    if not for_each:
        given = sorted(k for k in FAN_OUT_KEYS - {"for_each"} if spec.get(k) not in (None, ""))
        if given:
            raise InvalidInput(f"step {name!r}: {', '.join(given)} needs for_each", field="steps")
        return {}
    max_parallel = spec.get("max_parallel")
    if max_parallel is not None and (
        isinstance(max_parallel, bool)
        or not isinstance(max_parallel, int)
        or not 1 <= max_parallel <= MAX_PARALLEL
    ):
        raise InvalidInput(
            f"step {name!r}: max_parallel must be a whole number from 1 to {MAX_PARALLEL}", field="steps"
        )
    join = spec.get("join") or {"mode": JoinMode.ALL}
    if not isinstance(join, dict) or set(join) - {"mode", "count"}:
        raise InvalidInput(f"step {name!r}: join must be an object with mode and count", field="steps")
    mode = join.get("mode") or JoinMode.ALL
    if mode not in JoinMode.values:
        raise InvalidInput(
            f"step {name!r}: join.mode must be one of {', '.join(JoinMode.values)}", field="steps"
        )
    count = join.get("count")
    limit = settings.SAS_MAX_FANOUT_ITEMS
    if mode == JoinMode.AT_LEAST:
        if not is_count(count, 1, limit):
            raise InvalidInput(
                f"step {name!r}: join.count must be a whole number from 1 to {limit} (mode at_least)",
                field="steps",
            )
    elif count is not None:
        raise InvalidInput(f"step {name!r}: join.count goes with mode at_least only", field="steps")
    return {
        "for_each": for_each,
        "item_key": spec.get("item_key") or "",
        "max_parallel": max_parallel,
        "join_mode": mode,
        "join_count": count,
    }


def _check_expressions(name: str, spec: dict[str, Any], ancestors_of: set[str]) -> None:
    """A step's expressions: its condition, fan-out, input mapping and output projection."""
    fan_out = ("item", "index") if spec.get("for_each") else ()
    if spec["when"]:
        expressions.check(spec["when"], where=f"step {name!r} when", ancestors=ancestors_of)
    if spec.get("for_each"):
        expressions.check(spec["for_each"], where=f"step {name!r} for_each", ancestors=ancestors_of)
    if spec.get("item_key"):
        expressions.check(spec["item_key"], where=f"step {name!r} item_key", ancestors=set(), roots=fan_out)
    if spec.get("input_map") is not None:
        expressions.check_template(
            spec["input_map"],
            where=f"step {name!r} input",
            ancestors=ancestors_of,
            roots=(*expressions.ROOTS, *fan_out),
        )
    for limit in ("concurrency", "rate"):
        if (spec.get(limit) or {}).get("key"):
            expressions.check(
                spec[limit]["key"],
                where=f"step {name!r} {limit}.key",
                ancestors=ancestors_of,
                roots=(*expressions.ROOTS, *fan_out),
            )
    if spec.get("output_map"):
        expressions.check(
            spec["output_map"],
            where=f"step {name!r} output",
            ancestors=ancestors_of,
            roots=("output", *expressions.ROOTS, *fan_out),
        )


def validate_steps(steps: Any, *, workflow: str | None = None) -> list[dict[str, Any]]:
    """Check a list of step specs; returns them cleaned, in a dependency-respecting order.

    Raises InvalidInput naming the step and the problem: an unknown kind, pool, policy, group or
    dependency, a field the step's kind does not take, a duplicate name, a bad path, a timer's
    `until` that reads no ancestor, or a cycle.
    """
    if not isinstance(steps, list) or not steps:
        raise InvalidInput("a workflow needs a non-empty list of steps", field="steps")
    if len(steps) > 100:
        raise InvalidInput("a workflow has at most 100 steps", field="steps")
    cleaned: dict[str, dict[str, Any]] = {}
    pools = {p.name: p for p in AgentPool.objects.all()}
    policies = {p.name: p for p in RemediationPolicy.objects.all()}
    groups = set(Group.objects.values_list("name", flat=True))
    for index, spec in enumerate(steps):
        where = f"steps[{index}]"
        if not isinstance(spec, dict):
            raise InvalidInput(f"{where} must be an object", field="steps")
        kind = spec.get("kind") or StepDefinitionKind.CALL
        if kind not in StepDefinitionKind.values:
            raise InvalidInput(
                f"{where}: kind must be one of {', '.join(StepDefinitionKind.values)}", field="steps"
            )
        allowed = CALL_KEYS if kind == StepDefinitionKind.CALL else WAIT_KEYS[kind]
        # A null is an absent value (a representation read back states every field).
        extra = {key for key in set(spec) - allowed if spec[key] not in (None, "")}
        if extra:
            raise InvalidInput(
                f"{where}: unknown fields for {kind} steps: {', '.join(sorted(extra))}", field="steps"
            )
        name = valid_name(spec.get("name"), f"{where}.name", "steps")
        if name in cleaned:
            raise InvalidInput(f"step {name!r} appears twice", field="steps")
        policy = policies.get(str(spec.get("policy"))) if isinstance(spec.get("policy"), str) else None
        if kind == StepDefinitionKind.CALL:
            fields = {**_call_spec(name, spec, pools, policy), **_fan_out_spec(name, spec)}
        elif kind == StepDefinitionKind.WORKFLOW:
            fields = _workflow_spec(name, spec, policy, workflow)
        elif kind == StepDefinitionKind.REPEAT:
            fields = _repeat_spec(name, spec, pools, policies)
        else:
            fields = _wait_spec(name, kind, spec, groups, policy)
        depends_on = spec.get("depends_on", [])
        if depends_on is None:
            depends_on = []
        if not isinstance(depends_on, list) or not all(isinstance(d, str) for d in depends_on):
            raise InvalidInput(f"step {name!r}: depends_on must be a list of step names", field="steps")
        run_if_skipped = spec.get("run_if_skipped") or False
        if not isinstance(run_if_skipped, bool):
            raise InvalidInput(f"step {name!r}: run_if_skipped must be true or false", field="steps")
        cleaned[name] = {
            "name": name,
            "kind": kind,
            **fields,
            "depends_on": list(dict.fromkeys(depends_on)),
            "when": spec.get("when") or "",
            "run_if_skipped": run_if_skipped,
        }
        if spec.get("input") is not None and kind != StepDefinitionKind.REPEAT:
            cleaned[name]["input_map"] = spec["input"]
        if spec.get("output") not in (None, ""):
            cleaned[name]["output_map"] = spec["output"]
    for name, spec in cleaned.items():
        for dep in spec["depends_on"]:
            if dep not in cleaned:
                raise InvalidInput(f"step {name!r} depends on unknown step {dep!r}", field="steps")
            if dep == name:
                raise InvalidInput(f"step {name!r} depends on itself", field="steps")
    try:
        order = list(TopologicalSorter({n: s["depends_on"] for n, s in cleaned.items()}).static_order())
    except CycleError as exc:
        cycle = " -> ".join(exc.args[1]) if len(exc.args) > 1 else "?"
        raise InvalidInput(f"the steps form a cycle: {cycle}", field="steps") from exc
    graph = {n: spec["depends_on"] for n, spec in cleaned.items()}
    for name, spec in cleaned.items():
        _check_expressions(name, spec, ancestors(graph, name))
        if spec.get("repeat"):
            expressions.check(
                spec["repeat"]["until"], where=f"step {name!r} until", ancestors=set(), roots=REPEAT_ROOTS
            )
        until = spec.get("until")
        if until and until.split(".", 1)[0] != "input":
            source = until.split(".", 1)[0]
            if source not in ancestors(graph, name):
                raise InvalidInput(
                    f"step {name!r}: until reads {source!r}, which is not a step it depends on "
                    "(directly or not)",
                    field="steps",
                )
    return [cleaned[name] for name in order]


def ancestors(depends_on: Mapping[str, Iterable[str]], name: str) -> set[str]:
    """Every step `name` depends on, directly or not (`depends_on`: each step's direct
    dependencies by name). The one closure the definitions, the DAG advance and the claim use."""
    seen: set[str] = set()
    todo = list(depends_on.get(name, ()))
    while todo:
        dep = todo.pop()
        if dep not in seen:
            seen.add(dep)
            todo.extend(depends_on.get(dep, ()))
    return seen


def outcome_plain(spec: Mapping[str, Any]) -> bool:
    """sas_record_outcome may record a success of this step (of one of its items, for a fan-out)
    as it came: no projection makes its output, and it cannot settle a join by itself."""
    return (
        not spec.get("output_map")
        and spec.get("join_mode") != JoinMode.ANY
        # An iteration's success decides its loop (its `until`): the general path records it.
        and spec.get("kind") != StepDefinitionKind.REPEAT
    )


def step_plain(spec: Mapping[str, Any]) -> bool:
    """The SQL fast path runs this step (a cleaned spec, as validate_steps returns it) whole: a
    call that sets nothing beyond PLAIN_FIELDS (a field at its empty value sets nothing)."""
    return (
        spec.get("kind", StepDefinitionKind.CALL) == StepDefinitionKind.CALL
        and all(value in (None, "", False) for key, value in spec.items() if key not in PLAIN_FIELDS)
        and outcome_plain(spec)
    )


def workflow_plain(specs: Iterable[Mapping[str, Any]]) -> bool:
    """The SQL fast path submits and advances this version's jobs: every step is plain."""
    return all(step_plain(spec) for spec in specs)


#: The fraction of `sla_seconds` after which a job is at risk by the clock, when none is given.
DEFAULT_WARN_FRACTION = 0.8


def sla_check(sla_seconds: Any, *, warn_fraction: Any = None) -> tuple[float | None, float]:
    """A workflow's service-level target and warn fraction as stored (supervisor.sla reads them):
    `sla_seconds` empty or a number of seconds above 0 (at most ten years), `warn_fraction` a
    number in (0, 1] (absent: DEFAULT_WARN_FRACTION). InvalidInput names the field."""
    if sla_seconds is not None and (
        isinstance(sla_seconds, bool)
        or not isinstance(sla_seconds, int | float)
        or not 0 < sla_seconds <= MAX_WAIT_SECONDS
    ):
        raise InvalidInput(
            f"sla_seconds must be empty or a number greater than 0 and at most {int(MAX_WAIT_SECONDS)}",
            field="sla_seconds",
        )
    if warn_fraction is None:
        warn_fraction = DEFAULT_WARN_FRACTION
    if (
        isinstance(warn_fraction, bool)
        or not isinstance(warn_fraction, int | float)
        or not 0 < warn_fraction <= 1
    ):
        raise InvalidInput(
            "warn_fraction must be a number greater than 0 and at most 1", field="warn_fraction"
        )
    return (float(sla_seconds) if sla_seconds is not None else None), float(warn_fraction)


@transaction.atomic
def workflow_create(
    *,
    name: str,
    steps: Any,
    actor: User | None = None,
    description: str = "",
    deadline_seconds: float | None = None,
    input_schema: Any = None,
    concurrency: Any = None,
    debounce: Any = None,
    throttle: Any = None,
    triggers: Any = None,
    sla_seconds: Any = None,
    warn_fraction: Any = None,
    system: bool = False,
) -> Workflow:
    """Create the next version of workflow `name` from validated step specs (and its input's
    JSON Schema, if any: scheduler.contracts; the inbound events that start its jobs, if any:
    scheduler.event_definitions; its service-level target, if any: `sla_check`). The canary's
    workflow is the service's own (`system`): no one else may make a version of it."""
    valid_name(name, "workflow name", "name")
    if name == CANARY_WORKFLOW and not system:
        raise InvalidInput(f"workflow name {name!r} is reserved for the service's canary", field="name")
    if deadline_seconds is not None and (
        isinstance(deadline_seconds, bool)
        or not isinstance(deadline_seconds, int | float)
        or deadline_seconds <= 0
    ):
        raise InvalidInput("deadline_seconds must be empty or greater than 0", field="deadline_seconds")
    if not isinstance(description, str):
        raise InvalidInput("description must be a string", field="description")
    ordered = validate_steps(steps, workflow=name)
    input_schema = contracts.schema_check(input_schema)
    concurrency = concurrency_check(concurrency)
    debounce = debounce_check(debounce)
    throttle = throttle_check(throttle)
    gates_combination_check(concurrency=concurrency, debounce=debounce, throttle=throttle)
    triggers = triggers_check(triggers)
    sla_seconds, warn_fraction = sla_check(sla_seconds, warn_fraction=warn_fraction)
    latest = Workflow.objects.select_for_update().filter(name=name).order_by("-version").first()
    # Two first versions of one name can both pass the lock above (there is no row to lock yet):
    # the unique (name, version) constraint decides, and the loser is told to send again.
    try:
        with transaction.atomic():
            workflow = _create_version(
                name,
                latest,
                description,
                deadline_seconds,
                actor,
                input_schema,
                concurrency=concurrency,
                debounce=debounce,
                throttle=throttle,
                triggers=triggers,
                sla=(sla_seconds, warn_fraction),
                plain=workflow_plain(ordered),
            )
    except IntegrityError as exc:
        raise StaleWrite(f"workflow {name!r} was changed at the same moment; send yours again") from exc
    StepDefinition.objects.bulk_create(
        [
            StepDefinition(
                workflow=workflow,
                position=i,
                plain_outcome=outcome_plain(spec),
                **spec,
            )
            for i, spec in enumerate(ordered)
        ]
    )
    definition_logged(actor, workflow, created=True)
    return workflow


def _create_version(
    name: str,
    latest: Workflow | None,
    description: str,
    deadline_seconds: float | None,
    actor: User | None,
    input_schema: dict[str, Any] | None,
    *,
    concurrency: dict[str, Any] | None,
    debounce: dict[str, Any] | None = None,
    throttle: dict[str, Any] | None = None,
    triggers: list[dict[str, Any]] | None = None,
    sla: tuple[float | None, float] = (None, DEFAULT_WARN_FRACTION),
    plain: bool,
) -> Workflow:
    return Workflow.objects.create(
        name=name,
        version=(latest.version + 1) if latest else 1,
        description=description,
        deadline_seconds=deadline_seconds,
        input_schema=input_schema,
        concurrency=concurrency,
        debounce=debounce,
        throttle=throttle,
        triggers=triggers,
        sla_seconds=sla[0],
        warn_fraction=sla[1],
        plain=plain,
        created_by=cast(Any, actor) if actor is not None and actor.is_authenticated else None,
    )


def workflow_latest(name: str) -> Workflow | None:
    return Workflow.objects.filter(name=name).order_by("-version").first()


@transaction.atomic
def workflow_delete(name: str, *, actor: Any) -> int:
    """Delete every version of a workflow no job and no schedule uses; returns how many versions.
    Otherwise ActionNotAllowed names a job (or schedule) that uses it: history keeps its
    definitions."""
    versions = list(Workflow.objects.select_for_update().filter(name=name).order_by("version"))
    if not versions:
        raise NotFound(f"workflow {name!r} does not exist")
    job = Job.objects.filter(workflow__name=name).values_list("pk", flat=True).first()
    if job is not None:
        raise ActionNotAllowed(
            f"workflow {name!r} is used by job {job}: it cannot be deleted", job_id=str(job)
        )
    schedule = Schedule.objects.filter(workflow=name).values_list("name", flat=True).first()
    if schedule is not None:
        raise ActionNotAllowed(f"workflow {name!r} is used by schedule {schedule!r}: delete that first")
    for version in versions:
        definition_deleted(actor, version)
    try:
        with transaction.atomic():
            Workflow.objects.filter(name=name).delete()
    except ProtectedError as exc:
        raise ActionNotAllowed(f"workflow {name!r} is still used: it cannot be deleted") from exc
    return len(versions)
