from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.on_exhausted_enum import OnExhaustedEnum
from ..models.retry_on_enum import RetryOnEnum
from ..types import UNSET, Unset

T = TypeVar("T", bound="PolicyReplaceRequest")


@_attrs_define
class PolicyReplaceRequest:
    """Replacing a policy (PUT) needs every setting. A policy cannot be renamed.

    Attributes:
        timeout_seconds (float): Deadline of one attempt (> 0).
        max_attempts (int): Calls in total, the first included (>= 1).
        backoff_initial_seconds (float):
        backoff_multiplier (float):
        backoff_max_seconds (float):
        backoff_jitter (float): 0 = none, 1 = full jitter.
        retry_on (list[RetryOnEnum]):
        reassign_after_attempts (int | None):
        on_exhausted (OnExhaustedEnum): * `compensate` - Compensate the job
            * `fail` - Fail the job
            * `hold` - Hold for an operator
        reconcile_before_retry (bool):
        step_budget_seconds (float | None):
        heartbeat_seconds (float | None): A call that answers later (HTTP 202, queue) must send a heartbeat at least
            this often (> 0): each one moves its deadline this far ahead, past timeout_seconds if need be. Empty: no
            heartbeats needed.
        name (str | Unset):
    """

    timeout_seconds: float
    max_attempts: int
    backoff_initial_seconds: float
    backoff_multiplier: float
    backoff_max_seconds: float
    backoff_jitter: float
    retry_on: list[RetryOnEnum]
    reassign_after_attempts: int | None
    on_exhausted: OnExhaustedEnum
    reconcile_before_retry: bool
    step_budget_seconds: float | None
    heartbeat_seconds: float | None
    name: str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        timeout_seconds = self.timeout_seconds

        max_attempts = self.max_attempts

        backoff_initial_seconds = self.backoff_initial_seconds

        backoff_multiplier = self.backoff_multiplier

        backoff_max_seconds = self.backoff_max_seconds

        backoff_jitter = self.backoff_jitter

        retry_on = []
        for retry_on_item_data in self.retry_on:
            retry_on_item = retry_on_item_data.value
            retry_on.append(retry_on_item)

        reassign_after_attempts: int | None
        reassign_after_attempts = self.reassign_after_attempts

        on_exhausted = self.on_exhausted.value

        reconcile_before_retry = self.reconcile_before_retry

        step_budget_seconds: float | None
        step_budget_seconds = self.step_budget_seconds

        heartbeat_seconds: float | None
        heartbeat_seconds = self.heartbeat_seconds

        name = self.name

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "timeout_seconds": timeout_seconds,
                "max_attempts": max_attempts,
                "backoff_initial_seconds": backoff_initial_seconds,
                "backoff_multiplier": backoff_multiplier,
                "backoff_max_seconds": backoff_max_seconds,
                "backoff_jitter": backoff_jitter,
                "retry_on": retry_on,
                "reassign_after_attempts": reassign_after_attempts,
                "on_exhausted": on_exhausted,
                "reconcile_before_retry": reconcile_before_retry,
                "step_budget_seconds": step_budget_seconds,
                "heartbeat_seconds": heartbeat_seconds,
            }
        )
        if name is not UNSET:
            field_dict["name"] = name

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        timeout_seconds = d.pop("timeout_seconds")

        max_attempts = d.pop("max_attempts")

        backoff_initial_seconds = d.pop("backoff_initial_seconds")

        backoff_multiplier = d.pop("backoff_multiplier")

        backoff_max_seconds = d.pop("backoff_max_seconds")

        backoff_jitter = d.pop("backoff_jitter")

        retry_on = []
        _retry_on = d.pop("retry_on")
        for retry_on_item_data in _retry_on:
            retry_on_item = RetryOnEnum(retry_on_item_data)

            retry_on.append(retry_on_item)

        def _parse_reassign_after_attempts(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        reassign_after_attempts = _parse_reassign_after_attempts(d.pop("reassign_after_attempts"))

        on_exhausted = OnExhaustedEnum(d.pop("on_exhausted"))

        reconcile_before_retry = d.pop("reconcile_before_retry")

        def _parse_step_budget_seconds(data: object) -> float | None:
            if data is None:
                return data
            return cast(float | None, data)

        step_budget_seconds = _parse_step_budget_seconds(d.pop("step_budget_seconds"))

        def _parse_heartbeat_seconds(data: object) -> float | None:
            if data is None:
                return data
            return cast(float | None, data)

        heartbeat_seconds = _parse_heartbeat_seconds(d.pop("heartbeat_seconds"))

        name = d.pop("name", UNSET)

        policy_replace_request = cls(
            timeout_seconds=timeout_seconds,
            max_attempts=max_attempts,
            backoff_initial_seconds=backoff_initial_seconds,
            backoff_multiplier=backoff_multiplier,
            backoff_max_seconds=backoff_max_seconds,
            backoff_jitter=backoff_jitter,
            retry_on=retry_on,
            reassign_after_attempts=reassign_after_attempts,
            on_exhausted=on_exhausted,
            reconcile_before_retry=reconcile_before_retry,
            step_budget_seconds=step_budget_seconds,
            heartbeat_seconds=heartbeat_seconds,
            name=name,
        )

        return policy_replace_request
