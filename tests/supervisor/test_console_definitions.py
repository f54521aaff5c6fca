"""The console's read-only pages of definitions: workflows (versions, the latest version's DAG,
the jobs that use them), agent pools (limits, endpoint health, calls waiting) and remediation
policies (fields, revisions), each linking to the admin for those who may edit, and each a fixed
number of queries."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from agents.models import AgentEndpoint
from agents.services import pool_save
from scheduler.models import StepStatus
from scheduler.services import job_submit
from supervisor.policies import policy_update
from tests.api.support import make_user
from tests.factories import make_policy, make_workflow, step

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def console_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def ops() -> Client:
    return console_for(make_user("olga", "operators"))


def test_the_nav_links_the_definition_pages(ops: Client) -> None:
    html = ops.get("/ops/").content.decode()
    for path in ("/ops/workflows/", "/ops/pools/", "/ops/policies/"):
        assert f'href="{path}"' in html, path


def test_a_workflow_page_lists_its_versions_draws_its_latest_dag_and_links_its_jobs(
    ops: Client, django_assert_max_num_queries: Any
) -> None:
    make_workflow("orders", step("reserve"), step("charge", "reserve"))
    make_workflow(
        "orders",
        step("reserve"),
        step("charge", "reserve"),
        {"name": "shipped", "kind": "signal", "signal": "shipped", "depends_on": ["charge"]},
    )
    job = job_submit(workflow="orders", input={}).job
    listing = ops.get("/ops/workflows/").content.decode()
    row = re.search(r'<tr data-workflow="orders">.*?</tr>', listing, re.S)
    assert row and "v2" in row.group(0) and 'href="/ops/workflows/orders/"' in row.group(0)
    with django_assert_max_num_queries(10):
        html = ops.get("/ops/workflows/orders/").content.decode()
    assert 'data-version="1"' in html and 'data-version="2"' in html
    start = html.index('<svg class="dag"')
    dag = html[start : html.index("</svg>", start)]
    assert len(re.findall(r'<g class="dag-node"', dag)) == 3
    assert 'data-from="reserve" data-to="charge"' in dag and 'data-from="charge" data-to="shipped"' in dag
    assert "signal shipped" in dag and "call step" in dag
    assert 'href="/ops/jobs/?workflow=orders"' in html
    assert f'href="/ops/jobs/{job.pk}/"' in html
    assert ops.get("/ops/workflows/nothing-here/").status_code == 404


def test_the_pools_page_shows_limits_health_asked_to_wait_and_calls_waiting(
    ops: Client, django_assert_max_num_queries: Any
) -> None:
    pool_save(
        name="payments",
        kind="http",
        endpoints=["https://payments.example.com"],
        max_in_flight=1,
        max_per_second=2.5,
        rate={"key": "input.account", "per_second": 1, "burst": 3},
    )
    AgentEndpoint.objects.filter(pool__name="payments").update(
        wait_asked_until=timezone.now() + dt.timedelta(minutes=5)
    )
    make_workflow("pay", step("charge", pool="payments", path="/charge", compensation="/refund"))
    jobs = [job_submit(workflow="pay", input={"account": n}).job for n in range(3)]
    waiting = sum(1 for j in jobs if j.steps.get().status == StepStatus.WAITING)
    # Eight, and the latency charts' one aggregate (supervisor.selectors.latency).
    with django_assert_max_num_queries(9):
        html = ops.get("/ops/pools/").content.decode()
    card = re.search(r'<section class="card" id="pool-payments".*?</section>', html, re.S)
    assert card
    text = card.group(0)
    assert "max in flight: <strong>1</strong>" in text
    assert "max per second: <strong>2.5</strong>" in text
    assert "input.account" in text and "burst 3" in text
    assert f"calls waiting: <strong>{waiting}</strong>" in text and waiting >= 1
    assert "asked to wait until" in text and "payments.example.com" in text
    # Every endpoint asked to wait: nothing queued for a worker, nothing being called.
    assert "queued for a worker: <strong>0</strong>" in text
    assert "the remote answering later): <strong>0</strong>" in text
    pool_save(name="ledger", kind="http", endpoints=["https://ledger.example.com"])
    make_workflow("book", step("post", pool="ledger", path="/post", compensation="/unpost"))
    queued = job_submit(workflow="book", input={}).job
    assert queued.steps.get().status == StepStatus.DISPATCHED
    ledger = re.search(r'id="pool-ledger".*?</section>', ops.get("/ops/pools/").content.decode(), re.S)
    assert ledger and "queued for a worker: <strong>1</strong>" in ledger.group(0)


def test_the_policies_pages_show_fields_and_revisions(ops: Client) -> None:
    policy = make_policy("careful", max_attempts=2)
    policy_update(policy.pk, actor=make_user("ada", "operators"), changes={"max_attempts": 5})
    listing = ops.get("/ops/policies/").content.decode()
    assert re.search(r'<tr data-policy="careful">.*?v2.*?</tr>', listing, re.S)
    html = ops.get("/ops/policies/careful/").content.decode()
    assert re.search(r'<tr data-field="max_attempts"><th>max_attempts</th><td class="mono">5</td>', html)
    revision = re.search(r'<tr data-version="2">.*?</tr>', html, re.S)
    assert revision and "ada" in revision.group(0) and "2 → 5" in revision.group(0)
    assert ops.get("/ops/policies/nothing-here/").status_code == 404


@pytest.mark.parametrize(
    "path",
    ["/ops/workflows/", "/ops/workflows/w/", "/ops/pools/", "/ops/policies/", "/ops/policies/default/"],
)
def test_the_admin_link_is_shown_only_to_those_who_may_edit(path: str) -> None:
    make_workflow("w", step("s1"))
    viewer = console_for(make_user("vera", "viewers")).get(path)
    assert viewer.status_code == 200 and "admin-link" not in viewer.content.decode()
    root = User.objects.create_superuser("root", "root@example.invalid", "root-password-1")
    page = console_for(root).get(path).content.decode()
    assert re.search(r'class="[^"]*admin-link[^"]*" href="/admin/', page)
