from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.alert_webhook_type_2_alert import AlertWebhookType2Alert

T = TypeVar("T", bound="AlertWebhookType2")


@_attrs_define
class AlertWebhookType2:
    """The supervisor's last scan is older than three intervals.

    Attributes:
        alert (AlertWebhookType2Alert):
        holder (str): The cluster that holds the supervisor's lease.
        last_scan_at (datetime.datetime):
        lease_expires_at (datetime.datetime | None):
    """

    alert: AlertWebhookType2Alert
    holder: str
    last_scan_at: datetime.datetime
    lease_expires_at: datetime.datetime | None

    def to_dict(self) -> dict[str, Any]:
        alert = self.alert.value

        holder = self.holder

        last_scan_at = self.last_scan_at.isoformat()

        lease_expires_at: None | str
        if isinstance(self.lease_expires_at, datetime.datetime):
            lease_expires_at = self.lease_expires_at.isoformat()
        else:
            lease_expires_at = self.lease_expires_at

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "alert": alert,
                "holder": holder,
                "last_scan_at": last_scan_at,
                "lease_expires_at": lease_expires_at,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        alert = AlertWebhookType2Alert(d.pop("alert"))

        holder = d.pop("holder")

        last_scan_at = datetime.datetime.fromisoformat(d.pop("last_scan_at"))

        def _parse_lease_expires_at(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                lease_expires_at_type_0 = datetime.datetime.fromisoformat(data)

                return lease_expires_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        lease_expires_at = _parse_lease_expires_at(d.pop("lease_expires_at"))

        alert_webhook_type_2 = cls(
            alert=alert,
            holder=holder,
            last_scan_at=last_scan_at,
            lease_expires_at=lease_expires_at,
        )

        return alert_webhook_type_2
