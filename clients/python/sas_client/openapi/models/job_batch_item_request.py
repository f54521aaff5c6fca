from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.job_batch_item_request_input import JobBatchItemRequestInput


T = TypeVar("T", bound="JobBatchItemRequest")


@_attrs_define
class JobBatchItemRequest:
    """Refuses keys it does not declare. Read-only fields are declared, so a representation read
    from the API can be sent back as it is.

    A null for an optional field means "not given" (clients that write absent values as null need
    not leave the key out); for a text or list field a replacement must state, it is the empty
    value.

        Attributes:
            workflow (str): Name of the workflow (its latest version).
            input_ (JobBatchItemRequestInput): The job's input: a JSON object, passed to every step.
            callback_url (None | str | Unset): Where to POST the job's summary (id, workflow, status, result, finished_at)
                when it settles: http(s), to hosts the callback lists allow (docs/security.md). Signed with the webhook-id,
                webhook-timestamp and webhook-signature headers of Standard Webhooks (docs/api.md) and sent with Idempotency-Key
                `<job id>:<status>`, at least once.
            business_key (None | str | Unset): Your own name for what the job is about ("order 1001"): searchable, not
                unique.
            priority (int | None | Unset): Among steps waiting for a limited pool, higher goes first (default 0).
            idempotency_key (None | str | Unset): This job's idempotency key (printable ASCII): a batch sent again with it
                finds the job it made instead of making another. Keys are per user, shared with the header of single
                submissions.
    """

    workflow: str
    input_: JobBatchItemRequestInput
    callback_url: None | str | Unset = UNSET
    business_key: None | str | Unset = UNSET
    priority: int | None | Unset = UNSET
    idempotency_key: None | str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        workflow = self.workflow

        input_ = self.input_.to_dict()

        callback_url: None | str | Unset
        if isinstance(self.callback_url, Unset):
            callback_url = UNSET
        else:
            callback_url = self.callback_url

        business_key: None | str | Unset
        if isinstance(self.business_key, Unset):
            business_key = UNSET
        else:
            business_key = self.business_key

        priority: int | None | Unset
        if isinstance(self.priority, Unset):
            priority = UNSET
        else:
            priority = self.priority

        idempotency_key: None | str | Unset
        if isinstance(self.idempotency_key, Unset):
            idempotency_key = UNSET
        else:
            idempotency_key = self.idempotency_key

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "workflow": workflow,
                "input": input_,
            }
        )
        if callback_url is not UNSET:
            field_dict["callback_url"] = callback_url
        if business_key is not UNSET:
            field_dict["business_key"] = business_key
        if priority is not UNSET:
            field_dict["priority"] = priority
        if idempotency_key is not UNSET:
            field_dict["idempotency_key"] = idempotency_key

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.job_batch_item_request_input import JobBatchItemRequestInput

        d = dict(src_dict)
        workflow = d.pop("workflow")

        input_ = JobBatchItemRequestInput.from_dict(d.pop("input"))

        def _parse_callback_url(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        callback_url = _parse_callback_url(d.pop("callback_url", UNSET))

        def _parse_business_key(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        business_key = _parse_business_key(d.pop("business_key", UNSET))

        def _parse_priority(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        priority = _parse_priority(d.pop("priority", UNSET))

        def _parse_idempotency_key(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        idempotency_key = _parse_idempotency_key(d.pop("idempotency_key", UNSET))

        job_batch_item_request = cls(
            workflow=workflow,
            input_=input_,
            callback_url=callback_url,
            business_key=business_key,
            priority=priority,
            idempotency_key=idempotency_key,
        )

        return job_batch_item_request
