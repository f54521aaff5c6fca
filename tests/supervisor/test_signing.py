"""Signed callbacks and alerts (supervisor.signing): each receiver verifies with its own secret,
the Standard Webhooks way, using the `standardwebhooks` package as a receiver would; a rotated
secret signs beside its successor for the grace period; an old message is refused; the
submitter reads and rotates its secret over the API, and only its own."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.utils import timezone
from standardwebhooks import Webhook, WebhookVerificationError

from agents.fake import FakeRemote
from scheduler.models import AlertKind, AlertSubscription, CallbackSecret, Delivery, DeliveryKind
from scheduler.services import job_submit
from supervisor import deliveries
from supervisor.alerts import alert_write
from supervisor.signing import (
    callback_secret_get,
    callback_secret_rotate,
    headers_for,
    subscription_secret_rotate,
)
from supervisor.subscriptions import subscription_create
from testbed.processes import ReceiverProcess, free_port, wait_until
from tests.api.support import V1, client_for, make_user
from tests.factories import chain
from tests.processes import ARTIFACTS

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

BODY = b'{"alert":"job_failed"}'


def alert_for(name: str) -> Delivery:
    """An alert webhook written for subscription `name`."""
    subscription = subscription_create(
        name=name, actor=None, webhook_url=f"https://{name}.example.com/hook", kinds=["job_failed"]
    )
    alert_write(AlertKind.JOB_FAILED, f"about-{name}", {"job": "x"})
    return Delivery.objects.get(subscription=subscription, kind=DeliveryKind.WEBHOOK)


def test_a_callback_verifies_with_its_submitters_secret_as_a_receiver_would(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    receiver = ReceiverProcess(port=free_port(), log=ARTIFACTS / "receiver-signing.log", fail_first=1).start()
    try:
        chain(n=1)
        sam = make_user("sam", "submitters")
        job = job_submit(workflow="chain", input={}, callback_url=f"{receiver.url}/cb", submitter=sam).job
        drain()

        def delivered() -> bool:
            deliveries.send_due()
            return Delivery.objects.get().status == "delivered"

        Delivery.objects.update(next_try_at=timezone.now())
        wait_until(delivered, timeout=20, interval=0.1, message="the callback delivered")
        (accepted,) = receiver.received()["accepted"]
    finally:
        receiver.stop()
    secret = client_for(sam).get(f"{V1}/callback-secret/").json()["signing_secret"]
    assert secret.startswith("whsec_")
    payload = Webhook(secret).verify(accepted["body"], accepted["webhook"])
    assert payload["id"] == str(job.pk) and payload["status"] == "succeeded"
    # The id is the message's key, the same on every try: the receiver de-duplicates by it.
    assert accepted["webhook"]["webhook-id"] == f"{job.pk}:succeeded" == accepted["key"]
    # Another user's secret does not verify it.
    other = callback_secret_get(make_user("ada", "submitters")).signing_secret
    with pytest.raises(WebhookVerificationError):
        Webhook(other).verify(accepted["body"], accepted["webhook"])


def test_every_try_is_signed_at_its_own_time_with_the_same_id() -> None:
    delivery = alert_for("ops")
    now = timezone.now()
    first = headers_for(delivery, BODY, now=now)
    later = headers_for(delivery, BODY, now=now + dt.timedelta(seconds=30))
    assert first["webhook-id"] == later["webhook-id"] == delivery.key
    assert int(later["webhook-timestamp"]) - int(first["webhook-timestamp"]) == 30
    assert first["webhook-signature"] != later["webhook-signature"]
    Webhook(delivery.subscription.signing_secret).verify(BODY, later)  # type: ignore[union-attr]


def test_a_subscriptions_secret_does_not_verify_another_subscriptions_message() -> None:
    ops, billing = alert_for("ops"), alert_for("billing")
    assert ops.subscription is not None and billing.subscription is not None
    headers = headers_for(ops, BODY)
    Webhook(ops.subscription.signing_secret).verify(BODY, headers)
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(billing.subscription.signing_secret).verify(BODY, headers)


def test_during_a_rotation_both_secrets_verify_and_after_it_only_the_new_one(settings: Any) -> None:
    settings.SAS_SIGNING_ROTATION_GRACE_SECONDS = 3600
    delivery = alert_for("ops")
    assert delivery.subscription is not None
    old = delivery.subscription.signing_secret
    rotated = subscription_secret_rotate("ops", actor=None)
    delivery.refresh_from_db()
    now = timezone.now()
    during = headers_for(delivery, BODY, now=now)
    assert during["webhook-signature"].count("v1,") == 2
    # A verifier checks signatures at its own clock: sign as of now, verify now.
    Webhook(old).verify(BODY, during)
    Webhook(rotated.signing_secret).verify(BODY, during)
    after = headers_for(delivery, BODY, now=now + dt.timedelta(seconds=3601))
    assert after["webhook-signature"].count("v1,") == 1
    # Past the grace period the old secret signs nothing (checked on the signature itself: the
    # verifier would refuse the future timestamp first).
    assert Webhook(old).sign(delivery.key, now + dt.timedelta(seconds=3601), BODY.decode()) not in after[
        "webhook-signature"
    ].split(" ")


def test_an_old_message_is_refused_by_the_verifier() -> None:
    delivery = alert_for("ops")
    assert delivery.subscription is not None
    replayed = headers_for(delivery, BODY, now=timezone.now() - dt.timedelta(minutes=10))
    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(delivery.subscription.signing_secret).verify(BODY, replayed)


def test_the_former_signature_is_sent_beside_only_when_turned_on(settings: Any) -> None:
    delivery = alert_for("ops")
    assert "X-SAS-Signature" not in headers_for(delivery, BODY)  # deprecated: off by default
    settings.SAS_LEGACY_SIGNATURE = True
    assert headers_for(delivery, BODY)["X-SAS-Signature"].startswith("sha256=")


def test_a_callback_of_a_job_without_a_submitter_has_no_standard_signature(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    chain(n=1)
    job_submit(workflow="chain", input={}, callback_url="https://h.example.com/cb")
    drain()
    headers = headers_for(Delivery.objects.get(), BODY)
    assert "webhook-signature" not in headers and headers["webhook-id"]
    assert not CallbackSecret.objects.exists()


# --- the submitter's secret over the API -----------------------------------------------------------


def test_a_submitter_reads_its_own_secret_created_on_first_read() -> None:
    sam, ada = make_user("sam", "submitters"), make_user("ada", "submitters")
    first = client_for(sam).get(f"{V1}/callback-secret/")
    assert first.status_code == 200
    assert client_for(sam).get(f"{V1}/callback-secret/").json() == first.json()
    assert (
        client_for(ada).get(f"{V1}/callback-secret/").json()["signing_secret"]
        != first.json()["signing_secret"]
    )
    assert CallbackSecret.objects.count() == 2


def test_a_submitter_rotates_its_secret_and_the_rotation_is_logged_with_the_user(settings: Any) -> None:
    settings.SAS_SIGNING_ROTATION_GRACE_SECONDS = 600
    sam, ada = make_user("sam", "submitters"), make_user("ada", "submitters")
    before = client_for(sam).get(f"{V1}/callback-secret/").json()["signing_secret"]
    ada_secret = client_for(ada).get(f"{V1}/callback-secret/").json()["signing_secret"]
    rotated = client_for(sam).post(f"{V1}/callback-secret/rotate/")
    assert rotated.status_code == 200
    body = rotated.json()
    assert body["signing_secret"] != before and body["previous_signing_until"] and body["signing_rotated_at"]
    secret = CallbackSecret.objects.get(user=sam)
    assert secret.previous_signing_secret == before
    assert client_for(ada).get(f"{V1}/callback-secret/").json()["signing_secret"] == ada_secret
    entry = LogEntry.objects.get(object_id=str(secret.pk))
    assert entry.user_id == sam.pk and before not in entry.change_message
    assert body["signing_secret"] not in entry.change_message


@pytest.mark.parametrize("method", ["get", "post"])
def test_the_callback_secret_needs_a_signed_in_submitter(method: str) -> None:
    path = f"{V1}/callback-secret/" if method == "get" else f"{V1}/callback-secret/rotate/"
    assert getattr(client_for(None), method)(path).status_code == 401
    assert getattr(client_for(make_user("vera", "viewers")), method)(path).status_code == 403
    assert not CallbackSecret.objects.exists()


def test_rotating_twice_keeps_only_the_last_previous_secret() -> None:
    sam = make_user("sam", "submitters")
    first = callback_secret_get(sam).signing_secret
    second = callback_secret_rotate(user=sam).signing_secret
    third = callback_secret_rotate(user=sam)
    assert third.previous_signing_secret == second and first not in (third.signing_secret, second)


# --- the admin ------------------------------------------------------------------------------------


def test_an_administrator_reveals_and_rotates_a_subscriptions_secret(client: Client, settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    ada = make_user("ada", "administrators")
    ada.is_staff = True
    ada.save(update_fields=["is_staff"])
    subscription = subscription_create(
        name="ops", actor=None, webhook_url="https://ops.example.com/hook", kinds=["job_failed"]
    )
    client.force_login(ada)
    page = client.get(f"/admin/scheduler/alertsubscription/{subscription.pk}/change/").content.decode()
    assert subscription.signing_secret in page
    assert (
        subscription.signing_secret not in client.get("/admin/scheduler/alertsubscription/").content.decode()
    )
    response = client.post(
        "/admin/scheduler/alertsubscription/",
        {"action": "rotate_signing_secret", "_selected_action": [subscription.pk]},
    )
    assert response.status_code == 302
    old = subscription.signing_secret
    subscription.refresh_from_db()
    assert subscription.signing_secret != old and subscription.previous_signing_secret == old
    entry = LogEntry.objects.get(object_id=str(subscription.pk), user=ada)
    assert "signing_secret" in entry.change_message and old not in entry.change_message


def test_no_signing_secret_is_in_the_job_api_or_the_delivery_payload(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    chain(n=1)
    sam = make_user("sam", "submitters")
    job = job_submit(workflow="chain", input={}, callback_url="https://h.example.com/cb", submitter=sam).job
    drain()
    delivery = Delivery.objects.get()
    headers_for(delivery, json.dumps(delivery.payload).encode())
    secret = CallbackSecret.objects.get(user=sam).signing_secret
    assert secret not in client_for(sam).get(f"{V1}/jobs/{job.pk}/").content.decode()
    assert secret not in json.dumps(delivery.payload)


def test_creating_a_subscription_over_the_api_shows_its_secret_that_once() -> None:
    api = client_for(make_user("ada", "administrators"))
    created = api.post(
        f"{V1}/alerts/", {"name": "ops", "webhook_url": "https://ops.example.com/hook"}, format="json"
    )
    assert created.status_code == 201
    secret = created.json()["signing_secret"]
    assert secret == AlertSubscription.objects.get(name="ops").signing_secret and secret.startswith("whsec_")
    assert "signing_secret" not in api.get(f"{V1}/alerts/ops/").json()
    assert secret not in api.get(f"{V1}/alerts/").content.decode()
