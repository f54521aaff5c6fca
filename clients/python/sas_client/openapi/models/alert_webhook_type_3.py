from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast
from uuid import UUID

from attrs import define as _attrs_define

from ..models.alert_webhook_type_3_alert import AlertWebhookType3Alert
from ..models.alert_webhook_type_3_loop import AlertWebhookType3Loop

T = TypeVar("T", bound="AlertWebhookType3")


@_attrs_define
class AlertWebhookType3:
    """A supervision loop set one item aside because handling it raised; the rest went on.

    Attributes:
        alert (AlertWebhookType3Alert):
        loop (AlertWebhookType3Loop):
        job_id (None | UUID): The job, when it names one.
        step_id (int | None): The step, when it names one.
        subject (str): What else names the item (a schedule).
        action (str): What the loop did with it: held (the step, for an operator), needs_attention, moved_on or
            schedule_paused (a schedule), not_archived, skipped.
        error (str): The error, its type first.
    """

    alert: AlertWebhookType3Alert
    loop: AlertWebhookType3Loop
    job_id: None | UUID
    step_id: int | None
    subject: str
    action: str
    error: str

    def to_dict(self) -> dict[str, Any]:
        alert = self.alert.value

        loop = self.loop.value

        job_id: None | str
        if isinstance(self.job_id, UUID):
            job_id = str(self.job_id)
        else:
            job_id = self.job_id

        step_id: int | None
        step_id = self.step_id

        subject = self.subject

        action = self.action

        error = self.error

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "alert": alert,
                "loop": loop,
                "job_id": job_id,
                "step_id": step_id,
                "subject": subject,
                "action": action,
                "error": error,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        alert = AlertWebhookType3Alert(d.pop("alert"))

        loop = AlertWebhookType3Loop(d.pop("loop"))

        def _parse_job_id(data: object) -> None | UUID:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                job_id_type_0 = UUID(data)

                return job_id_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | UUID, data)

        job_id = _parse_job_id(d.pop("job_id"))

        def _parse_step_id(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        step_id = _parse_step_id(d.pop("step_id"))

        subject = d.pop("subject")

        action = d.pop("action")

        error = d.pop("error")

        alert_webhook_type_3 = cls(
            alert=alert,
            loop=loop,
            job_id=job_id,
            step_id=step_id,
            subject=subject,
            action=action,
            error=error,
        )

        return alert_webhook_type_3
