from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.blank_enum import BlankEnum
from ..models.outcome_enum import OutcomeEnum
from ..models.step_status_enum import StepStatusEnum

T = TypeVar("T", bound="StepItem")


@_attrs_define
class StepItem:
    """One item of a fan-out step: its element, position, operation ID and fate.

    Attributes:
        index (int): Its position in the list.
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
        item (Any): The element, as its remote receives it (`item`).
        output (Any):
        error (str):
        reason (None | str): Why it is in its status (why it was skipped).
        attempt_count (int): Dispatches so far.
        calls (int):
        last_outcome (BlankEnum | OutcomeEnum): Outcome of the last finished attempt.

            * `succeeded` - Succeeded
            * `business_failure` - Business failure
            * `transient_failure` - Transient failure
            * `no_answer` - No answer
            * `not_happened` - Did not happen
            * `superseded` - Superseded
        deadline (datetime.datetime | None):
        compensation (None | str): The status of its undo, when it was undone (null otherwise).
        created_at (datetime.datetime):
        updated_at (datetime.datetime):
        finished_at (datetime.datetime | None):
    """

    index: int
    status: StepStatusEnum
    operation_id: str
    item: Any
    output: Any
    error: str
    reason: None | str
    attempt_count: int
    calls: int
    last_outcome: BlankEnum | OutcomeEnum
    deadline: datetime.datetime | None
    compensation: None | str
    created_at: datetime.datetime
    updated_at: datetime.datetime
    finished_at: datetime.datetime | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        index = self.index

        status = self.status.value

        operation_id = self.operation_id

        item = self.item

        output = self.output

        error = self.error

        reason: None | str
        reason = self.reason

        attempt_count = self.attempt_count

        calls = self.calls

        last_outcome: str
        if isinstance(self.last_outcome, OutcomeEnum):
            last_outcome = self.last_outcome.value
        else:
            last_outcome = self.last_outcome.value

        deadline: None | str
        if isinstance(self.deadline, datetime.datetime):
            deadline = self.deadline.isoformat()
        else:
            deadline = self.deadline

        compensation: None | str
        compensation = self.compensation

        created_at = self.created_at.isoformat()

        updated_at = self.updated_at.isoformat()

        finished_at: None | str
        if isinstance(self.finished_at, datetime.datetime):
            finished_at = self.finished_at.isoformat()
        else:
            finished_at = self.finished_at

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "index": index,
                "status": status,
                "operation_id": operation_id,
                "item": item,
                "output": output,
                "error": error,
                "reason": reason,
                "attempt_count": attempt_count,
                "calls": calls,
                "last_outcome": last_outcome,
                "deadline": deadline,
                "compensation": compensation,
                "created_at": created_at,
                "updated_at": updated_at,
                "finished_at": finished_at,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        index = d.pop("index")

        status = StepStatusEnum(d.pop("status"))

        operation_id = d.pop("operation_id")

        item = d.pop("item")

        output = d.pop("output")

        error = d.pop("error")

        def _parse_reason(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        reason = _parse_reason(d.pop("reason"))

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

        def _parse_compensation(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        compensation = _parse_compensation(d.pop("compensation"))

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

        step_item = cls(
            index=index,
            status=status,
            operation_id=operation_id,
            item=item,
            output=output,
            error=error,
            reason=reason,
            attempt_count=attempt_count,
            calls=calls,
            last_outcome=last_outcome,
            deadline=deadline,
            compensation=compensation,
            created_at=created_at,
            updated_at=updated_at,
            finished_at=finished_at,
        )

        step_item.additional_properties = d
        return step_item

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
