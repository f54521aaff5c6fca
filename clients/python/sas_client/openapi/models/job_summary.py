from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast
from uuid import UUID

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.job_status_enum import JobStatusEnum

T = TypeVar("T", bound="JobSummary")


@_attrs_define
class JobSummary:
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
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
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

        job_summary = cls(
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
        )

        job_summary.additional_properties = d
        return job_summary

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
