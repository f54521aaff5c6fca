from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.step_retry_request_input_type_0 import StepRetryRequestInputType0


T = TypeVar("T", bound="StepRetryRequest")


@_attrs_define
class StepRetryRequest:
    """Refuses keys it does not declare. Read-only fields are declared, so a representation read
    from the API can be sent back as it is.

    A null for an optional field means "not given" (clients that write absent values as null need
    not leave the key out); for a text or list field a replacement must state, it is the empty
    value.

        Attributes:
            reason (None | str | Unset): Why: recorded in the job's history with your name. Default: ''.
            pool (None | str | Unset): Dispatch on this pool (same kind) instead of the step's own.
            input_ (None | StepRetryRequestInputType0 | Unset): Call the step with this input instead (held or failed steps
                whose last outcome proves no effect: a refusal or 'did not happen'). The step gets a new operation ID; the event
                records the old and new input.
    """

    reason: None | str | Unset = ""
    pool: None | str | Unset = UNSET
    input_: None | StepRetryRequestInputType0 | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.step_retry_request_input_type_0 import StepRetryRequestInputType0

        reason: None | str | Unset
        if isinstance(self.reason, Unset):
            reason = UNSET
        else:
            reason = self.reason

        pool: None | str | Unset
        if isinstance(self.pool, Unset):
            pool = UNSET
        else:
            pool = self.pool

        input_: dict[str, Any] | None | Unset
        if isinstance(self.input_, Unset):
            input_ = UNSET
        elif isinstance(self.input_, StepRetryRequestInputType0):
            input_ = self.input_.to_dict()
        else:
            input_ = self.input_

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if reason is not UNSET:
            field_dict["reason"] = reason
        if pool is not UNSET:
            field_dict["pool"] = pool
        if input_ is not UNSET:
            field_dict["input"] = input_

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.step_retry_request_input_type_0 import StepRetryRequestInputType0

        d = dict(src_dict)

        def _parse_reason(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        reason = _parse_reason(d.pop("reason", UNSET))

        def _parse_pool(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        pool = _parse_pool(d.pop("pool", UNSET))

        def _parse_input_(data: object) -> None | StepRetryRequestInputType0 | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                input_type_0 = StepRetryRequestInputType0.from_dict(data)

                return input_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | StepRetryRequestInputType0 | Unset, data)

        input_ = _parse_input_(d.pop("input", UNSET))

        step_retry_request = cls(
            reason=reason,
            pool=pool,
            input_=input_,
        )

        return step_retry_request
