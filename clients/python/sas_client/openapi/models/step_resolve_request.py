from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.step_resolve_request_output_type_0 import StepResolveRequestOutputType0


T = TypeVar("T", bound="StepResolveRequest")


@_attrs_define
class StepResolveRequest:
    """Refuses keys it does not declare. Read-only fields are declared, so a representation read
    from the API can be sent back as it is.

    A null for an optional field means "not given" (clients that write absent values as null need
    not leave the key out); for a text or list field a replacement must state, it is the empty
    value.

        Attributes:
            output (None | StepResolveRequestOutputType0): The step's output, as the remote would have returned it.
            reason (None | str | Unset): Why: recorded in the job's history with your name. Default: ''.
    """

    output: None | StepResolveRequestOutputType0
    reason: None | str | Unset = ""

    def to_dict(self) -> dict[str, Any]:
        from ..models.step_resolve_request_output_type_0 import (
            StepResolveRequestOutputType0,
        )

        output: dict[str, Any] | None
        if isinstance(self.output, StepResolveRequestOutputType0):
            output = self.output.to_dict()
        else:
            output = self.output

        reason: None | str | Unset
        if isinstance(self.reason, Unset):
            reason = UNSET
        else:
            reason = self.reason

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "output": output,
            }
        )
        if reason is not UNSET:
            field_dict["reason"] = reason

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.step_resolve_request_output_type_0 import (
            StepResolveRequestOutputType0,
        )

        d = dict(src_dict)

        def _parse_output(data: object) -> None | StepResolveRequestOutputType0:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                output_type_0 = StepResolveRequestOutputType0.from_dict(data)

                return output_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | StepResolveRequestOutputType0, data)

        output = _parse_output(d.pop("output"))

        def _parse_reason(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        reason = _parse_reason(d.pop("reason", UNSET))

        step_resolve_request = cls(
            output=output,
            reason=reason,
        )

        return step_resolve_request
