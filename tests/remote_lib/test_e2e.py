"""End to end: remotes built on sas_remote, run as their own processes, called by real `qcluster`
processes against PostgreSQL (and, for callbacks and heartbeats, the web server where they
arrive): an operation delivered again after its deadline has one effect; work answered with 202
completes its step by callback, its heartbeats on the attempt; the callbacks and alerts the
service signs verify with the library, and altered or stale ones do not; the example order remote
passes the demo's order workflow with each effect once."""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import call_command
from sas_remote import VerificationError, verify

from agents.outcome import Outcome
from scheduler.models import (
    AlertSubscription,
    Attempt,
    Delivery,
    DeliveryKind,
    DeliveryStatus,
    Event,
    EventKind,
    Job,
    JobStatus,
    RemediationPolicy,
    Step,
)
from scheduler.services import job_submit
from supervisor.policies import policy_update
from supervisor.signing import callback_secret_get
from supervisor.subscriptions import subscription_create
from testbed.definitions import ensure_policy, ensure_pool, ensure_workflow
from testbed.processes import ReceiverProcess, WebProcess, spawn_listening, stop_piped
from tests.api.support import make_user
from tests.e2e.test_async_agents import start_clusters, wait_settled
from tests.processes import ARTIFACTS, ROOT, Cluster, child_env, free_port, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

EXAMPLE = ROOT / "clients" / "python-remote" / "examples" / "orders_remote.py"
#: The header the test remote requires of every caller, as NAME:VALUE.
SECRET = "X-Remote-Key:e2e-remote-key"


@dataclass
class RemoteProcess:
    """A remote built on sas_remote, in its own process."""

    args: list[str]
    log: Path
    port: int
    proc: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> RemoteProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.proc = spawn_listening(self.args, self.log)
        return self

    def stop(self) -> None:
        stop_piped(self.proc)

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = httpx.get(f"{self.url}/stats", timeout=10).json()
        return result


@pytest.fixture
def remote(tmp_path: Path, web: WebProcess) -> Iterator[RemoteProcess]:
    port = free_port()
    args = [sys.executable, "-m", "tests.remote_lib.remote_app", "--port", str(port)]
    # Results of accepted work go to the web server the clusters name in their callback URLs only.
    args += ["--callback-origin", f"{web.url}/api/v1/callbacks/"]
    process = RemoteProcess(
        [*args, "--db", str(tmp_path / "remote.sqlite3"), "--wait-seconds", "5", "--secret-header", SECRET],
        ARTIFACTS / f"remote-lib-{port}.log",
        port,
    ).start()
    yield process
    process.stop()


@pytest.fixture
def web() -> Iterator[WebProcess]:
    process = WebProcess(port=free_port(), env=child_env(), log=ARTIFACTS / "web-remote-lib.log").start()
    yield process
    process.stop()


@pytest.fixture
def clusters_for(web: WebProcess) -> Iterator[Callable[..., list[Cluster]]]:
    """Clusters whose callback URLs point at `web`; stopped at the end of the test."""
    started: list[Cluster] = []

    def start(*names: str, **env: Any) -> list[Cluster]:
        started.extend(start_clusters(web, *names, **env))
        return started

    yield start
    for cluster in started:
        cluster.stop()


def one_step(name: str, remote: RemoteProcess, path: str, **policy: Any) -> None:
    """A workflow of one step on `remote`, whose endpoint sends the secret header it requires."""
    name_, value = SECRET.split(":")
    endpoint = {"url": remote.url, "secret_header_name": name_, "secret_header_value": value}
    ensure_pool(f"{name}-pool", kind="http", endpoints=[endpoint])
    ensure_policy(
        f"{name}-policy",
        max_attempts=5,
        backoff_initial_seconds=0.2,
        backoff_max_seconds=0.2,
        backoff_jitter=0,
        on_exhausted="fail",
        **policy,
    )
    ensure_workflow(
        name, [{"name": "work", "pool": f"{name}-pool", "path": path, "policy": f"{name}-policy"}]
    )


def test_an_operation_delivered_again_after_its_deadline_has_one_effect(
    remote: RemoteProcess, clusters_for: Callable[..., list[Cluster]]
) -> None:
    # The first attempt outlives its 1 s deadline (2.5 s of work): the scheduler records no
    # answer and calls again with the same operation ID while the first delivery still runs.
    one_step("lib_sync", remote, "/sync", timeout_seconds=1)
    clusters_for("c1")
    job = job_submit(workflow="lib_sync", input={"sleep_ms": 2500}).job
    assert wait_settled([job.pk], timeout=90) == {job.pk: JobStatus.SUCCEEDED}
    step = Step.objects.get(job=job, name="work")
    attempts = list(Attempt.objects.filter(step=step).order_by("number"))
    assert attempts[0].outcome == Outcome.NO_ANSWER and attempts[-1].outcome == Outcome.SUCCEEDED
    stats = remote.stats()
    assert stats["deliveries"][step.operation_id] == len(attempts) >= 2
    assert stats["effects"] == {step.operation_id: 1}
    assert step.output == {"done": step.operation_id}


def test_accepted_work_completes_its_step_by_callback_with_heartbeats_on_the_attempt(
    remote: RemoteProcess, clusters_for: Callable[..., list[Cluster]]
) -> None:
    # 4 s of work against a 3 s timeout: only its heartbeats (every 0.5 s, the policy asking for
    # one every 2 s) keep the attempt alive that long.
    one_step("lib_later", remote, "/later", timeout_seconds=3, heartbeat_seconds=2)
    clusters_for("c1")
    job = job_submit(workflow="lib_later", input={"beats": 8, "beat_ms": 500}).job
    assert wait_settled([job.pk], timeout=90) == {job.pk: JobStatus.SUCCEEDED}
    step = Step.objects.get(job=job, name="work")
    (attempt,) = Attempt.objects.filter(step=step)
    assert attempt.outcome == Outcome.SUCCEEDED
    assert Event.objects.filter(step=step, kind=EventKind.CALL_ACCEPTED).count() == 1
    assert attempt.heartbeat_at is not None and attempt.heartbeat_details == {"beat": 8}
    assert attempt.started_at is not None and attempt.finished_at is not None
    assert (attempt.finished_at - attempt.started_at).total_seconds() > 3
    assert step.output == {"beats": 8}
    assert remote.stats()["effects"] == {step.operation_id: 1}


def test_the_callbacks_and_alerts_the_service_signs_verify_with_the_library(
    remote: RemoteProcess, clusters_for: Callable[..., list[Cluster]]
) -> None:
    receiver = ReceiverProcess(port=free_port(), log=ARTIFACTS / "remote-lib-receiver.log").start()
    try:
        one_step("lib_ok", remote, "/sync", timeout_seconds=5)
        one_step("lib_refused", remote, "/refuse", timeout_seconds=5)
        subscription_create(
            name="lib-oncall", actor=None, webhook_url=f"{receiver.url}/alerts", kinds=["job_failed"]
        )
        sam = make_user("sam", "submitters")
        clusters_for("c1")
        jobs = [
            job_submit(
                workflow=workflow, input={}, submitter=sam, callback_url=f"{receiver.url}/callbacks"
            ).job
            for workflow in ("lib_ok", "lib_refused")
        ]
        assert wait_settled([j.pk for j in jobs], timeout=90) == {
            jobs[0].pk: JobStatus.SUCCEEDED,
            jobs[1].pk: JobStatus.FAILED,
        }
        wait_until(
            lambda: Delivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == 3,
            timeout=60,
            interval=0.25,
            message="two callbacks and an alert delivered",
        )
        assert set(Delivery.objects.values_list("kind", flat=True)) == {
            DeliveryKind.CALLBACK,
            DeliveryKind.WEBHOOK,
        }
        secrets = {
            "/callbacks": callback_secret_get(sam).signing_secret,
            "/alerts": AlertSubscription.objects.get(name="lib-oncall").signing_secret,
        }
        received = receiver.received()["accepted"]
        assert Counter(m["path"] for m in received) == {"/callbacks": 2, "/alerts": 1}
        for message in received:
            raw, headers, secret = message["body"].encode(), message["webhook"], secrets[message["path"]]
            sent = int(headers["webhook-timestamp"])
            body = verify(raw, headers, secret, now=sent + 1)
            assert isinstance(body, dict) and body
            with pytest.raises(VerificationError, match="no signature matches"):
                verify(raw.replace(b"}", b', "x": 1}', 1), headers, secret, now=sent + 1)
            with pytest.raises(VerificationError, match="replayed or stale"):
                verify(raw, headers, secret, now=sent + 301)
            other = secrets["/alerts" if message["path"] == "/callbacks" else "/callbacks"]
            with pytest.raises(VerificationError, match="no signature matches"):
                verify(raw, headers, other, now=sent + 1)
    finally:
        receiver.stop()


def test_the_example_order_remote_passes_the_order_workflow_with_each_effect_once(
    tmp_path: Path, clusters: Callable[..., Cluster]
) -> None:
    port = free_port()
    log = ARTIFACTS / f"orders-remote-{port}.log"
    example = RemoteProcess(
        [sys.executable, str(EXAMPLE), str(port), str(tmp_path / "orders.sqlite3")], log, port
    ).start()
    try:
        call_command(
            "load_demo", sandbox_url=example.url, backup_url=example.url.replace("127.0.0.1", "localhost")
        )
        for policy in RemediationPolicy.objects.all():
            policy_update(
                policy.pk,
                actor=None,
                changes={"timeout_seconds": 3, "backoff_initial_seconds": 0.2, "backoff_max_seconds": 1},
            )
        clusters("c1")
        amounts = [10, 20, 30, 40, 5000]  # the card's limit refuses the last charge
        jobs = [
            job_submit(workflow="order_fulfilment", input={"sku": "A1", "quantity": 1, "amount": a}).job
            for a in amounts
        ]
        statuses = wait_settled([j.pk for j in jobs], timeout=120)
        assert [statuses[j.pk] for j in jobs] == [JobStatus.SUCCEEDED] * 4 + [JobStatus.COMPENSATED]

        expected: dict[str, str] = {}  # operation ID -> the action it must have caused, once
        for job in jobs[:4]:
            for step in Step.objects.filter(job=job):
                expected[step.operation_id] = {
                    "reserve": "inventory.reserve",
                    "charge": "payments.charge",
                }.get(step.name, "shipping.schedule")
                assert step.output["action"] == expected[step.operation_id]
        refused = Job.objects.get(pk=jobs[4].pk)
        reserve = Step.objects.get(job=refused, name="reserve", kind="action")
        release = Step.objects.get(job=refused, name="reserve.compensate", kind="compensation")
        expected[reserve.operation_id] = "inventory.reserve"
        expected[release.operation_id] = "inventory.release"

        def effects() -> Counter[tuple[str, str]]:
            lines = re.findall(r"^effect (\S+) (\S+)$", log.read_text(), flags=re.MULTILINE)
            return Counter((op, action) for action, op in lines)

        wait_until(lambda: len(effects()) >= len(expected), timeout=10, message="the effects in the log")
        assert effects() == Counter(expected.items())
    finally:
        example.stop()
