from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define

if TYPE_CHECKING:
    from ..models.job_batch_item_request import JobBatchItemRequest


T = TypeVar("T", bound="JobBatchRequest")


@_attrs_define
class JobBatchRequest:
    """Refuses keys it does not declare. Read-only fields are declared, so a representation read
    from the API can be sent back as it is.

    A null for an optional field means "not given" (clients that write absent values as null need
    not leave the key out); for a text or list field a replacement must state, it is the empty
    value.

        Attributes:
            jobs (list[JobBatchItemRequest]): The jobs, each as a single submission's body plus its own `idempotency_key`;
                at most SAS_MAX_BATCH_JOBS (100).
    """

    jobs: list[JobBatchItemRequest]

    def to_dict(self) -> dict[str, Any]:
        jobs = []
        for jobs_item_data in self.jobs:
            jobs_item = jobs_item_data.to_dict()
            jobs.append(jobs_item)

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "jobs": jobs,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.job_batch_item_request import JobBatchItemRequest

        d = dict(src_dict)
        jobs = []
        _jobs = d.pop("jobs")
        for jobs_item_data in _jobs:
            jobs_item = JobBatchItemRequest.from_dict(jobs_item_data)

            jobs.append(jobs_item)

        job_batch_request = cls(
            jobs=jobs,
        )

        return job_batch_request
