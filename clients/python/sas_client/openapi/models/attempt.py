from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.attempt_kind_enum import AttemptKindEnum
from ..models.blank_enum import BlankEnum
from ..models.outcome_enum import OutcomeEnum

T = TypeVar("T", bound="Attempt")


@_attrs_define
class Attempt:
    """
    Attributes:
        number (int):
        kind (AttemptKindEnum): * `call` - Call
            * `reconcile` - Reconcile
        endpoint (str): The endpoint's URL (empty: python).
        pool (str):
        policy_version (int):
        dispatched_at (datetime.datetime):
        deadline (datetime.datetime):
        started_at (datetime.datetime | None):
        finished_at (datetime.datetime | None):
        outcome (BlankEnum | OutcomeEnum): Empty while the attempt is in flight.

            * `succeeded` - Succeeded
            * `business_failure` - Business failure
            * `transient_failure` - Transient failure
            * `no_answer` - No answer
            * `not_happened` - Did not happen
            * `superseded` - Superseded
        decided_by (str):
        status_code (int | None):
        latency_ms (int | None):
        response_excerpt (str):
        error (str):
        late_outcome (BlankEnum | OutcomeEnum): A result that arrived after the outcome was set (noted once).

            * `succeeded` - Succeeded
            * `business_failure` - Business failure
            * `transient_failure` - Transient failure
            * `no_answer` - No answer
            * `not_happened` - Did not happen
            * `superseded` - Superseded
        late_at (datetime.datetime | None):
        heartbeat_at (datetime.datetime | None):
        heartbeat_details (Any):
    """

    number: int
    kind: AttemptKindEnum
    endpoint: str
    pool: str
    policy_version: int
    dispatched_at: datetime.datetime
    deadline: datetime.datetime
    started_at: datetime.datetime | None
    finished_at: datetime.datetime | None
    outcome: BlankEnum | OutcomeEnum
    decided_by: str
    status_code: int | None
    latency_ms: int | None
    response_excerpt: str
    error: str
    late_outcome: BlankEnum | OutcomeEnum
    late_at: datetime.datetime | None
    heartbeat_at: datetime.datetime | None
    heartbeat_details: Any
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        number = self.number

        kind = self.kind.value

        endpoint = self.endpoint

        pool = self.pool

        policy_version = self.policy_version

        dispatched_at = self.dispatched_at.isoformat()

        deadline = self.deadline.isoformat()

        started_at: None | str
        if isinstance(self.started_at, datetime.datetime):
            started_at = self.started_at.isoformat()
        else:
            started_at = self.started_at

        finished_at: None | str
        if isinstance(self.finished_at, datetime.datetime):
            finished_at = self.finished_at.isoformat()
        else:
            finished_at = self.finished_at

        outcome: str
        if isinstance(self.outcome, OutcomeEnum):
            outcome = self.outcome.value
        else:
            outcome = self.outcome.value

        decided_by = self.decided_by

        status_code: int | None
        status_code = self.status_code

        latency_ms: int | None
        latency_ms = self.latency_ms

        response_excerpt = self.response_excerpt

        error = self.error

        late_outcome: str
        if isinstance(self.late_outcome, OutcomeEnum):
            late_outcome = self.late_outcome.value
        else:
            late_outcome = self.late_outcome.value

        late_at: None | str
        if isinstance(self.late_at, datetime.datetime):
            late_at = self.late_at.isoformat()
        else:
            late_at = self.late_at

        heartbeat_at: None | str
        if isinstance(self.heartbeat_at, datetime.datetime):
            heartbeat_at = self.heartbeat_at.isoformat()
        else:
            heartbeat_at = self.heartbeat_at

        heartbeat_details = self.heartbeat_details

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "number": number,
                "kind": kind,
                "endpoint": endpoint,
                "pool": pool,
                "policy_version": policy_version,
                "dispatched_at": dispatched_at,
                "deadline": deadline,
                "started_at": started_at,
                "finished_at": finished_at,
                "outcome": outcome,
                "decided_by": decided_by,
                "status_code": status_code,
                "latency_ms": latency_ms,
                "response_excerpt": response_excerpt,
                "error": error,
                "late_outcome": late_outcome,
                "late_at": late_at,
                "heartbeat_at": heartbeat_at,
                "heartbeat_details": heartbeat_details,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        number = d.pop("number")

        kind = AttemptKindEnum(d.pop("kind"))

        endpoint = d.pop("endpoint")

        pool = d.pop("pool")

        policy_version = d.pop("policy_version")

        dispatched_at = datetime.datetime.fromisoformat(d.pop("dispatched_at"))

        deadline = datetime.datetime.fromisoformat(d.pop("deadline"))

        def _parse_started_at(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                started_at_type_0 = datetime.datetime.fromisoformat(data)

                return started_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        started_at = _parse_started_at(d.pop("started_at"))

        def _parse_finished_at(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                finished_at_type_0 = datetime.datetime.fromisoformat(data)

                return finished_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        finished_at = _parse_finished_at(d.pop("finished_at"))

        def _parse_outcome(data: object) -> BlankEnum | OutcomeEnum:
            try:
                if not isinstance(data, str):
                    raise TypeError()
                outcome_type_0 = OutcomeEnum(data)

                return outcome_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            if not isinstance(data, str):
                raise TypeError()
            outcome_type_1 = BlankEnum(data)

            return outcome_type_1

        outcome = _parse_outcome(d.pop("outcome"))

        decided_by = d.pop("decided_by")

        def _parse_status_code(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        status_code = _parse_status_code(d.pop("status_code"))

        def _parse_latency_ms(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        latency_ms = _parse_latency_ms(d.pop("latency_ms"))

        response_excerpt = d.pop("response_excerpt")

        error = d.pop("error")

        def _parse_late_outcome(data: object) -> BlankEnum | OutcomeEnum:
            try:
                if not isinstance(data, str):
                    raise TypeError()
                late_outcome_type_0 = OutcomeEnum(data)

                return late_outcome_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            if not isinstance(data, str):
                raise TypeError()
            late_outcome_type_1 = BlankEnum(data)

            return late_outcome_type_1

        late_outcome = _parse_late_outcome(d.pop("late_outcome"))

        def _parse_late_at(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                late_at_type_0 = datetime.datetime.fromisoformat(data)

                return late_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        late_at = _parse_late_at(d.pop("late_at"))

        def _parse_heartbeat_at(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                heartbeat_at_type_0 = datetime.datetime.fromisoformat(data)

                return heartbeat_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        heartbeat_at = _parse_heartbeat_at(d.pop("heartbeat_at"))

        heartbeat_details = d.pop("heartbeat_details")

        attempt = cls(
            number=number,
            kind=kind,
            endpoint=endpoint,
            pool=pool,
            policy_version=policy_version,
            dispatched_at=dispatched_at,
            deadline=deadline,
            started_at=started_at,
            finished_at=finished_at,
            outcome=outcome,
            decided_by=decided_by,
            status_code=status_code,
            latency_ms=latency_ms,
            response_excerpt=response_excerpt,
            error=error,
            late_outcome=late_outcome,
            late_at=late_at,
            heartbeat_at=heartbeat_at,
            heartbeat_details=heartbeat_details,
        )

        attempt.additional_properties = d
        return attempt

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
