from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar
from uuid import UUID

from attrs import define as _attrs_define

from ..models.alert_webhook_type_6_alert import AlertWebhookType6Alert

T = TypeVar("T", bound="AlertWebhookType6")


@_attrs_define
class AlertWebhookType6:
    """The canary job (which succeeds only through the supervisor's retry) did not succeed in its expected time (once per
    run of failures).

        Attributes:
            alert (AlertWebhookType6Alert):
            job_id (UUID):
            status (str): The canary job's status.
            submitted_at (datetime.datetime):
            age_seconds (float):
            expected_seconds (float):
    """

    alert: AlertWebhookType6Alert
    job_id: UUID
    status: str
    submitted_at: datetime.datetime
    age_seconds: float
    expected_seconds: float

    def to_dict(self) -> dict[str, Any]:
        alert = self.alert.value

        job_id = str(self.job_id)

        status = self.status

        submitted_at = self.submitted_at.isoformat()

        age_seconds = self.age_seconds

        expected_seconds = self.expected_seconds

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "alert": alert,
                "job_id": job_id,
                "status": status,
                "submitted_at": submitted_at,
                "age_seconds": age_seconds,
                "expected_seconds": expected_seconds,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        alert = AlertWebhookType6Alert(d.pop("alert"))

        job_id = UUID(d.pop("job_id"))

        status = d.pop("status")

        submitted_at = datetime.datetime.fromisoformat(d.pop("submitted_at"))

        age_seconds = d.pop("age_seconds")

        expected_seconds = d.pop("expected_seconds")

        alert_webhook_type_6 = cls(
            alert=alert,
            job_id=job_id,
            status=status,
            submitted_at=submitted_at,
            age_seconds=age_seconds,
            expected_seconds=expected_seconds,
        )

        return alert_webhook_type_6
