from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar
from uuid import UUID

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.remote_call_results import RemoteCallResults


T = TypeVar("T", bound="RemoteCall")


@_attrs_define
class RemoteCall:
    """One attempt of one step. Every attempt of the step carries the same `operation_id` (also the `Idempotency-Key`
    header) and the same body: do the operation at most once per operation ID, and answer a repeat with the first
    result.

        Attributes:
            job_id (UUID):
            step (str): The step's name in its workflow.
            operation_id (str): The operation's key: the same for every attempt.
            attempt (int): This attempt's number (X-SAS-Attempt).
            input_ (Any): The job's input (an object); with the step's input mapping, whatever the mapping builds from
                `input` and `results`.
            results (RemoteCallResults | Unset): The outputs of the steps this one depends on (directly or not), by step
                name. Absent when the step has an input mapping.
            item (Any | Unset): A fan-out item: the element of `for_each` this call is for.
            index (int | Unset): A fan-out item: its position.
            compensates (str | Unset): A compensation (to the step's compensation path): the operation ID it undoes.
            original_output (Any | Unset): A compensation: what the undone operation answered.
            heartbeat_details (Any | Unset): The details of the last heartbeat an earlier attempt of this operation sent:
                where to resume. Absent until one sent details.
    """

    job_id: UUID
    step: str
    operation_id: str
    attempt: int
    input_: Any
    results: RemoteCallResults | Unset = UNSET
    item: Any | Unset = UNSET
    index: int | Unset = UNSET
    compensates: str | Unset = UNSET
    original_output: Any | Unset = UNSET
    heartbeat_details: Any | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        job_id = str(self.job_id)

        step = self.step

        operation_id = self.operation_id

        attempt = self.attempt

        input_ = self.input_

        results: dict[str, Any] | Unset = UNSET
        if not isinstance(self.results, Unset):
            results = self.results.to_dict()

        item = self.item

        index = self.index

        compensates = self.compensates

        original_output = self.original_output

        heartbeat_details = self.heartbeat_details

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "job_id": job_id,
                "step": step,
                "operation_id": operation_id,
                "attempt": attempt,
                "input": input_,
            }
        )
        if results is not UNSET:
            field_dict["results"] = results
        if item is not UNSET:
            field_dict["item"] = item
        if index is not UNSET:
            field_dict["index"] = index
        if compensates is not UNSET:
            field_dict["compensates"] = compensates
        if original_output is not UNSET:
            field_dict["original_output"] = original_output
        if heartbeat_details is not UNSET:
            field_dict["heartbeat_details"] = heartbeat_details

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.remote_call_results import RemoteCallResults

        d = dict(src_dict)
        job_id = UUID(d.pop("job_id"))

        step = d.pop("step")

        operation_id = d.pop("operation_id")

        attempt = d.pop("attempt")

        input_ = d.pop("input")

        _results = d.pop("results", UNSET)
        results: RemoteCallResults | Unset
        if isinstance(_results, Unset):
            results = UNSET
        else:
            results = RemoteCallResults.from_dict(_results)

        item = d.pop("item", UNSET)

        index = d.pop("index", UNSET)

        compensates = d.pop("compensates", UNSET)

        original_output = d.pop("original_output", UNSET)

        heartbeat_details = d.pop("heartbeat_details", UNSET)

        remote_call = cls(
            job_id=job_id,
            step=step,
            operation_id=operation_id,
            attempt=attempt,
            input_=input_,
            results=results,
            item=item,
            index=index,
            compensates=compensates,
            original_output=original_output,
            heartbeat_details=heartbeat_details,
        )

        return remote_call
