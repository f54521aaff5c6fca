from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.step_definition_request import StepDefinitionRequest


T = TypeVar("T", bound="WorkflowReplaceRequest")


@_attrs_define
class WorkflowReplaceRequest:
    """The next version (PUT) states description, deadline_seconds and steps; left out,
    input_schema is none (PATCH keeps the latest version's). A workflow cannot be renamed.

        Attributes:
            description (str):
            deadline_seconds (float | None): Time limit of a whole job, if any.
            steps (list[StepDefinitionRequest]):
            name (str | Unset):
            input_schema (Any | Unset): A JSON Schema (2020-12) every job's input must match (a 400 lists each error with
                its JSON pointer). It may refer ($ref) only inside itself.
    """

    description: str
    deadline_seconds: float | None
    steps: list[StepDefinitionRequest]
    name: str | Unset = UNSET
    input_schema: Any | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        description = self.description

        deadline_seconds: float | None
        deadline_seconds = self.deadline_seconds

        steps = []
        for steps_item_data in self.steps:
            steps_item = steps_item_data.to_dict()
            steps.append(steps_item)

        name = self.name

        input_schema = self.input_schema

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "description": description,
                "deadline_seconds": deadline_seconds,
                "steps": steps,
            }
        )
        if name is not UNSET:
            field_dict["name"] = name
        if input_schema is not UNSET:
            field_dict["input_schema"] = input_schema

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.step_definition_request import StepDefinitionRequest

        d = dict(src_dict)
        description = d.pop("description")

        def _parse_deadline_seconds(data: object) -> float | None:
            if data is None:
                return data
            return cast(float | None, data)

        deadline_seconds = _parse_deadline_seconds(d.pop("deadline_seconds"))

        steps = []
        _steps = d.pop("steps")
        for steps_item_data in _steps:
            steps_item = StepDefinitionRequest.from_dict(steps_item_data)

            steps.append(steps_item)

        name = d.pop("name", UNSET)

        input_schema = d.pop("input_schema", UNSET)

        workflow_replace_request = cls(
            description=description,
            deadline_seconds=deadline_seconds,
            steps=steps,
            name=name,
            input_schema=input_schema,
        )

        return workflow_replace_request
