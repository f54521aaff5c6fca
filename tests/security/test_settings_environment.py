"""The environment is parsed with types when a process starts (sas_project/settings.py, environs):
every bad value is named at once, with why, and the process does not start; a value that may be a
secret is named without being shown."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from tests.security.test_secret_key import manage_check

pytestmark = pytest.mark.sqlite

KEY = secrets.token_urlsafe(50)


def test_a_process_refuses_to_start_naming_every_bad_value_of_the_environment(tmp_path: Path) -> None:
    result = manage_check(
        tmp_path,
        DJANGO_SECRET_KEY=KEY,
        SAS_Q_WORKERS="0",
        SAS_SUPERVISOR_INTERVAL="five",
        SAS_LOG_FORMAT="xml",
        DJANGO_SECURE="maybe",
        SAS_DELIVERY_TIMEOUT="-1",
    )
    assert result.returncode != 0
    message = result.stderr[result.stderr.index("ImproperlyConfigured: ") :]
    assert message.splitlines()[1:] == [
        "  DJANGO_SECURE='maybe': Not a valid boolean.",
        "  SAS_Q_WORKERS='0': Must be greater than or equal to 1.",
        "  SAS_SUPERVISOR_INTERVAL='five': Not a valid number.",
        "  SAS_DELIVERY_TIMEOUT='-1': Must be greater than or equal to 0.1.",
        "  SAS_LOG_FORMAT='xml': Must be one of: json, text.",
    ]


def test_a_bad_value_whose_name_says_secret_token_password_or_key_is_named_but_not_shown(
    tmp_path: Path,
) -> None:
    result = manage_check(tmp_path, DJANGO_SECRET_KEY=KEY, SAS_TOKEN_LIFETIME_DAYS="90d-s3cret")
    assert "  SAS_TOKEN_LIFETIME_DAYS: Not a valid number." in result.stderr
    assert "s3cret" not in result.stderr
    result = manage_check(tmp_path, DJANGO_SECRET_KEY=KEY, SAS_EMAIL_HOST="mail", SAS_EMAIL_PORT="x25")
    assert "  SAS_EMAIL_PORT='x25': Not a valid integer." in result.stderr


def test_the_documented_boolean_spellings_start(tmp_path: Path) -> None:
    for value in ("1", "0", "true", "False", "yes", "off"):
        result = manage_check(tmp_path, DJANGO_SECRET_KEY=KEY, SAS_FAST_PATH=value)
        assert result.returncode == 0, (value, result.stderr[-500:])


def test_an_archive_in_object_storage_wants_its_bucket_and_only_known_stores_start(tmp_path: Path) -> None:
    result = manage_check(tmp_path, DJANGO_SECRET_KEY=KEY, SAS_ARCHIVE_STORAGE="s3")
    assert result.returncode != 0
    assert "SAS_ARCHIVE_STORAGE=s3 needs SAS_ARCHIVE_S3_BUCKET" in result.stderr
    result = manage_check(tmp_path, DJANGO_SECRET_KEY=KEY, SAS_ARCHIVE_STORAGE="gcs")
    assert "  SAS_ARCHIVE_STORAGE='gcs': Must be one of: local, s3." in result.stderr
    result = manage_check(
        tmp_path, DJANGO_SECRET_KEY=KEY, SAS_ARCHIVE_STORAGE="s3", SAS_ARCHIVE_S3_BUCKET="b"
    )
    assert result.returncode == 0, result.stderr[-500:]
