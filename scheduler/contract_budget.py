"""A submitter's budget of input-contract checking in the web tier.

A contract's check is bounded per request (scheduler.contracts: RE2 patterns, hashed
`uniqueItems`, at most MAX_COUNTED errors), yet a large input under a demanding contract still
costs the web process tenths of a second, and a tenant sending such inputs as fast as its request
rate allows would take the web tier's CPU from everyone else. So each submitter has a budget of
checking time (`SAS_CONTRACT_BUDGET` seconds a second, `SAS_CONTRACT_BUDGET_BURST` at once),
counted in the database like the request rates (sas_project.throttling, "budgets of work"), on
the CPU time the check took in its thread. Over it, the submission is refused with 429 and
`Retry-After`, before its check runs, and nothing is written.

An ordinary check takes well under a millisecond: it costs one indexed read, and is not counted
below MIN_COUNTED seconds (no write)."""

from __future__ import annotations

import math
import time
from typing import Any

from sas_project.conf import sas_settings
from sas_project.errors import Throttled
from sas_project.throttling import WorkBudget, work_budget_spend, work_budget_wait
from scheduler import contracts

#: Checks cheaper than this are not counted (no write for an ordinary submission).
MIN_COUNTED = 0.002


def budget() -> WorkBudget | None:
    """The budget the settings give, or None when it is off."""
    per_second = sas_settings.contract_budget
    if per_second <= 0:
        return None
    return WorkBudget(per_second=per_second, burst=max(sas_settings.contract_budget_burst, per_second))


def input_check_budgeted(
    schema: dict[str, Any] | None, value: Any, *, user: Any, field: str = "input"
) -> None:
    """contracts.input_check, within `user`'s budget of checking time: Throttled (429) when the
    user spent it lately; the check's CPU time counted against it."""
    limits = budget()
    if schema is None or limits is None or user is None or not getattr(user, "is_authenticated", False):
        contracts.input_check(schema, value, field=field)
        return
    key = f"contract:user:{user.pk}"
    wait = work_budget_wait(key=key, budget=limits)
    if wait > 0:
        raise Throttled(
            f"your submissions' input checks used their budget ({limits.per_second:g} s a second, "
            f"{limits.burst:g} s at once: SAS_CONTRACT_BUDGET); try again in {math.ceil(wait)} s",
            retry_after=math.ceil(wait),
        )
    started = time.thread_time()
    try:
        contracts.input_check(schema, value, field=field)
    finally:
        spent = time.thread_time() - started
        if spent >= MIN_COUNTED:
            work_budget_spend(key=key, budget=limits, seconds=spent)
