"""Flow control of calls by key (scheduler.services.capacity): a call step's `concurrency` and
`rate`, a pool's keyed `rate`, and calls held while every endpoint asked to wait (Retry-After).
Calls over a limit wait for the capacity pump (`waiting`, no worker, no queue row) and say why."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from agents.fake import FakeRemote
from agents.models import AgentEndpoint, AgentPool
from agents.outcome import Outcome
from scheduler.models import Step, StepStatus
from scheduler.serializers import rendering
from scheduler.services import capacity, job_submit
from scheduler.services.capacity import forget_limits_cache, pump
from scheduler.services.dispatch import step_dispatch
from tests.api.support import V1, client_for, make_user
from tests.conftest import run_queued_tasks
from tests.factories import make_pool, make_workflow, step

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

W = StepStatus.WAITING
D = StepStatus.DISPATCHED


@pytest.fixture(autouse=True)
def _fresh_limits() -> None:
    forget_limits_cache()


def keyed_step(name: str = "charge", **flow: Any) -> dict[str, Any]:
    return {**step(name), **flow}


def submit(workflow: str, **payload: Any) -> Any:
    """A job, and the pump its commit asks for (on-commit callbacks do not run in these tests)."""
    job = job_submit(workflow=workflow, input=payload).job
    pump(dispatch=step_dispatch)
    return job


def calls_of(job: Any) -> Step:
    return Step.objects.get(job=job, name="charge")


def in_flight(key: str) -> int:
    return Step.objects.filter(concurrency_key__endswith=f":{key}", status=D).count()


def test_a_steps_concurrency_holds_its_calls_in_flight_per_key_to_the_limit(fake_remote: FakeRemote) -> None:
    make_workflow("pay", keyed_step(concurrency={"key": "input.account", "limit": 1}))
    a1, a2, a3 = (submit("pay", account="a") for _ in range(3))
    b1 = submit("pay", account="b")
    assert [calls_of(j).status for j in (a1, a2, a3, b1)] == [D, W, W, D]
    waiting = calls_of(a2)
    assert waiting.concurrency_key == "pay.charge:a" and waiting.deadline is None
    assert waiting.attempts.count() == 0  # no attempt, no queue row: nothing holds a worker
    # The call in flight ends: the key's next call, oldest first, goes out, one at a time.
    for expected in (a2, a3):
        run_queued_tasks()
        pump(dispatch=step_dispatch)
        assert in_flight("a") <= 1
        assert calls_of(expected).status == D
    run_queued_tasks()
    assert all(calls_of(j).status == StepStatus.SUCCEEDED for j in (a1, a2, a3, b1))


def test_a_call_whose_key_reads_nothing_is_not_limited(fake_remote: FakeRemote) -> None:
    make_workflow("pay", keyed_step(concurrency={"key": "input.account", "limit": 1}))
    jobs = [submit("pay", other=n) for n in range(3)]
    assert [calls_of(j).status for j in jobs] == [D, D, D]
    assert {calls_of(j).concurrency_key for j in jobs} == {""}


def test_a_keys_backlog_does_not_hold_back_another_keys_first_call(fake_remote: FakeRemote) -> None:
    make_workflow("pay", keyed_step(concurrency={"key": "input.account", "limit": 2}))
    backlog = [submit("pay", account="a") for _ in range(capacity.BATCH + 20)]
    assert Step.objects.filter(status=W).count() == capacity.BATCH + 18
    late = submit("pay", account="b")
    # Submitted after more waiting calls of key a than the pump reads at once: it goes at once.
    assert calls_of(late).status == D
    assert in_flight("a") == 2
    assert sum(calls_of(j).status == D for j in backlog) == 2


def test_a_waiting_call_says_which_key_it_waits_for(fake_remote: FakeRemote) -> None:
    make_workflow("pay", keyed_step(concurrency={"key": "input.account", "limit": 1}))
    client = client_for(make_user("sam", "submitters"))
    body = {"workflow": "pay", "input": {"account": "acct-7"}}
    ids = []
    for _ in range(2):
        ids.append(client.post(f"{V1}/jobs/", body, format="json").json()["id"])
        pump(dispatch=step_dispatch)
    document = client.get(f"{V1}/jobs/{ids[1]}/").json()
    charge = next(s for s in document["steps"] if s["name"] == "charge")
    assert charge["status"] == W
    assert charge["waiting_for"] == {"kind": "concurrency", "key": "acct-7", "limit": 1}
    # The job's document (built in SQL on PostgreSQL) and the Python rendering say the same.
    assert rendering.waiting_for(Step.objects.get(job_id=ids[1], name="charge")) == charge["waiting_for"]


def test_a_steps_rate_starts_at_most_its_burst_per_key_and_says_so(fake_remote: FakeRemote) -> None:
    make_workflow("pay", keyed_step(rate={"key": "input.merchant", "per_second": 0.01, "burst": 2}))
    jobs = [submit("pay", merchant="m-3") for _ in range(4)]
    other = submit("pay", merchant="m-4")
    assert [calls_of(j).status for j in jobs] == [D, D, W, W]
    assert calls_of(other).status == D  # another key has its own bucket
    pump(dispatch=step_dispatch)
    assert [calls_of(j).status for j in jobs] == [D, D, W, W]
    held = calls_of(jobs[2])
    assert held.rate_key == "step:pay.charge:m-3"
    client = client_for(make_user("olga", "operators"))
    steps = client.get(f"{V1}/jobs/{jobs[2].pk}/").json()["steps"]
    waiting_for = steps[0]["waiting_for"]
    assert {k: waiting_for[k] for k in ("kind", "key", "pool")} == {
        "kind": "rate",
        "key": "m-3",
        "pool": "local",
    }
    # When its bucket has a token next: a tenth of a call a second, some 100 s on.
    assert waiting_for["until"] and held.not_before is not None
    assert 50 < (held.not_before - timezone.now()).total_seconds() <= 101
    assert rendering.waiting_for(Step.objects.get(pk=held.pk)) == waiting_for
    # The light read the operator actions answer with renders the same.
    from scheduler import selectors
    from scheduler.models import Job
    from scheduler.serializers import JobSerializer

    job = Job.objects.get(pk=jobs[2].pk)
    operator = User.objects.get(username="olga")
    assert (
        JobSerializer(selectors.job_for_reading(user=operator, job_id=job.pk)).data == JobSerializer(job).data
    )


def test_a_pools_keyed_rate_is_shared_by_every_step_that_calls_it(fake_remote: FakeRemote) -> None:
    make_pool()
    AgentPool.objects.filter(name="local").update(
        rate={"key": "input.merchant", "per_second": 0.01, "burst": 1}
    )
    forget_limits_cache()
    make_workflow("pay", step("charge"))
    make_workflow("refund", step("charge"))
    first = submit("pay", merchant="m")
    second = submit("refund", merchant="m")
    third = submit("refund", merchant="n")
    assert [calls_of(j).status for j in (first, second, third)] == [D, W, D]
    pump(dispatch=step_dispatch)
    assert calls_of(second).status == W and calls_of(second).rate_key == "pool:local:m"


def test_a_rate_lets_the_next_call_go_once_a_token_is_back(fake_remote: FakeRemote) -> None:
    make_workflow("pay", keyed_step(rate={"key": "input.merchant", "per_second": 1000, "burst": 1}))
    jobs = [submit("pay", merchant="m") for _ in range(3)]
    # A thousand a second: the pump's own pace lets the others go within a few rounds.
    deadline = timezone.now() + dt.timedelta(seconds=5)
    while Step.objects.filter(status=W).exists() and timezone.now() < deadline:
        pump(dispatch=step_dispatch)
    assert [calls_of(j).status for j in jobs] == [D, D, D]


def test_no_call_goes_to_a_pool_whose_every_endpoint_asked_to_wait(fake_remote: FakeRemote) -> None:
    pool = make_pool("remote", kind="http", endpoints=[{"url": "https://remote.example.com"}])
    make_workflow("pay", step("charge", pool="remote", path="/charge", compensation=""))
    until = timezone.now() + dt.timedelta(minutes=5)
    AgentEndpoint.objects.filter(pool=pool).update(wait_asked_until=until, circuit_open_until=until)
    job = submit("pay")
    held = calls_of(job)
    assert held.status == W and held.not_before == until and held.attempts.count() == 0
    assert pump(dispatch=step_dispatch)[0] == 0
    client = client_for(make_user("olga", "operators"))
    charge = client.get(f"{V1}/jobs/{job.pk}/").json()["steps"][0]
    assert charge["waiting_for"]["kind"] == "backoff" and charge["waiting_for"]["pool"] == "remote"
    # The time asked passes: the pump sends it.
    past = timezone.now() - dt.timedelta(seconds=1)
    AgentEndpoint.objects.filter(pool=pool).update(wait_asked_until=past, circuit_open_until=past)
    assert pump(dispatch=step_dispatch)[0] == 1
    assert calls_of(job).status == D and calls_of(job).not_before is None


def test_the_flow_fields_of_a_step_and_a_pool_are_checked_when_saved() -> None:
    client = client_for(make_user("ada", "administrators"))
    make_workflow("base", step("s"))
    bad = [
        ({"concurrency": {"key": "input.a", "limit": 1, "on_limit": "cancel_newest"}}, "on_limit"),
        ({"concurrency": {"key": "input.a", "limit": 0}}, "limit"),
        ({"concurrency": {"key": "steps.x", "limit": 1}}, "concurrency.key"),
        ({"concurrency": {"key": "results.later", "limit": 1}}, "concurrency.key"),
        ({"rate": {"key": "input.a", "per_second": 0}}, "per_second"),
        ({"rate": {"key": "input.[", "per_second": 1}}, "rate"),
        ({"rate": {"key": "input.a", "per_second": 1, "burst": 0}}, "burst"),
        ({"rate": {"per_second": 1, "extra": 1}}, "extra"),
    ]
    for fields, said in bad:
        answer = client.post(
            f"{V1}/workflows/", {"name": "w", "steps": [{**step("s"), **fields}]}, format="json"
        )
        assert answer.status_code == 400, (fields, answer.content)
        assert said in answer.content.decode(), (fields, answer.content)
    flow = {"concurrency": {"key": "input.account", "limit": 2}, "rate": {"key": "", "per_second": 5}}
    created = client.post(f"{V1}/workflows/", {"name": "w", "steps": [{**step("s"), **flow}]}, format="json")
    assert created.status_code == 201, created.content
    saved = created.json()["steps"][0]
    assert saved["concurrency"] == {"key": "input.account", "limit": 2}
    assert saved["rate"] == {"key": "", "per_second": 5.0, "burst": 1}
    # What was read back is accepted as it is (a round trip).
    again = client.put(f"{V1}/workflows/w/", {**created.json(), "steps": [saved]}, format="json")
    assert again.status_code == 200, again.content
    for rate in ({"key": "input.[", "per_second": 1}, {"per_second": -1}):
        refused = client.patch(f"{V1}/pools/local/", {"rate": rate}, format="json")
        assert refused.status_code == 400, refused.content
    assert AgentPool.objects.get(name="local").rate is None
    changed = client.patch(f"{V1}/pools/local/", {"rate": {"key": "input.m", "per_second": 2}}, format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["rate"] == {"key": "input.m", "per_second": 2.0, "burst": 1}


def test_metrics_count_the_waiting_calls_by_what_holds_them(fake_remote: FakeRemote) -> None:
    from django.test import Client

    from tests.supervisor.test_operations import metrics, total

    make_workflow("pay", keyed_step(concurrency={"key": "input.account", "limit": 1}))
    make_workflow("rated", keyed_step(rate={"key": "input.merchant", "per_second": 0.01}))
    for _ in range(3):
        submit("pay", account="a")
    for _ in range(2):
        submit("rated", merchant="m")
    found = metrics(Client())
    assert total(found, "sas_calls_waiting", reason="concurrency") == 2
    assert total(found, "sas_calls_waiting", reason="rate") == 1
    assert total(found, "sas_calls_waiting", reason="capacity") == 0
    assert total(found, "sas_calls_waiting", reason="backoff") == 0
    # Bounded: one series per reason, whatever the keys.
    assert len([k for k in found if k[0] == "sas_calls_waiting"]) == 4


def test_the_console_says_what_a_waiting_call_waits_for(fake_remote: FakeRemote, client: Any) -> None:
    make_workflow("pay", keyed_step(concurrency={"key": "input.account", "limit": 1}))
    make_workflow("rated", keyed_step(rate={"key": "input.merchant", "per_second": 0.01}))
    holder = submit("pay", account="acct-7")
    behind = submit("pay", account="acct-7")
    submit("rated", merchant="m-3")
    throttled = submit("rated", merchant="m-3")
    client.force_login(make_user("olga", "operators"))
    page = client.get(f"/ops/jobs/{behind.pk}/").content.decode()
    assert f"key acct-7: 1 of 1 in flight, behind job {holder.pk}" in page
    page = client.get(f"/ops/jobs/{throttled.pk}/").content.decode()
    assert "Waiting for its rate" in page and "the rate of m-3 (step:rated.charge)" in page


def test_the_keys_page_lists_the_calls_keys_and_the_rates_holding_calls(
    fake_remote: FakeRemote, client: Any
) -> None:
    make_workflow("pay", keyed_step(concurrency={"key": "input.account", "limit": 1}))
    make_workflow("rated", keyed_step(rate={"key": "input.merchant", "per_second": 0.01}))
    for _ in range(3):
        submit("pay", account="acct-7")
    for _ in range(2):
        submit("rated", merchant="m-3")
    client.force_login(make_user("olga", "operators"))
    page = client.get("/ops/keys/").content.decode()
    section = page[page.index('id="call-keys"') :]
    assert 'data-scope="pay.charge" data-key="acct-7"' in section
    assert "1 / 1" in section
    assert 'data-scope="step:rated.charge" data-key="m-3"' in section


def test_a_call_that_got_no_answer_keeps_its_keys_place_until_it_calls_again(
    fake_remote: FakeRemote, supervise: Any
) -> None:
    make_workflow("pay", keyed_step(concurrency={"key": "input.account", "limit": 1}))
    fake_remote.script("charge", Outcome.NO_ANSWER)
    first = submit("pay", account="a")
    second = submit("pay", account="a")
    assert [calls_of(j).status for j in (first, second)] == [D, W]
    run_queued_tasks()  # the first call: no answer (it may still be running at the remote)
    assert calls_of(first).last_outcome == Outcome.NO_ANSWER
    for _ in range(3):
        supervise()  # the retry is decided (and parked: the step's key is limited)
        pump(dispatch=step_dispatch)
        # Whatever the first step's status on the way, the second's call never goes beside it.
        assert calls_of(second).status == W
        if calls_of(first).status == D:
            break
    assert calls_of(first).status == D  # its own retry takes its earlier call's place
    run_queued_tasks()
    pump(dispatch=step_dispatch)
    assert calls_of(first).status == StepStatus.SUCCEEDED and calls_of(second).status == D


def test_retries_that_keep_their_keys_places_go_out_behind_a_backlog_longer_than_the_pump_reads(
    fake_remote: FakeRemote, supervise: Any
) -> None:
    """The key's places are held by its two waiting retries (no answer yet); the calls that hold
    no place, more than the pump reads per key and all older, can never go before them. The pump
    must look at the retries, not at a batch of calls that can only wait."""
    make_workflow("pay", keyed_step(concurrency={"key": "input.account", "limit": 2}))
    fake_remote.script("charge", Outcome.NO_ANSWER, Outcome.NO_ANSWER)
    first = [submit("pay", account="a") for _ in range(2)]
    backlog = [submit("pay", account="a") for _ in range(capacity.PER_KEY + 2)]
    assert [calls_of(j).status for j in first] == [D, D]
    run_queued_tasks()  # both calls: no answer (they may still be running at the remote)
    assert all(calls_of(j).last_outcome == Outcome.NO_ANSWER for j in first)
    for _ in range(4):
        supervise()  # the retries are decided, then parked behind the backlog (the key is limited)
        pump(dispatch=step_dispatch)
        if all(calls_of(j).status == D for j in first):
            break
    assert [calls_of(j).status for j in first] == [D, D]
    assert all(calls_of(j).status == W for j in backlog)  # the key's two places, no more
    run_queued_tasks()
    pump(dispatch=step_dispatch)
    assert in_flight("a") == 2 and all(calls_of(j).status == StepStatus.SUCCEEDED for j in first)
