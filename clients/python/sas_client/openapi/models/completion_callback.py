from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast
from uuid import UUID

from attrs import define as _attrs_define

from ..models.completion_callback_status import CompletionCallbackStatus

T = TypeVar("T", bound="CompletionCallback")


@_attrs_define
class CompletionCallback:
    """A job settled: its summary, POSTed to the job's `callback_url`.

    Attributes:
        id (UUID): The job's ID.
        workflow (str): The workflow's name.
        status (CompletionCallbackStatus): The status it settled in (once each: the message's key is `<job
            id>:<status>`).
        result (Any): The job's result (null unless it succeeded).
        finished_at (datetime.datetime | None): When it settled (ISO 8601).
    """

    id: UUID
    workflow: str
    status: CompletionCallbackStatus
    result: Any
    finished_at: datetime.datetime | None

    def to_dict(self) -> dict[str, Any]:
        id = str(self.id)

        workflow = self.workflow

        status = self.status.value

        result = self.result

        finished_at: None | str
        if isinstance(self.finished_at, datetime.datetime):
            finished_at = self.finished_at.isoformat()
        else:
            finished_at = self.finished_at

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "id": id,
                "workflow": workflow,
                "status": status,
                "result": result,
                "finished_at": finished_at,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        id = UUID(d.pop("id"))

        workflow = d.pop("workflow")

        status = CompletionCallbackStatus(d.pop("status"))

        result = d.pop("result")

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

        completion_callback = cls(
            id=id,
            workflow=workflow,
            status=status,
            result=result,
            finished_at=finished_at,
        )

        return completion_callback
