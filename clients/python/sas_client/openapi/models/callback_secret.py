from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="CallbackSecret")


@_attrs_define
class CallbackSecret:
    """A submitter's key for verifying its jobs' completion callbacks (Standard Webhooks).

    Attributes:
        signing_secret (str): `whsec_` and the base64 of the key: pass it whole to a Standard Webhooks verifier.
        previous_signing_until (datetime.datetime | None): After a rotation, the previous secret still signs (a second
            `v1,` signature) until this instant.
        signing_rotated_at (datetime.datetime | None):
        created_at (datetime.datetime):
    """

    signing_secret: str
    previous_signing_until: datetime.datetime | None
    signing_rotated_at: datetime.datetime | None
    created_at: datetime.datetime
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        signing_secret = self.signing_secret

        previous_signing_until: None | str
        if isinstance(self.previous_signing_until, datetime.datetime):
            previous_signing_until = self.previous_signing_until.isoformat()
        else:
            previous_signing_until = self.previous_signing_until

        signing_rotated_at: None | str
        if isinstance(self.signing_rotated_at, datetime.datetime):
            signing_rotated_at = self.signing_rotated_at.isoformat()
        else:
            signing_rotated_at = self.signing_rotated_at

        created_at = self.created_at.isoformat()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "signing_secret": signing_secret,
                "previous_signing_until": previous_signing_until,
                "signing_rotated_at": signing_rotated_at,
                "created_at": created_at,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        signing_secret = d.pop("signing_secret")

        def _parse_previous_signing_until(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                previous_signing_until_type_0 = datetime.datetime.fromisoformat(data)

                return previous_signing_until_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        previous_signing_until = _parse_previous_signing_until(d.pop("previous_signing_until"))

        def _parse_signing_rotated_at(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                signing_rotated_at_type_0 = datetime.datetime.fromisoformat(data)

                return signing_rotated_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        signing_rotated_at = _parse_signing_rotated_at(d.pop("signing_rotated_at"))

        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        callback_secret = cls(
            signing_secret=signing_secret,
            previous_signing_until=previous_signing_until,
            signing_rotated_at=signing_rotated_at,
            created_at=created_at,
        )

        callback_secret.additional_properties = d
        return callback_secret

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
