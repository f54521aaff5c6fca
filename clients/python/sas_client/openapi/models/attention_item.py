from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.last_event import LastEvent
    from ..models.step import Step


T = TypeVar("T", bound="AttentionItem")


@_attrs_define
class AttentionItem:
    """
    Attributes:
        step (Step):
        job (str): The step's job.
        workflow (str):
        job_status (str):
        why (str): Why the step is on the list.
        age_seconds (int): How long it has been in its current state.
        last_event (LastEvent | None):
        can_retry (bool):
        can_resolve (bool):
        other_pools (list[str]):
    """

    step: Step
    job: str
    workflow: str
    job_status: str
    why: str
    age_seconds: int
    last_event: LastEvent | None
    can_retry: bool
    can_resolve: bool
    other_pools: list[str]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.last_event import LastEvent

        step = self.step.to_dict()

        job = self.job

        workflow = self.workflow

        job_status = self.job_status

        why = self.why

        age_seconds = self.age_seconds

        last_event: dict[str, Any] | None
        if isinstance(self.last_event, LastEvent):
            last_event = self.last_event.to_dict()
        else:
            last_event = self.last_event

        can_retry = self.can_retry

        can_resolve = self.can_resolve

        other_pools = self.other_pools

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "step": step,
                "job": job,
                "workflow": workflow,
                "job_status": job_status,
                "why": why,
                "age_seconds": age_seconds,
                "last_event": last_event,
                "can_retry": can_retry,
                "can_resolve": can_resolve,
                "other_pools": other_pools,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.last_event import LastEvent
        from ..models.step import Step

        d = dict(src_dict)
        step = Step.from_dict(d.pop("step"))

        job = d.pop("job")

        workflow = d.pop("workflow")

        job_status = d.pop("job_status")

        why = d.pop("why")

        age_seconds = d.pop("age_seconds")

        def _parse_last_event(data: object) -> LastEvent | None:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                last_event_type_0 = LastEvent.from_dict(data)

                return last_event_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(LastEvent | None, data)

        last_event = _parse_last_event(d.pop("last_event"))

        can_retry = d.pop("can_retry")

        can_resolve = d.pop("can_resolve")

        other_pools = cast(list[str], d.pop("other_pools"))

        attention_item = cls(
            step=step,
            job=job,
            workflow=workflow,
            job_status=job_status,
            why=why,
            age_seconds=age_seconds,
            last_event=last_event,
            can_retry=can_retry,
            can_resolve=can_resolve,
            other_pools=other_pools,
        )

        attention_item.additional_properties = d
        return attention_item

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
