from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.catch_up_enum import CatchUpEnum
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.patched_schedule_replace_request_input import (
        PatchedScheduleReplaceRequestInput,
    )


T = TypeVar("T", bound="PatchedScheduleReplaceRequest")


@_attrs_define
class PatchedScheduleReplaceRequest:
    """Replacing a schedule (PUT) states every value; it cannot be renamed.

    Attributes:
        name (str | Unset):
        workflow (str | Unset): Each firing submits its latest version.
        input_ (PatchedScheduleReplaceRequestInput | Unset): The jobs' input (default {}).
        business_key (str | Unset):
        priority (int | Unset):
        run_at (datetime.datetime | None | Unset): Fire once, at this instant (ISO 8601; without an offset, UTC).
        cron (str | Unset): Fire at every time of this five-field cron expression (minute hour day month weekday).
        timezone (str | Unset): The cron expression's time zone (IANA name; default UTC).
        catch_up (CatchUpEnum | Unset): * `once` - Submit once
            * `skip` - Skip
    """

    name: str | Unset = UNSET
    workflow: str | Unset = UNSET
    input_: PatchedScheduleReplaceRequestInput | Unset = UNSET
    business_key: str | Unset = UNSET
    priority: int | Unset = UNSET
    run_at: datetime.datetime | None | Unset = UNSET
    cron: str | Unset = UNSET
    timezone: str | Unset = UNSET
    catch_up: CatchUpEnum | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        workflow = self.workflow

        input_: dict[str, Any] | Unset = UNSET
        if not isinstance(self.input_, Unset):
            input_ = self.input_.to_dict()

        business_key = self.business_key

        priority = self.priority

        run_at: None | str | Unset
        if isinstance(self.run_at, Unset):
            run_at = UNSET
        elif isinstance(self.run_at, datetime.datetime):
            run_at = self.run_at.isoformat()
        else:
            run_at = self.run_at

        cron = self.cron

        timezone = self.timezone

        catch_up: str | Unset = UNSET
        if not isinstance(self.catch_up, Unset):
            catch_up = self.catch_up.value

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if name is not UNSET:
            field_dict["name"] = name
        if workflow is not UNSET:
            field_dict["workflow"] = workflow
        if input_ is not UNSET:
            field_dict["input"] = input_
        if business_key is not UNSET:
            field_dict["business_key"] = business_key
        if priority is not UNSET:
            field_dict["priority"] = priority
        if run_at is not UNSET:
            field_dict["run_at"] = run_at
        if cron is not UNSET:
            field_dict["cron"] = cron
        if timezone is not UNSET:
            field_dict["timezone"] = timezone
        if catch_up is not UNSET:
            field_dict["catch_up"] = catch_up

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.patched_schedule_replace_request_input import (
            PatchedScheduleReplaceRequestInput,
        )

        d = dict(src_dict)
        name = d.pop("name", UNSET)

        workflow = d.pop("workflow", UNSET)

        _input_ = d.pop("input", UNSET)
        input_: PatchedScheduleReplaceRequestInput | Unset
        if isinstance(_input_, Unset):
            input_ = UNSET
        else:
            input_ = PatchedScheduleReplaceRequestInput.from_dict(_input_)

        business_key = d.pop("business_key", UNSET)

        priority = d.pop("priority", UNSET)

        def _parse_run_at(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                run_at_type_0 = datetime.datetime.fromisoformat(data)

                return run_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        run_at = _parse_run_at(d.pop("run_at", UNSET))

        cron = d.pop("cron", UNSET)

        timezone = d.pop("timezone", UNSET)

        _catch_up = d.pop("catch_up", UNSET)
        catch_up: CatchUpEnum | Unset
        if isinstance(_catch_up, Unset):
            catch_up = UNSET
        else:
            catch_up = CatchUpEnum(_catch_up)

        patched_schedule_replace_request = cls(
            name=name,
            workflow=workflow,
            input_=input_,
            business_key=business_key,
            priority=priority,
            run_at=run_at,
            cron=cron,
            timezone=timezone,
            catch_up=catch_up,
        )

        return patched_schedule_replace_request
