"""Workflows as the API reads and writes them: a version and its step definitions.

The request serializers check shapes, types and the limits of the columns the values end up in;
the rules of the domain (unknown workflow or pool, cycles, ...) stay in scheduler.definitions,
which names the offending field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from agents.serializers import RateSerializer
from sas_project.api import MAX_INT, ReplaceMixin, StrictSerializer
from scheduler.definitions import DEFAULT_WARN_FRACTION
from scheduler.event_definitions import event_of_signal
from scheduler.models import OnTimeout, StepDefinition, StepDefinitionKind


def _optional_text(max_length: int, help_text: str) -> serializers.CharField:
    """A text a step definition may leave out or leave empty (its column defaults to "")."""
    return serializers.CharField(max_length=max_length, required=False, allow_blank=True, help_text=help_text)


class StepConcurrencySerializer(StrictSerializer):
    """A call step's flow control by key (scheduler.services.capacity): at most `limit` calls of
    the step in flight per value of `key`."""

    key = serializers.CharField(
        max_length=1000,
        help_text="An expression over `input` and `results` (and `item` in a fan-out), written as "
        "conditions are (`input.account`); a call whose key reads nothing is not limited.",
    )
    limit = serializers.IntegerField(
        min_value=1, max_value=10_000, help_text="Calls in flight per key value."
    )
    on_limit = serializers.ChoiceField(
        choices=["queue"],
        required=False,
        help_text="queue (the only choice for a step): calls over the limit wait their turn, oldest first.",
    )


class EscalationRungSerializer(StrictSerializer):
    """One rung of a wait's escalation (scheduler.wait_definitions)."""

    after_seconds = serializers.FloatField(help_text="Seconds after the step began waiting.")
    do = serializers.ChoiceField(choices=["remind", "reassign", "hold", "fail", "continue"])
    group = _optional_text(150, "reassign: the group that may now decide; remind: whom to remind.")


class StepDefinitionSerializer(StrictSerializer):
    """One step of a workflow (the same shape is read and written): a call (no `kind`, or
    `call`), or a wait: `signal`, `approval` or `timer`."""

    name = serializers.CharField(max_length=100)
    kind = serializers.ChoiceField(
        choices=StepDefinitionKind.choices,
        required=False,
        help_text="call (default): a remote call through a pool; signal: waits for a named signal sent "
        "to the job; approval: waits for an operator's Approve or Reject; timer: waits for a time; repeat: "
        "calls again, after an interval, until an expression over the answer holds.",
    )
    pool = serializers.CharField(max_length=100, required=False, help_text="call: the pool's name.")
    path = serializers.CharField(
        max_length=300,
        required=False,
        help_text="call: the path POSTed under the endpoint (HTTP), a queue name, or a registered callable.",
    )
    status_path = _optional_text(
        300, "call: where to ask whether operation {operation_id} happened (GET: 200 yes, 404 no)."
    )
    compensation_path = _optional_text(300, "call: the action that undoes this one.")
    cancel_path = serializers.CharField(
        max_length=300,
        required=False,
        allow_blank=True,
        allow_null=True,
        help_text="call (HTTP or queue pool): where a cancel of a call in flight is POSTed when the job is "
        "cancelled or compensated, with the call's operation ID (a queue step's cancel goes to its request "
        "queue). A path starting with '/'; null: none.",
    )
    depends_on = serializers.ListField(
        child=serializers.CharField(max_length=100), required=False, max_length=100
    )
    policy = serializers.CharField(
        max_length=100,
        required=False,
        help_text="Remediation policy name (required for a call; for a signal or approval, its "
        "on_exhausted decides what a rejection or a failing timeout does to the job).",
    )
    signal = serializers.CharField(
        max_length=100, required=False, help_text="signal: the name it waits for (or `event`)."
    )
    event = serializers.CharField(
        max_length=100,
        required=False,
        help_text="signal: the type of the inbound event it waits for instead of a named signal "
        "(POST /api/v1/events/); its output is the event's `data`. Needs `match`.",
    )
    match = _optional_text(
        1000,
        "signal with `event`: which events are this job's, in JMESPath over `event` ({type, id, source, "
        "data}) and `input` (the job's), e.g. event.data.order_id == input.order_id.",
    )
    group = _optional_text(150, "approval: the group whose members may decide (default: operators).")
    timeout_seconds = serializers.FloatField(
        required=False, allow_null=True, help_text="signal, approval: how long to wait (default: for ever)."
    )
    on_timeout = serializers.ChoiceField(
        choices=OnTimeout.choices,
        required=False,
        allow_blank=True,
        help_text="signal, approval: hold (default) for an operator, fail the step (its policy then "
        "decides the job), or continue with default_output.",
    )
    default_output = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text="The step's output when on_timeout (or an escalation rung) is continue.",
    )
    escalation = EscalationRungSerializer(
        many=True,
        required=False,
        help_text="signal, approval: the ladder walked while no decision comes, in time order: remind "
        "(an alert approval_reminder), reassign (its group may now decide too), then at most one of hold "
        "(for an operator), fail (the job compensates) or continue (with default_output), each an event "
        "and an alert. A decision at any rung ends it.",
    )
    allow_self_approval = serializers.BooleanField(
        required=False,
        help_text="approval: the job's submitter may approve it too (default false: separation of duties).",
    )
    sender_group = _optional_text(
        150, "signal (named): only members of this group may send the signal (default: whoever may signal)."
    )
    wait_seconds = serializers.FloatField(
        required=False, allow_null=True, help_text="timer: wait this long once the step is ready."
    )
    until = _optional_text(
        300,
        "timer: wait until the ISO 8601 time at this field: input.<field> or <step>.<field>. repeat: "
        "the JMESPath expression over `output` (the iteration's answer), `input` and `iteration` that "
        "ends the loop when true, e.g. output.state == 'done'.",
    )
    call = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text="repeat: the call each iteration makes: pool, path, policy and optionally status_path, "
        "compensation_path and input, as a call step's. Each iteration has its own operation ID "
        "(<step's operation ID>/iter-<n>) and attempts.",
    )
    interval_seconds = serializers.FloatField(
        required=False,
        allow_null=True,
        help_text="repeat: the wait between an iteration whose until was false and the next (no worker "
        "is held meanwhile).",
    )
    max_iterations = serializers.IntegerField(
        required=False, allow_null=True, help_text="repeat: the most iterations (1 to 1000)."
    )
    on_exhausted = serializers.ChoiceField(
        choices=["hold", "fail", "continue"],
        required=False,
        allow_blank=True,
        help_text="repeat: after max_iterations without until holding: hold (default) for an operator, "
        "fail the step (the job compensates), or continue with the last iteration's output.",
    )
    when = _optional_text(
        1000,
        "A condition, in JMESPath (https://jmespath.org), over `input` (the job's input) and "
        "`results` (the outputs of the steps it depends on, by name): when false (false, null, empty), "
        "the step is skipped with the reason. Example: input.amount > `100`.",
    )
    run_if_skipped = serializers.BooleanField(
        required=False,
        help_text="Run even when every step it depends on was skipped (default: it is skipped too).",
    )
    input = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text="call, workflow: the `input` its remote (or child job) receives instead of the job's "
        "input and `results`: a JMESPath expression over `input`, `results` (and, in a fan-out, `item` "
        "and `index`), or a JSON template whose keys ending in `.$` hold such expressions, e.g. "
        '{"amount.$": "input.total", "currency": "EUR"}. Absent: the body carries `input` and `results`.',
    )
    output = _optional_text(
        1000,
        "call, workflow: which part of the answer becomes the step's output, in JMESPath over "
        "`output` (the answer), `input` and `results`, e.g. output.charge_id.",
    )
    for_each = _optional_text(
        1000,
        "call: fan out over the list this JMESPath expression yields (over `input` and "
        "`results`): each element is an item with its own operation ID, attempts and retries; its "
        "remote receives the element as `item` and its position as `index`.",
    )
    item_key = _optional_text(
        1000,
        "call with for_each: a JMESPath expression over `item` naming the item in its "
        "operation ID (<step's operation ID>:<key>); default: its index.",
    )
    max_parallel = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        help_text="call with for_each: the most items with a call in flight at once.",
    )
    join = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text='call with for_each: {"mode": "all" (default) | "at_least" | "any", "count": N}: how many '
        "items must succeed. When that can no longer happen, the items that succeeded are compensated.",
    )
    workflow = serializers.CharField(
        max_length=100,
        required=False,
        help_text="workflow: the workflow whose latest version runs as a child job; the step waits for it "
        "and its result is the step's output.",
    )
    concurrency = StepConcurrencySerializer(
        required=False,
        allow_null=True,
        help_text="call: at most `limit` calls of this step in flight at once per value of `key`; the "
        "others wait (status waiting, waiting_for kind concurrency), holding no worker.",
    )
    rate = RateSerializer(
        required=False,
        allow_null=True,
        help_text="call: at most `per_second` calls of this step started per value of `key`, `burst` at "
        "once; the others wait (waiting_for kind rate), holding no worker.",
    )

    def to_internal_value(self, data: Any) -> Any:
        # A call's pool, path and policy are required, as they were before steps had kinds.
        if isinstance(data, Mapping) and data.get("kind") in (None, "", StepDefinitionKind.CALL):
            missing = {
                key: ["This field may not be null." if key in data else "This field is required."]
                for key in ("pool", "path", "policy")
                if data.get(key) is None
            }
            if missing:
                raise serializers.ValidationError(missing)
        return super().to_internal_value(data)

    def to_representation(self, instance: StepDefinition) -> Any:
        data = {
            **self._kind_fields(instance),
            "when": instance.when,
            "run_if_skipped": instance.run_if_skipped,
        }
        if instance.kind in (StepDefinitionKind.CALL, StepDefinitionKind.WORKFLOW):
            data["input"] = instance.input_map
            data["output"] = instance.output_map
        if instance.kind == StepDefinitionKind.CALL:
            data["for_each"] = instance.for_each
            data["item_key"] = instance.item_key
            data["max_parallel"] = instance.max_parallel
            data["join"] = (
                {"mode": instance.join_mode, "count": instance.join_count} if instance.for_each else None
            )
            data["concurrency"] = instance.concurrency
            data["rate"] = instance.rate
        return data

    def _kind_fields(self, instance: StepDefinition) -> dict[str, Any]:
        base: dict[str, Any] = {"name": instance.name, "kind": instance.kind}
        if instance.kind == StepDefinitionKind.CALL:
            return {
                **base,
                "pool": instance.pool.name if instance.pool is not None else None,
                "path": instance.path,
                "status_path": instance.status_path,
                "compensation_path": instance.compensation_path,
                "cancel_path": instance.cancel_path or None,
                "depends_on": list(instance.depends_on or []),
                "policy": instance.call_policy.name,
            }
        if instance.kind == StepDefinitionKind.WORKFLOW:
            return {
                **base,
                "workflow": instance.child_workflow,
                "depends_on": list(instance.depends_on or []),
                "policy": instance.policy.name if instance.policy is not None else None,
            }
        if instance.kind == StepDefinitionKind.REPEAT:
            loop = instance.repeat or {}
            return {
                **base,
                "call": {
                    "pool": instance.pool.name if instance.pool is not None else None,
                    "path": instance.path,
                    "status_path": instance.status_path,
                    "compensation_path": instance.compensation_path,
                    "policy": instance.call_policy.name,
                    "input": instance.input_map,
                },
                "until": loop.get("until"),
                "interval_seconds": loop.get("interval_seconds"),
                "max_iterations": loop.get("max_iterations"),
                "on_exhausted": loop.get("on_exhausted"),
                "depends_on": list(instance.depends_on or []),
            }
        if instance.kind == StepDefinitionKind.TIMER:
            return {
                **base,
                "wait_seconds": instance.wait_seconds,
                "until": instance.until,
                "depends_on": list(instance.depends_on or []),
            }
        event_type = event_of_signal(instance.signal) if instance.kind == StepDefinitionKind.SIGNAL else None
        if event_type is not None:
            wait: dict[str, Any] = {"event": event_type, "match": instance.event_match}
        elif instance.kind == StepDefinitionKind.SIGNAL:
            wait = {"signal": instance.signal, "sender_group": instance.sender_group}
        else:
            wait = {"group": instance.group, "allow_self_approval": instance.allow_self_approval}
        wait["escalation"] = list(instance.escalation or [])
        return {
            **base,
            **wait,
            "timeout_seconds": instance.timeout_seconds,
            "on_timeout": instance.on_timeout,
            "default_output": instance.default_output,
            "depends_on": list(instance.depends_on or []),
            "policy": instance.policy.name if instance.policy is not None else None,
        }


class ConcurrencySerializer(StrictSerializer):
    """Flow control by key (scheduler.services.flow): at most `limit` live jobs of the workflow
    per value of `key`."""

    key = serializers.CharField(
        max_length=1000,
        help_text="An expression over the input, written as conditions are (`input.account`); a job "
        "whose key reads nothing is not limited.",
    )
    limit = serializers.IntegerField(min_value=1, max_value=10_000, help_text="Live jobs per key value.")
    on_limit = serializers.ChoiceField(
        choices=["queue", "cancel_newest", "cancel_in_progress"],
        default="queue",
        help_text="A job over the limit: waits (`queue`), is refused with a 409 naming the running job "
        "(`cancel_newest`), or cancels the oldest running one and waits for it (`cancel_in_progress`).",
    )


class DebounceSerializer(StrictSerializer):
    """Debounce of starts by key (scheduler.services.gates): a job waits `seconds` after its
    submission; a newer job of its key submitted meanwhile replaces it."""

    key = serializers.CharField(
        max_length=1000,
        help_text="An expression over the input (`input.document`); a job whose key reads nothing is "
        "not debounced.",
    )
    seconds = serializers.FloatField(
        help_text="The quiet period: how long after its submission a job starts unless replaced "
        "(above 0, at most 86400)."
    )
    max_seconds = serializers.FloatField(
        required=False,
        allow_null=True,
        help_text="The longest a chain of replacements waits, from its first submission (at least "
        "`seconds`, at most 604800; absent: no bound).",
    )


class ThrottleSerializer(StrictSerializer):
    """Throttle of starts by key (scheduler.services.gates): at most `limit` starts per
    `per_seconds` per key value; the others wait, in arrival order."""

    key = serializers.CharField(
        max_length=1000,
        help_text="An expression over the input (`input.account`); a job whose key reads nothing is "
        "not throttled.",
    )
    per_seconds = serializers.FloatField(help_text="The window, in seconds (above 0, at most 86400).")
    limit = serializers.IntegerField(
        min_value=1, max_value=10_000, help_text="Starts per window and key value."
    )


class TriggerSerializer(StrictSerializer):
    """An inbound event that starts a job of the workflow (scheduler.services.events): each
    event of its type that its `when` holds for starts one job of the latest version, submitted
    by the event's sender."""

    event = serializers.CharField(max_length=100, help_text="The event's type, e.g. order.placed.")
    when = serializers.CharField(
        max_length=1000,
        required=False,
        allow_null=True,
        allow_blank=True,
        help_text="A condition in JMESPath over `event` ({type, id, source, data}): when false, no job.",
    )
    input = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text="The job's input, as a step's `input` mapping over `event`: an expression, or a "
        'template whose keys ending in `.$` hold expressions ({"order.$": "event.data.order"}). '
        "Absent: the event's `data` (an object).",
    )
    business_key = serializers.CharField(
        max_length=1000,
        required=False,
        allow_null=True,
        allow_blank=True,
        help_text="The job's business key, in JMESPath over `event` (a string), e.g. event.data.order_id.",
    )


class WorkflowSerializer(StrictSerializer):
    """A workflow version as read, and as written to create one (POST): `name` and `steps` are
    required."""

    name = serializers.CharField(max_length=100)
    version = serializers.IntegerField(read_only=True)
    description = serializers.CharField(required=False, allow_blank=True, default="", max_length=10_000)
    deadline_seconds = serializers.FloatField(
        required=False, allow_null=True, default=None, help_text="Time limit of a whole job, if any."
    )
    sla_seconds = serializers.FloatField(
        required=False,
        allow_null=True,
        default=None,
        help_text="A job's service-level target, in seconds from submission (above 0), if any: a job "
        "likely to miss it is flagged at risk (`at_risk`, the event and alert `job_at_risk`). It stops "
        "nothing (deadline_seconds does).",
    )
    warn_fraction = serializers.FloatField(
        required=False,
        default=DEFAULT_WARN_FRACTION,
        help_text="In (0, 1]: a job not finished after this fraction of sla_seconds is at risk by the "
        "clock (default 0.8).",
    )
    input_schema = serializers.JSONField(
        required=False,
        allow_null=True,
        default=None,
        help_text="A JSON Schema (2020-12) every job's input must match (a 400 lists each error with "
        "its JSON pointer). It may refer ($ref) only inside itself.",
    )
    concurrency = ConcurrencySerializer(required=False, allow_null=True, default=None)
    debounce = DebounceSerializer(required=False, allow_null=True, default=None)
    throttle = ThrottleSerializer(required=False, allow_null=True, default=None)
    triggers = TriggerSerializer(
        many=True,
        required=False,
        allow_null=True,
        default=None,
        help_text="The inbound events (POST /api/v1/events/) that start a job of the latest version; "
        "null: none.",
    )
    steps = StepDefinitionSerializer(many=True)
    created_by = serializers.CharField(source="created_by.username", allow_null=True, read_only=True)
    created_at = serializers.DateTimeField(read_only=True)


class WorkflowReplaceSerializer(ReplaceMixin, WorkflowSerializer):
    """The next version (PUT) states description, deadline_seconds and steps; left out,
    input_schema, concurrency, debounce, throttle, triggers and sla_seconds are none and
    warn_fraction its default (PATCH keeps the latest version's). A workflow cannot be renamed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("input_schema", "concurrency", "debounce", "throttle", "triggers", "sla_seconds"):
            self.fields[name].required = False
            self.fields[name].default = None
        self.fields["warn_fraction"].required = False
        self.fields["warn_fraction"].default = DEFAULT_WARN_FRACTION


class WorkflowVersionSerializer(serializers.Serializer):
    version = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_INT, help_text="A past version (default: latest)."
    )
