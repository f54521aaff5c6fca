from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast
from uuid import UUID

from attrs import define as _attrs_define

from ..models.alert_webhook_type_0_alert import AlertWebhookType0Alert

T = TypeVar("T", bound="AlertWebhookType0")


@_attrs_define
class AlertWebhookType0:
    """A job's event: a step held for an operator, a job failed or compensated, an approval asked for.

    Attributes:
        alert (AlertWebhookType0Alert):
        job_id (UUID):
        step_id (int | None): The step, when the event names one.
        attempt (int | None): The attempt, when the event names one.
        event (str): The event's kind (step_held, job_failed...).
        reason (str): Why, as recorded in the job's history.
    """

    alert: AlertWebhookType0Alert
    job_id: UUID
    step_id: int | None
    attempt: int | None
    event: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        alert = self.alert.value

        job_id = str(self.job_id)

        step_id: int | None
        step_id = self.step_id

        attempt: int | None
        attempt = self.attempt

        event = self.event

        reason = self.reason

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "alert": alert,
                "job_id": job_id,
                "step_id": step_id,
                "attempt": attempt,
                "event": event,
                "reason": reason,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        alert = AlertWebhookType0Alert(d.pop("alert"))

        job_id = UUID(d.pop("job_id"))

        def _parse_step_id(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        step_id = _parse_step_id(d.pop("step_id"))

        def _parse_attempt(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        attempt = _parse_attempt(d.pop("attempt"))

        event = d.pop("event")

        reason = d.pop("reason")

        alert_webhook_type_0 = cls(
            alert=alert,
            job_id=job_id,
            step_id=step_id,
            attempt=attempt,
            event=event,
            reason=reason,
        )

        return alert_webhook_type_0
