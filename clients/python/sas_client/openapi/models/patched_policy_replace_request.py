from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..models.on_exhausted_enum import OnExhaustedEnum
from ..models.retry_on_enum import RetryOnEnum
from ..types import UNSET, Unset

T = TypeVar("T", bound="PatchedPolicyReplaceRequest")


@_attrs_define
class PatchedPolicyReplaceRequest:
    """Replacing a policy (PUT) needs every setting. A policy cannot be renamed.

    Attributes:
        name (str | Unset):
        timeout_seconds (float | Unset): Deadline of one attempt (> 0).
        max_attempts (int | Unset): Calls in total, the first included (>= 1).
        backoff_initial_seconds (float | Unset):
        backoff_multiplier (float | Unset):
        backoff_max_seconds (float | Unset):
        backoff_jitter (float | Unset): 0 = none, 1 = full jitter.
        retry_on (list[RetryOnEnum] | Unset):
        reassign_after_attempts (int | None | Unset):
        on_exhausted (OnExhaustedEnum | Unset): * `compensate` - Compensate the job
            * `fail` - Fail the job
            * `hold` - Hold for an operator
        reconcile_before_retry (bool | Unset):
        step_budget_seconds (float | None | Unset):
        heartbeat_seconds (float | None | Unset): A call that answers later (HTTP 202, queue) must send a heartbeat at
            least this often (> 0): each one moves its deadline this far ahead, past timeout_seconds if need be. Empty: no
            heartbeats needed.
    """

    name: str | Unset = UNSET
    timeout_seconds: float | Unset = UNSET
    max_attempts: int | Unset = UNSET
    backoff_initial_seconds: float | Unset = UNSET
    backoff_multiplier: float | Unset = UNSET
    backoff_max_seconds: float | Unset = UNSET
    backoff_jitter: float | Unset = UNSET
    retry_on: list[RetryOnEnum] | Unset = UNSET
    reassign_after_attempts: int | None | Unset = UNSET
    on_exhausted: OnExhaustedEnum | Unset = UNSET
    reconcile_before_retry: bool | Unset = UNSET
    step_budget_seconds: float | None | Unset = UNSET
    heartbeat_seconds: float | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        timeout_seconds = self.timeout_seconds

        max_attempts = self.max_attempts

        backoff_initial_seconds = self.backoff_initial_seconds

        backoff_multiplier = self.backoff_multiplier

        backoff_max_seconds = self.backoff_max_seconds

        backoff_jitter = self.backoff_jitter

        retry_on: list[str] | Unset = UNSET
        if not isinstance(self.retry_on, Unset):
            retry_on = []
            for retry_on_item_data in self.retry_on:
                retry_on_item = retry_on_item_data.value
                retry_on.append(retry_on_item)

        reassign_after_attempts: int | None | Unset
        if isinstance(self.reassign_after_attempts, Unset):
            reassign_after_attempts = UNSET
        else:
            reassign_after_attempts = self.reassign_after_attempts

        on_exhausted: str | Unset = UNSET
        if not isinstance(self.on_exhausted, Unset):
            on_exhausted = self.on_exhausted.value

        reconcile_before_retry = self.reconcile_before_retry

        step_budget_seconds: float | None | Unset
        if isinstance(self.step_budget_seconds, Unset):
            step_budget_seconds = UNSET
        else:
            step_budget_seconds = self.step_budget_seconds

        heartbeat_seconds: float | None | Unset
        if isinstance(self.heartbeat_seconds, Unset):
            heartbeat_seconds = UNSET
        else:
            heartbeat_seconds = self.heartbeat_seconds

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if name is not UNSET:
            field_dict["name"] = name
        if timeout_seconds is not UNSET:
            field_dict["timeout_seconds"] = timeout_seconds
        if max_attempts is not UNSET:
            field_dict["max_attempts"] = max_attempts
        if backoff_initial_seconds is not UNSET:
            field_dict["backoff_initial_seconds"] = backoff_initial_seconds
        if backoff_multiplier is not UNSET:
            field_dict["backoff_multiplier"] = backoff_multiplier
        if backoff_max_seconds is not UNSET:
            field_dict["backoff_max_seconds"] = backoff_max_seconds
        if backoff_jitter is not UNSET:
            field_dict["backoff_jitter"] = backoff_jitter
        if retry_on is not UNSET:
            field_dict["retry_on"] = retry_on
        if reassign_after_attempts is not UNSET:
            field_dict["reassign_after_attempts"] = reassign_after_attempts
        if on_exhausted is not UNSET:
            field_dict["on_exhausted"] = on_exhausted
        if reconcile_before_retry is not UNSET:
            field_dict["reconcile_before_retry"] = reconcile_before_retry
        if step_budget_seconds is not UNSET:
            field_dict["step_budget_seconds"] = step_budget_seconds
        if heartbeat_seconds is not UNSET:
            field_dict["heartbeat_seconds"] = heartbeat_seconds

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        name = d.pop("name", UNSET)

        timeout_seconds = d.pop("timeout_seconds", UNSET)

        max_attempts = d.pop("max_attempts", UNSET)

        backoff_initial_seconds = d.pop("backoff_initial_seconds", UNSET)

        backoff_multiplier = d.pop("backoff_multiplier", UNSET)

        backoff_max_seconds = d.pop("backoff_max_seconds", UNSET)

        backoff_jitter = d.pop("backoff_jitter", UNSET)

        _retry_on = d.pop("retry_on", UNSET)
        retry_on: list[RetryOnEnum] | Unset = UNSET
        if _retry_on is not UNSET:
            retry_on = []
            for retry_on_item_data in _retry_on:
                retry_on_item = RetryOnEnum(retry_on_item_data)

                retry_on.append(retry_on_item)

        def _parse_reassign_after_attempts(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        reassign_after_attempts = _parse_reassign_after_attempts(d.pop("reassign_after_attempts", UNSET))

        _on_exhausted = d.pop("on_exhausted", UNSET)
        on_exhausted: OnExhaustedEnum | Unset
        if isinstance(_on_exhausted, Unset):
            on_exhausted = UNSET
        else:
            on_exhausted = OnExhaustedEnum(_on_exhausted)

        reconcile_before_retry = d.pop("reconcile_before_retry", UNSET)

        def _parse_step_budget_seconds(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        step_budget_seconds = _parse_step_budget_seconds(d.pop("step_budget_seconds", UNSET))

        def _parse_heartbeat_seconds(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        heartbeat_seconds = _parse_heartbeat_seconds(d.pop("heartbeat_seconds", UNSET))

        patched_policy_replace_request = cls(
            name=name,
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
        )

        return patched_policy_replace_request
