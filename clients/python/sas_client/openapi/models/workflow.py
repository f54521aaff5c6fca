from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.step_definition import StepDefinition


T = TypeVar("T", bound="Workflow")


@_attrs_define
class Workflow:
    """A workflow version as read, and as written to create one (POST): `name` and `steps` are
    required.

        Attributes:
            name (str):
            version (int):
            steps (list[StepDefinition]):
            created_by (None | str):
            created_at (datetime.datetime):
            description (str | Unset):  Default: ''.
            deadline_seconds (float | None | Unset): Time limit of a whole job, if any.
            input_schema (Any | Unset): A JSON Schema (2020-12) every job's input must match (a 400 lists each error with
                its JSON pointer). It may refer ($ref) only inside itself.
    """

    name: str
    version: int
    steps: list[StepDefinition]
    created_by: None | str
    created_at: datetime.datetime
    description: str | Unset = ""
    deadline_seconds: float | None | Unset = UNSET
    input_schema: Any | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        version = self.version

        steps = []
        for steps_item_data in self.steps:
            steps_item = steps_item_data.to_dict()
            steps.append(steps_item)

        created_by: None | str
        created_by = self.created_by

        created_at = self.created_at.isoformat()

        description = self.description

        deadline_seconds: float | None | Unset
        if isinstance(self.deadline_seconds, Unset):
            deadline_seconds = UNSET
        else:
            deadline_seconds = self.deadline_seconds

        input_schema = self.input_schema

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "name": name,
                "version": version,
                "steps": steps,
                "created_by": created_by,
                "created_at": created_at,
            }
        )
        if description is not UNSET:
            field_dict["description"] = description
        if deadline_seconds is not UNSET:
            field_dict["deadline_seconds"] = deadline_seconds
        if input_schema is not UNSET:
            field_dict["input_schema"] = input_schema

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.step_definition import StepDefinition

        d = dict(src_dict)
        name = d.pop("name")

        version = d.pop("version")

        steps = []
        _steps = d.pop("steps")
        for steps_item_data in _steps:
            steps_item = StepDefinition.from_dict(steps_item_data)

            steps.append(steps_item)

        def _parse_created_by(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        created_by = _parse_created_by(d.pop("created_by"))

        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        description = d.pop("description", UNSET)

        def _parse_deadline_seconds(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        deadline_seconds = _parse_deadline_seconds(d.pop("deadline_seconds", UNSET))

        input_schema = d.pop("input_schema", UNSET)

        workflow = cls(
            name=name,
            version=version,
            steps=steps,
            created_by=created_by,
            created_at=created_at,
            description=description,
            deadline_seconds=deadline_seconds,
            input_schema=input_schema,
        )

        workflow.additional_properties = d
        return workflow

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
