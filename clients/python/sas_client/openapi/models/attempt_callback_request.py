from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define

from ..models.attempt_callback_outcome_enum import AttemptCallbackOutcomeEnum
from ..types import UNSET, Unset

T = TypeVar("T", bound="AttemptCallbackRequest")


@_attrs_define
class AttemptCallbackRequest:
    """The result a remote POSTs to an attempt's callback URL.

    Attributes:
        outcome (AttemptCallbackOutcomeEnum): * `succeeded` - succeeded
            * `refused` - refused
            * `failed` - failed
        output (Any | Unset): The step's output.
        error (str | Unset):
    """

    outcome: AttemptCallbackOutcomeEnum
    output: Any | Unset = UNSET
    error: str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        outcome = self.outcome.value

        output = self.output

        error = self.error

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "outcome": outcome,
            }
        )
        if output is not UNSET:
            field_dict["output"] = output
        if error is not UNSET:
            field_dict["error"] = error

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        outcome = AttemptCallbackOutcomeEnum(d.pop("outcome"))

        output = d.pop("output", UNSET)

        error = d.pop("error", UNSET)

        attempt_callback_request = cls(
            outcome=outcome,
            output=output,
            error=error,
        )

        return attempt_callback_request
