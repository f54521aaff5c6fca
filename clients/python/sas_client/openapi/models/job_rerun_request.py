from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.version_enum import VersionEnum
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.job_rerun_request_input_type_0 import JobRerunRequestInputType0


T = TypeVar("T", bound="JobRerunRequest")


@_attrs_define
class JobRerunRequest:
    """Refuses keys it does not declare. Read-only fields are declared, so a representation read
    from the API can be sent back as it is.

    A null for an optional field means "not given" (clients that write absent values as null need
    not leave the key out); for a text or list field a replacement must state, it is the empty
    value.

        Attributes:
            from_step (str): Run this step and every step after it again (new operation IDs).
            reason (None | str | Unset): Why: recorded in the job's history with your name. Default: ''.
            input_ (JobRerunRequestInputType0 | None | Unset): The new job's input; the original's when left out. Reused
                outputs are kept either way.
            version (VersionEnum | Unset): * `job` - job
                * `current` - current Default: VersionEnum.JOB.
    """

    from_step: str
    reason: None | str | Unset = ""
    input_: JobRerunRequestInputType0 | None | Unset = UNSET
    version: VersionEnum | Unset = VersionEnum.JOB

    def to_dict(self) -> dict[str, Any]:
        from ..models.job_rerun_request_input_type_0 import JobRerunRequestInputType0

        from_step = self.from_step

        reason: None | str | Unset
        if isinstance(self.reason, Unset):
            reason = UNSET
        else:
            reason = self.reason

        input_: dict[str, Any] | None | Unset
        if isinstance(self.input_, Unset):
            input_ = UNSET
        elif isinstance(self.input_, JobRerunRequestInputType0):
            input_ = self.input_.to_dict()
        else:
            input_ = self.input_

        version: str | Unset = UNSET
        if not isinstance(self.version, Unset):
            version = self.version.value

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "from_step": from_step,
            }
        )
        if reason is not UNSET:
            field_dict["reason"] = reason
        if input_ is not UNSET:
            field_dict["input"] = input_
        if version is not UNSET:
            field_dict["version"] = version

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.job_rerun_request_input_type_0 import JobRerunRequestInputType0

        d = dict(src_dict)
        from_step = d.pop("from_step")

        def _parse_reason(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        reason = _parse_reason(d.pop("reason", UNSET))

        def _parse_input_(data: object) -> JobRerunRequestInputType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                input_type_0 = JobRerunRequestInputType0.from_dict(data)

                return input_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(JobRerunRequestInputType0 | None | Unset, data)

        input_ = _parse_input_(d.pop("input", UNSET))

        _version = d.pop("version", UNSET)
        version: VersionEnum | Unset
        if isinstance(_version, Unset):
            version = UNSET
        else:
            version = VersionEnum(_version)

        job_rerun_request = cls(
            from_step=from_step,
            reason=reason,
            input_=input_,
            version=version,
        )

        return job_rerun_request
