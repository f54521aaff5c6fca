"""A submitter's budget of input-contract checking (scheduler.contract_budget): a tenant whose
submissions' checks spent it lately is refused with 429 and Retry-After before its next check
runs, creating nothing, while other submitters go on; the check's CPU time is what is counted,
an ordinary check writes nothing, and the budget can be turned off."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sas_project.throttling import WorkBudget, work_budget_spend, work_budget_wait
from sas_project.tokens.models import RateBucket
from scheduler.models import Job
from tests.api.support import V1, client_for, make_user, submit
from tests.factories import make_policy, make_pool, step

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

#: Items whose uniqueness is checked by hashing each object: measurable CPU, bounded.
SCHEMA = {"type": "object", "properties": {"lines": {"type": "array", "uniqueItems": True}}}
BIG = {"lines": [{"sku": f"S{i}", "q": [i, {"n": i}]} for i in range(4000)]}


@pytest.fixture(autouse=True)
def order(settings: Any) -> None:
    settings.SAS_CONTRACT_BUDGET = 0.5
    settings.SAS_CONTRACT_BUDGET_BURST = 1.0
    ada = client_for(make_user("ada", "administrators"))
    make_pool()
    make_policy("once", max_attempts=1, on_exhausted="hold")
    body = {"name": "order", "input_schema": SCHEMA, "steps": [step("charge", policy="once")]}
    assert ada.post(f"{V1}/workflows/", body, format="json").status_code == 201


def charged(user_pk: int) -> float:
    """How far the user's bucket ran ahead of the clock when its last check was counted."""
    bucket = RateBucket.objects.filter(key=f"contract:user:{user_pk}").first()
    return 0.0 if bucket is None else bucket.tat - bucket.seen_at


def test_a_submitter_over_its_checking_budget_is_refused_429_creating_nothing() -> None:
    sam_user, tom_user = make_user("sam", "submitters"), make_user("tom", "submitters")
    sam, tom = client_for(sam_user), client_for(tom_user)
    budget = WorkBudget(per_second=0.5, burst=1.0)
    # Sam's checks took 3 s lately: 2 s past the burst, 4 s at 0.5 s a second.
    work_budget_spend(key=f"contract:user:{sam_user.pk}", budget=budget, seconds=3.0)
    before = Job.objects.count()
    refused = submit(sam, "order", {"lines": [1, 2]})
    assert refused.status_code == 429
    body = refused.json()
    assert body["code"] == "throttled" and "SAS_CONTRACT_BUDGET" in body["detail"]
    assert 3 <= int(refused["Retry-After"]) <= 4
    assert Job.objects.count() == before
    # Another submitter is not held by Sam's budget.
    assert submit(tom, "order", {"lines": [1, 2]}).status_code == 201


def test_a_checks_cpu_time_is_counted_and_an_ordinary_one_writes_nothing() -> None:
    sam_user = make_user("sam", "submitters")
    sam = client_for(sam_user)
    assert submit(sam, "order", {"lines": [1, 2, 3]}).status_code == 201
    assert not RateBucket.objects.filter(key=f"contract:user:{sam_user.pk}").exists()
    started = time.thread_time()
    assert submit(sam, "order", BIG).status_code == 201
    took = time.thread_time() - started
    # Its check's CPU time, at 0.5 s a second: the bucket runs ahead by up to twice the time
    # the whole request took (the check is part of it).
    assert 0 < charged(sam_user.pk) <= 2 * took + 0.1


def test_the_budget_refills_and_can_be_turned_off(settings: Any) -> None:
    sam_user = make_user("sam", "submitters")
    budget = WorkBudget(per_second=0.5, burst=1.0)
    key = f"contract:user:{sam_user.pk}"
    assert work_budget_wait(key=key, budget=budget) == 0
    work_budget_spend(key=key, budget=budget, seconds=0.4)
    assert work_budget_wait(key=key, budget=budget) == 0  # within the burst
    work_budget_spend(key=key, budget=budget, seconds=1.6)
    assert 1.5 < work_budget_wait(key=key, budget=budget) <= 2.0  # 1 s over: 2 s at 0.5 s a second
    settings.SAS_CONTRACT_BUDGET = 0
    assert submit(client_for(sam_user), "order", {"lines": [1]}).status_code == 201
