from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.kinds_enum import KindsEnum

T = TypeVar("T", bound="AlertSubscription")


@_attrs_define
class AlertSubscription:
    """
    Attributes:
        name (str):
        webhook_url (str): Whole for administrators; for other readers only its scheme and host, as the rest of a
            webhook URL is often its secret.
        email (str):
        kinds (list[KindsEnum]):
        enabled (bool):
        created_by (None | str):
        created_at (datetime.datetime):
        updated_at (datetime.datetime):
    """

    name: str
    webhook_url: str
    email: str
    kinds: list[KindsEnum]
    enabled: bool
    created_by: None | str
    created_at: datetime.datetime
    updated_at: datetime.datetime
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        webhook_url = self.webhook_url

        email = self.email

        kinds = []
        for kinds_item_data in self.kinds:
            kinds_item = kinds_item_data.value
            kinds.append(kinds_item)

        enabled = self.enabled

        created_by: None | str
        created_by = self.created_by

        created_at = self.created_at.isoformat()

        updated_at = self.updated_at.isoformat()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "name": name,
                "webhook_url": webhook_url,
                "email": email,
                "kinds": kinds,
                "enabled": enabled,
                "created_by": created_by,
                "created_at": created_at,
                "updated_at": updated_at,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        name = d.pop("name")

        webhook_url = d.pop("webhook_url")

        email = d.pop("email")

        kinds = []
        _kinds = d.pop("kinds")
        for kinds_item_data in _kinds:
            kinds_item = KindsEnum(kinds_item_data)

            kinds.append(kinds_item)

        enabled = d.pop("enabled")

        def _parse_created_by(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        created_by = _parse_created_by(d.pop("created_by"))

        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        updated_at = datetime.datetime.fromisoformat(d.pop("updated_at"))

        alert_subscription = cls(
            name=name,
            webhook_url=webhook_url,
            email=email,
            kinds=kinds,
            enabled=enabled,
            created_by=created_by,
            created_at=created_at,
            updated_at=updated_at,
        )

        alert_subscription.additional_properties = d
        return alert_subscription

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
