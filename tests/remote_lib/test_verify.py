"""`sas_remote.verify` against messages signed as the scheduler signs them
(supervisor.signing.signatures, the reference package underneath): accepted when one signature
matches within the tolerance, refused with one exception otherwise, malformed headers included."""

from __future__ import annotations

import datetime as dt

import pytest
from sas_remote import VerificationError, verify

from scheduler.models import signing_secret_new
from supervisor.signing import signatures

pytestmark = pytest.mark.sqlite

SENT = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
BODY = b'{"job": "j-1", "status": "succeeded"}'


def signed(
    keys: list[str], body: bytes = BODY, msg_id: str = "j-1:succeeded", sent: dt.datetime = SENT
) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(sent.timestamp())),
        "webhook-signature": signatures(keys, msg_id=msg_id, timestamp=sent, body=body),
    }


@pytest.fixture
def secret() -> str:
    return signing_secret_new()


def test_a_signed_message_verifies_and_its_body_is_returned(secret: str) -> None:
    assert verify(BODY, signed([secret]), secret, now=SENT.timestamp() + 10) == {
        "job": "j-1",
        "status": "succeeded",
    }


def test_during_a_rotation_either_signature_verifies(secret: str) -> None:
    new = signing_secret_new()
    headers = signed([new, secret])
    assert verify(BODY, headers, secret, now=SENT.timestamp())
    assert verify(BODY, headers, new, now=SENT.timestamp())


def test_a_receiver_moving_between_secrets_may_hold_both(secret: str) -> None:
    assert verify(BODY, signed([secret]), [signing_secret_new(), secret], now=SENT.timestamp())


def test_header_names_are_read_in_any_case(secret: str) -> None:
    headers = {name.title(): value for name, value in signed([secret]).items()}
    assert verify(BODY, headers, secret, now=SENT.timestamp())


@pytest.mark.parametrize("offset", [-301, 301])
def test_a_message_outside_five_minutes_is_refused(secret: str, offset: int) -> None:
    with pytest.raises(VerificationError, match="replayed or stale"):
        verify(BODY, signed([secret]), secret, now=SENT.timestamp() + offset)


def test_a_message_within_five_minutes_verifies(secret: str) -> None:
    for offset in (-300, 300):
        assert verify(BODY, signed([secret]), secret, now=SENT.timestamp() + offset)


def test_a_tampered_body_is_refused(secret: str) -> None:
    with pytest.raises(VerificationError, match="no signature matches"):
        verify(BODY.replace(b"succeeded", b"failed"), signed([secret]), secret, now=SENT.timestamp())


def test_another_id_or_timestamp_is_refused(secret: str) -> None:
    headers = signed([secret])
    for name, value in (
        ("webhook-id", "j-2:succeeded"),
        ("webhook-timestamp", str(int(SENT.timestamp()) + 1)),
    ):
        with pytest.raises(VerificationError, match="no signature matches"):
            verify(BODY, {**headers, name: value}, secret, now=SENT.timestamp())


def test_another_secret_is_refused(secret: str) -> None:
    with pytest.raises(VerificationError, match="no signature matches"):
        verify(BODY, signed([signing_secret_new()]), secret, now=SENT.timestamp())


@pytest.mark.parametrize(
    "change",
    [
        {"webhook-signature": ""},
        {"webhook-id": ""},
        {"webhook-timestamp": "yesterday"},
        {"webhook-signature": "v1"},
        {"webhook-signature": "v1,not base64!"},
        {"webhook-signature": "v2,AAAA"},
    ],
)
def test_malformed_headers_are_refused_with_the_one_exception(secret: str, change: dict[str, str]) -> None:
    with pytest.raises(VerificationError):
        verify(BODY, {**signed([secret]), **change}, secret, now=SENT.timestamp())


def test_a_body_that_is_not_utf8_is_refused(secret: str) -> None:
    with pytest.raises(VerificationError, match="UTF-8"):
        verify(b"\xff" + BODY, signed([secret]), secret, now=SENT.timestamp())


def test_without_a_clock_given_the_time_now_applies(secret: str) -> None:
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    assert verify(BODY, signed([secret], sent=now), secret)
    with pytest.raises(VerificationError, match="replayed or stale"):
        verify(BODY, signed([secret], sent=now - dt.timedelta(minutes=10)), secret)
