from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.step_definition_request import StepDefinitionRequest


T = TypeVar("T", bound="WorkflowRequest")


@_attrs_define
class WorkflowRequest:
    """A workflow version as read, and as written to create one (POST): `name` and `steps` are
    required.

        Attributes:
            name (str):
            steps (list[StepDefinitionRequest]):
            description (str | Unset):  Default: ''.
            deadline_seconds (float | None | Unset): Time limit of a whole job, if any.
            input_schema (Any | Unset): A JSON Schema (2020-12) every job's input must match (a 400 lists each error with
                its JSON pointer). It may refer ($ref) only inside itself.
    """

    name: str
    steps: list[StepDefinitionRequest]
    description: str | Unset = ""
    deadline_seconds: float | None | Unset = UNSET
    input_schema: Any | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        steps = []
        for steps_item_data in self.steps:
            steps_item = steps_item_data.to_dict()
            steps.append(steps_item)

        description = self.description

        deadline_seconds: float | None | Unset
        if isinstance(self.deadline_seconds, Unset):
            deadline_seconds = UNSET
        else:
            deadline_seconds = self.deadline_seconds

        input_schema = self.input_schema

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "name": name,
                "steps": steps,
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
        from ..models.step_definition_request import StepDefinitionRequest

        d = dict(src_dict)
        name = d.pop("name")

        steps = []
        _steps = d.pop("steps")
        for steps_item_data in _steps:
            steps_item = StepDefinitionRequest.from_dict(steps_item_data)

            steps.append(steps_item)

        description = d.pop("description", UNSET)

        def _parse_deadline_seconds(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        deadline_seconds = _parse_deadline_seconds(d.pop("deadline_seconds", UNSET))

        input_schema = d.pop("input_schema", UNSET)

        workflow_request = cls(
            name=name,
            steps=steps,
            description=description,
            deadline_seconds=deadline_seconds,
            input_schema=input_schema,
        )

        return workflow_request
