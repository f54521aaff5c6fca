from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast
from uuid import UUID

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.blank_enum import BlankEnum
from ..models.outcome_enum import OutcomeEnum
from ..models.step_kind_enum import StepKindEnum
from ..models.step_status_enum import StepStatusEnum

if TYPE_CHECKING:
    from ..models.attempt import Attempt
    from ..models.step_action_result_items_type_0 import StepActionResultItemsType0
    from ..models.waiting_for import WaitingFor


T = TypeVar("T", bound="StepActionResult")


@_attrs_define
class StepActionResult:
    """A step after an operator action; `job` is the id of its job.

    Attributes:
        job (UUID):
        id (int):
        name (str):
        kind (StepKindEnum): * `action` - Action
            * `compensation` - Compensation
            * `item` - Item
        compensates (int | None):
        status (StepStatusEnum): * `pending` - Pending
            * `waiting` - Waiting
            * `dispatched` - Dispatched
            * `attempt_failed` - Attempt failed
            * `unknown` - Outcome unknown
            * `retry_wait` - Waiting to retry
            * `held` - Held
            * `succeeded` - Succeeded
            * `failed` - Failed
            * `skipped` - Skipped
            * `compensated` - Compensated
        operation_id (str):
        attempt_count (int): Dispatches so far (the fencing number).
        calls (int):
        last_outcome (BlankEnum | OutcomeEnum): Outcome of the last finished attempt.

            * `succeeded` - Succeeded
            * `business_failure` - Business failure
            * `transient_failure` - Transient failure
            * `no_answer` - No answer
            * `not_happened` - Did not happen
            * `superseded` - Superseded
        type_ (str): call, workflow (a sub-workflow step), or what the step waits for: signal, approval, timer.
        pool (None | str): null for a wait step.
        waiting_for (None | WaitingFor): While the step is waiting: what for (null otherwise).
        items (None | StepActionResultItemsType0): A fan-out step's items: how many in all (`total`) and in each status
            they are in (e.g. `succeeded`); null for any other step. The items themselves: GET
            /api/v1/jobs/{id}/steps/{step_name}/items/.
        deadline (datetime.datetime | None):
        not_before (datetime.datetime | None):
        output (Any):
        error (str):
        reason (None | str): Why the step is in its status when that alone does not say (why it was skipped).
        input_override (Any):
        reused_from (int | None):
        child_job (None | UUID): A sub-workflow step: the child job it started (null before it starts, and for other
            steps).
        created_at (datetime.datetime):
        updated_at (datetime.datetime):
        finished_at (datetime.datetime | None):
        attempts (list[Attempt]):
    """

    job: UUID
    id: int
    name: str
    kind: StepKindEnum
    compensates: int | None
    status: StepStatusEnum
    operation_id: str
    attempt_count: int
    calls: int
    last_outcome: BlankEnum | OutcomeEnum
    type_: str
    pool: None | str
    waiting_for: None | WaitingFor
    items: None | StepActionResultItemsType0
    deadline: datetime.datetime | None
    not_before: datetime.datetime | None
    output: Any
    error: str
    reason: None | str
    input_override: Any
    reused_from: int | None
    child_job: None | UUID
    created_at: datetime.datetime
    updated_at: datetime.datetime
    finished_at: datetime.datetime | None
    attempts: list[Attempt]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.step_action_result_items_type_0 import StepActionResultItemsType0
        from ..models.waiting_for import WaitingFor

        job = str(self.job)

        id = self.id

        name = self.name

        kind = self.kind.value

        compensates: int | None
        compensates = self.compensates

        status = self.status.value

        operation_id = self.operation_id

        attempt_count = self.attempt_count

        calls = self.calls

        last_outcome: str
        if isinstance(self.last_outcome, OutcomeEnum):
            last_outcome = self.last_outcome.value
        else:
            last_outcome = self.last_outcome.value

        type_ = self.type_

        pool: None | str
        pool = self.pool

        waiting_for: dict[str, Any] | None
        if isinstance(self.waiting_for, WaitingFor):
            waiting_for = self.waiting_for.to_dict()
        else:
            waiting_for = self.waiting_for

        items: dict[str, Any] | None
        if isinstance(self.items, StepActionResultItemsType0):
            items = self.items.to_dict()
        else:
            items = self.items

        deadline: None | str
        if isinstance(self.deadline, datetime.datetime):
            deadline = self.deadline.isoformat()
        else:
            deadline = self.deadline

        not_before: None | str
        if isinstance(self.not_before, datetime.datetime):
            not_before = self.not_before.isoformat()
        else:
            not_before = self.not_before

        output = self.output

        error = self.error

        reason: None | str
        reason = self.reason

        input_override = self.input_override

        reused_from: int | None
        reused_from = self.reused_from

        child_job: None | str
        if isinstance(self.child_job, UUID):
            child_job = str(self.child_job)
        else:
            child_job = self.child_job

        created_at = self.created_at.isoformat()

        updated_at = self.updated_at.isoformat()

        finished_at: None | str
        if isinstance(self.finished_at, datetime.datetime):
            finished_at = self.finished_at.isoformat()
        else:
            finished_at = self.finished_at

        attempts = []
        for attempts_item_data in self.attempts:
            attempts_item = attempts_item_data.to_dict()
            attempts.append(attempts_item)

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "job": job,
                "id": id,
                "name": name,
                "kind": kind,
                "compensates": compensates,
                "status": status,
                "operation_id": operation_id,
                "attempt_count": attempt_count,
                "calls": calls,
                "last_outcome": last_outcome,
                "type": type_,
                "pool": pool,
                "waiting_for": waiting_for,
                "items": items,
                "deadline": deadline,
                "not_before": not_before,
                "output": output,
                "error": error,
                "reason": reason,
                "input_override": input_override,
                "reused_from": reused_from,
                "child_job": child_job,
                "created_at": created_at,
                "updated_at": updated_at,
                "finished_at": finished_at,
                "attempts": attempts,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.attempt import Attempt
        from ..models.step_action_result_items_type_0 import StepActionResultItemsType0
        from ..models.waiting_for import WaitingFor

        d = dict(src_dict)
        job = UUID(d.pop("job"))

        id = d.pop("id")

        name = d.pop("name")

        kind = StepKindEnum(d.pop("kind"))

        def _parse_compensates(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        compensates = _parse_compensates(d.pop("compensates"))

        status = StepStatusEnum(d.pop("status"))

        operation_id = d.pop("operation_id")

        attempt_count = d.pop("attempt_count")

        calls = d.pop("calls")

        def _parse_last_outcome(data: object) -> BlankEnum | OutcomeEnum:
            try:
                if not isinstance(data, str):
                    raise TypeError()
                last_outcome_type_0 = OutcomeEnum(data)

                return last_outcome_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            if not isinstance(data, str):
                raise TypeError()
            last_outcome_type_1 = BlankEnum(data)

            return last_outcome_type_1

        last_outcome = _parse_last_outcome(d.pop("last_outcome"))

        type_ = d.pop("type")

        def _parse_pool(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        pool = _parse_pool(d.pop("pool"))

        def _parse_waiting_for(data: object) -> None | WaitingFor:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                waiting_for_type_0 = WaitingFor.from_dict(data)

                return waiting_for_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | WaitingFor, data)

        waiting_for = _parse_waiting_for(d.pop("waiting_for"))

        def _parse_items(data: object) -> None | StepActionResultItemsType0:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                items_type_0 = StepActionResultItemsType0.from_dict(data)

                return items_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | StepActionResultItemsType0, data)

        items = _parse_items(d.pop("items"))

        def _parse_deadline(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                deadline_type_0 = datetime.datetime.fromisoformat(data)

                return deadline_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        deadline = _parse_deadline(d.pop("deadline"))

        def _parse_not_before(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                not_before_type_0 = datetime.datetime.fromisoformat(data)

                return not_before_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        not_before = _parse_not_before(d.pop("not_before"))

        output = d.pop("output")

        error = d.pop("error")

        def _parse_reason(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        reason = _parse_reason(d.pop("reason"))

        input_override = d.pop("input_override")

        def _parse_reused_from(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        reused_from = _parse_reused_from(d.pop("reused_from"))

        def _parse_child_job(data: object) -> None | UUID:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                child_job_type_0 = UUID(data)

                return child_job_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | UUID, data)

        child_job = _parse_child_job(d.pop("child_job"))

        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        updated_at = datetime.datetime.fromisoformat(d.pop("updated_at"))

        def _parse_finished_at(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                finished_at_type_0 = datetime.datetime.fromisoformat(data)

                return finished_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        finished_at = _parse_finished_at(d.pop("finished_at"))

        attempts = []
        _attempts = d.pop("attempts")
        for attempts_item_data in _attempts:
            attempts_item = Attempt.from_dict(attempts_item_data)

            attempts.append(attempts_item)

        step_action_result = cls(
            job=job,
            id=id,
            name=name,
            kind=kind,
            compensates=compensates,
            status=status,
            operation_id=operation_id,
            attempt_count=attempt_count,
            calls=calls,
            last_outcome=last_outcome,
            type_=type_,
            pool=pool,
            waiting_for=waiting_for,
            items=items,
            deadline=deadline,
            not_before=not_before,
            output=output,
            error=error,
            reason=reason,
            input_override=input_override,
            reused_from=reused_from,
            child_job=child_job,
            created_at=created_at,
            updated_at=updated_at,
            finished_at=finished_at,
            attempts=attempts,
        )

        step_action_result.additional_properties = d
        return step_action_result

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
