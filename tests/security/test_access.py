"""Request rates and sign-in protection: the API answers 429 with Retry-After past a user's or an
address's rate; repeated failed sign-ins to the console or the admin lock the account (from any
address) and the address (for any account) for a while, with a page that says so."""

from __future__ import annotations

from typing import Any

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from tests.api.support import V1, client_for, make_user

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

PASSWORD = "operator-password-1"


@pytest.fixture
def fast_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


# --- API rates ------------------------------------------------------------------------------------


def test_a_user_over_the_rate_gets_429_with_retry_after(settings: Any) -> None:
    settings.SAS_THROTTLE_USER = "3/min"
    settings.SAS_THROTTLE_USER_BURST = 3
    client = client_for(make_user("sam", "submitters"))
    assert [client.get(f"{V1}/jobs/").status_code for _ in range(3)] == [200, 200, 200]
    refused = client.get(f"{V1}/jobs/")
    assert refused.status_code == 429
    assert refused.json()["code"] == "throttled"
    assert 0 < int(refused["Retry-After"]) <= 60
    # Another user has a rate of its own.
    assert client_for(make_user("ada", "submitters")).get(f"{V1}/jobs/").status_code == 200


def test_anonymous_requests_are_counted_per_address(settings: Any) -> None:
    settings.SAS_THROTTLE_ANON = "2/min"
    settings.SAS_THROTTLE_ANON_BURST = 2
    client = APIClient()
    codes = [client.get("/api/schema/", REMOTE_ADDR="203.0.113.5").status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    assert client.get("/api/schema/", REMOTE_ADDR="203.0.113.5")["Retry-After"]
    assert client.get("/api/schema/", REMOTE_ADDR="203.0.113.6").status_code == 200


def test_a_forwarded_for_header_is_believed_only_from_the_trusted_proxies(settings: Any) -> None:
    settings.SAS_THROTTLE_ANON = "1/min"
    settings.SAS_THROTTLE_ANON_BURST = 1
    client = APIClient()

    def ask(forwarded: str) -> int:
        return int(
            client.get("/api/schema/", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR=forwarded).status_code
        )

    # No proxy is trusted by default: a client cannot escape its count by inventing addresses.
    assert [ask("198.51.100.1"), ask("198.51.100.2")] == [200, 429]
    settings.SAS_TRUSTED_PROXIES = 1
    # Behind one load balancer, the address it saw is the client; what the client wrote further
    # left is not.
    assert [ask("198.51.100.3"), ask("6.6.6.6, 198.51.100.4"), ask("7.7.7.7, 198.51.100.4")] == [
        200,
        200,
        429,
    ]


def test_a_rate_set_to_off_counts_nothing(settings: Any) -> None:
    settings.SAS_THROTTLE_USER = "off"
    settings.SAS_THROTTLE_ANON = "off"
    client = client_for(make_user("sam", "submitters"))
    assert {client.get(f"{V1}/jobs/").status_code for _ in range(5)} == {200}


# --- sign-in lockout ------------------------------------------------------------------------------


def sign_in(
    client: Client, username: str, password: str, address: str, path: str = "/accounts/login/"
) -> Any:
    return client.post(path, {"username": username, "password": password}, REMOTE_ADDR=address)


@pytest.mark.usefixtures("fast_hashing")
def test_five_failed_sign_ins_lock_the_account_from_every_address() -> None:
    User.objects.create_user("olga", password=PASSWORD)
    codes = [sign_in(Client(), "olga", "wrong", "198.51.100.1").status_code for _ in range(5)]
    assert codes == [200, 200, 200, 200, 429]  # the fifth failure is told about the lock at once
    client = Client()
    locked = sign_in(client, "olga", PASSWORD, "198.51.100.99")
    assert locked.status_code == 429
    page = locked.content.decode()
    assert "Sign-in locked" in page and "Try again in 15 minutes" in page
    assert locked["Retry-After"] == "900"
    assert "_auth_user_id" not in client.session


@pytest.mark.usefixtures("fast_hashing")
def test_five_failures_from_one_address_lock_that_address_for_every_account() -> None:
    User.objects.create_user("olga", password=PASSWORD)
    for name in ("a", "b", "c", "d", "e"):
        sign_in(Client(), name, "guess", "198.51.100.7")
    assert sign_in(Client(), "olga", PASSWORD, "198.51.100.7").status_code == 429
    elsewhere = sign_in(Client(), "olga", PASSWORD, "198.51.100.8")
    assert elsewhere.status_code == 302 and elsewhere["Location"] == "/ops/"


@pytest.mark.usefixtures("fast_hashing")
def test_the_admin_sign_in_is_locked_the_same_way() -> None:
    User.objects.create_superuser("root", "root@example.invalid", PASSWORD)
    for _ in range(5):
        sign_in(Client(), "root", "wrong", "198.51.100.1", path="/admin/login/")
    assert sign_in(Client(), "root", PASSWORD, "198.51.100.2", path="/admin/login/").status_code == 429


@pytest.mark.usefixtures("fast_hashing")
def test_the_lock_ends_after_the_cool_off(settings: Any) -> None:
    User.objects.create_user("olga", password=PASSWORD)
    for _ in range(5):
        sign_in(Client(), "olga", "wrong", "198.51.100.1")
    assert sign_in(Client(), "olga", PASSWORD, "198.51.100.1").status_code == 429
    AccessAttempt.objects.update(attempt_time=timezone.now() - settings.AXES_COOLOFF_TIME * 2)
    assert sign_in(Client(), "olga", PASSWORD, "198.51.100.1").status_code == 302


@pytest.mark.usefixtures("fast_hashing")
def test_a_few_failures_then_a_success_start_the_count_again() -> None:
    User.objects.create_user("olga", password=PASSWORD)
    for _ in range(4):
        sign_in(Client(), "olga", "wrong", "198.51.100.1")
    assert sign_in(Client(), "olga", PASSWORD, "198.51.100.1").status_code == 302
    for _ in range(4):
        sign_in(Client(), "olga", "wrong", "198.51.100.1")
    assert sign_in(Client(), "olga", PASSWORD, "198.51.100.1").status_code == 302
