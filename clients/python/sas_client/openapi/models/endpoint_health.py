from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="EndpointHealth")


@_attrs_define
class EndpointHealth:
    """
    Attributes:
        url (str):
        enabled (bool):
        recent_calls (int):
        bad_calls (int):
        circuit_open (bool):
        circuit_open_until (datetime.datetime | None):
    """

    url: str
    enabled: bool
    recent_calls: int
    bad_calls: int
    circuit_open: bool
    circuit_open_until: datetime.datetime | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        url = self.url

        enabled = self.enabled

        recent_calls = self.recent_calls

        bad_calls = self.bad_calls

        circuit_open = self.circuit_open

        circuit_open_until: None | str
        if isinstance(self.circuit_open_until, datetime.datetime):
            circuit_open_until = self.circuit_open_until.isoformat()
        else:
            circuit_open_until = self.circuit_open_until

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "url": url,
                "enabled": enabled,
                "recent_calls": recent_calls,
                "bad_calls": bad_calls,
                "circuit_open": circuit_open,
                "circuit_open_until": circuit_open_until,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        url = d.pop("url")

        enabled = d.pop("enabled")

        recent_calls = d.pop("recent_calls")

        bad_calls = d.pop("bad_calls")

        circuit_open = d.pop("circuit_open")

        def _parse_circuit_open_until(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                circuit_open_until_type_0 = datetime.datetime.fromisoformat(data)

                return circuit_open_until_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        circuit_open_until = _parse_circuit_open_until(d.pop("circuit_open_until"))

        endpoint_health = cls(
            url=url,
            enabled=enabled,
            recent_calls=recent_calls,
            bad_calls=bad_calls,
            circuit_open=circuit_open,
            circuit_open_until=circuit_open_until,
        )

        endpoint_health.additional_properties = d
        return endpoint_health

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
