from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="SignalSendRequest")


@_attrs_define
class SignalSendRequest:
    """A signal sent to a job: a step waiting for its name takes it (now, or when it starts
    waiting) and its payload becomes the step's output.

        Attributes:
            name (str): The signal's name.
            payload (Any | Unset): Any JSON: the output of the step that consumes it.
    """

    name: str
    payload: Any | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        payload = self.payload

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "name": name,
            }
        )
        if payload is not UNSET:
            field_dict["payload"] = payload

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        name = d.pop("name")

        payload = d.pop("payload", UNSET)

        signal_send_request = cls(
            name=name,
            payload=payload,
        )

        return signal_send_request
