from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define

from ..models.alert_webhook_type_1_alert import AlertWebhookType1Alert

T = TypeVar("T", bound="AlertWebhookType1")


@_attrs_define
class AlertWebhookType1:
    """An endpoint failed too often: calls avoid it until `open_until`.

    Attributes:
        alert (AlertWebhookType1Alert):
        endpoint_id (int):
        endpoint (str): The endpoint's URL.
        open_until (datetime.datetime):
    """

    alert: AlertWebhookType1Alert
    endpoint_id: int
    endpoint: str
    open_until: datetime.datetime

    def to_dict(self) -> dict[str, Any]:
        alert = self.alert.value

        endpoint_id = self.endpoint_id

        endpoint = self.endpoint

        open_until = self.open_until.isoformat()

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "alert": alert,
                "endpoint_id": endpoint_id,
                "endpoint": endpoint,
                "open_until": open_until,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        alert = AlertWebhookType1Alert(d.pop("alert"))

        endpoint_id = d.pop("endpoint_id")

        endpoint = d.pop("endpoint")

        open_until = datetime.datetime.fromisoformat(d.pop("open_until"))

        alert_webhook_type_1 = cls(
            alert=alert,
            endpoint_id=endpoint_id,
            endpoint=endpoint,
            open_until=open_until,
        )

        return alert_webhook_type_1
