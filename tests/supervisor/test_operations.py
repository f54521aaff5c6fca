"""Running it in production, in-process: health and readiness probes, Prometheus metrics against
the database, completion callbacks and alerts through the outbox, tracing with the in-memory
exporter, structured log lines. The whole stack in real processes is tests/e2e/test_production.py."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth.models import User
from django.core import mail
from django.db.models import Count
from django.test import Client, override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from agents.fake import FakeRemote
from agents.models import AgentEndpoint
from agents.outcome import Outcome
from scheduler.models import (
    AlertSubscription,
    Attempt,
    Delivery,
    DeliveryKind,
    DeliveryStatus,
    Event,
    EventReaction,
    Job,
    JobStatus,
    Step,
)
from scheduler.services import job_submit
from supervisor import deliveries, probes
from supervisor.alerts import endpoint_assess_and_alert, reactions_handle, supervisor_stale_check
from supervisor.models import MetricsCheckpoint, SupervisorLease
from supervisor.scan import ScanReport
from supervisor.services import job_cancel
from supervisor.subscriptions import subscription_create
from testbed.processes import ReceiverProcess, free_port, wait_until
from tests.api.support import V1, client_for, make_user
from tests.factories import chain, failing_endpoint_history, make_policy, make_pool, make_workflow, step
from tests.processes import ARTIFACTS

pytestmark = pytest.mark.django_db
Supervise = Callable[..., ScanReport]

SECRET = "callback-secret-0123456789"


SCRAPE_TOKEN = "scrape-token-5b1e"


def metrics(client: Client, **headers: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The scrape, as {(sample name, sorted labels): value}, made as Prometheus makes it: with
    the token (outside debug /metrics is off without one)."""
    with override_settings(SAS_METRICS_TOKEN=SCRAPE_TOKEN):
        response = client.get("/metrics", headers={"Authorization": f"Bearer {SCRAPE_TOKEN}", **headers})
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return found


def total(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return sum(
        value
        for (sample, sample_labels), value in found.items()
        if sample == name and all(dict(sample_labels).get(k) == v for k, v in labels.items())
    )


# --- probes -------------------------------------------------------------------------------------


@pytest.mark.sqlite
def test_healthz_answers_without_touching_the_database(django_assert_num_queries: Any) -> None:
    with django_assert_num_queries(0):
        response = Client().get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


@pytest.mark.sqlite
def test_readyz_answers_for_this_process_whether_or_not_a_supervisor_scans(settings: Any) -> None:
    settings.SAS_SUPERVISOR_INTERVAL = 1
    response = Client().get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ready" and body["reasons"] == []
    assert body["checks"] == {"database": "ok", "migrations": "ok", "database_code": "ok"}


@pytest.mark.sqlite
def test_supervisorz_wants_a_recent_scan_and_says_why_not(supervise: Supervise, settings: Any) -> None:
    settings.SAS_SUPERVISOR_INTERVAL = 1
    client = Client()
    response = client.get("/supervisorz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "stale",
        "reason": "no supervisor has scanned yet",
        "remediation_debt": {"steps": 0, "oldest_seconds": 0.0},
    }
    supervise()
    response = client.get("/supervisorz")
    assert response.status_code == 200
    assert response.json() == {"status": "scanning", "remediation_debt": {"steps": 0, "oldest_seconds": 0.0}}
    # Three intervals without a scan: stale, and the answer names no host or holder.
    SupervisorLease.objects.update(last_scan_at=timezone.now() - dt.timedelta(seconds=10))
    response = client.get("/supervisorz")
    assert response.status_code == 503
    assert "last scan is 10s old" in response.json()["reason"]
    lease = SupervisorLease.objects.get()
    assert lease.holder and lease.holder not in response.content.decode()
    # The web tier stays ready meanwhile.
    assert client.get("/readyz").status_code == 200


def test_readyz_is_a_503_when_the_database_is_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.db import OperationalError

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("connection refused: host db.internal password=hunter2")

    monkeypatch.setattr(probes.connection, "cursor", refuse)
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["reasons"] == ["the database is unreachable"]
    assert "hunter2" not in response.content.decode()


def test_readyz_sees_unapplied_migrations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probes, "_migrated", False)
    monkeypatch.setattr(
        "django.db.migrations.executor.MigrationExecutor.migration_plan", lambda self, targets: [object()]
    )
    response = Client().get("/readyz")
    assert response.status_code == 503 and response.json()["checks"]["migrations"] == "failing"


# --- metrics ------------------------------------------------------------------------------------


def test_metrics_want_the_bearer_token_and_are_off_without_one_outside_debug(settings: Any) -> None:
    settings.SAS_METRICS_TOKEN = "tok-123"
    client = Client()
    refused = client.get("/metrics")
    assert refused.status_code == 401 and refused["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer tok-123"}).status_code == 200
    # No token: nobody who reaches the port reads them (and locks the counters' row).
    settings.SAS_METRICS_TOKEN = ""
    off = client.get("/metrics")
    assert off.status_code == 404 and "set SAS_METRICS_TOKEN" in off.json()["detail"]
    settings.DEBUG = True  # a developer's machine
    assert client.get("/metrics").status_code == 200


def test_a_burst_of_scrapes_reads_the_database_once_per_cache_period(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from supervisor import metrics as metrics_module
    from supervisor import probes

    made: list[int] = []
    real = metrics_module.exposition

    def counted() -> bytes:
        made.append(1)
        return real()

    monkeypatch.setattr(metrics_module, "exposition", counted)
    monkeypatch.setattr(probes, "_made", None)
    settings.SAS_METRICS_CACHE_SECONDS = 60
    settings.SAS_METRICS_TOKEN = SCRAPE_TOKEN
    client = Client(headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"})
    bodies = {client.get("/metrics").content for _ in range(5)}
    assert len(made) == 1 and len(bodies) == 1
    settings.SAS_METRICS_CACHE_SECONDS = 0
    client.get("/metrics")
    assert len(made) == 2


def _expected_attempts() -> dict[tuple[str, str], int]:
    return {
        (row["pool__name"], row["outcome"]): row["n"]
        for row in Attempt.objects.exclude(outcome="").values("pool__name", "outcome").annotate(n=Count("pk"))
    }


@pytest.mark.sqlite
def test_metrics_count_what_the_database_holds_and_never_twice(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise, settings: Any
) -> None:
    settings.SAS_METRICS_SETTLE_SECONDS = 0
    chain(n=2)
    client = Client()
    first = metrics(client)  # starts the counters at the history's end
    assert total(first, "sas_jobs_submitted_total") == 0
    fake_remote.script("s2", Outcome.BUSINESS_FAILURE)
    jobs = [job_submit(workflow="chain", input={"n": i}).job for i in range(4)]
    drain()
    supervise()
    drain()
    statuses = dict(Job.objects.values_list("status").annotate(n=Count("pk")))
    found = metrics(client)
    assert total(found, "sas_jobs_submitted_total", workflow="chain") == len(jobs)
    for status, n in statuses.items():
        assert total(found, "sas_jobs_settled_total", workflow="chain", status=status) == n
    for (pool, outcome), n in _expected_attempts().items():
        assert total(found, "sas_attempts_total", pool=pool, outcome=outcome) == n, (pool, outcome)
    with_latency = Attempt.objects.exclude(outcome="").exclude(latency_ms=None).count()
    assert total(found, "sas_call_latency_seconds_count") == with_latency
    # Gauges: nothing live, nothing queued; the lease's token.
    assert (
        total(found, "sas_steps_live")
        == Step.objects.exclude(
            status__in=["succeeded", "compensated", "skipped", "failed", "cancelled"]
        ).count()
    )
    assert total(found, "sas_queue_depth") == 0
    assert total(found, "sas_supervisor_lease_token") == SupervisorLease.objects.get().token
    # Another scrape adds nothing: counters count each event once.
    again = metrics(client)
    assert total(again, "sas_jobs_submitted_total") == len(jobs)
    assert total(again, "sas_attempts_total") == sum(_expected_attempts().values())


def test_latency_buckets_hold_values_up_to_their_bound_and_both_paths_agree(
    drain: Callable[[], int], fake_remote: FakeRemote, settings: Any
) -> None:
    from supervisor.metrics import BUCKETS, _count_rows, _count_rows_python

    settings.SAS_METRICS_SETTLE_SECONDS = 0
    chain(n=4)
    job_submit(workflow="chain", input={})
    drain()
    for ms, attempt in zip([5, 6, 10, 120_000], Attempt.objects.order_by("id"), strict=True):
        Attempt.objects.filter(pk=attempt.pk).update(latency_ms=ms)
    in_sql = sorted((m, a, b, round(v, 6)) for m, a, b, v in _count_rows(0))
    in_python = sorted((m, a, b, round(v, 6)) for m, a, b, v in _count_rows_python(0))
    assert in_sql == in_python
    buckets = {b: v for m, _, b, v in in_sql if m == "latency_bucket"}
    # 5 ms is within the 5 ms bucket; 6 and 10 ms within 10 ms; two minutes above every bound.
    assert buckets == {"0": 1, "1": 2, str(len(BUCKETS)): 1}


def test_metrics_trail_the_history_by_the_settle_margin(
    drain: Callable[[], int], fake_remote: FakeRemote, settings: Any
) -> None:
    settings.SAS_METRICS_SETTLE_SECONDS = 3600
    chain(n=1)
    client = Client()
    metrics(client)
    job_submit(workflow="chain", input={})
    drain()
    assert total(metrics(client), "sas_jobs_submitted_total") == 0  # too recent to count yet
    settings.SAS_METRICS_SETTLE_SECONDS = 0
    assert total(metrics(client), "sas_jobs_submitted_total") == 1
    checkpoint = MetricsCheckpoint.objects.get()
    assert checkpoint.event_id == Event.objects.order_by("-id").values_list("id", flat=True).first()


def test_operator_actions_and_late_successes_are_counted(
    drain: Callable[[], int], fake_remote: FakeRemote, settings: Any
) -> None:
    settings.SAS_METRICS_SETTLE_SECONDS = 0
    chain(n=2)
    client = Client()
    metrics(client)
    operator = make_user("olga", "operators")
    job = job_submit(workflow="chain", input={}).job
    job_cancel(actor=operator, job_id=job.pk, reason="test")
    drain()
    found = metrics(client)
    assert total(found, "sas_operator_actions_total", action="cancel") == 1
    assert total(found, "sas_jobs_settled_total", status="cancelled") == 1


# --- completion callbacks -----------------------------------------------------------------------


@pytest.mark.sqlite
@pytest.mark.parametrize("fast_path", [True, False])
def test_a_settled_job_writes_one_callback_with_its_summary(
    drain: Callable[[], int], fake_remote: FakeRemote, settings: Any, fast_path: bool
) -> None:
    settings.SAS_FAST_PATH = fast_path
    chain(n=2)
    job = job_submit(workflow="chain", input={}, callback_url="https://hooks.example.com/done").job
    assert Delivery.objects.count() == 0  # nothing until it settles
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    (callback,) = Delivery.objects.all()
    assert (callback.kind, callback.key, callback.target) == (
        DeliveryKind.CALLBACK,
        f"{job.pk}:succeeded",
        "https://hooks.example.com/done",
    )
    assert callback.payload == {
        "id": str(job.pk),
        "workflow": "chain",
        "status": "succeeded",
        "result": job.result,
        "finished_at": callback.payload["finished_at"],
    }
    assert dt.datetime.fromisoformat(callback.payload["finished_at"]) == job.finished_at


def test_compensated_failed_and_cancelled_jobs_call_back_too(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_policy("once", max_attempts=1, on_exhausted="fail")
    chain(n=2)
    make_workflow("fails", step("only", policy="once"))
    fake_remote.script("s2", Outcome.BUSINESS_FAILURE)
    fake_remote.script("only", Outcome.BUSINESS_FAILURE)
    compensated = job_submit(workflow="chain", input={}, callback_url="https://h.example.com/a").job
    failed_job = job_submit(workflow="fails", input={}, callback_url="https://h.example.com/b").job
    cancelled = job_submit(workflow="chain", input={}, callback_url="https://h.example.com/c").job
    job_cancel(actor=make_user("olga", "operators"), job_id=cancelled.pk)
    for _ in range(3):
        drain()
        supervise()
    statuses = {j.pk: Job.objects.get(pk=j.pk).status for j in (compensated, failed_job, cancelled)}
    assert sorted(statuses.values()) == ["cancelled", "compensated", "failed"]
    keys = set(Delivery.objects.filter(kind=DeliveryKind.CALLBACK).values_list("key", flat=True))
    assert keys == {f"{pk}:{status}" for pk, status in statuses.items()}


@pytest.mark.parametrize(
    "url",
    ["ftp://h.example.com/x", "http://user:pw@h.example.com/", "not a url", "https://", "x" * 600],
)
def test_a_bad_callback_url_is_a_400_and_creates_nothing(url: str) -> None:
    chain(n=1)
    client = client_for(make_user("sam", "submitters"))
    response = client.post(
        f"{V1}/jobs/", {"workflow": "chain", "input": {}, "callback_url": url}, format="json"
    )
    assert response.status_code == 400, response.json()
    assert response.json()["field"] == "callback_url"
    assert Job.objects.count() == 0 and Delivery.objects.count() == 0


def test_callback_hosts_follow_the_callback_allow_list(settings: Any) -> None:
    settings.SAS_CALLBACK_ALLOWED_HOSTS = ["hooks.example.com"]
    chain(n=1)
    client = client_for(make_user("sam", "submitters"))
    refused = client.post(
        f"{V1}/jobs/",
        {"workflow": "chain", "input": {}, "callback_url": "https://evil.example.net/"},
        format="json",
    )
    assert refused.status_code == 400 and Job.objects.count() == 0
    ok = client.post(
        f"{V1}/jobs/",
        {"workflow": "chain", "input": {}, "callback_url": "https://hooks.example.com/x"},
        format="json",
    )
    assert ok.status_code == 201 and ok.json()["callback_url"] == "https://hooks.example.com/x"


def test_a_replay_with_another_callback_url_is_a_conflict() -> None:
    chain(n=1)
    client = client_for(make_user("sam", "submitters"))
    body = {"workflow": "chain", "input": {}, "callback_url": "https://h.example.com/1"}
    assert (
        client.post(f"{V1}/jobs/", body, format="json", headers={"Idempotency-Key": "k"}).status_code == 201
    )
    assert (
        client.post(f"{V1}/jobs/", body, format="json", headers={"Idempotency-Key": "k"}).status_code == 200
    )
    other = {**body, "callback_url": "https://h.example.com/2"}
    assert (
        client.post(f"{V1}/jobs/", other, format="json", headers={"Idempotency-Key": "k"}).status_code == 422
    )


@pytest.mark.sqlite
def test_callbacks_are_sent_signed_and_retried_until_delivered(
    drain: Callable[[], int], fake_remote: FakeRemote, settings: Any, tmp_path: Path
) -> None:
    settings.SAS_CALLBACK_SECRET = SECRET
    settings.SAS_LEGACY_SIGNATURE = True  # the deprecated shared signature, asked for
    settings.SAS_DELIVERY_RETRY_SECONDS = 0.05
    receiver = ReceiverProcess(port=free_port(), log=ARTIFACTS / "receiver-retry.log", fail_first=2).start()
    try:
        chain(n=1)
        job = job_submit(workflow="chain", input={}, callback_url=f"{receiver.url}/cb").job
        drain()
        callback = Delivery.objects.get()

        def delivered() -> bool:
            deliveries.send_due()
            callback.refresh_from_db()
            return callback.status == DeliveryStatus.DELIVERED

        wait_until(delivered, timeout=20, interval=0.1, message="the callback delivered")
        assert callback.tries == 3 and callback.last_status_code == 200 and callback.delivered_at
        got = receiver.received()
        assert got["tries"] == {f"{job.pk}:succeeded": 3}
        (accepted,) = got["accepted"]
        expected = hmac.new(SECRET.encode(), accepted["body"].encode(), hashlib.sha256).hexdigest()
        assert accepted["signature"] == f"sha256={expected}"
        assert json.loads(accepted["body"])["status"] == "succeeded" and accepted["path"] == "/cb"
        # Delivered is final: nothing is sent again.
        assert deliveries.send_due() == 0
        # The API and the console show how it went.
        shown = client_for(make_user("olga", "operators")).get(f"{V1}/jobs/{job.pk}/").json()
        assert shown["callbacks"][0]["status"] == "delivered" and shown["callbacks"][0]["tries"] == 3
        operator = make_user("op2", "operators")
        page = Client()
        page.force_login(operator)
        html = page.get(f"/ops/jobs/{job.pk}/").content.decode()
        assert 'id="job-callbacks"' in html and "Delivered" in html
    finally:
        receiver.stop()


def test_a_callback_that_keeps_failing_gives_up_visibly_and_never_blocks_the_job(
    drain: Callable[[], int], fake_remote: FakeRemote, settings: Any
) -> None:
    settings.SAS_DELIVERY_RETRY_SECONDS = 0
    settings.SAS_DELIVERY_BREAKER_OPEN_SECONDS = 0  # its receiver's breaker lets every try probe
    chain(n=1)
    port = free_port()  # nobody listens
    job = job_submit(workflow="chain", input={}, callback_url=f"http://127.0.0.1:{port}/cb").job
    drain()
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    for _ in range(deliveries.MAX_TRIES):
        Delivery.objects.update(next_try_at=timezone.now() - dt.timedelta(seconds=1))
        deliveries.send_due()
    callback = Delivery.objects.get()
    assert callback.status == DeliveryStatus.FAILED and callback.tries == deliveries.MAX_TRIES
    assert "ConnectError" in callback.last_error
    shown = client_for(make_user("olga", "operators")).get(f"{V1}/jobs/{job.pk}/").json()
    assert shown["callbacks"][0]["status"] == "failed" and shown["status"] == "succeeded"
    # An operator sends it again from a first try, and that is recorded with the user.
    admin_user = make_user("ada", "administrators")
    assert deliveries.delivery_retry(actor=admin_user, delivery_ids=[callback.pk]) == 1
    callback.refresh_from_db()
    assert (callback.status, callback.tries) == (DeliveryStatus.PENDING, 0)
    assert LogEntry.objects.filter(object_id=str(callback.pk), user=admin_user, action_flag=CHANGE).exists()


def test_two_senders_never_send_one_message_at_the_same_moment(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    chain(n=1)
    job_submit(workflow="chain", input={}, callback_url="https://h.example.com/x")
    drain()
    first = deliveries._claim(10)
    second = deliveries._claim(10)  # the first claim set its next try: not due again yet
    assert len(first) == 1 and second == []


# --- alerts -------------------------------------------------------------------------------------


def test_alert_subscriptions_over_the_api_are_checked_and_audited() -> None:
    ada = make_user("ada", "administrators")
    admin_client = client_for(ada)
    created = admin_client.post(
        f"{V1}/alerts/",
        {
            "name": "oncall",
            "webhook_url": "https://hooks.example.com/a",
            "kinds": ["job_failed", "job_failed"],
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    assert created["Location"] == f"{V1}/alerts/oncall/"
    assert created.json()["kinds"] == ["job_failed"] and created.json()["created_by"] == "ada"
    for bad, field in [
        ({"name": "x"}, "webhook_url"),
        ({"name": "x", "email": "not-an-address"}, "email"),
        ({"name": "x", "email": "a@example.com", "kinds": ["nonsense"]}, "kinds"),
        ({"name": "x", "webhook_url": "ftp://h.example.com/"}, "webhook_url"),
        ({"name": "has space", "email": "a@example.com"}, "name"),
        ({"name": "x", "email": "a@example.com", "extra": 1}, "extra"),
    ]:
        response = admin_client.post(f"{V1}/alerts/", bad, format="json")
        assert response.status_code == 400, (bad, response.json())
        assert response.json().get("field") == field or field in response.json(), (bad, response.json())
    assert list(AlertSubscription.objects.values_list("name", flat=True)) == ["oncall"]
    changed = admin_client.patch(f"{V1}/alerts/oncall/", {"email": "o@example.com"}, format="json")
    assert changed.status_code == 200 and changed.json()["email"] == "o@example.com"
    assert admin_client.patch(f"{V1}/alerts/oncall/", {"name": "other"}, format="json").status_code == 400
    subscription = AlertSubscription.objects.get()
    assert admin_client.delete(f"{V1}/alerts/oncall/").status_code == 204
    assert admin_client.get(f"{V1}/alerts/oncall/").status_code == 404
    flags = set(
        LogEntry.objects.filter(object_id=str(subscription.pk), user=ada).values_list(
            "action_flag", flat=True
        )
    )
    assert flags == {ADDITION, CHANGE, DELETION}


def staff(username: str) -> User:
    """The user, allowed into the admin site (what each role may see there is the admin's rule)."""
    user = User.objects.get(username=username)
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    return user


def test_only_administrators_read_a_webhook_url_whole() -> None:
    """A webhook URL is often its own credential: the other readers see its scheme and host."""
    admin_client = client_for(make_user("ada", "administrators"))
    url = "https://hooks.example.com:8443/services/T000/B000/s3cr3t"
    assert (
        admin_client.post(f"{V1}/alerts/", {"name": "oncall", "webhook_url": url}, format="json").status_code
        == 201
    )
    assert admin_client.get(f"{V1}/alerts/oncall/").json()["webhook_url"] == url
    for group in ("viewers", "operators"):
        reader = client_for(make_user(f"{group}-reader", group))
        for answer in (
            reader.get(f"{V1}/alerts/oncall/").json(),
            reader.get(f"{V1}/alerts/").json()["results"][0],
        ):
            assert answer["webhook_url"] == "https://hooks.example.com:8443/(hidden)", group
        # Nor does the admin show it to them (it lists subscriptions to administrators only).
        browser = Client()
        browser.force_login(staff(f"{group}-reader"))
        page = browser.get("/admin/scheduler/alertsubscription/")
        assert page.status_code != 200 and url not in page.content.decode(), group
    ada_browser = Client()
    ada_browser.force_login(staff("ada"))
    page = ada_browser.get("/admin/scheduler/alertsubscription/")
    assert page.status_code == 200 and url in page.content.decode()
    assert AlertSubscription.objects.get().webhook_url == url


def test_a_held_step_a_failed_and_a_compensated_job_alert_each_subscription_once(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise
) -> None:
    subscription_create(
        name="ops", actor=None, webhook_url="https://hooks.example.com/a", email="ops@example.com"
    )
    subscription_create(name="quiet", actor=None, email="q@example.com", kinds=["circuit_opened"])
    make_policy("hold", max_attempts=1, on_exhausted="hold")
    make_workflow("held", step("only", policy="hold"))
    chain(n=2)
    fake_remote.script("only", Outcome.TRANSIENT_FAILURE)
    fake_remote.script("s2", Outcome.BUSINESS_FAILURE)
    job_submit(workflow="held", input={})
    job_submit(workflow="chain", input={})
    drain()
    supervise()
    drain()
    # The supervisor loop hears of the alerting events from the database's reaction queue.
    assert reactions_handle() > 0
    assert not EventReaction.objects.exists()
    alerts = list(Delivery.objects.exclude(kind=DeliveryKind.CALLBACK).order_by("id"))
    kinds = sorted((d.payload["alert"], d.kind) for d in alerts)
    assert ("step_needs_attention", "webhook") in kinds and ("step_needs_attention", "email") in kinds
    assert ("job_compensated", "webhook") in kinds and ("job_compensated", "email") in kinds
    assert all(d.subscription is not None and d.subscription.name == "ops" for d in alerts)
    assert len({d.key for d in alerts}) == len(alerts)
    # Emails go through Django's mail backend (the test's outbox here).
    while deliveries.send_due():
        pass
    assert {m.to[0] for m in mail.outbox} == {"ops@example.com"}
    assert all("[scheduler-agent-supervisor]" in m.subject for m in mail.outbox)


def test_a_wave_of_alerting_events_reads_the_subscriptions_once() -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduler.models import Event, EventKind
    from supervisor.alerts import reactions_handle

    subscription_create(name="ops", actor=None, email="ops@example.com", kinds=["job_failed"])
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    Event.objects.bulk_create(
        [Event(job_id=job.pk, kind=EventKind.JOB_FAILED, source="test", reason="x") for _ in range(20)]
    )
    with CaptureQueriesContext(connection) as queries:
        assert reactions_handle() == 20
    reads = [q for q in queries.captured_queries if "supervisor_alertsubscription" in q["sql"]]
    assert len(reads) == 1
    assert Delivery.objects.filter(kind=DeliveryKind.EMAIL).count() == 20  # one per event, as before


def test_a_circuit_that_the_scan_opens_alerts_once(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise
) -> None:
    subscription_create(name="ops", actor=None, email="ops@example.com", kinds=["circuit_opened"])
    make_pool("web", kind="http", endpoints=["http://a.example:1", "http://b.example:1"])
    make_workflow("w", step("s1", pool="web", path="/do", compensation="/undo"))
    failing_endpoint_history("w", "http://a.example:1")
    bad = AgentEndpoint.objects.get(url="http://a.example:1")
    supervise()
    bad.refresh_from_db()
    assert bad.circuit_open_until is not None
    (alert,) = Delivery.objects.filter(kind=DeliveryKind.EMAIL)
    assert alert.payload["alert"] == "circuit_opened" and alert.payload["endpoint"] == "http://a.example:1"
    # Still open at the next assessment: no second alert.
    assert not endpoint_assess_and_alert(bad.pk, timezone.now())
    assert Delivery.objects.filter(kind=DeliveryKind.EMAIL).count() == 1


def test_a_stalled_supervisor_alerts_once_per_stall(supervise: Supervise, settings: Any) -> None:
    subscription_create(name="ops", actor=None, email="ops@example.com", kinds=["supervisor_stale"])
    assert not supervisor_stale_check(1.0)  # no supervisor ever ran
    supervise()
    assert not supervisor_stale_check(1.0)
    SupervisorLease.objects.update(last_scan_at=timezone.now() - dt.timedelta(seconds=10))
    assert supervisor_stale_check(1.0) and supervisor_stale_check(1.0)
    assert Delivery.objects.filter(payload__alert="supervisor_stale").count() == 1
    supervise()  # it scans again, then stalls again: a second alert
    SupervisorLease.objects.update(last_scan_at=timezone.now() - dt.timedelta(seconds=20))
    supervisor_stale_check(1.0)
    assert Delivery.objects.filter(payload__alert="supervisor_stale").count() == 2


def test_an_admin_adds_a_subscription_and_sees_the_outbox(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    ada = make_user("ada", "administrators")
    ada.is_staff = True
    ada.save()
    client = Client()
    client.force_login(ada)
    response = client.post(
        "/admin/scheduler/alertsubscription/add/",
        {
            "name": "pager",
            "webhook_url": "https://hooks.example.com/p",
            "email": "",
            "kinds": ["job_failed"],
            "enabled": "on",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    subscription = AlertSubscription.objects.get(name="pager")
    assert subscription.kinds == ["job_failed"]
    assert (
        LogEntry.objects.filter(object_id=str(subscription.pk), user=ada, action_flag=ADDITION).count() == 1
    )
    refused = client.post(
        "/admin/scheduler/alertsubscription/add/",
        {"name": "nothing", "webhook_url": "", "email": "", "kinds": ["job_failed"]},
    )
    assert refused.status_code == 200 and not AlertSubscription.objects.filter(name="nothing").exists()
    chain(n=1)
    job_submit(workflow="chain", input={}, callback_url="https://h.example.com/x")
    drain()
    page = client.get("/admin/scheduler/delivery/?status__exact=pending")
    assert page.status_code == 200 and "https://h.example.com/x" in page.content.decode()


# --- tracing ------------------------------------------------------------------------------------


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from sas_project import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_provider", provider)
    yield exporter
    monkeypatch.setattr(tracing, "_provider", None)


def test_without_otel_settings_no_span_is_made_and_no_header_sent(
    drain: Callable[[], int], fake_remote: FakeRemote, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    drain()
    assert Job.objects.get(pk=job.pk).trace_parent == ""
    assert all("traceparent" not in c.headers for c in fake_remote.calls)


@pytest.mark.parametrize("fast_path", [True, False])
def test_one_trace_per_job_and_the_remote_gets_its_traceparent(
    drain: Callable[[], int], fake_remote: FakeRemote, spans: Any, settings: Any, fast_path: bool
) -> None:
    settings.SAS_FAST_PATH = fast_path
    chain(n=2)
    job = job_submit(workflow="chain", input={}).job
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and job.trace_parent
    trace_id = int(job.trace_parent.split("-")[1], 16)
    finished = spans.get_finished_spans()
    names = [s.name for s in finished]
    assert names.count("submit") == 1 and names.count("call") == 2 and names.count("outcome") == 2
    assert names.count("dispatch") == 2
    assert {s.context.trace_id for s in finished} == {trace_id}
    calls = [s for s in finished if s.name == "call"]
    assert {s.kind.name for s in calls} == {"CLIENT"}
    assert {s.attributes["sas.job_id"] for s in calls} == {str(job.pk)}
    # Each call carried the W3C header of its own client span, in the job's trace.
    headers = [c.headers["traceparent"] for c in fake_remote.calls]
    assert len(headers) == 2
    for header, span in zip(headers, calls, strict=True):
        version, trace, parent, flags = header.split("-")
        assert (version, trace, parent) == ("00", f"{trace_id:032x}", f"{span.context.span_id:016x}")
        assert int(flags, 16) & 1  # sampled


# --- logs ---------------------------------------------------------------------------------------


def test_an_attempt_logs_one_line_with_its_ids(
    drain: Callable[[], int],
    fake_remote: FakeRemote,
    caplog: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: Any,
) -> None:
    chain(n=1)
    with caplog.at_level(logging.INFO), django_capture_on_commit_callbacks(execute=True):
        job = job_submit(workflow="chain", input={}).job
        drain()
    (submitted,) = [r for r in caplog.records if r.getMessage() == "job submitted"]
    assert submitted.job_id == str(job.pk) and submitted.workflow == "chain"  # type: ignore[attr-defined]
    (line,) = [r for r in caplog.records if r.getMessage() == "attempt finished"]
    step_row = job.steps.get()
    fields = {k: getattr(line, k) for k in ("job_id", "step", "operation_id", "attempt", "pool", "outcome")}
    assert fields == {
        "job_id": str(job.pk),
        "step": "s1",
        "operation_id": step_row.operation_id,
        "attempt": 1,
        "pool": "local",
        "outcome": "succeeded",
    }
    assert hasattr(line, "latency_ms") and hasattr(line, "endpoint")


def test_the_json_formatter_writes_the_fields_as_keys() -> None:
    from pythonjsonlogger.json import JsonFormatter

    from sas_project import settings as project_settings

    spec = project_settings.LOGGING["formatters"]["json"]
    formatter = JsonFormatter(spec["fmt"], rename_fields=spec["rename_fields"])
    record = logging.LogRecord(
        "scheduler.attempts", logging.INFO, __file__, 1, "attempt finished", None, None
    )
    record.job_id = "j-1"
    record.latency_ms = 12
    line = json.loads(formatter.format(record))
    assert line["message"] == "attempt finished" and line["logger"] == "scheduler.attempts"
    assert line["level"] == "INFO" and line["job_id"] == "j-1" and line["latency_ms"] == 12 and "time" in line
