from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="BulkItem")


@_attrs_define
class BulkItem:
    """
    Attributes:
        step_id (int):
        job_id (str):
        step (str):
        allowed (bool): Dry run: whether it would be done; run: whether it was.
        detail (str):
    """

    step_id: int
    job_id: str
    step: str
    allowed: bool
    detail: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        step_id = self.step_id

        job_id = self.job_id

        step = self.step

        allowed = self.allowed

        detail = self.detail

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "step_id": step_id,
                "job_id": job_id,
                "step": step,
                "allowed": allowed,
                "detail": detail,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        step_id = d.pop("step_id")

        job_id = d.pop("job_id")

        step = d.pop("step")

        allowed = d.pop("allowed")

        detail = d.pop("detail")

        bulk_item = cls(
            step_id=step_id,
            job_id=job_id,
            step=step,
            allowed=allowed,
            detail=detail,
        )

        bulk_item.additional_properties = d
        return bulk_item

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
