from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="RemediationDebt")


@_attrs_define
class RemediationDebt:
    """
    Attributes:
        steps (int): Remediable steps more than two intervals past due.
        oldest_seconds (float): Seconds since the oldest of them became due (0: none).
    """

    steps: int
    oldest_seconds: float
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        steps = self.steps

        oldest_seconds = self.oldest_seconds

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "steps": steps,
                "oldest_seconds": oldest_seconds,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        steps = d.pop("steps")

        oldest_seconds = d.pop("oldest_seconds")

        remediation_debt = cls(
            steps=steps,
            oldest_seconds=oldest_seconds,
        )

        remediation_debt.additional_properties = d
        return remediation_debt

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
