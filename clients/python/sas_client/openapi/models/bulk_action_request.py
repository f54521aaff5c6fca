from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.action_enum import ActionEnum
from ..types import UNSET, Unset

T = TypeVar("T", bound="BulkActionRequest")


@_attrs_define
class BulkActionRequest:
    """Refuses keys it does not declare. Read-only fields are declared, so a representation read
    from the API can be sent back as it is.

    A null for an optional field means "not given" (clients that write absent values as null need
    not leave the key out); for a text or list field a replacement must state, it is the empty
    value.

        Attributes:
            action (ActionEnum): * `retry` - retry
                * `compensate` - compensate
                * `cancel` - cancel
            step_ids (list[int]): Steps from the Needs-attention list; compensate and cancel act on their jobs.
            reason (None | str | Unset): Why: recorded in the job's history with your name. Default: ''.
            dry_run (bool | Unset): Say what would happen to each item; change nothing. Default: False.
    """

    action: ActionEnum
    step_ids: list[int]
    reason: None | str | Unset = ""
    dry_run: bool | Unset = False

    def to_dict(self) -> dict[str, Any]:
        action = self.action.value

        step_ids = self.step_ids

        reason: None | str | Unset
        if isinstance(self.reason, Unset):
            reason = UNSET
        else:
            reason = self.reason

        dry_run = self.dry_run

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "action": action,
                "step_ids": step_ids,
            }
        )
        if reason is not UNSET:
            field_dict["reason"] = reason
        if dry_run is not UNSET:
            field_dict["dry_run"] = dry_run

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        action = ActionEnum(d.pop("action"))

        step_ids = cast(list[int], d.pop("step_ids"))

        def _parse_reason(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        reason = _parse_reason(d.pop("reason", UNSET))

        dry_run = d.pop("dry_run", UNSET)

        bulk_action_request = cls(
            action=action,
            step_ids=step_ids,
            reason=reason,
            dry_run=dry_run,
        )

        return bulk_action_request
