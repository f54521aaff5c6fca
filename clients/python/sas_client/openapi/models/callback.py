from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.callback_status_enum import CallbackStatusEnum

T = TypeVar("T", bound="Callback")


@_attrs_define
class Callback:
    """A completion callback of the job and how its delivery goes.

    Attributes:
        job_status (str): The job status the callback reports.
        status (CallbackStatusEnum): * `pending` - Pending
            * `delivered` - Delivered
            * `failed` - Failed
        tries (int):
        last_status_code (int | None):
        last_error (str):
        created_at (datetime.datetime):
        next_try_at (datetime.datetime):
        delivered_at (datetime.datetime | None):
    """

    job_status: str
    status: CallbackStatusEnum
    tries: int
    last_status_code: int | None
    last_error: str
    created_at: datetime.datetime
    next_try_at: datetime.datetime
    delivered_at: datetime.datetime | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        job_status = self.job_status

        status = self.status.value

        tries = self.tries

        last_status_code: int | None
        last_status_code = self.last_status_code

        last_error = self.last_error

        created_at = self.created_at.isoformat()

        next_try_at = self.next_try_at.isoformat()

        delivered_at: None | str
        if isinstance(self.delivered_at, datetime.datetime):
            delivered_at = self.delivered_at.isoformat()
        else:
            delivered_at = self.delivered_at

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "job_status": job_status,
                "status": status,
                "tries": tries,
                "last_status_code": last_status_code,
                "last_error": last_error,
                "created_at": created_at,
                "next_try_at": next_try_at,
                "delivered_at": delivered_at,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        job_status = d.pop("job_status")

        status = CallbackStatusEnum(d.pop("status"))

        tries = d.pop("tries")

        def _parse_last_status_code(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        last_status_code = _parse_last_status_code(d.pop("last_status_code"))

        last_error = d.pop("last_error")

        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        next_try_at = datetime.datetime.fromisoformat(d.pop("next_try_at"))

        def _parse_delivered_at(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                delivered_at_type_0 = datetime.datetime.fromisoformat(data)

                return delivered_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        delivered_at = _parse_delivered_at(d.pop("delivered_at"))

        callback = cls(
            job_status=job_status,
            status=status,
            tries=tries,
            last_status_code=last_status_code,
            last_error=last_error,
            created_at=created_at,
            next_try_at=next_try_at,
            delivered_at=delivered_at,
        )

        callback.additional_properties = d
        return callback

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
