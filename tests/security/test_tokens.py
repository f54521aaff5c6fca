"""API tokens: they expire after a configurable time, record their last use (at most once per
interval, the request still one statement), are listed and revoked by their owner (API and
console), any of them by an administrator, and `drf_create_token` still makes them for scripts.
Keys are never stored nor shown again."""

from __future__ import annotations

import datetime as dt
import importlib
import io
import re
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from sas_project.errors import InvalidInput
from sas_project.tokens.models import ApiToken
from sas_project.tokens.services import digest_of, token_create
from tests.api.support import V1, make_user

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]


def api(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


# --- lifetime and last use ------------------------------------------------------------------------


def test_a_token_lives_90_days_by_default_and_what_sas_token_lifetime_days_says(settings: Any) -> None:
    sam = make_user("sam", "submitters")
    before = timezone.now()
    token, _ = token_create(user=sam, name="ci")
    after = timezone.now()
    assert token.expires_at is not None
    assert before + dt.timedelta(days=90) <= token.expires_at <= after + dt.timedelta(days=90)
    settings.SAS_TOKEN_LIFETIME_DAYS = 7
    before = timezone.now()
    short, _ = token_create(user=sam, name="ci")
    after = timezone.now()
    assert short.expires_at is not None
    assert before + dt.timedelta(days=7) <= short.expires_at <= after + dt.timedelta(days=7)
    with pytest.raises(InvalidInput, match="at most 7"):
        token_create(user=sam, name="longer", lifetime_days=30)
    settings.SAS_TOKEN_LIFETIME_DAYS = 0
    assert token_create(user=sam, name="forever")[0].expires_at is None


def test_an_expired_token_is_a_401_that_says_so() -> None:
    token, key = token_create(user=make_user("sam", "submitters"), name="ci")
    assert api(key).get(f"{V1}/jobs/").status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    response = api(key).get(f"{V1}/jobs/")
    assert response.status_code == 401 and "expired" in response.json()["detail"]


def test_the_last_use_is_written_at_most_once_per_interval(settings: Any) -> None:
    settings.SAS_TOKEN_LAST_USED_SECONDS = 60
    token, key = token_create(user=make_user("sam", "submitters"), name="ci")
    assert token.last_used_at is None
    api(key).get(f"{V1}/workflows/")
    first = ApiToken.objects.get(pk=token.pk).last_used_at
    assert first is not None
    with CaptureQueriesContext(connection) as queries:
        api(key).get(f"{V1}/workflows/")
    touching = [q["sql"] for q in queries.captured_queries if "api_token" in q["sql"]]
    assert len(touching) == 1 and touching[0].lstrip().upper().startswith("SELECT")
    assert ApiToken.objects.get(pk=token.pk).last_used_at == first
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - dt.timedelta(seconds=61))
    api(key).get(f"{V1}/workflows/")
    assert ApiToken.objects.get(pk=token.pk).last_used_at > first  # type: ignore[operator]


def test_the_key_is_stored_only_as_its_digest() -> None:
    token, key = token_create(user=make_user("sam"), name="ci")
    row = ApiToken.objects.filter(pk=token.pk).values().get()
    assert key not in str(row) and row["digest"] == digest_of(key) and row["prefix"] == key[:8]


# --- listing and revoking over the API --------------------------------------------------------------


def test_owners_list_their_own_tokens_without_any_key() -> None:
    sam, ada = make_user("sam", "submitters"), make_user("ada", "submitters")
    _, key = token_create(user=sam, name="ci")
    token_create(user=sam, name="laptop")
    _, ada_key = token_create(user=ada, name="ada's")
    response = api(key).get(f"{V1}/tokens/")
    assert response.status_code == 200
    listed = response.json()["results"]
    assert [t["name"] for t in listed] == ["laptop", "ci"]
    assert {t["user"] for t in listed} == {"sam"} and {t["status"] for t in listed} == {"active"}
    assert key not in response.content.decode() and digest_of(key) not in response.content.decode()
    # Naming another user shows nothing to a non-administrator.
    assert api(key).get(f"{V1}/tokens/", {"user": "ada"}).json()["results"] == []
    assert ada_key not in response.content.decode()


def test_a_user_makes_a_token_over_the_api_and_sees_its_key_in_that_answer_only(settings: Any) -> None:
    settings.SAS_TOKEN_LIFETIME_DAYS = 90
    sam = make_user("sam", "submitters")
    _, key = token_create(user=sam, name="laptop")
    response = api(key).post(f"{V1}/tokens/", {"name": "ci", "lifetime_days": 7}, format="json")
    assert response.status_code == 201, response.json()
    made = response.json()
    assert made["name"] == "ci" and made["user"] == "sam" and made["status"] == "active"
    assert response["Location"] == f"{V1}/tokens/{made['id']}/"
    lifetime = dt.datetime.fromisoformat(made["expires_at"]) - dt.datetime.fromisoformat(made["created_at"])
    assert lifetime == dt.timedelta(days=7)
    # The key works at once, acts as its user, and is never shown again.
    assert api(made["key"]).get(f"{V1}/jobs/").status_code == 200
    assert ApiToken.objects.get(pk=made["id"]).digest == digest_of(made["key"])
    assert "key" not in api(key).get(f"{V1}/tokens/{made['id']}/").json()
    assert made["key"] not in api(key).get(f"{V1}/tokens/").content.decode()
    entry = LogEntry.objects.get(object_id=str(made["id"]), action_flag=1)
    assert entry.user_id == sam.pk


def test_a_token_made_with_a_token_expires_no_later_than_the_token_that_made_it(settings: Any) -> None:
    """A stolen token cannot keep itself alive by minting successors of 90 days each: what it
    makes dies with it. A signed-in person (the console's session) still makes a fresh one."""
    settings.SAS_TOKEN_LIFETIME_DAYS = 90
    sam = make_user("sam", "submitters")
    parent, key = token_create(user=sam, name="laptop", lifetime_days=3)
    assert parent.expires_at is not None
    child = api(key).post(f"{V1}/tokens/", {"name": "ci", "lifetime_days": 60}, format="json")
    assert child.status_code == 201, child.json()
    assert dt.datetime.fromisoformat(child.json()["expires_at"]) == parent.expires_at
    grandchild = api(child.json()["key"]).post(f"{V1}/tokens/", {"name": "again"}, format="json")
    assert dt.datetime.fromisoformat(grandchild.json()["expires_at"]) == parent.expires_at
    shorter = api(key).post(f"{V1}/tokens/", {"name": "short", "lifetime_days": 1}, format="json")
    made = shorter.json()
    lifetime = dt.datetime.fromisoformat(made["expires_at"]) - dt.datetime.fromisoformat(made["created_at"])
    assert lifetime == dt.timedelta(days=1)  # shorter than its maker: as asked
    # From a session, the lifetime asked for (the longest by default).
    session = APIClient()
    session.force_login(sam)
    fresh = session.post(f"{V1}/tokens/", {"name": "desk"}, format="json").json()
    lifetime = dt.datetime.fromisoformat(fresh["expires_at"]) - dt.datetime.fromisoformat(fresh["created_at"])
    assert lifetime == dt.timedelta(days=90)


def test_a_token_asked_for_longer_than_the_longest_lifetime_is_a_400_and_makes_nothing(settings: Any) -> None:
    settings.SAS_TOKEN_LIFETIME_DAYS = 30
    _, key = token_create(user=make_user("sam", "submitters"), name="laptop")
    for body, field in (
        ({"name": "ci", "lifetime_days": 31}, "lifetime_days"),
        ({"name": "ci", "lifetime_days": 0}, "lifetime_days"),
        ({"name": "", "lifetime_days": 1}, "name"),
        ({"name": "ci", "user": "root"}, "user"),
    ):
        response = api(key).post(f"{V1}/tokens/", body, format="json")
        assert response.status_code == 400 and response.json()["field"] == field, response.json()
    assert ApiToken.objects.count() == 1
    assert APIClient().post(f"{V1}/tokens/", {"name": "ci"}, format="json").status_code == 401


def test_an_owner_revokes_its_token_and_it_stops_working_at_once() -> None:
    sam = make_user("sam", "submitters")
    token, key = token_create(user=sam, name="ci")
    _, other_key = token_create(user=sam, name="laptop")
    response = api(other_key).post(f"{V1}/tokens/{token.pk}/revoke/", {}, format="json")
    assert response.status_code == 200
    assert response.json()["status"] == "revoked" and response.json()["revoked_by"] == "sam"
    refused = api(key).get(f"{V1}/jobs/")
    assert refused.status_code == 401 and refused.json()["detail"] == "Token revoked."
    again = api(other_key).post(f"{V1}/tokens/{token.pk}/revoke/", {}, format="json")
    assert again.status_code == 200  # idempotent
    entry = LogEntry.objects.get(object_id=str(token.pk), action_flag=2)
    assert entry.user_id == sam.pk


def test_another_users_token_is_a_404_and_stays_usable() -> None:
    ada = make_user("ada", "submitters")
    token, ada_key = token_create(user=ada, name="ada's")
    _, sam_key = token_create(user=make_user("sam", "operators"), name="ci")
    assert api(sam_key).get(f"{V1}/tokens/{token.pk}/").status_code == 404
    assert api(sam_key).post(f"{V1}/tokens/{token.pk}/revoke/", {}, format="json").status_code == 404
    assert api(ada_key).get(f"{V1}/jobs/").status_code == 200


def test_an_administrator_lists_and_revokes_anyones_token_and_is_recorded() -> None:
    ada = make_user("ada", "submitters")
    token, ada_key = token_create(user=ada, name="ada's")
    root = make_user("root", "administrators")
    _, root_key = token_create(user=root, name="admin")
    listed = api(root_key).get(f"{V1}/tokens/", {"user": "ada"}).json()["results"]
    assert [t["id"] for t in listed] == [token.pk]
    response = api(root_key).post(f"{V1}/tokens/{token.pk}/revoke/", {}, format="json")
    assert response.status_code == 200 and response.json()["revoked_by"] == "root"
    assert api(ada_key).get(f"{V1}/jobs/").status_code == 401
    assert LogEntry.objects.get(object_id=str(token.pk), action_flag=2).user_id == root.pk


def test_the_admin_revokes_the_selected_tokens_in_the_name_of_the_administrator() -> None:
    token, key = token_create(user=make_user("ada", "submitters"), name="ada's")
    root = User.objects.create_superuser("root")
    client = Client()
    client.force_login(root)
    listing = client.get("/admin/tokens/apitoken/")
    assert listing.status_code == 200 and key not in listing.content.decode()
    client.post("/admin/tokens/apitoken/", {"action": "revoke", "_selected_action": [token.pk]})
    token.refresh_from_db()
    assert token.revoked_at is not None and token.revoked_by == root


# --- the console page -------------------------------------------------------------------------------


def test_the_console_makes_a_token_shows_its_key_once_and_revokes_it() -> None:
    sam = make_user("sam", "submitters")
    client = Client(enforce_csrf_checks=True)
    client.force_login(sam)
    page = client.get("/accounts/tokens/")
    assert page.status_code == 200 and "No token yet" in page.content.decode()
    csrf = page.cookies["csrftoken"].value
    made = client.post(
        "/accounts/tokens/new/", {"name": "deploy script", "lifetime_days": 30, "csrfmiddlewaretoken": csrf}
    )
    assert made.status_code == 201 and made["Cache-Control"].startswith("max-age=0")
    key = re.search(r'id="new-token-key">([0-9a-f]{40})<', made.content.decode()).group(1)  # type: ignore[union-attr]
    token = ApiToken.objects.get(digest=digest_of(key))
    assert token.user == sam and token.name == "deploy script"
    assert token.expires_at - timezone.now() < dt.timedelta(days=30)  # type: ignore[operator]
    assert api(key).get(f"{V1}/jobs/").status_code == 200
    again = client.get("/accounts/tokens/").content.decode()
    assert key not in again and token.prefix in again
    revoked = client.post(f"/accounts/tokens/{token.pk}/revoke/", {"csrfmiddlewaretoken": csrf})
    assert revoked.status_code == 302
    assert api(key).get(f"{V1}/jobs/").status_code == 401


def test_the_console_refuses_to_revoke_another_users_token_and_any_post_without_csrf() -> None:
    token, key = token_create(user=make_user("ada", "submitters"), name="ada's")
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user("sam", "submitters"))
    csrf = client.get("/accounts/tokens/").cookies["csrftoken"].value
    assert (
        client.post(f"/accounts/tokens/{token.pk}/revoke/", {"csrfmiddlewaretoken": csrf}).status_code == 404
    )
    assert client.post(f"/accounts/tokens/{token.pk}/revoke/").status_code == 403
    assert client.post("/accounts/tokens/new/", {"name": "x"}).status_code == 403
    assert api(key).get(f"{V1}/jobs/").status_code == 200


def test_the_console_page_needs_a_signed_in_user() -> None:
    response = Client().get("/accounts/tokens/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


# --- scripts ------------------------------------------------------------------------------------


def test_drf_create_token_prints_a_working_key_and_reset_revokes_the_earlier_ones() -> None:
    make_user("bot", "submitters")
    out = io.StringIO()
    call_command("drf_create_token", "bot", stdout=out, stderr=io.StringIO())
    first = out.getvalue().split()[2]
    assert re.fullmatch(r"Generated token [0-9a-f]{40} for user bot\n", out.getvalue())
    assert api(first).get(f"{V1}/jobs/").status_code == 200
    out = io.StringIO()
    call_command("drf_create_token", "bot", "-r", stdout=out, stderr=io.StringIO())
    second = out.getvalue().split()[2]
    assert api(second).get(f"{V1}/jobs/").status_code == 200
    assert api(first).get(f"{V1}/jobs/").status_code == 401


def test_tokens_made_by_drfs_own_table_are_carried_over(settings: Any) -> None:
    carry = importlib.import_module("sas_project.tokens.migrations.0002_carry_over_drf_tokens").carry_over
    sam = make_user("sam", "submitters")
    legacy = "0123456789abcdef0123456789abcdef01234567"
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, user_id integer, created timestamp)"
        )
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, %s, CURRENT_TIMESTAMP)", [legacy, sam.pk])

    class Apps:
        @staticmethod
        def get_model(app: str, model: str) -> Any:
            return ApiToken

    carry(Apps(), type("Editor", (), {"connection": connection})())
    assert api(legacy).get(f"{V1}/jobs/").status_code == 200
    assert ApiToken.objects.get(user=sam).name == "carried over"
