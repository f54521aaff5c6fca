from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="PoolWriteRequestEndpointsItemType1")


@_attrs_define
class PoolWriteRequestEndpointsItemType1:
    """
    Attributes:
        url (str):
        enabled (bool | Unset):  Default: True.
        secret_header_name (str | Unset):
        secret_header_value (str | Unset):
    """

    url: str
    enabled: bool | Unset = True
    secret_header_name: str | Unset = UNSET
    secret_header_value: str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        url = self.url

        enabled = self.enabled

        secret_header_name = self.secret_header_name

        secret_header_value = self.secret_header_value

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "url": url,
            }
        )
        if enabled is not UNSET:
            field_dict["enabled"] = enabled
        if secret_header_name is not UNSET:
            field_dict["secret_header_name"] = secret_header_name
        if secret_header_value is not UNSET:
            field_dict["secret_header_value"] = secret_header_value

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        url = d.pop("url")

        enabled = d.pop("enabled", UNSET)

        secret_header_name = d.pop("secret_header_name", UNSET)

        secret_header_value = d.pop("secret_header_value", UNSET)

        pool_write_request_endpoints_item_type_1 = cls(
            url=url,
            enabled=enabled,
            secret_header_name=secret_header_name,
            secret_header_value=secret_header_value,
        )

        return pool_write_request_endpoints_item_type_1
