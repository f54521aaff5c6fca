from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="ApprovalDecisionRequest")


@_attrs_define
class ApprovalDecisionRequest:
    """Refuses keys it does not declare. Read-only fields are declared, so a representation read
    from the API can be sent back as it is.

    A null for an optional field means "not given" (clients that write absent values as null need
    not leave the key out); for a text or list field a replacement must state, it is the empty
    value.

        Attributes:
            comment (str | Unset): Why: recorded with the decision.
    """

    comment: str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        comment = self.comment

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if comment is not UNSET:
            field_dict["comment"] = comment

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        comment = d.pop("comment", UNSET)

        approval_decision_request = cls(
            comment=comment,
        )

        return approval_decision_request
