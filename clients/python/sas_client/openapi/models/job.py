from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast
from uuid import UUID

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.job_status_enum import JobStatusEnum

if TYPE_CHECKING:
    from ..models.callback import Callback
    from ..models.step import Step


T = TypeVar("T", bound="Job")


@_attrs_define
class Job:
    """A job in a list: no input, result or steps (read the job for those).

    Attributes:
        id (UUID):
        workflow (str):
        workflow_version (int):
        status (JobStatusEnum): * `pending` - Pending
            * `running` - Running
            * `succeeded` - Succeeded
            * `compensating` - Compensating
            * `compensated` - Compensated
            * `failed` - Failed
            * `cancelled` - Cancelled
            * `needs_attention` - Needs attention
        paused (bool): Whether an operator paused the job.
        compensation_reason (str):
        submitter (None | str):
        business_key (None | str): The submitter's business key, or null.
        priority (int):
        rerun_of (None | str): The job this one reruns, or null.
        parent_job (None | UUID): A child job: the job whose sub-workflow step started it, or null.
        parent_step (str): A child job: the name of the sub-workflow step that started it (empty otherwise).
        created_at (datetime.datetime):
        updated_at (datetime.datetime):
        finished_at (datetime.datetime | None):
        input_ (Any):
        result (Any):
        paused_at (datetime.datetime | None):
        deadline (datetime.datetime | None):
        callback_url (None | str): Where the job's completion callbacks go, or null.
        callbacks (list[Callback]):
        reruns (list[str]): The jobs that rerun this one, oldest first.
        steps (list[Step]):
    """

    id: UUID
    workflow: str
    workflow_version: int
    status: JobStatusEnum
    paused: bool
    compensation_reason: str
    submitter: None | str
    business_key: None | str
    priority: int
    rerun_of: None | str
    parent_job: None | UUID
    parent_step: str
    created_at: datetime.datetime
    updated_at: datetime.datetime
    finished_at: datetime.datetime | None
    input_: Any
    result: Any
    paused_at: datetime.datetime | None
    deadline: datetime.datetime | None
    callback_url: None | str
    callbacks: list[Callback]
    reruns: list[str]
    steps: list[Step]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        id = str(self.id)

        workflow = self.workflow

        workflow_version = self.workflow_version

        status = self.status.value

        paused = self.paused

        compensation_reason = self.compensation_reason

        submitter: None | str
        submitter = self.submitter

        business_key: None | str
        business_key = self.business_key

        priority = self.priority

        rerun_of: None | str
        rerun_of = self.rerun_of

        parent_job: None | str
        if isinstance(self.parent_job, UUID):
            parent_job = str(self.parent_job)
        else:
            parent_job = self.parent_job

        parent_step = self.parent_step

        created_at = self.created_at.isoformat()

        updated_at = self.updated_at.isoformat()

        finished_at: None | str
        if isinstance(self.finished_at, datetime.datetime):
            finished_at = self.finished_at.isoformat()
        else:
            finished_at = self.finished_at

        input_ = self.input_

        result = self.result

        paused_at: None | str
        if isinstance(self.paused_at, datetime.datetime):
            paused_at = self.paused_at.isoformat()
        else:
            paused_at = self.paused_at

        deadline: None | str
        if isinstance(self.deadline, datetime.datetime):
            deadline = self.deadline.isoformat()
        else:
            deadline = self.deadline

        callback_url: None | str
        callback_url = self.callback_url

        callbacks = []
        for callbacks_item_data in self.callbacks:
            callbacks_item = callbacks_item_data.to_dict()
            callbacks.append(callbacks_item)

        reruns = self.reruns

        steps = []
        for steps_item_data in self.steps:
            steps_item = steps_item_data.to_dict()
            steps.append(steps_item)

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "id": id,
                "workflow": workflow,
                "workflow_version": workflow_version,
                "status": status,
                "paused": paused,
                "compensation_reason": compensation_reason,
                "submitter": submitter,
                "business_key": business_key,
                "priority": priority,
                "rerun_of": rerun_of,
                "parent_job": parent_job,
                "parent_step": parent_step,
                "created_at": created_at,
                "updated_at": updated_at,
                "finished_at": finished_at,
                "input": input_,
                "result": result,
                "paused_at": paused_at,
                "deadline": deadline,
                "callback_url": callback_url,
                "callbacks": callbacks,
                "reruns": reruns,
                "steps": steps,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.callback import Callback
        from ..models.step import Step

        d = dict(src_dict)
        id = UUID(d.pop("id"))

        workflow = d.pop("workflow")

        workflow_version = d.pop("workflow_version")

        status = JobStatusEnum(d.pop("status"))

        paused = d.pop("paused")

        compensation_reason = d.pop("compensation_reason")

        def _parse_submitter(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        submitter = _parse_submitter(d.pop("submitter"))

        def _parse_business_key(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        business_key = _parse_business_key(d.pop("business_key"))

        priority = d.pop("priority")

        def _parse_rerun_of(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        rerun_of = _parse_rerun_of(d.pop("rerun_of"))

        def _parse_parent_job(data: object) -> None | UUID:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                parent_job_type_0 = UUID(data)

                return parent_job_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | UUID, data)

        parent_job = _parse_parent_job(d.pop("parent_job"))

        parent_step = d.pop("parent_step")

        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        updated_at = datetime.datetime.fromisoformat(d.pop("updated_at"))

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

        input_ = d.pop("input")

        result = d.pop("result")

        def _parse_paused_at(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                paused_at_type_0 = datetime.datetime.fromisoformat(data)

                return paused_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        paused_at = _parse_paused_at(d.pop("paused_at"))

        def _parse_deadline(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                deadline_type_0 = datetime.datetime.fromisoformat(data)

                return deadline_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        deadline = _parse_deadline(d.pop("deadline"))

        def _parse_callback_url(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        callback_url = _parse_callback_url(d.pop("callback_url"))

        callbacks = []
        _callbacks = d.pop("callbacks")
        for callbacks_item_data in _callbacks:
            callbacks_item = Callback.from_dict(callbacks_item_data)

            callbacks.append(callbacks_item)

        reruns = cast(list[str], d.pop("reruns"))

        steps = []
        _steps = d.pop("steps")
        for steps_item_data in _steps:
            steps_item = Step.from_dict(steps_item_data)

            steps.append(steps_item)

        job = cls(
            id=id,
            workflow=workflow,
            workflow_version=workflow_version,
            status=status,
            paused=paused,
            compensation_reason=compensation_reason,
            submitter=submitter,
            business_key=business_key,
            priority=priority,
            rerun_of=rerun_of,
            parent_job=parent_job,
            parent_step=parent_step,
            created_at=created_at,
            updated_at=updated_at,
            finished_at=finished_at,
            input_=input_,
            result=result,
            paused_at=paused_at,
            deadline=deadline,
            callback_url=callback_url,
            callbacks=callbacks,
            reruns=reruns,
            steps=steps,
        )

        job.additional_properties = d
        return job

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
