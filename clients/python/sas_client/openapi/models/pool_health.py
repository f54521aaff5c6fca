from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.endpoint_health import EndpointHealth


T = TypeVar("T", bound="PoolHealth")


@_attrs_define
class PoolHealth:
    """
    Attributes:
        name (str):
        kind (str):
        alternate (str):
        endpoints (list[EndpointHealth]):
    """

    name: str
    kind: str
    alternate: str
    endpoints: list[EndpointHealth]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        kind = self.kind

        alternate = self.alternate

        endpoints = []
        for endpoints_item_data in self.endpoints:
            endpoints_item = endpoints_item_data.to_dict()
            endpoints.append(endpoints_item)

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "name": name,
                "kind": kind,
                "alternate": alternate,
                "endpoints": endpoints,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.endpoint_health import EndpointHealth

        d = dict(src_dict)
        name = d.pop("name")

        kind = d.pop("kind")

        alternate = d.pop("alternate")

        endpoints = []
        _endpoints = d.pop("endpoints")
        for endpoints_item_data in _endpoints:
            endpoints_item = EndpointHealth.from_dict(endpoints_item_data)

            endpoints.append(endpoints_item)

        pool_health = cls(
            name=name,
            kind=kind,
            alternate=alternate,
            endpoints=endpoints,
        )

        pool_health.additional_properties = d
        return pool_health

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
