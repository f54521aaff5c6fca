from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.catch_up_enum import CatchUpEnum

T = TypeVar("T", bound="Schedule")


@_attrs_define
class Schedule:
    """
    Attributes:
        name (str):
        workflow (str): Workflow name (its latest version at each firing).
        input_ (Any):
        business_key (str):
        priority (int):
        run_at (datetime.datetime | None):
        cron (str):
        timezone (str):
        catch_up (CatchUpEnum): * `once` - Submit once
            * `skip` - Skip
        paused (bool): Whether the schedule is paused.
        next_fire_at (datetime.datetime | None):
        last_fired_at (datetime.datetime | None):
        last_job (None | str): The job of the last firing, if any.
        last_error (str):
        created_by (None | str):
        created_at (datetime.datetime):
        updated_at (datetime.datetime):
    """

    name: str
    workflow: str
    input_: Any
    business_key: str
    priority: int
    run_at: datetime.datetime | None
    cron: str
    timezone: str
    catch_up: CatchUpEnum
    paused: bool
    next_fire_at: datetime.datetime | None
    last_fired_at: datetime.datetime | None
    last_job: None | str
    last_error: str
    created_by: None | str
    created_at: datetime.datetime
    updated_at: datetime.datetime
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        workflow = self.workflow

        input_ = self.input_

        business_key = self.business_key

        priority = self.priority

        run_at: None | str
        if isinstance(self.run_at, datetime.datetime):
            run_at = self.run_at.isoformat()
        else:
            run_at = self.run_at

        cron = self.cron

        timezone = self.timezone

        catch_up = self.catch_up.value

        paused = self.paused

        next_fire_at: None | str
        if isinstance(self.next_fire_at, datetime.datetime):
            next_fire_at = self.next_fire_at.isoformat()
        else:
            next_fire_at = self.next_fire_at

        last_fired_at: None | str
        if isinstance(self.last_fired_at, datetime.datetime):
            last_fired_at = self.last_fired_at.isoformat()
        else:
            last_fired_at = self.last_fired_at

        last_job: None | str
        last_job = self.last_job

        last_error = self.last_error

        created_by: None | str
        created_by = self.created_by

        created_at = self.created_at.isoformat()

        updated_at = self.updated_at.isoformat()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "name": name,
                "workflow": workflow,
                "input": input_,
                "business_key": business_key,
                "priority": priority,
                "run_at": run_at,
                "cron": cron,
                "timezone": timezone,
                "catch_up": catch_up,
                "paused": paused,
                "next_fire_at": next_fire_at,
                "last_fired_at": last_fired_at,
                "last_job": last_job,
                "last_error": last_error,
                "created_by": created_by,
                "created_at": created_at,
                "updated_at": updated_at,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        name = d.pop("name")

        workflow = d.pop("workflow")

        input_ = d.pop("input")

        business_key = d.pop("business_key")

        priority = d.pop("priority")

        def _parse_run_at(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                run_at_type_0 = datetime.datetime.fromisoformat(data)

                return run_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        run_at = _parse_run_at(d.pop("run_at"))

        cron = d.pop("cron")

        timezone = d.pop("timezone")

        catch_up = CatchUpEnum(d.pop("catch_up"))

        paused = d.pop("paused")

        def _parse_next_fire_at(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                next_fire_at_type_0 = datetime.datetime.fromisoformat(data)

                return next_fire_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        next_fire_at = _parse_next_fire_at(d.pop("next_fire_at"))

        def _parse_last_fired_at(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                last_fired_at_type_0 = datetime.datetime.fromisoformat(data)

                return last_fired_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        last_fired_at = _parse_last_fired_at(d.pop("last_fired_at"))

        def _parse_last_job(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        last_job = _parse_last_job(d.pop("last_job"))

        last_error = d.pop("last_error")

        def _parse_created_by(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        created_by = _parse_created_by(d.pop("created_by"))

        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        updated_at = datetime.datetime.fromisoformat(d.pop("updated_at"))

        schedule = cls(
            name=name,
            workflow=workflow,
            input_=input_,
            business_key=business_key,
            priority=priority,
            run_at=run_at,
            cron=cron,
            timezone=timezone,
            catch_up=catch_up,
            paused=paused,
            next_fire_at=next_fire_at,
            last_fired_at=last_fired_at,
            last_job=last_job,
            last_error=last_error,
            created_by=created_by,
            created_at=created_at,
            updated_at=updated_at,
        )

        schedule.additional_properties = d
        return schedule

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
