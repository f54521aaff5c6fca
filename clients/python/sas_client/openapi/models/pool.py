from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.agent_kind_enum import AgentKindEnum

if TYPE_CHECKING:
    from ..models.endpoint import Endpoint


T = TypeVar("T", bound="Pool")


@_attrs_define
class Pool:
    """
    Attributes:
        name (str):
        kind (AgentKindEnum): * `http` - HTTP
            * `python` - Python callable
            * `queue` - Message queue
        alternate (None | str): Pool a step may be reassigned to.
        max_in_flight (int | None): Calls in flight at most (null: no limit).
        max_per_second (float | None): Calls started per second at most (null: no limit).
        endpoints (list[Endpoint]):
        created_at (datetime.datetime):
        updated_at (datetime.datetime):
    """

    name: str
    kind: AgentKindEnum
    alternate: None | str
    max_in_flight: int | None
    max_per_second: float | None
    endpoints: list[Endpoint]
    created_at: datetime.datetime
    updated_at: datetime.datetime
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        kind = self.kind.value

        alternate: None | str
        alternate = self.alternate

        max_in_flight: int | None
        max_in_flight = self.max_in_flight

        max_per_second: float | None
        max_per_second = self.max_per_second

        endpoints = []
        for endpoints_item_data in self.endpoints:
            endpoints_item = endpoints_item_data.to_dict()
            endpoints.append(endpoints_item)

        created_at = self.created_at.isoformat()

        updated_at = self.updated_at.isoformat()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "name": name,
                "kind": kind,
                "alternate": alternate,
                "max_in_flight": max_in_flight,
                "max_per_second": max_per_second,
                "endpoints": endpoints,
                "created_at": created_at,
                "updated_at": updated_at,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.endpoint import Endpoint

        d = dict(src_dict)
        name = d.pop("name")

        kind = AgentKindEnum(d.pop("kind"))

        def _parse_alternate(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        alternate = _parse_alternate(d.pop("alternate"))

        def _parse_max_in_flight(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        max_in_flight = _parse_max_in_flight(d.pop("max_in_flight"))

        def _parse_max_per_second(data: object) -> float | None:
            if data is None:
                return data
            return cast(float | None, data)

        max_per_second = _parse_max_per_second(d.pop("max_per_second"))

        endpoints = []
        _endpoints = d.pop("endpoints")
        for endpoints_item_data in _endpoints:
            endpoints_item = Endpoint.from_dict(endpoints_item_data)

            endpoints.append(endpoints_item)

        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        updated_at = datetime.datetime.fromisoformat(d.pop("updated_at"))

        pool = cls(
            name=name,
            kind=kind,
            alternate=alternate,
            max_in_flight=max_in_flight,
            max_per_second=max_per_second,
            endpoints=endpoints,
            created_at=created_at,
            updated_at=updated_at,
        )

        pool.additional_properties = d
        return pool

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
