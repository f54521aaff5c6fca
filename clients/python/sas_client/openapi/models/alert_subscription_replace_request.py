from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define

from ..models.kinds_enum import KindsEnum
from ..types import UNSET, Unset

T = TypeVar("T", bound="AlertSubscriptionReplaceRequest")


@_attrs_define
class AlertSubscriptionReplaceRequest:
    """Replacing a subscription (PUT) states every value; it cannot be renamed.

    Attributes:
        webhook_url (str): POSTed each alert as JSON, signed the Standard Webhooks way (webhook-signature, docs/api.md);
            to hosts the webhook lists allow.
        email (str):
        kinds (list[KindsEnum]): The alert kinds wanted (default: all).
        enabled (bool):
        name (str | Unset):
    """

    webhook_url: str
    email: str
    kinds: list[KindsEnum]
    enabled: bool
    name: str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        webhook_url = self.webhook_url

        email = self.email

        kinds = []
        for kinds_item_data in self.kinds:
            kinds_item = kinds_item_data.value
            kinds.append(kinds_item)

        enabled = self.enabled

        name = self.name

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "webhook_url": webhook_url,
                "email": email,
                "kinds": kinds,
                "enabled": enabled,
            }
        )
        if name is not UNSET:
            field_dict["name"] = name

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        webhook_url = d.pop("webhook_url")

        email = d.pop("email")

        kinds = []
        _kinds = d.pop("kinds")
        for kinds_item_data in _kinds:
            kinds_item = KindsEnum(kinds_item_data)

            kinds.append(kinds_item)

        enabled = d.pop("enabled")

        name = d.pop("name", UNSET)

        alert_subscription_replace_request = cls(
            webhook_url=webhook_url,
            email=email,
            kinds=kinds,
            enabled=enabled,
            name=name,
        )

        return alert_subscription_replace_request
