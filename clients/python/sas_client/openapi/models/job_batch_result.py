from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar
from uuid import UUID

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="JobBatchResult")


@_attrs_define
class JobBatchResult:
    """
    Attributes:
        index (int): The job's place in the request's `jobs`.
        id (UUID):
        created (bool): False: the job an earlier request made with the same idempotency key and body.
        url (str): The job's resource, `/api/v1/jobs/<id>/`.
    """

    index: int
    id: UUID
    created: bool
    url: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        index = self.index

        id = str(self.id)

        created = self.created

        url = self.url

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "index": index,
                "id": id,
                "created": created,
                "url": url,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        index = d.pop("index")

        id = UUID(d.pop("id"))

        created = d.pop("created")

        url = d.pop("url")

        job_batch_result = cls(
            index=index,
            id=id,
            created=created,
            url=url,
        )

        job_batch_result.additional_properties = d
        return job_batch_result

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
