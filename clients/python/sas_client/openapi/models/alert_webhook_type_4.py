from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.alert_webhook_type_4_alert import AlertWebhookType4Alert

T = TypeVar("T", bound="AlertWebhookType4")


@_attrs_define
class AlertWebhookType4:
    """The lease holder renews its lease but left remediable steps overdue too long (once per term).

    Attributes:
        alert (AlertWebhookType4Alert):
        holder (str): The cluster that held the lease.
        token (int): Its fencing token.
        debt_steps (int):
        oldest_seconds (float): How long the oldest has been due.
        threshold_seconds (float):
        taken_over_by (None | str): The cluster that took the lease over; null when none could.
    """

    alert: AlertWebhookType4Alert
    holder: str
    token: int
    debt_steps: int
    oldest_seconds: float
    threshold_seconds: float
    taken_over_by: None | str

    def to_dict(self) -> dict[str, Any]:
        alert = self.alert.value

        holder = self.holder

        token = self.token

        debt_steps = self.debt_steps

        oldest_seconds = self.oldest_seconds

        threshold_seconds = self.threshold_seconds

        taken_over_by: None | str
        taken_over_by = self.taken_over_by

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "alert": alert,
                "holder": holder,
                "token": token,
                "debt_steps": debt_steps,
                "oldest_seconds": oldest_seconds,
                "threshold_seconds": threshold_seconds,
                "taken_over_by": taken_over_by,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        alert = AlertWebhookType4Alert(d.pop("alert"))

        holder = d.pop("holder")

        token = d.pop("token")

        debt_steps = d.pop("debt_steps")

        oldest_seconds = d.pop("oldest_seconds")

        threshold_seconds = d.pop("threshold_seconds")

        def _parse_taken_over_by(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        taken_over_by = _parse_taken_over_by(d.pop("taken_over_by"))

        alert_webhook_type_4 = cls(
            alert=alert,
            holder=holder,
            token=token,
            debt_steps=debt_steps,
            oldest_seconds=oldest_seconds,
            threshold_seconds=threshold_seconds,
            taken_over_by=taken_over_by,
        )

        return alert_webhook_type_4
