"""Idempotency keys on the operator actions that make or change many things: a rerun and a bulk
action sent again with the same `Idempotency-Key` are done once and answered again with
`Idempotent-Replayed: true`; the key with another request is a 422 that does nothing; a refusal
is not kept (the same request is decided again); two copies racing make one rerun; keys are
forgotten after SAS_IDEMPOTENCY_KEY_HOURS."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from agents.fake import FakeRemote
from sas_project.idempotency import idempotent_requests_prune
from sas_project.tokens.models import IdempotentRequest
from scheduler.models import Event, Job, Outcome, Step
from scheduler.services import job_submit
from tests.api.support import V1, client_for, failed_at_s2, make_user
from tests.factories import make_policy, make_workflow, step

pytestmark = pytest.mark.django_db

Supervise = Callable[..., Any]
RERUN = {"from_step": "s2", "reason": "card replaced"}


def rerun(client: APIClient, job: Job, body: dict[str, Any], key: str | None = "rerun-1") -> Any:
    headers = {"Idempotency-Key": key} if key else {}
    return client.post(f"{V1}/jobs/{job.pk}/rerun/", body, format="json", headers=headers)


@pytest.mark.sqlite
def test_a_rerun_sent_again_with_its_key_makes_one_job_and_says_it_is_a_replay(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    original = failed_at_s2(drain, fake_remote, supervise)
    ops = client_for(make_user("olga", "operators"))
    first = rerun(ops, original, RERUN)
    assert first.status_code == 201, first.json()
    assert not first.has_header("Idempotent-Replayed")
    events = Event.objects.count()
    again = rerun(ops, original, {"reason": "card replaced", "from_step": "s2"})  # same fields, other order
    assert again.status_code == 201 and again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"] and again["Location"] == first["Location"]
    assert Job.objects.filter(rerun_of=original).count() == 1 and Event.objects.count() == events
    # Without a key, each request is a new rerun, as before.
    assert rerun(ops, original, RERUN, key=None).status_code == 201
    assert Job.objects.filter(rerun_of=original).count() == 2


@pytest.mark.sqlite
def test_a_key_reused_for_another_request_is_a_422_that_does_nothing(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    original = failed_at_s2(drain, fake_remote, supervise)
    ops = client_for(make_user("olga", "operators"))
    assert rerun(ops, original, RERUN).status_code == 201
    jobs, events = Job.objects.count(), Event.objects.count()
    other_body = rerun(ops, original, {**RERUN, "reason": "another reason"})
    assert other_body.status_code == 422, other_body.json()
    assert (
        other_body.json()["code"] == "idempotency_conflict"
        and other_body.json()["field"] == "Idempotency-Key"
    )
    other_path = ops.post(
        f"{V1}/attention/bulk/",
        {"action": "cancel", "step_ids": [1]},
        format="json",
        headers={"Idempotency-Key": "rerun-1"},
    )
    assert other_path.status_code == 422
    assert (Job.objects.count(), Event.objects.count()) == (jobs, events)
    # Keys are per user: another operator's same key is its own request.
    assert rerun(client_for(make_user("oscar", "operators")), original, RERUN).status_code == 201


def test_a_refused_rerun_is_not_kept_and_is_decided_again(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    original = failed_at_s2(drain, fake_remote, supervise)
    ops = client_for(make_user("olga", "operators"))
    refused = rerun(ops, original, {**RERUN, "from_step": "nope"})
    assert refused.status_code in (400, 409) and not refused.has_header("Idempotent-Replayed")
    assert not IdempotentRequest.objects.exists()
    # The same key, now with a request that is allowed, is a new request.
    assert rerun(ops, original, RERUN).status_code == 201


def test_a_bulk_action_sent_again_with_its_key_is_done_once_and_a_dry_run_is_not_kept(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    make_policy("holding", on_exhausted="hold", max_attempts=1)
    make_workflow("h", step("s1", policy="holding"))
    fake_remote.script("s1", Outcome.TRANSIENT_FAILURE, Outcome.TRANSIENT_FAILURE)
    jobs = [job_submit(workflow="h", input={"n": n}).job for n in range(2)]
    drain()
    supervise()
    ops = client_for(make_user("olga", "operators"))
    step_ids = list(Step.objects.filter(job__in=jobs).values_list("pk", flat=True))
    url = f"{V1}/attention/bulk/"
    preview = ops.post(
        url,
        {"action": "retry", "step_ids": step_ids, "dry_run": True},
        format="json",
        headers={"Idempotency-Key": "b"},
    )
    assert preview.status_code == 200 and not preview.has_header("Idempotent-Replayed")
    assert not IdempotentRequest.objects.exists()
    body = {"action": "retry", "step_ids": step_ids, "reason": "remote is back"}
    first = ops.post(url, body, format="json", headers={"Idempotency-Key": "b"})
    assert first.status_code == 200 and first.json()["done"] == 2
    events = Event.objects.count()
    again = ops.post(url, body, format="json", headers={"Idempotency-Key": "b"})
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json() and Event.objects.count() == events


def test_a_key_that_is_not_printable_ascii_is_a_400(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    original = failed_at_s2(drain, fake_remote, supervise)
    ops = client_for(make_user("olga", "operators"))
    for key in ("é", "x" * 256):
        response = rerun(ops, original, RERUN, key=key)
        assert response.status_code == 400 and response.json()["field"] == "Idempotency-Key"
    assert not Job.objects.filter(rerun_of=original).exists()


@pytest.mark.django_db(transaction=True)
def test_two_copies_of_a_rerun_racing_with_one_key_make_one_job(
    drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    original = failed_at_s2(drain, fake_remote, supervise)
    operator = make_user("olga", "operators")
    answers: list[tuple[int, str, bool]] = []
    start = threading.Barrier(2)

    def send() -> None:
        try:
            start.wait(10)
            response = rerun(client_for(operator), original, RERUN, key="race")
            answers.append(
                (response.status_code, response.json()["id"], response.has_header("Idempotent-Replayed"))
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(a[0] for a in answers) == [201, 201], answers
    assert answers[0][1] == answers[1][1] and sorted(a[2] for a in answers) == [False, True]
    assert Job.objects.filter(rerun_of=original).count() == 1


def test_keys_older_than_their_hours_are_forgotten(
    settings: Any, drain: Callable, fake_remote: FakeRemote, supervise: Supervise
) -> None:
    settings.SAS_IDEMPOTENCY_KEY_HOURS = 24
    original = failed_at_s2(drain, fake_remote, supervise)
    ops = client_for(make_user("olga", "operators"))
    assert rerun(ops, original, RERUN).status_code == 201
    assert idempotent_requests_prune() == 0
    IdempotentRequest.objects.update(created_at=timezone.now() - dt.timedelta(hours=25))
    assert idempotent_requests_prune() == 1
    assert rerun(ops, original, RERUN).status_code == 201
    assert Job.objects.filter(rerun_of=original).count() == 2
