from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="LastEvent")


@_attrs_define
class LastEvent:
    """
    Attributes:
        kind (str):
        reason (str):
        source (str):
        actor (None | str):
        created_at (datetime.datetime):
    """

    kind: str
    reason: str
    source: str
    actor: None | str
    created_at: datetime.datetime
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        kind = self.kind

        reason = self.reason

        source = self.source

        actor: None | str
        actor = self.actor

        created_at = self.created_at.isoformat()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "kind": kind,
                "reason": reason,
                "source": source,
                "actor": actor,
                "created_at": created_at,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        kind = d.pop("kind")

        reason = d.pop("reason")

        source = d.pop("source")

        def _parse_actor(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        actor = _parse_actor(d.pop("actor"))

        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        last_event = cls(
            kind=kind,
            reason=reason,
            source=source,
            actor=actor,
            created_at=created_at,
        )

        last_event.additional_properties = d
        return last_event

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
