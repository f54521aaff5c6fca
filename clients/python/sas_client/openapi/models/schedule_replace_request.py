from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.catch_up_enum import CatchUpEnum
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.schedule_replace_request_input import ScheduleReplaceRequestInput


T = TypeVar("T", bound="ScheduleReplaceRequest")


@_attrs_define
class ScheduleReplaceRequest:
    """Replacing a schedule (PUT) states every value; it cannot be renamed.

    Attributes:
        workflow (str): Each firing submits its latest version.
        input_ (ScheduleReplaceRequestInput): The jobs' input (default {}).
        business_key (str):
        priority (int):
        run_at (datetime.datetime | None): Fire once, at this instant (ISO 8601; without an offset, UTC).
        cron (str): Fire at every time of this five-field cron expression (minute hour day month weekday).
        timezone (str): The cron expression's time zone (IANA name; default UTC).
        catch_up (CatchUpEnum): * `once` - Submit once
            * `skip` - Skip
        name (str | Unset):
    """

    workflow: str
    input_: ScheduleReplaceRequestInput
    business_key: str
    priority: int
    run_at: datetime.datetime | None
    cron: str
    timezone: str
    catch_up: CatchUpEnum
    name: str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        workflow = self.workflow

        input_ = self.input_.to_dict()

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

        name = self.name

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "workflow": workflow,
                "input": input_,
                "business_key": business_key,
                "priority": priority,
                "run_at": run_at,
                "cron": cron,
                "timezone": timezone,
                "catch_up": catch_up,
            }
        )
        if name is not UNSET:
            field_dict["name"] = name

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.schedule_replace_request_input import ScheduleReplaceRequestInput

        d = dict(src_dict)
        workflow = d.pop("workflow")

        input_ = ScheduleReplaceRequestInput.from_dict(d.pop("input"))

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

        name = d.pop("name", UNSET)

        schedule_replace_request = cls(
            workflow=workflow,
            input_=input_,
            business_key=business_key,
            priority=priority,
            run_at=run_at,
            cron=cron,
            timezone=timezone,
            catch_up=catch_up,
            name=name,
        )

        return schedule_replace_request
