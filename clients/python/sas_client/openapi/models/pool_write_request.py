from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.agent_kind_enum import AgentKindEnum
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.pool_write_request_endpoints_item_type_1 import (
        PoolWriteRequestEndpointsItemType1,
    )


T = TypeVar("T", bound="PoolWriteRequest")


@_attrs_define
class PoolWriteRequest:
    """Creating a pool: `name` is required; `kind` defaults to http, `endpoints` to none.

    Attributes:
        name (str):
        kind (AgentKindEnum | Unset): * `http` - HTTP
            * `python` - Python callable
            * `queue` - Message queue Default: AgentKindEnum.HTTP.
        alternate (None | str | Unset): Pool a step may be reassigned to (same kind).
        endpoints (list[PoolWriteRequestEndpointsItemType1 | str] | Unset):
        max_in_flight (int | None | Unset): At most this many calls in flight; steps beyond it wait for capacity (null:
            no limit).
        max_per_second (float | None | Unset): At most this many calls started per second (null: no limit).
    """

    name: str
    kind: AgentKindEnum | Unset = AgentKindEnum.HTTP
    alternate: None | str | Unset = UNSET
    endpoints: list[PoolWriteRequestEndpointsItemType1 | str] | Unset = UNSET
    max_in_flight: int | None | Unset = UNSET
    max_per_second: float | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.pool_write_request_endpoints_item_type_1 import (
            PoolWriteRequestEndpointsItemType1,
        )

        name = self.name

        kind: str | Unset = UNSET
        if not isinstance(self.kind, Unset):
            kind = self.kind.value

        alternate: None | str | Unset
        if isinstance(self.alternate, Unset):
            alternate = UNSET
        else:
            alternate = self.alternate

        endpoints: list[dict[str, Any] | str] | Unset = UNSET
        if not isinstance(self.endpoints, Unset):
            endpoints = []
            for endpoints_item_data in self.endpoints:
                endpoints_item: dict[str, Any] | str
                if isinstance(endpoints_item_data, PoolWriteRequestEndpointsItemType1):
                    endpoints_item = endpoints_item_data.to_dict()
                else:
                    endpoints_item = endpoints_item_data
                endpoints.append(endpoints_item)

        max_in_flight: int | None | Unset
        if isinstance(self.max_in_flight, Unset):
            max_in_flight = UNSET
        else:
            max_in_flight = self.max_in_flight

        max_per_second: float | None | Unset
        if isinstance(self.max_per_second, Unset):
            max_per_second = UNSET
        else:
            max_per_second = self.max_per_second

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "name": name,
            }
        )
        if kind is not UNSET:
            field_dict["kind"] = kind
        if alternate is not UNSET:
            field_dict["alternate"] = alternate
        if endpoints is not UNSET:
            field_dict["endpoints"] = endpoints
        if max_in_flight is not UNSET:
            field_dict["max_in_flight"] = max_in_flight
        if max_per_second is not UNSET:
            field_dict["max_per_second"] = max_per_second

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.pool_write_request_endpoints_item_type_1 import (
            PoolWriteRequestEndpointsItemType1,
        )

        d = dict(src_dict)
        name = d.pop("name")

        _kind = d.pop("kind", UNSET)
        kind: AgentKindEnum | Unset
        if isinstance(_kind, Unset):
            kind = UNSET
        else:
            kind = AgentKindEnum(_kind)

        def _parse_alternate(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        alternate = _parse_alternate(d.pop("alternate", UNSET))

        _endpoints = d.pop("endpoints", UNSET)
        endpoints: list[PoolWriteRequestEndpointsItemType1 | str] | Unset = UNSET
        if _endpoints is not UNSET:
            endpoints = []
            for endpoints_item_data in _endpoints:

                def _parse_endpoints_item(data: object) -> PoolWriteRequestEndpointsItemType1 | str:
                    try:
                        if not isinstance(data, dict):
                            raise TypeError()
                        endpoints_item_type_1 = PoolWriteRequestEndpointsItemType1.from_dict(data)

                        return endpoints_item_type_1
                    except (TypeError, ValueError, AttributeError, KeyError):
                        pass
                    return cast(PoolWriteRequestEndpointsItemType1 | str, data)

                endpoints_item = _parse_endpoints_item(endpoints_item_data)

                endpoints.append(endpoints_item)

        def _parse_max_in_flight(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_in_flight = _parse_max_in_flight(d.pop("max_in_flight", UNSET))

        def _parse_max_per_second(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        max_per_second = _parse_max_per_second(d.pop("max_per_second", UNSET))

        pool_write_request = cls(
            name=name,
            kind=kind,
            alternate=alternate,
            endpoints=endpoints,
            max_in_flight=max_in_flight,
            max_per_second=max_per_second,
        )

        return pool_write_request
