from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="TokenCreateRequest")


@_attrs_define
class TokenCreateRequest:
    """Refuses keys it does not declare. Read-only fields are declared, so a representation read
    from the API can be sent back as it is.

    A null for an optional field means "not given" (clients that write absent values as null need
    not leave the key out); for a text or list field a replacement must state, it is the empty
    value.

        Attributes:
            name (str): What the token is for (1-100 printable characters).
            lifetime_days (float | Unset): Days until it expires: more than 0 and at most SAS_TOKEN_LIFETIME_DAYS (the
                default).
    """

    name: str
    lifetime_days: float | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        lifetime_days = self.lifetime_days

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "name": name,
            }
        )
        if lifetime_days is not UNSET:
            field_dict["lifetime_days"] = lifetime_days

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        name = d.pop("name")

        lifetime_days = d.pop("lifetime_days", UNSET)

        token_create_request = cls(
            name=name,
            lifetime_days=lifetime_days,
        )

        return token_create_request
