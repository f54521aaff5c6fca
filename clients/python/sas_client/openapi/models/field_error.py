from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="FieldError")


@_attrs_define
class FieldError:
    """
    Attributes:
        detail (str): What is wrong with it, readable.
        pointer (str): Where: a JSON pointer (RFC 6901) into the request body (`#/jobs/2/input`), or into the job's
            input for the errors of an input contract (`/amount`).
        field (str | Unset): Where, as a field path (`jobs[2].input`); absent for input contracts.
        code (str | Unset): A machine-readable code (required, invalid...).
    """

    detail: str
    pointer: str
    field: str | Unset = UNSET
    code: str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        detail = self.detail

        pointer = self.pointer

        field = self.field

        code = self.code

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "detail": detail,
                "pointer": pointer,
            }
        )
        if field is not UNSET:
            field_dict["field"] = field
        if code is not UNSET:
            field_dict["code"] = code

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        detail = d.pop("detail")

        pointer = d.pop("pointer")

        field = d.pop("field", UNSET)

        code = d.pop("code", UNSET)

        field_error = cls(
            detail=detail,
            pointer=pointer,
            field=field,
            code=code,
        )

        field_error.additional_properties = d
        return field_error

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
