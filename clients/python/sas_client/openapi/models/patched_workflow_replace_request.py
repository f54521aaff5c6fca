from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.step_definition_request import StepDefinitionRequest


T = TypeVar("T", bound="PatchedWorkflowReplaceRequest")


@_attrs_define
class PatchedWorkflowReplaceRequest:
    """The next version (PUT) states description, deadline_seconds and steps; left out,
    input_schema is none (PATCH keeps the latest version's). A workflow cannot be renamed.

        Attributes:
            name (str | Unset):
            description (str | Unset):
            deadline_seconds (float | None | Unset): Time limit of a whole job, if any.
            input_schema (Any | Unset): A JSON Schema (2020-12) every job's input must match (a 400 lists each error with
                its JSON pointer). It may refer ($ref) only inside itself.
            steps (list[StepDefinitionRequest] | Unset):
    """

    name: str | Unset = UNSET
    description: str | Unset = UNSET
    deadline_seconds: float | None | Unset = UNSET
    input_schema: Any | Unset = UNSET
    steps: list[StepDefinitionRequest] | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        description = self.description

        deadline_seconds: float | None | Unset
        if isinstance(self.deadline_seconds, Unset):
            deadline_seconds = UNSET
        else:
            deadline_seconds = self.deadline_seconds

        input_schema = self.input_schema

        steps: list[dict[str, Any]] | Unset = UNSET
        if not isinstance(self.steps, Unset):
            steps = []
            for steps_item_data in self.steps:
                steps_item = steps_item_data.to_dict()
                steps.append(steps_item)

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if name is not UNSET:
            field_dict["name"] = name
        if description is not UNSET:
            field_dict["description"] = description
        if deadline_seconds is not UNSET:
            field_dict["deadline_seconds"] = deadline_seconds
        if input_schema is not UNSET:
            field_dict["input_schema"] = input_schema
        if steps is not UNSET:
            field_dict["steps"] = steps

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.step_definition_request import StepDefinitionRequest

        d = dict(src_dict)
        name = d.pop("name", UNSET)

        description = d.pop("description", UNSET)

        def _parse_deadline_seconds(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        deadline_seconds = _parse_deadline_seconds(d.pop("deadline_seconds", UNSET))

        input_schema = d.pop("input_schema", UNSET)

        _steps = d.pop("steps", UNSET)
        steps: list[StepDefinitionRequest] | Unset = UNSET
        if _steps is not UNSET:
            steps = []
            for steps_item_data in _steps:
                steps_item = StepDefinitionRequest.from_dict(steps_item_data)

                steps.append(steps_item)

        patched_workflow_replace_request = cls(
            name=name,
            description=description,
            deadline_seconds=deadline_seconds,
            input_schema=input_schema,
            steps=steps,
        )

        return patched_workflow_replace_request
