from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.agent_kind_enum import AgentKindEnum
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.pool_replace_request_endpoints_item_type_1 import (
        PoolReplaceRequestEndpointsItemType1,
    )


T = TypeVar("T", bound="PoolReplaceRequest")


@_attrs_define
class PoolReplaceRequest:
    """Replacing a pool (PUT) needs kind, endpoints and alternate. A different `name` in the body
    renames the pool.

        Attributes:
            kind (AgentKindEnum): * `http` - HTTP
                * `python` - Python callable
                * `queue` - Message queue
            alternate (None | str): Pool a step may be reassigned to (same kind).
            endpoints (list[PoolReplaceRequestEndpointsItemType1 | str]):
            max_in_flight (int | None): At most this many calls in flight; steps beyond it wait for capacity (null: no
                limit).
            max_per_second (float | None): At most this many calls started per second (null: no limit).
            name (str | Unset):
    """

    kind: AgentKindEnum
    alternate: None | str
    endpoints: list[PoolReplaceRequestEndpointsItemType1 | str]
    max_in_flight: int | None
    max_per_second: float | None
    name: str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.pool_replace_request_endpoints_item_type_1 import (
            PoolReplaceRequestEndpointsItemType1,
        )

        kind = self.kind.value

        alternate: None | str
        alternate = self.alternate

        endpoints = []
        for endpoints_item_data in self.endpoints:
            endpoints_item: dict[str, Any] | str
            if isinstance(endpoints_item_data, PoolReplaceRequestEndpointsItemType1):
                endpoints_item = endpoints_item_data.to_dict()
            else:
                endpoints_item = endpoints_item_data
            endpoints.append(endpoints_item)

        max_in_flight: int | None
        max_in_flight = self.max_in_flight

        max_per_second: float | None
        max_per_second = self.max_per_second

        name = self.name

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "kind": kind,
                "alternate": alternate,
                "endpoints": endpoints,
                "max_in_flight": max_in_flight,
                "max_per_second": max_per_second,
            }
        )
        if name is not UNSET:
            field_dict["name"] = name

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.pool_replace_request_endpoints_item_type_1 import (
            PoolReplaceRequestEndpointsItemType1,
        )

        d = dict(src_dict)
        kind = AgentKindEnum(d.pop("kind"))

        def _parse_alternate(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        alternate = _parse_alternate(d.pop("alternate"))

        endpoints = []
        _endpoints = d.pop("endpoints")
        for endpoints_item_data in _endpoints:

            def _parse_endpoints_item(data: object) -> PoolReplaceRequestEndpointsItemType1 | str:
                try:
                    if not isinstance(data, dict):
                        raise TypeError()
                    endpoints_item_type_1 = PoolReplaceRequestEndpointsItemType1.from_dict(data)

                    return endpoints_item_type_1
                except (TypeError, ValueError, AttributeError, KeyError):
                    pass
                return cast(PoolReplaceRequestEndpointsItemType1 | str, data)

            endpoints_item = _parse_endpoints_item(endpoints_item_data)

            endpoints.append(endpoints_item)

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

        name = d.pop("name", UNSET)

        pool_replace_request = cls(
            kind=kind,
            alternate=alternate,
            endpoints=endpoints,
            max_in_flight=max_in_flight,
            max_per_second=max_per_second,
            name=name,
        )

        return pool_replace_request
