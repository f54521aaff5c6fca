from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast
from uuid import UUID

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.waiting_for_kind_enum import WaitingForKindEnum
from ..types import UNSET, Unset

T = TypeVar("T", bound="WaitingFor")


@_attrs_define
class WaitingFor:
    """What a waiting step waits for (schema only; `waiting_for` renders it).

    Attributes:
        kind (WaitingForKindEnum): * `signal` - signal
            * `approval` - approval
            * `timer` - timer
            * `workflow` - workflow
            * `capacity` - capacity
            * `items` - items
        signal (str | Unset): signal: its name.
        group (None | str | Unset): approval: who decides (null: operators).
        until (datetime.datetime | Unset): timer: when it fires.
        timeout_at (datetime.datetime | None | Unset): signal, approval: when the wait times out (null: never).
        pool (str | Unset): capacity: the pool.
        workflow (str | Unset): workflow: the child's workflow.
        child_job (None | Unset | UUID): workflow: the child job (null until it has started).
    """

    kind: WaitingForKindEnum
    signal: str | Unset = UNSET
    group: None | str | Unset = UNSET
    until: datetime.datetime | Unset = UNSET
    timeout_at: datetime.datetime | None | Unset = UNSET
    pool: str | Unset = UNSET
    workflow: str | Unset = UNSET
    child_job: None | Unset | UUID = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        kind = self.kind.value

        signal = self.signal

        group: None | str | Unset
        if isinstance(self.group, Unset):
            group = UNSET
        else:
            group = self.group

        until: str | Unset = UNSET
        if not isinstance(self.until, Unset):
            until = self.until.isoformat()

        timeout_at: None | str | Unset
        if isinstance(self.timeout_at, Unset):
            timeout_at = UNSET
        elif isinstance(self.timeout_at, datetime.datetime):
            timeout_at = self.timeout_at.isoformat()
        else:
            timeout_at = self.timeout_at

        pool = self.pool

        workflow = self.workflow

        child_job: None | str | Unset
        if isinstance(self.child_job, Unset):
            child_job = UNSET
        elif isinstance(self.child_job, UUID):
            child_job = str(self.child_job)
        else:
            child_job = self.child_job

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "kind": kind,
            }
        )
        if signal is not UNSET:
            field_dict["signal"] = signal
        if group is not UNSET:
            field_dict["group"] = group
        if until is not UNSET:
            field_dict["until"] = until
        if timeout_at is not UNSET:
            field_dict["timeout_at"] = timeout_at
        if pool is not UNSET:
            field_dict["pool"] = pool
        if workflow is not UNSET:
            field_dict["workflow"] = workflow
        if child_job is not UNSET:
            field_dict["child_job"] = child_job

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        kind = WaitingForKindEnum(d.pop("kind"))

        signal = d.pop("signal", UNSET)

        def _parse_group(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        group = _parse_group(d.pop("group", UNSET))

        _until = d.pop("until", UNSET)
        until: datetime.datetime | Unset
        if isinstance(_until, Unset):
            until = UNSET
        else:
            until = datetime.datetime.fromisoformat(_until)

        def _parse_timeout_at(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                timeout_at_type_0 = datetime.datetime.fromisoformat(data)

                return timeout_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        timeout_at = _parse_timeout_at(d.pop("timeout_at", UNSET))

        pool = d.pop("pool", UNSET)

        workflow = d.pop("workflow", UNSET)

        def _parse_child_job(data: object) -> None | Unset | UUID:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                child_job_type_0 = UUID(data)

                return child_job_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | Unset | UUID, data)

        child_job = _parse_child_job(d.pop("child_job", UNSET))

        waiting_for = cls(
            kind=kind,
            signal=signal,
            group=group,
            until=until,
            timeout_at=timeout_at,
            pool=pool,
            workflow=workflow,
            child_job=child_job,
        )

        waiting_for.additional_properties = d
        return waiting_for

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
