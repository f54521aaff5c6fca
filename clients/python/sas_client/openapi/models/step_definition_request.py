from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.blank_enum import BlankEnum
from ..models.on_timeout_enum import OnTimeoutEnum
from ..models.step_definition_kind_enum import StepDefinitionKindEnum
from ..types import UNSET, Unset

T = TypeVar("T", bound="StepDefinitionRequest")


@_attrs_define
class StepDefinitionRequest:
    """One step of a workflow (the same shape is read and written): a call (no `kind`, or
    `call`), or a wait: `signal`, `approval` or `timer`.

        Attributes:
            name (str):
            kind (StepDefinitionKindEnum | Unset): * `call` - Call
                * `signal` - Wait for a signal
                * `approval` - Wait for an approval
                * `timer` - Wait for a time
                * `workflow` - Run a sub-workflow
            pool (str | Unset): call: the pool's name.
            path (str | Unset): call: the path POSTed under the endpoint (HTTP), a queue name, or a registered callable.
            status_path (str | Unset): call: where to ask whether operation {operation_id} happened (GET: 200 yes, 404 no).
            compensation_path (str | Unset): call: the action that undoes this one.
            depends_on (list[str] | Unset):
            policy (str | Unset): Remediation policy name (required for a call; for a signal or approval, its on_exhausted
                decides what a rejection or a failing timeout does to the job).
            signal (str | Unset): signal: the name it waits for.
            group (str | Unset): approval: the group whose members may decide (default: operators).
            timeout_seconds (float | None | Unset): signal, approval: how long to wait (default: for ever).
            on_timeout (BlankEnum | OnTimeoutEnum | Unset): signal, approval: hold (default) for an operator, fail the step
                (its policy then decides the job), or continue with default_output.

                * `hold` - Hold for an operator
                * `fail` - Fail the step
                * `continue` - Continue with the default output
            default_output (Any | Unset): The step's output when on_timeout is continue.
            wait_seconds (float | None | Unset): timer: wait this long once the step is ready.
            until (str | Unset): timer: wait until the ISO 8601 time at this field: input.<field> or <step>.<field>.
            when (str | Unset): A condition, in JMESPath (https://jmespath.org), over `input` (the job's input) and
                `results` (the outputs of the steps it depends on, by name): when false (false, null, empty), the step is
                skipped with the reason. Example: input.amount > `100`.
            run_if_skipped (bool | Unset): Run even when every step it depends on was skipped (default: it is skipped too).
            input_ (Any | Unset): call, workflow: the `input` its remote (or child job) receives instead of the job's input
                and `results`: a JMESPath expression over `input`, `results` (and, in a fan-out, `item` and `index`), or a JSON
                template whose keys ending in `.$` hold such expressions, e.g. {"amount.$": "input.total", "currency": "EUR"}.
                Absent: the body carries `input` and `results`.
            output (str | Unset): call, workflow: which part of the answer becomes the step's output, in JMESPath over
                `output` (the answer), `input` and `results`, e.g. output.charge_id.
            for_each (str | Unset): call: fan out over the list this JMESPath expression yields (over `input` and
                `results`): each element is an item with its own operation ID, attempts and retries; its remote receives the
                element as `item` and its position as `index`.
            item_key (str | Unset): call with for_each: a JMESPath expression over `item` naming the item in its operation
                ID (<step's operation ID>:<key>); default: its index.
            max_parallel (int | None | Unset): call with for_each: the most items with a call in flight at once.
            join (Any | Unset): call with for_each: {"mode": "all" (default) | "at_least" | "any", "count": N}: how many
                items must succeed. When that can no longer happen, the items that succeeded are compensated.
            workflow (str | Unset): workflow: the workflow whose latest version runs as a child job; the step waits for it
                and its result is the step's output.
    """

    name: str
    kind: StepDefinitionKindEnum | Unset = UNSET
    pool: str | Unset = UNSET
    path: str | Unset = UNSET
    status_path: str | Unset = UNSET
    compensation_path: str | Unset = UNSET
    depends_on: list[str] | Unset = UNSET
    policy: str | Unset = UNSET
    signal: str | Unset = UNSET
    group: str | Unset = UNSET
    timeout_seconds: float | None | Unset = UNSET
    on_timeout: BlankEnum | OnTimeoutEnum | Unset = UNSET
    default_output: Any | Unset = UNSET
    wait_seconds: float | None | Unset = UNSET
    until: str | Unset = UNSET
    when: str | Unset = UNSET
    run_if_skipped: bool | Unset = UNSET
    input_: Any | Unset = UNSET
    output: str | Unset = UNSET
    for_each: str | Unset = UNSET
    item_key: str | Unset = UNSET
    max_parallel: int | None | Unset = UNSET
    join: Any | Unset = UNSET
    workflow: str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        kind: str | Unset = UNSET
        if not isinstance(self.kind, Unset):
            kind = self.kind.value

        pool = self.pool

        path = self.path

        status_path = self.status_path

        compensation_path = self.compensation_path

        depends_on: list[str] | Unset = UNSET
        if not isinstance(self.depends_on, Unset):
            depends_on = self.depends_on

        policy = self.policy

        signal = self.signal

        group = self.group

        timeout_seconds: float | None | Unset
        if isinstance(self.timeout_seconds, Unset):
            timeout_seconds = UNSET
        else:
            timeout_seconds = self.timeout_seconds

        on_timeout: str | Unset
        if isinstance(self.on_timeout, Unset):
            on_timeout = UNSET
        elif isinstance(self.on_timeout, OnTimeoutEnum):
            on_timeout = self.on_timeout.value
        else:
            on_timeout = self.on_timeout.value

        default_output = self.default_output

        wait_seconds: float | None | Unset
        if isinstance(self.wait_seconds, Unset):
            wait_seconds = UNSET
        else:
            wait_seconds = self.wait_seconds

        until = self.until

        when = self.when

        run_if_skipped = self.run_if_skipped

        input_ = self.input_

        output = self.output

        for_each = self.for_each

        item_key = self.item_key

        max_parallel: int | None | Unset
        if isinstance(self.max_parallel, Unset):
            max_parallel = UNSET
        else:
            max_parallel = self.max_parallel

        join = self.join

        workflow = self.workflow

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "name": name,
            }
        )
        if kind is not UNSET:
            field_dict["kind"] = kind
        if pool is not UNSET:
            field_dict["pool"] = pool
        if path is not UNSET:
            field_dict["path"] = path
        if status_path is not UNSET:
            field_dict["status_path"] = status_path
        if compensation_path is not UNSET:
            field_dict["compensation_path"] = compensation_path
        if depends_on is not UNSET:
            field_dict["depends_on"] = depends_on
        if policy is not UNSET:
            field_dict["policy"] = policy
        if signal is not UNSET:
            field_dict["signal"] = signal
        if group is not UNSET:
            field_dict["group"] = group
        if timeout_seconds is not UNSET:
            field_dict["timeout_seconds"] = timeout_seconds
        if on_timeout is not UNSET:
            field_dict["on_timeout"] = on_timeout
        if default_output is not UNSET:
            field_dict["default_output"] = default_output
        if wait_seconds is not UNSET:
            field_dict["wait_seconds"] = wait_seconds
        if until is not UNSET:
            field_dict["until"] = until
        if when is not UNSET:
            field_dict["when"] = when
        if run_if_skipped is not UNSET:
            field_dict["run_if_skipped"] = run_if_skipped
        if input_ is not UNSET:
            field_dict["input"] = input_
        if output is not UNSET:
            field_dict["output"] = output
        if for_each is not UNSET:
            field_dict["for_each"] = for_each
        if item_key is not UNSET:
            field_dict["item_key"] = item_key
        if max_parallel is not UNSET:
            field_dict["max_parallel"] = max_parallel
        if join is not UNSET:
            field_dict["join"] = join
        if workflow is not UNSET:
            field_dict["workflow"] = workflow

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        name = d.pop("name")

        _kind = d.pop("kind", UNSET)
        kind: StepDefinitionKindEnum | Unset
        if isinstance(_kind, Unset):
            kind = UNSET
        else:
            kind = StepDefinitionKindEnum(_kind)

        pool = d.pop("pool", UNSET)

        path = d.pop("path", UNSET)

        status_path = d.pop("status_path", UNSET)

        compensation_path = d.pop("compensation_path", UNSET)

        depends_on = cast(list[str], d.pop("depends_on", UNSET))

        policy = d.pop("policy", UNSET)

        signal = d.pop("signal", UNSET)

        group = d.pop("group", UNSET)

        def _parse_timeout_seconds(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        timeout_seconds = _parse_timeout_seconds(d.pop("timeout_seconds", UNSET))

        def _parse_on_timeout(data: object) -> BlankEnum | OnTimeoutEnum | Unset:
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                on_timeout_type_0 = OnTimeoutEnum(data)

                return on_timeout_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            if not isinstance(data, str):
                raise TypeError()
            on_timeout_type_1 = BlankEnum(data)

            return on_timeout_type_1

        on_timeout = _parse_on_timeout(d.pop("on_timeout", UNSET))

        default_output = d.pop("default_output", UNSET)

        def _parse_wait_seconds(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        wait_seconds = _parse_wait_seconds(d.pop("wait_seconds", UNSET))

        until = d.pop("until", UNSET)

        when = d.pop("when", UNSET)

        run_if_skipped = d.pop("run_if_skipped", UNSET)

        input_ = d.pop("input", UNSET)

        output = d.pop("output", UNSET)

        for_each = d.pop("for_each", UNSET)

        item_key = d.pop("item_key", UNSET)

        def _parse_max_parallel(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_parallel = _parse_max_parallel(d.pop("max_parallel", UNSET))

        join = d.pop("join", UNSET)

        workflow = d.pop("workflow", UNSET)

        step_definition_request = cls(
            name=name,
            kind=kind,
            pool=pool,
            path=path,
            status_path=status_path,
            compensation_path=compensation_path,
            depends_on=depends_on,
            policy=policy,
            signal=signal,
            group=group,
            timeout_seconds=timeout_seconds,
            on_timeout=on_timeout,
            default_output=default_output,
            wait_seconds=wait_seconds,
            until=until,
            when=when,
            run_if_skipped=run_if_skipped,
            input_=input_,
            output=output,
            for_each=for_each,
            item_key=item_key,
            max_parallel=max_parallel,
            join=join,
            workflow=workflow,
        )

        return step_definition_request
