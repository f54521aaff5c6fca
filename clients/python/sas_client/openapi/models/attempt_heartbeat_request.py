from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="AttemptHeartbeatRequest")


@_attrs_define
class AttemptHeartbeatRequest:
    """A heartbeat a remote POSTs while it works on an accepted call.

    Attributes:
        details (Any | Unset): Any JSON (at most 16 KiB): how far the work got. Kept on the attempt, and sent to the
            next attempt of the same operation as `heartbeat_details`. Absent: the attempt keeps the details of its last
            heartbeat that had some.
    """

    details: Any | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        details = self.details

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if details is not UNSET:
            field_dict["details"] = details

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        details = d.pop("details", UNSET)

        attempt_heartbeat_request = cls(
            details=details,
        )

        return attempt_heartbeat_request
