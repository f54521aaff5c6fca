"""End to end: sas_client's Client and the `sas` command against the real service: `runserver`
and `qcluster` on the test database, the sandbox remote behind the demo's workflows.

One web server and one sandbox serve the whole file; a test whose jobs must run starts a cluster
of its own (`running`), stopped before the test's database is emptied: the flush's TRUNCATE,
run beside a working cluster's row locks, deadlocks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sas_client import SETTLED, Client, RetryEvent, RetryPolicy, SasApiError, SasWaitTimeout
from sas_client.client import TOKEN_ENV, URL_ENV

from sas_project.tokens.models import ApiToken
from sas_project.tokens.services import token_create
from scheduler.definitions import workflow_create
from testbed.processes import WebProcess
from tests.api.support import make_user
from tests.e2e.test_qcluster import load_demo
from tests.factories import make_policy
from tests.processes import ARTIFACTS, Cluster, Sandbox, child_env, free_port, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SAS = str(Path(sys.executable).parent / "sas")
ORDER = {"sku": "A1", "quantity": 1, "amount": 10}
#: An order above 100 waits for an operator's approval, then for the `shipped` signal.
BIG_ORDER = {"sku": "A1", "quantity": 1, "amount": 500}


@dataclass
class Service:
    url: str
    sandbox: Sandbox


@pytest.fixture(scope="module")
def service(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    sandbox = Sandbox(port=free_port(), db=tmp_path_factory.mktemp("sandbox") / "sandbox.sqlite3").start()
    web = WebProcess(port=free_port(), env=child_env(), log=ARTIFACTS / "web-client.log").start()
    try:
        yield Service(url=web.url, sandbox=sandbox)
    finally:
        web.stop()
        sandbox.stop()


@pytest.fixture
def demo(service: Service) -> Service:
    service.sandbox.config(decline_over=None)
    load_demo(service.sandbox)
    return service


@pytest.fixture
def running(demo: Service, clusters: Callable[..., Cluster]) -> Service:
    """The demo with a cluster running its jobs."""
    clusters("client")
    return demo


@contextmanager
def own_web(name: str, **env: str) -> Iterator[str]:
    """A web server of a test's own (its URL), for a test that needs its own settings."""
    web = WebProcess(port=free_port(), env=child_env(**env), log=ARTIFACTS / f"web-client-{name}.log").start()
    try:
        yield web.url
    finally:
        web.stop()


def key_of(name: str, role: str = "operators") -> str:
    """The key of a token of a new user in `role` (operators see every job; submitters their own)."""
    _, key = token_create(user=make_user(name, role), name="client tests")
    return key


@pytest.fixture
def client(demo: Service) -> Iterator[Client]:
    with Client(demo.url, key_of("ops")) as c:
        yield c


def sas(service: Service, key: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The `sas` console script, as a user runs it."""
    env = {**os.environ, URL_ENV: service.url, TOKEN_ENV: key}
    return subprocess.run(
        [SAS, *args], env=env, input=stdin, capture_output=True, text=True, timeout=120, check=False
    )


# --- the library -----------------------------------------------------------------------------------


def test_a_submitted_job_is_waited_for_until_it_succeeds_with_progress(
    client: Client, running: Service
) -> None:
    job = client.submit("order_fulfilment", ORDER)
    assert job["status"] in {"pending", "running"}
    seen: list[str] = []
    done = client.wait(job["id"], timeout=90, progress=lambda j: seen.append(j["status"]))
    assert done["status"] == "succeeded"
    assert [s["status"] for s in done["steps"]] == ["succeeded"] * 3
    assert seen[-1] == "succeeded"


def test_a_submission_sent_again_with_its_key_finds_the_same_job(client: Client) -> None:
    first = client.submit("order_fulfilment", ORDER, idempotency_key="order-1001")
    again = client.submit("order_fulfilment", ORDER, idempotency_key="order-1001")
    other = client.submit("order_fulfilment", ORDER)
    assert again["id"] == first["id"] != other["id"]
    assert [j["id"] for j in client.jobs(idempotency_key="order-1001")] == [first["id"]]


def test_a_key_sent_again_with_another_body_is_refused_and_not_retried(client: Client) -> None:
    sent: list[RetryEvent] = []
    client.transport.on_retry = sent.append
    client.submit("order_fulfilment", ORDER, idempotency_key="order-1002")
    with pytest.raises(SasApiError) as raised:
        client.submit("order_fulfilment", {**ORDER, "amount": 11}, idempotency_key="order-1002")
    assert raised.value.status == 422 and raised.value.code and raised.value.detail
    assert not sent


def test_a_wait_that_runs_out_of_time_raises_with_the_last_state(client: Client) -> None:
    job = client.submit("order_approval", BIG_ORDER)
    with pytest.raises(SasWaitTimeout) as raised:
        client.wait(job["id"], timeout=2, interval=0.2)
    assert raised.value.job["id"] == job["id"] and raised.value.job["status"] not in SETTLED


def test_an_approval_and_a_signal_let_a_waiting_job_finish(client: Client, running: Service) -> None:
    job = client.submit("order_approval", BIG_ORDER)

    def waiting_for(kind: str) -> dict[str, Any] | None:
        steps = client.get(job["id"])["steps"]
        return next((s for s in steps if (s.get("waiting_for") or {}).get("kind") == kind), None)

    wait_until(lambda: waiting_for("approval"), timeout=60, message="the approval step waiting")
    step = client.approve(job["id"], "approve_charge", comment="known customer")
    assert step["status"] == "succeeded"
    wait_until(lambda: waiting_for("signal"), timeout=60, message="the shipped step waiting")
    signal = client.signal(job["id"], "shipped", {"tracking": "T-1"})
    assert signal["name"] == "shipped"
    done = client.wait(job["id"], timeout=60)
    assert done["status"] == "succeeded"
    assert next(s for s in done["steps"] if s["name"] == "shipped")["output"] == {"tracking": "T-1"}


def test_a_batch_is_submitted_in_chunks_and_answered_per_item(client: Client) -> None:
    orders = [{"workflow": "order_fulfilment", "input": {**ORDER, "amount": n}} for n in range(1, 6)]
    result = client.submit_batch(orders, chunk_size=2)
    assert result.ok and [i.index for i in result.items] == [0, 1, 2, 3, 4]
    assert all(i.created for i in result.items) and len({i.id for i in result.items}) == 5
    # Sent again with the keys it was given, the batch finds its jobs instead of making others.
    again = client.submit_batch(
        [{**o, "idempotency_key": i.idempotency_key} for o, i in zip(orders, result.items, strict=True)]
    )
    assert [i.id for i in again.items] == [i.id for i in result.items]
    assert not any(i.created for i in again.items)


def test_a_refused_chunk_is_reported_on_its_items_and_the_other_chunks_go_through(demo: Service) -> None:
    with Client(demo.url, key_of("batcher", "submitters")) as client:
        orders = [{"workflow": "order_fulfilment", "input": ORDER} for _ in range(4)]
        orders[3] = {"workflow": "no_such_workflow", "input": ORDER}
        result = client.submit_batch(orders, chunk_size=2)
        assert [i.ok for i in result.items] == [True, True, False, False]
        assert [i.at_fault for i in result.items] == [False, False, False, True]
        error = result.items[3].error
        assert error is not None and error.status == 400 and error.detail.startswith("jobs[1]")
        assert {j["id"] for j in client.jobs()} == {i.id for i in result.items[:2]}


def test_a_list_follows_the_pages_of_the_service(demo: Service) -> None:
    requested: list[str] = []

    class Recording(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            requested.append(str(request.url))
            return super().handle_request(request)

    with Client(demo.url, key_of("lister", "submitters"), transport=Recording()) as client:
        made = client.submit_batch([{"workflow": "order_fulfilment", "input": ORDER}] * 5)
        requested.clear()
        listed = list(client.jobs(workflow="order_fulfilment", page_size=2))
    assert sorted(j["id"] for j in listed) == sorted(i.id for i in made.items if i.id)
    # Three pages, the second and third asked for by the `next` link of the one before.
    assert len(requested) == 3 and all("cursor=" in url or "page=" in url for url in requested[1:])


def test_events_tell_a_jobs_history_in_order(client: Client, running: Service) -> None:
    job = client.wait(client.submit("order_fulfilment", ORDER)["id"], timeout=90)
    events = list(client.events(job["id"], page_size=3))
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "job_submitted" and kinds[-1] == "job_succeeded"
    assert kinds.count("step_succeeded") == 3
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)


def test_a_held_step_is_retried_with_a_new_input_and_its_job_succeeds(
    client: Client, demo: Service, running: Service
) -> None:
    make_policy("hold_at_once", max_attempts=1, on_exhausted="hold")
    workflow_create(
        name="charge_or_hold",
        steps=[{"name": "charge", "pool": "payments", "path": "/payments/charge", "policy": "hold_at_once"}],
    )
    demo.sandbox.config(decline_over=100)
    try:
        job = client.submit("charge_or_hold", {**ORDER, "amount": 250})

        def held() -> dict[str, Any] | None:
            return next((s for s in client.get(job["id"])["steps"] if s["status"] == "held"), None)

        step = wait_until(held, timeout=60, message="the charge held")
        retried = client.retry_step(step["id"], input={**ORDER, "amount": 50}, reason="a smaller charge")
        assert retried["name"] == "charge"
        done = client.wait(job["id"], timeout=90)
    finally:
        demo.sandbox.config(decline_over=None)
    assert done["status"] == "succeeded" and done["steps"][0]["input_override"] == {**ORDER, "amount": 50}


def test_a_settled_job_is_rerun_as_a_new_job(client: Client, running: Service) -> None:
    first = client.wait(client.submit("order_fulfilment", ORDER)["id"], timeout=90)
    rerun = client.rerun(first["id"], from_step="ship", reason="the warehouse lost it")
    assert rerun["id"] != first["id"] and rerun["rerun_of"] == first["id"]
    done = client.wait(rerun["id"], timeout=90)
    assert done["status"] == "succeeded"
    assert [s["reused_from"] is not None for s in done["steps"]] == [True, True, False]
    keyed = client.rerun(first["id"], from_step="charge", idempotency_key="rerun-1")
    assert client.rerun(first["id"], from_step="charge", idempotency_key="rerun-1")["id"] == keyed["id"]


def test_sas_reruns_a_job_from_its_first_step_by_default(demo: Service, running: Service) -> None:
    key = key_of("cli")
    first = json.loads(
        sas(
            demo, key, "jobs", "submit", "order_fulfilment", "--input", json.dumps(ORDER), "--wait", "--json"
        ).stdout
    )
    result = sas(demo, key, "jobs", "rerun", first["id"], "--json")
    assert result.returncode == 0, result.stderr
    rerun = json.loads(result.stdout)
    assert rerun["rerun_of"] == first["id"] and not any(s["reused_from"] for s in rerun["steps"])


def test_an_error_carries_the_services_status_code_and_detail(client: Client) -> None:
    with pytest.raises(SasApiError) as raised:
        client.submit("no_such_workflow", ORDER)
    assert raised.value.status == 400 and raised.value.detail and raised.value.code
    with pytest.raises(SasApiError) as missing:
        client.get(str(uuid.uuid4()))
    assert missing.value.status == 404 and missing.value.code == "not_found"


def test_field_errors_of_a_problem_document_reach_the_caller(client: Client) -> None:
    """The service answers errors as RFC 9457 problem details; the fields at fault come through."""
    with pytest.raises(SasApiError) as raised:
        client.request("POST", "/api/v1/jobs/", json_body={"workflow": "", "input": []})
    error = raised.value
    assert error.status == 400 and error.code and error.detail
    assert error.headers["content-type"].startswith("application/problem+json")
    assert {"workflow", "input"} <= {e.field for e in error.errors}
    assert all(e.detail for e in error.errors)


def test_the_generated_client_shares_the_facades_connection(client: Client) -> None:
    from sas_client.openapi.api.jobs import jobs_read

    job = client.submit("order_fulfilment", ORDER)
    typed = jobs_read.sync(client=client.api, job_id=uuid.UUID(job["id"]))
    assert typed is not None and str(typed.id) == job["id"] and typed.workflow == "order_fulfilment"


# --- rates -----------------------------------------------------------------------------------------


def test_reads_over_the_rate_wait_for_retry_after_and_succeed_and_writes_are_not_retried(
    demo: Service,
) -> None:
    """A web server of its own, allowing one request a second with no burst: every request after
    the first in a second gets a 429 with Retry-After."""
    key = key_of("paced", "submitters")
    events: list[RetryEvent] = []
    policy = RetryPolicy(attempts=8, jitter=0.2)
    with (
        own_web("rates", SAS_THROTTLE_USER="60/min", SAS_THROTTLE_USER_BURST="1") as url,
        Client(url, key, on_retry=events.append, retry=policy) as client,
    ):
        job = client.submit("order_fulfilment", ORDER)
        for _ in range(3):
            assert client.get(job["id"])["id"] == job["id"]
        throttled = [e for e in events if e.reason == "429"]
        assert throttled, "a request over the rate should have been answered 429"
        assert all(e.retry_after is not None and e.wait >= e.retry_after >= 1 for e in throttled)
        events.clear()
        # A write without a key is sent once: its 429 is the caller's (until one comes, the
        # service's own refusal: this user may not approve).
        refusals: list[SasApiError] = []
        for _ in range(5):
            try:
                client.approve(job["id"], "approve_charge")
            except SasApiError as error:
                refusals.append(error)
                if error.status == 429:
                    break
        assert refusals[-1].status == 429 and refusals[-1].retry_after and not events


# --- the command -----------------------------------------------------------------------------------


def test_sas_submits_and_waits_printing_progress_and_the_job_as_json(demo: Service, running: Service) -> None:
    result = sas(
        demo,
        key_of("cli"),
        "jobs",
        "submit",
        "order_fulfilment",
        "--input",
        json.dumps(ORDER),
        "--wait",
        "--timeout",
        "90",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    job = json.loads(result.stdout)
    assert job["status"] == "succeeded" and job["id"] in result.stderr and "succeeded" in result.stderr


def test_sas_lists_jobs_and_events_as_tables(demo: Service, running: Service) -> None:
    key = key_of("cli", "submitters")
    submitted = json.loads(
        sas(demo, key, "jobs", "submit", "order_fulfilment", "--input", json.dumps(ORDER), "--json").stdout
    )
    listed = sas(demo, key, "jobs", "list", "--workflow", "order_fulfilment")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["ID", "WORKFLOW", "STATUS", "CREATED", "BUSINESS", "KEY"]
    assert len(rows) == 1 and rows[0].startswith(submitted["id"])
    assert sas(demo, key, "jobs", "wait", submitted["id"], "--timeout", "90").returncode == 0
    events = sas(demo, key, "jobs", "events", submitted["id"])
    assert events.returncode == 0 and events.stdout.split()[:7] == [
        "CREATED",
        "KIND",
        "STEP",
        "FROM",
        "TO",
        "ACTOR",
        "REASON",
    ]
    assert "job_succeeded" in events.stdout
    as_json = json.loads(sas(demo, key, "jobs", "events", submitted["id"], "--json").stdout)
    assert as_json[-1]["kind"] == "job_succeeded"


def test_sas_wait_exits_4_when_it_times_out_and_3_when_the_job_did_not_succeed(
    demo: Service, running: Service
) -> None:
    key = key_of("cli")
    submitted = sas(demo, key, "jobs", "submit", "order_approval", "--input", json.dumps(BIG_ORDER), "-q")
    job_id = submitted.stdout.strip()
    assert submitted.returncode == 0 and str(uuid.UUID(job_id)) == job_id  # -q prints the id alone
    timed_out = sas(demo, key, "jobs", "wait", job_id, "--timeout", "1")
    assert timed_out.returncode == 4 and "is still" in timed_out.stderr
    assert sas(demo, key, "jobs", "cancel", job_id, "--reason", "not needed").returncode == 0
    cancelled = sas(demo, key, "jobs", "wait", job_id, "--timeout", "60", "--json")
    assert cancelled.returncode == 3 and json.loads(cancelled.stdout)["status"] == "cancelled"


def test_sas_approves_and_signals_a_waiting_job_through_to_success(demo: Service, running: Service) -> None:
    key = key_of("cli")
    job_id = sas(
        demo, key, "jobs", "submit", "order_approval", "--input", json.dumps(BIG_ORDER), "-q"
    ).stdout.strip()

    def step_waiting(name: str) -> bool:
        job = json.loads(sas(demo, key, "jobs", "get", job_id, "--json").stdout)
        return any(s["name"] == name and s["status"] == "waiting" for s in job["steps"])

    wait_until(lambda: step_waiting("approve_charge"), timeout=60, message="the approval waiting")
    approved = sas(demo, key, "steps", "approve", job_id, "approve_charge", "--comment", "known customer")
    assert approved.returncode == 0 and approved.stdout.split()[:3] == ["STEP", "ID", "NAME"]
    signalled = sas(
        demo, key, "jobs", "signal", job_id, "shipped", "--payload", '{"tracking": "T-1"}', "--json"
    )
    assert signalled.returncode == 0 and json.loads(signalled.stdout)["name"] == "shipped"
    done = sas(demo, key, "jobs", "wait", job_id, "--timeout", "90")
    assert done.returncode == 0, done.stderr
    assert [line.split() for line in done.stdout.splitlines() if line.startswith("status ")] == [
        ["status", "succeeded"]
    ]


def test_sas_submits_a_batch_from_json_lines(demo: Service, tmp_path: Path) -> None:
    lines = tmp_path / "orders.jsonl"
    lines.write_text(
        "\n".join(json.dumps({"workflow": "order_fulfilment", "input": ORDER}) for _ in range(3))
    )
    result = sas(demo, key_of("cli"), "jobs", "submit-batch", str(lines), "--json")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["ok"] and [j["index"] for j in answer["jobs"]] == [0, 1, 2]
    assert all(j["created"] and j["id"] for j in answer["jobs"])


def test_sas_exits_1_with_the_services_detail_and_2_on_bad_usage(demo: Service) -> None:
    key = key_of("cli")
    missing = sas(demo, key, "jobs", "get", str(uuid.uuid4()))
    assert missing.returncode == 1 and "404 not_found" in missing.stderr
    as_json = sas(demo, key, "--json", "jobs", "get", str(uuid.uuid4()))  # options before the command too
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["error"]["code"] == "not_found"
    assert sas(demo, key, "jobs", "submit", "order_fulfilment", "--input", "{not json").returncode == 2
    assert sas(demo, key, "jobs", "frobnicate").returncode == 2
    refused = sas(demo, "not-a-key", "jobs", "list")
    assert refused.returncode == 1 and "401" in refused.stderr


def test_tokens_are_made_listed_and_revoked_and_a_revoked_one_is_refused(demo: Service) -> None:
    """On a web server of its own: making and revoking a token writes Django's admin log, whose
    content types the file's server holds from before the last test's flush."""
    user = make_user("holder", "submitters")
    _, key = token_create(user=user, name="main")
    with own_web("tokens") as url:
        with Client(url, key) as client:
            made = client.create_token("spare", lifetime_days=7)
            assert made["name"] == "spare" and made["key"] and made["status"] == "active"
            assert {t["name"] for t in client.tokens()} == {"main", "spare"}
            assert all("key" not in t for t in client.tokens())
            with Client(url, made["key"]) as spare:
                assert [t["name"] for t in spare.tokens() if t["id"] == made["id"]] == ["spare"]
            assert client.revoke_token(made["id"])["status"] == "revoked"
            assert client.revoke_token(made["id"])["status"] == "revoked"  # again: nothing changes
        with Client(url, made["key"]) as revoked, pytest.raises(SasApiError) as raised:
            revoked.get(str(uuid.uuid4()))
        assert raised.value.status == 401
        # The same through the command.
        at = Service(url=url, sandbox=demo.sandbox)
        created = sas(at, key, "tokens", "create", "ci", "--lifetime-days", "1", "--json")
        assert created.returncode == 0, created.stderr
        ci = json.loads(created.stdout)
        listed = sas(at, ci["key"], "tokens", "list")
        assert listed.returncode == 0, listed.stderr
        header, *rows = listed.stdout.splitlines()
        assert header.split() == ["ID", "NAME", "PREFIX", "STATUS", "EXPIRES", "LAST", "USED"]
        assert len(rows) == 3
        shown = sas(at, key, "tokens", "create", "shown")
        assert shown.returncode == 0 and "key: " in shown.stdout and "this once" in shown.stderr
        revoked_by_cli = sas(at, key, "tokens", "revoke", str(ci["id"]), "--json")
        assert revoked_by_cli.returncode == 0 and json.loads(revoked_by_cli.stdout)["status"] == "revoked"
    assert ApiToken.objects.get(pk=ci["id"]).revoked_at is not None
