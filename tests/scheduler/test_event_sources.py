"""Events from providers, verified (scheduler.services.event_sources): a provider posts its own
signed events to /api/v1/events/<source>/ (Standard Webhooks: the signature with the source's
secret is the credential, a rotation keeps the previous secret for a grace period), and the event
sender role may post events and nothing else."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient
from standardwebhooks import Webhook

from agents.fake import FakeRemote
from scheduler.models import EventSource, InboundEvent, Job
from scheduler.services.event_sources import event_source_rotate
from tests.api.support import V1, client_for, make_user
from tests.factories import make_workflow, step

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

TRIGGER = {
    "event": "payment.succeeded",
    "input": {"order.$": "event.data.order"},
    "business_key": "event.data.order",
}


def source(name: str = "payments-provider") -> EventSource:
    runner = make_user("provider-runner", "submitters")
    return EventSource.objects.create(name=name, run_as=runner)


def signed(
    body: dict[str, Any], *, secret: str, msg_id: str = "msg_1", at: dt.datetime | None = None
) -> tuple[bytes, dict[str, str]]:
    data = json.dumps(body)
    when = at or timezone.now()
    signature = Webhook(secret).sign(msg_id, when, data)
    headers = {
        "HTTP_WEBHOOK_ID": msg_id,
        "HTTP_WEBHOOK_TIMESTAMP": str(int(when.timestamp())),
        "HTTP_WEBHOOK_SIGNATURE": signature,
    }
    return data.encode(), headers


def post_signed(name: str, body: bytes, headers: dict[str, str]) -> Any:
    return APIClient().post(f"{V1}/events/{name}/", body, content_type="application/json", **headers)


def test_a_providers_signed_event_starts_the_triggers_jobs_as_its_sources_user(
    fake_remote: FakeRemote,
) -> None:
    make_workflow("fulfil", step("reserve"), triggers=[TRIGGER])
    provider = source()
    body, headers = signed(
        {"type": "payment.succeeded", "timestamp": "2026-12-06T10:00:00Z", "data": {"order": "A-1"}},
        secret=provider.signing_secret,
    )
    answer = post_signed(provider.name, body, headers)
    assert answer.status_code == 202, answer.content
    (job_id,) = answer.json()["started"]
    job = Job.objects.get(pk=job_id)
    assert job.submitter == provider.run_as and job.business_key == "A-1" and job.input == {"order": "A-1"}
    event = InboundEvent.objects.get()
    assert (event.source, event.event_id, event.type) == (provider.name, "msg_1", "payment.succeeded")
    assert job.started_by_event == event.pk
    # The provider's retry of the same message is the same event.
    again = post_signed(provider.name, body, headers)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert Job.objects.count() == 1


def test_an_event_that_does_not_verify_is_a_401_and_does_nothing(fake_remote: FakeRemote) -> None:
    make_workflow("fulfil", step("reserve"), triggers=[TRIGGER])
    provider = source()
    event = {"type": "payment.succeeded", "data": {"order": "A-2"}}
    _, forged = signed(event, secret=EventSource(run_as=provider.run_as).signing_secret)
    body, headers = signed(event, secret=provider.signing_secret)
    stale_body, stale = signed(
        event, secret=provider.signing_secret, at=timezone.now() - dt.timedelta(hours=1)
    )
    cases = [
        (body, forged),  # another secret
        (body, {k: v for k, v in headers.items() if k != "HTTP_WEBHOOK_SIGNATURE"}),
        (body.replace(b"A-2", b"A-9"), headers),  # the body changed after signing
        (stale_body, stale),  # replayed an hour later
        (body, {**headers, "HTTP_WEBHOOK_SIGNATURE": "garbage"}),
    ]
    for sent, sent_headers in cases:
        answer = post_signed(provider.name, sent, sent_headers)
        assert answer.status_code == 401, answer.content
        assert answer.json()["code"] == "authentication_failed"
    assert not InboundEvent.objects.exists() and not Job.objects.exists()
    assert post_signed("no-such-source", body, headers).status_code == 404
    EventSource.objects.filter(pk=provider.pk).update(enabled=False)
    assert post_signed(provider.name, body, headers).status_code == 404


def test_a_rotated_secret_still_verifies_for_its_grace_period_then_no_more(fake_remote: FakeRemote) -> None:
    make_workflow("fulfil", step("reserve"), triggers=[TRIGGER])
    provider = source()
    old = provider.signing_secret
    rotated = event_source_rotate(provider.name, actor=make_user("ada", "administrators"))
    assert rotated.signing_secret != old
    body, headers = signed({"type": "payment.succeeded", "data": {"order": "A-3"}}, secret=old, msg_id="m-3")
    assert post_signed(provider.name, body, headers).status_code == 202
    body, headers = signed(
        {"type": "payment.succeeded", "data": {"order": "A-4"}}, secret=rotated.signing_secret, msg_id="m-4"
    )
    assert post_signed(provider.name, body, headers).status_code == 202
    EventSource.objects.filter(pk=provider.pk).update(
        previous_signing_until=timezone.now() - dt.timedelta(seconds=1)
    )
    body, headers = signed({"type": "payment.succeeded", "data": {"order": "A-5"}}, secret=old, msg_id="m-5")
    assert post_signed(provider.name, body, headers).status_code == 401


def test_a_signed_event_that_is_not_an_object_with_a_type_is_a_400(fake_remote: FakeRemote) -> None:
    provider = source()
    secret = provider.signing_secret
    for body in ({"data": {}}, {"type": 5}):
        sent, headers = signed(body, secret=secret)
        assert post_signed(provider.name, sent, headers).status_code == 400
    text = "[1, 2]"
    signature = Webhook(secret).sign("m", timezone.now(), text)
    headers = {
        "HTTP_WEBHOOK_ID": "m",
        "HTTP_WEBHOOK_TIMESTAMP": str(int(timezone.now().timestamp())),
        "HTTP_WEBHOOK_SIGNATURE": signature,
    }
    assert post_signed(provider.name, text.encode(), headers).status_code == 400
    assert not InboundEvent.objects.exists()


def test_an_event_sender_may_post_events_and_nothing_else(fake_remote: FakeRemote) -> None:
    make_workflow("fulfil", step("reserve"), triggers=[TRIGGER])
    sender = client_for(make_user("integration", "event-senders"))
    answer = sender.post(
        f"{V1}/events/",
        {"type": "payment.succeeded", "id": "e-1", "source": "psp", "data": {"order": "A-6"}},
        format="json",
    )
    assert answer.status_code == 202, answer.content
    assert len(answer.json()["started"]) == 1
    assert sender.get(f"{V1}/jobs/").status_code == 403
    assert sender.post(f"{V1}/jobs/", {"workflow": "fulfil", "input": {}}, format="json").status_code == 403
    assert sender.get(f"{V1}/workflows/").status_code == 403
