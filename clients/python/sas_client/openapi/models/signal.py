from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="Signal")


@_attrs_define
class Signal:
    """
    Attributes:
        id (int):
        name (str):
        payload (Any):
        sender (None | str): Who sent it.
        created_at (datetime.datetime):
        consumed_by (None | str): The step that consumed it; null while it waits for one.
        consumed_at (datetime.datetime | None):
    """

    id: int
    name: str
    payload: Any
    sender: None | str
    created_at: datetime.datetime
    consumed_by: None | str
    consumed_at: datetime.datetime | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        id = self.id

        name = self.name

        payload = self.payload

        sender: None | str
        sender = self.sender

        created_at = self.created_at.isoformat()

        consumed_by: None | str
        consumed_by = self.consumed_by

        consumed_at: None | str
        if isinstance(self.consumed_at, datetime.datetime):
            consumed_at = self.consumed_at.isoformat()
        else:
            consumed_at = self.consumed_at

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "id": id,
                "name": name,
                "payload": payload,
                "sender": sender,
                "created_at": created_at,
                "consumed_by": consumed_by,
                "consumed_at": consumed_at,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        id = d.pop("id")

        name = d.pop("name")

        payload = d.pop("payload")

        def _parse_sender(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        sender = _parse_sender(d.pop("sender"))

        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        def _parse_consumed_by(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        consumed_by = _parse_consumed_by(d.pop("consumed_by"))

        def _parse_consumed_at(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                consumed_at_type_0 = datetime.datetime.fromisoformat(data)

                return consumed_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        consumed_at = _parse_consumed_at(d.pop("consumed_at"))

        signal = cls(
            id=id,
            name=name,
            payload=payload,
            sender=sender,
            created_at=created_at,
            consumed_by=consumed_by,
            consumed_at=consumed_at,
        )

        signal.additional_properties = d
        return signal

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
