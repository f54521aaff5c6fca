"""The production stack in real processes, on PostgreSQL: gunicorn with the repository's
configuration (2 workers) and 2 `qcluster` processes, the sandbox remote, and a webhook receiver
that refuses the first tries of every message.

One run checks what an operator of the service relies on: the probes, /metrics against the
database, completion callbacks and alerts delivered exactly once per key with valid signatures,
JSON logs carrying the ids and no secret, the clusters' heartbeats and their liveness probe,
/supervisorz going 503 when the supervisors stop while /readyz stays 200, and every
process stopping on SIGTERM (to the whole process group, as systemd sends it, and to the parent
alone) within its graceful timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db.models import Count
from prometheus_client.parser import text_string_to_metric_families
from standardwebhooks import Webhook

from agents.models import AgentEndpoint
from scheduler.models import Attempt, Delivery, DeliveryStatus, Job, Step
from supervisor.models import ClusterHeartbeat, MetricsCheckpoint, SupervisorLease
from supervisor.subscriptions import subscription_create
from testbed.bench.definitions import api_token
from testbed.processes import ROOT as ROOT_DIR
from testbed.processes import ClusterProcess, ReceiverProcess, WebProcess
from tests.e2e.test_qcluster import TERMINAL, load_demo
from tests.processes import ARTIFACTS, Sandbox, child_env, free_port, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def cluster_check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`manage.py cluster_check` on this host, as a cluster's liveness probe runs it."""
    return subprocess.run(
        [sys.executable, "manage.py", "cluster_check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT_DIR,
    )


CALLBACK_SECRET = "callback-secret-7f3a9c2e51"
METRICS_TOKEN = "metrics-token-c41d07be9a"
ENDPOINT_SECRET = "endpoint-secret-b9e2f5a8d3"
STOP_SECONDS = 15
FAIL_FIRST = 2


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10)
    assert response.status_code == 200, response.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def total(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return sum(
        value
        for (sample, sample_labels), value in found.items()
        if sample == name and all(dict(sample_labels).get(k) == v for k, v in labels.items())
    )


def stops_by_itself(proc: Any, timeout: float = 120) -> None:
    """Wait for a process sent SIGTERM to exit on its own; `timeout` is far above its graceful
    stop time, a guard against a hang rather than a measure of speed."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"process {proc.pid} still running {timeout}s after SIGTERM") from None


def json_lines(path: Path) -> list[dict[str, Any]]:
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            raise AssertionError(f"{path.name}: not a JSON line: {line[:300]}") from None
    return parsed


def test_the_production_stack(sandbox: Sandbox, tmp_path: Path) -> None:
    receiver = ReceiverProcess(
        port=free_port(), log=ARTIFACTS / "prod-receiver.log", fail_first=FAIL_FIRST
    ).start()
    load_demo(sandbox)
    AgentEndpoint.objects.update(secret_header_name="X-Api-Key", secret_header_value=ENDPOINT_SECRET)
    sandbox.config(decline_over=100)
    oncall = subscription_create(
        name="oncall",
        actor=None,
        webhook_url=f"{receiver.url}/alerts",
        kinds=["job_compensated", "job_failed", "step_needs_attention"],
    )
    token = api_token()
    env = child_env(
        SAS_LOG_FORMAT="json",
        SAS_LOG_LEVEL="INFO",
        SAS_CALLBACK_SECRET=CALLBACK_SECRET,
        SAS_METRICS_TOKEN=METRICS_TOKEN,
        SAS_METRICS_SETTLE_SECONDS=0,
        SAS_DELIVERY_RETRY_SECONDS=0.2,
        # The receiver's 503s to every message's first tries open its breaker: briefly here.
        SAS_DELIVERY_BREAKER_OPEN_SECONDS=0.5,
        SAS_Q_STOP_SECONDS=STOP_SECONDS,
        SAS_WEB_WORKERS=2,
        SAS_WEB_GRACEFUL_TIMEOUT=STOP_SECONDS,
        DJANGO_DEBUG=0,
    )
    logs = {name: ARTIFACTS / f"prod-{name}.log" for name in ("web", "c1", "c2")}
    for log in logs.values():
        log.unlink(missing_ok=True)
    web = WebProcess(port=free_port(), env=env, log=logs["web"], gunicorn=True)
    clusters = [ClusterProcess(name=n, env=env, log=logs[n]) for n in ("c1", "c2")]
    try:
        web.start()
        for cluster in clusters:
            cluster.start()
        base = web.url

        # Probes: alive at once; ready once a supervisor has scanned.
        health = httpx.get(f"{base}/healthz", timeout=5)
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        wait_until(
            lambda: httpx.get(f"{base}/readyz", timeout=5).status_code == 200,
            timeout=60,
            interval=0.25,
            message="/readyz 200",
        )
        wait_until(
            lambda: httpx.get(f"{base}/supervisorz", timeout=5).status_code == 200,
            timeout=60,
            interval=0.25,
            message="/supervisorz 200",
        )
        # Both clusters beat, and the liveness probe finds one on this host.
        wait_until(
            lambda: ClusterHeartbeat.objects.filter(stopped_at__isnull=True).count() == 2,
            timeout=30,
            interval=0.25,
            message="two cluster heartbeats",
        )
        probe = cluster_check(env)
        assert probe.returncode == 0 and "live" in probe.stdout, probe.stderr
        assert httpx.get(f"{base}/metrics", timeout=5).status_code == 401
        scrape(base)  # the counters start here
        start = MetricsCheckpoint.objects.get().event_id

        # Jobs through the API: most succeed, the declined ones are compensated.
        client = httpx.Client(base_url=base, headers={"Authorization": f"Token {token}"}, timeout=30)
        jobs = []
        for i in range(10):
            body = {
                "workflow": "order_fulfilment",
                "input": {"sku": "A1", "quantity": 1, "amount": 500 if i % 5 == 0 else 10},
                "callback_url": f"{receiver.url}/callbacks",
            }
            response = client.post("/api/v1/jobs/", json=body)
            assert response.status_code == 201, response.text
            jobs.append(response.json()["id"])
        wait_until(
            lambda: Job.objects.filter(pk__in=jobs, status__in=TERMINAL).count() == len(jobs),
            timeout=90,
            interval=0.25,
            message="every job settled",
        )
        statuses = dict(Job.objects.filter(pk__in=jobs).values_list("pk", "status"))
        assert Counter(statuses.values()) == {"succeeded": 8, "compensated": 2}
        wait_until(
            lambda: not Delivery.objects.exclude(status=DeliveryStatus.DELIVERED).exists(),
            timeout=60,
            interval=0.25,
            message="every callback and alert delivered",
        )

        # The receiver got each message exactly once, after refusing its first tries, signed.
        got = receiver.received()
        keys = [a["key"] for a in got["accepted"]]
        assert len(keys) == len(set(keys)), Counter(keys).most_common(3)
        callbacks = {a["key"]: a for a in got["accepted"] if a["path"] == "/callbacks"}
        assert set(callbacks) == {f"{pk}:{status}" for pk, status in statuses.items()}
        alerts = [a for a in got["accepted"] if a["path"] == "/alerts"]
        assert sorted(json.loads(a["body"])["alert"] for a in alerts) == ["job_compensated"] * 2
        assert all(got["tries"][key] == FAIL_FIRST + 1 for key in keys)
        # Each receiver verifies with its own secret, as the Standard Webhooks package does: the
        # callbacks with the submitter's (read over the API), the alerts with the subscription's.
        # The former shared signature is deprecated, and not sent unless asked for.
        callback_secret = client.get("/api/v1/callback-secret/").json()["signing_secret"]
        for accepted in got["accepted"]:
            assert accepted["signature"] == ""
            secret = callback_secret if accepted["path"] == "/callbacks" else oncall.signing_secret
            Webhook(secret).verify(accepted["body"], accepted["webhook"])
            assert accepted["webhook"]["webhook-id"] == accepted["key"]
        for key, accepted in callbacks.items():
            summary = json.loads(accepted["body"])
            assert set(summary) == {"id", "workflow", "status", "result", "finished_at"}
            assert key == f"{summary['id']}:{summary['status']}" and summary["workflow"] == "order_fulfilment"
        shown = client.get(f"/api/v1/jobs/{jobs[1]}/").json()
        assert shown["callbacks"][0]["status"] == "delivered" and shown["callbacks"][0]["tries"] == 3

        # /metrics, through either worker, equals the database.
        found = scrape(base)
        assert total(found, "sas_jobs_submitted_total", workflow="order_fulfilment") == len(jobs)
        assert total(found, "sas_jobs_settled_total", status="succeeded") == 8
        assert total(found, "sas_jobs_settled_total", status="compensated") == 2
        attempts = {
            (r["pool__name"], r["outcome"]): r["n"]
            for r in Attempt.objects.filter(step__job_id__in=jobs)
            .exclude(outcome="")
            .values("pool__name", "outcome")
            .annotate(n=Count("pk"))
        }
        for (pool, outcome), n in attempts.items():
            assert total(found, "sas_attempts_total", pool=pool, outcome=outcome) == n, (pool, outcome)
        assert total(found, "sas_attempts_total") == sum(attempts.values())
        assert (
            total(found, "sas_call_latency_seconds_count")
            == Attempt.objects.filter(step__job_id__in=jobs)
            .exclude(outcome="")
            .exclude(latency_ms=None)
            .count()
        )
        assert total(found, "sas_steps_live") == 0 and total(found, "sas_queue_depth") == 0
        assert total(found, "sas_supervisor_lease_token") == SupervisorLease.objects.get().token
        assert 0 <= total(found, "sas_supervisor_last_scan_age_seconds") < 30
        assert MetricsCheckpoint.objects.get().event_id > start
        for _ in range(4):  # every worker answers the same totals
            assert total(scrape(base), "sas_jobs_submitted_total") == len(jobs)

        # Stop the supervisors: one by a SIGTERM to its whole group (systemd's default), one by
        # a SIGTERM to the parent alone. Both stop by themselves, workers and pusher included.
        first, second = clusters
        assert first.proc is not None and second.proc is not None
        os.killpg(first.proc.pid, signal.SIGTERM)
        stops_by_itself(first.proc)
        os.kill(second.proc.pid, signal.SIGTERM)
        stops_by_itself(second.proc)
        for cluster in clusters:
            # No worker or pusher left running (a dead one may linger as a zombie until init
            # reaps it).
            assert cluster.proc is not None
            group = subprocess.run(
                ["ps", "-o", "pid=,stat=", "-g", str(cluster.proc.pid)],
                capture_output=True,
                text=True,
                check=False,
            )
            running = [line for line in group.stdout.splitlines() if line.split()[1:2] != ["Z"]]
            assert running == [], group.stdout

        def supervisor_stale() -> bool:
            response = httpx.get(f"{base}/supervisorz", timeout=5)
            return response.status_code == 503 and "supervisor" in response.json()["reason"]

        wait_until(
            supervisor_stale, timeout=20, interval=0.25, message="/supervisorz 503 without a supervisor"
        )
        # The web tier stays ready without the clusters: submissions and callbacks are taken.
        assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200
        assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
        # Both clusters said they stopped; the probe fails.
        assert ClusterHeartbeat.objects.filter(stopped_at__isnull=False).count() == 2
        probe = cluster_check(env)
        assert probe.returncode == 1 and "stopped" not in probe.stdout

        assert web.proc is not None
        os.killpg(web.proc.pid, signal.SIGTERM)
        stops_by_itself(web.proc)
        client.close()
    finally:
        web.stop()
        for cluster in clusters:
            cluster.stop()
        receiver.stop()

    # Logs: every line of every process is a JSON object; the ids are there; no secret is.
    records = {name: json_lines(path) for name, path in logs.items()}
    finished = [r for name in ("c1", "c2") for r in records[name] if r.get("message") == "attempt finished"]
    calls = Attempt.objects.filter(step__job_id__in=jobs, kind="call").exclude(outcome="").count()
    assert len(finished) >= calls - 2  # a call whose worker was stopping may go unlogged
    operation_ids = set(Step.objects.filter(job_id__in=jobs).values_list("operation_id", flat=True))
    for record in finished:
        assert record["job_id"] in jobs and record["operation_id"] in operation_ids
        assert {"step", "attempt", "pool", "endpoint", "outcome", "latency_ms", "time", "level"} <= set(
            record
        )
    submitted = [r for r in records["web"] if r.get("message") == "job submitted"]
    assert sorted(r["job_id"] for r in submitted) == sorted(jobs)
    requests = [r for r in records["web"] if r.get("logger") == "gunicorn.access"]
    assert any(r["path"] == "/api/v1/jobs/" and r["status"] == 201 for r in requests)
    everything = "".join(path.read_text() for path in logs.values())
    for secret in (
        CALLBACK_SECRET,
        METRICS_TOKEN,
        ENDPOINT_SECRET,
        token,
        callback_secret,
        oncall.signing_secret,
    ):
        assert secret not in everything
    # An attempt's callback URL is logged without its token.
    callback_paths = [r["path"] for r in requests if "/callbacks/" in r["path"]]
    assert all(path.startswith("/api/v1/callbacks/(token)/") for path in callback_paths), callback_paths[:3]
