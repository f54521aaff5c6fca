from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="Endpoint")


@_attrs_define
class Endpoint:
    """An endpoint as read: its secret header value is never shown.

    Attributes:
        url (str):
        enabled (bool):
        secret_header_name (str):
        secret_header_set (bool): Whether a secret header value is stored.
        circuit_open_until (datetime.datetime | None): While in the future, dispatch avoids this endpoint.
        recent_calls (int): Finished calls looked at by the circuit breaker.
        recent_bad (int): Of those, transient failures and no answers.
    """

    url: str
    enabled: bool
    secret_header_name: str
    secret_header_set: bool
    circuit_open_until: datetime.datetime | None
    recent_calls: int
    recent_bad: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        url = self.url

        enabled = self.enabled

        secret_header_name = self.secret_header_name

        secret_header_set = self.secret_header_set

        circuit_open_until: None | str
        if isinstance(self.circuit_open_until, datetime.datetime):
            circuit_open_until = self.circuit_open_until.isoformat()
        else:
            circuit_open_until = self.circuit_open_until

        recent_calls = self.recent_calls

        recent_bad = self.recent_bad

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "url": url,
                "enabled": enabled,
                "secret_header_name": secret_header_name,
                "secret_header_set": secret_header_set,
                "circuit_open_until": circuit_open_until,
                "recent_calls": recent_calls,
                "recent_bad": recent_bad,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        url = d.pop("url")

        enabled = d.pop("enabled")

        secret_header_name = d.pop("secret_header_name")

        secret_header_set = d.pop("secret_header_set")

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

        recent_calls = d.pop("recent_calls")

        recent_bad = d.pop("recent_bad")

        endpoint = cls(
            url=url,
            enabled=enabled,
            secret_header_name=secret_header_name,
            secret_header_set=secret_header_set,
            circuit_open_until=circuit_open_until,
            recent_calls=recent_calls,
            recent_bad=recent_bad,
        )

        endpoint.additional_properties = d
        return endpoint

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
