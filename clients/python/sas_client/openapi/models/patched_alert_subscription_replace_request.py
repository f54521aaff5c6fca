from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define

from ..models.kinds_enum import KindsEnum
from ..types import UNSET, Unset

T = TypeVar("T", bound="PatchedAlertSubscriptionReplaceRequest")


@_attrs_define
class PatchedAlertSubscriptionReplaceRequest:
    """Replacing a subscription (PUT) states every value; it cannot be renamed.

    Attributes:
        name (str | Unset):
        webhook_url (str | Unset): POSTed each alert as JSON, signed the Standard Webhooks way (webhook-signature,
            docs/api.md); to hosts the webhook lists allow.
        email (str | Unset):
        kinds (list[KindsEnum] | Unset): The alert kinds wanted (default: all).
        enabled (bool | Unset):
    """

    name: str | Unset = UNSET
    webhook_url: str | Unset = UNSET
    email: str | Unset = UNSET
    kinds: list[KindsEnum] | Unset = UNSET
    enabled: bool | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        webhook_url = self.webhook_url

        email = self.email

        kinds: list[str] | Unset = UNSET
        if not isinstance(self.kinds, Unset):
            kinds = []
            for kinds_item_data in self.kinds:
                kinds_item = kinds_item_data.value
                kinds.append(kinds_item)

        enabled = self.enabled

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if name is not UNSET:
            field_dict["name"] = name
        if webhook_url is not UNSET:
            field_dict["webhook_url"] = webhook_url
        if email is not UNSET:
            field_dict["email"] = email
        if kinds is not UNSET:
            field_dict["kinds"] = kinds
        if enabled is not UNSET:
            field_dict["enabled"] = enabled

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        name = d.pop("name", UNSET)

        webhook_url = d.pop("webhook_url", UNSET)

        email = d.pop("email", UNSET)

        _kinds = d.pop("kinds", UNSET)
        kinds: list[KindsEnum] | Unset = UNSET
        if _kinds is not UNSET:
            kinds = []
            for kinds_item_data in _kinds:
                kinds_item = KindsEnum(kinds_item_data)

                kinds.append(kinds_item)

        enabled = d.pop("enabled", UNSET)

        patched_alert_subscription_replace_request = cls(
            name=name,
            webhook_url=webhook_url,
            email=email,
            kinds=kinds,
            enabled=enabled,
        )

        return patched_alert_subscription_replace_request
