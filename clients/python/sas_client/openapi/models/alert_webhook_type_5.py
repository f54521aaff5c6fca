from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define

from ..models.alert_webhook_type_5_alert import AlertWebhookType5Alert

T = TypeVar("T", bound="AlertWebhookType5")


@_attrs_define
class AlertWebhookType5:
    """The history archive cannot be written (once per run of failures).

    Attributes:
        alert (AlertWebhookType5Alert):
        location (str): Where the archive is written.
        error (str):
        failures (int):
        retry_at (datetime.datetime):
    """

    alert: AlertWebhookType5Alert
    location: str
    error: str
    failures: int
    retry_at: datetime.datetime

    def to_dict(self) -> dict[str, Any]:
        alert = self.alert.value

        location = self.location

        error = self.error

        failures = self.failures

        retry_at = self.retry_at.isoformat()

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "alert": alert,
                "location": location,
                "error": error,
                "failures": failures,
                "retry_at": retry_at,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        alert = AlertWebhookType5Alert(d.pop("alert"))

        location = d.pop("location")

        error = d.pop("error")

        failures = d.pop("failures")

        retry_at = datetime.datetime.fromisoformat(d.pop("retry_at"))

        alert_webhook_type_5 = cls(
            alert=alert,
            location=location,
            error=error,
            failures=failures,
            retry_at=retry_at,
        )

        return alert_webhook_type_5
