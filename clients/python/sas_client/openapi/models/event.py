from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.event_kind_enum import EventKindEnum

T = TypeVar("T", bound="Event")


@_attrs_define
class Event:
    """
    Attributes:
        id (int):
        kind (EventKindEnum): * `job_submitted` - Job submitted
            * `job_running` - Job running
            * `job_succeeded` - Job succeeded
            * `job_needs_attention` - Job needs attention
            * `job_compensating` - Job compensating
            * `job_compensated` - Job compensated
            * `job_failed` - Job failed
            * `job_cancelled` - Job cancelled
            * `job_paused` - Job paused
            * `job_resumed` - Job resumed
            * `step_dispatched` - Step dispatched
            * `step_succeeded` - Step succeeded
            * `step_reconciled` - Step reconciled
            * `step_resolved` - Step resolved
            * `late_success` - Late success
            * `late_success_noted` - Late success noted
            * `late_outcome_ignored` - Late outcome ignored
            * `reply_dead_lettered` - Reply dead-lettered
            * `step_business_failure` - Business failure
            * `step_transient_failure` - Transient failure
            * `step_not_happened` - Did not happen
            * `step_no_answer` - No answer
            * `step_reconcile_failed` - Status query failed
            * `step_timed_out` - Step timed out
            * `retry_scheduled` - Retry scheduled
            * `deadline_extended` - Deadline extended
            * `step_held` - Step held
            * `step_failed` - Step failed
            * `step_abandoned` - Step abandoned
            * `step_skipped` - Step skipped
            * `step_compensated` - Step compensated
            * `call_accepted` - Call accepted
            * `step_waiting` - Step waiting
            * `approval_requested` - Approval requested
            * `signal_received` - Signal received
            * `step_signalled` - Step signalled
            * `step_approved` - Step approved
            * `step_rejected` - Step rejected
            * `timer_fired` - Timer fired
            * `wait_timed_out` - Wait timed out
            * `items_started` - Items started
            * `join_met` - Join met
            * `join_failed` - Join failed
            * `child_started` - Child job started
            * `child_succeeded` - Child job succeeded
            * `child_failed` - Child job failed
            * `child_compensating` - Child job compensating
            * `operator_rerun` - Operator rerun
            * `job_scheduled` - Submitted by a schedule
            * `delivery_ignored` - Delivery ignored
            * `operator_retry` - Operator retry
            * `operator_resolve` - Operator resolve
            * `operator_compensate` - Operator compensate
            * `operator_cancel` - Operator cancel
        step (None | str): Step name, if any.
        from_status (str):
        to_status (str):
        attempt (int | None):
        source (str):
        actor (None | str): The operator, for operator actions.
        reason (str):
        data (Any):
        created_at (datetime.datetime):
    """

    id: int
    kind: EventKindEnum
    step: None | str
    from_status: str
    to_status: str
    attempt: int | None
    source: str
    actor: None | str
    reason: str
    data: Any
    created_at: datetime.datetime
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        id = self.id

        kind = self.kind.value

        step: None | str
        step = self.step

        from_status = self.from_status

        to_status = self.to_status

        attempt: int | None
        attempt = self.attempt

        source = self.source

        actor: None | str
        actor = self.actor

        reason = self.reason

        data = self.data

        created_at = self.created_at.isoformat()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "id": id,
                "kind": kind,
                "step": step,
                "from_status": from_status,
                "to_status": to_status,
                "attempt": attempt,
                "source": source,
                "actor": actor,
                "reason": reason,
                "data": data,
                "created_at": created_at,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        id = d.pop("id")

        kind = EventKindEnum(d.pop("kind"))

        def _parse_step(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        step = _parse_step(d.pop("step"))

        from_status = d.pop("from_status")

        to_status = d.pop("to_status")

        def _parse_attempt(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        attempt = _parse_attempt(d.pop("attempt"))

        source = d.pop("source")

        def _parse_actor(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        actor = _parse_actor(d.pop("actor"))

        reason = d.pop("reason")

        data = d.pop("data")

        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        event = cls(
            id=id,
            kind=kind,
            step=step,
            from_status=from_status,
            to_status=to_status,
            attempt=attempt,
            source=source,
            actor=actor,
            reason=reason,
            data=data,
            created_at=created_at,
        )

        event.additional_properties = d
        return event

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
