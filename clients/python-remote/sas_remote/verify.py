"""Checking that a completion callback or an alert webhook came from the scheduler, the Standard
Webhooks way (https://www.standardwebhooks.com/; the scheduler's docs/api.md, "Signed callbacks
and alerts").

The signature itself is the reference package's (`standardwebhooks.Webhook.sign`: the secret's
decoding and the signed content `<webhook-id>.<webhook-timestamp>.<body>`). The headers are read
here rather than by its `verify`, for two reasons: a malformed `webhook-signature` (no comma, bad
base64) or a body that is not UTF-8 makes its `verify` raise ValueError or binascii.Error, where a
receiver wants one refusal it can answer 401 to; and its clock cannot be given, where tests and
receivers with a clock of their own need to.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hmac
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from standardwebhooks import Webhook

#: How far `webhook-timestamp` may be from the receiver's clock: the reference verifiers' 5 minutes.
TOLERANCE_SECONDS = 300


class VerificationError(Exception):
    """The message is not from the scheduler, was altered, or is replayed outside the tolerance."""


def verify(
    raw_body: bytes,
    headers: Mapping[str, str],
    secret: str | Sequence[str],
    *,
    now: float | None = None,
    tolerance: float = TOLERANCE_SECONDS,
) -> Any:
    """The JSON body of a message signed with `secret` (`whsec_...`; or several, while the
    receiver itself moves from one to another), checked as received: before any parsing.

    Raises VerificationError when a header is missing or malformed, the timestamp is more than
    `tolerance` seconds from `now` (the time now when not given), or no signature matches. A
    message signed during the scheduler's rotation carries two signatures: either may match.
    De-duplicate verified messages on `headers["webhook-id"]`: it is the same on every try.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id = lowered.get("webhook-id", "")
    stamp = lowered.get("webhook-timestamp", "")
    signature = lowered.get("webhook-signature", "")
    if not (msg_id and stamp and signature):
        raise VerificationError("webhook-id, webhook-timestamp and webhook-signature are required")
    try:
        sent = int(stamp)
    except ValueError:
        raise VerificationError("webhook-timestamp is not Unix seconds") from None
    clock = time.time() if now is None else now
    if abs(clock - sent) > tolerance:
        raise VerificationError(f"webhook-timestamp is more than {tolerance:g} s from now: replayed or stale")
    try:
        text = raw_body.decode("utf-8")
    except UnicodeDecodeError:
        raise VerificationError("the body is not UTF-8") from None
    when = dt.datetime.fromtimestamp(sent, tz=dt.UTC)
    secrets = [secret] if isinstance(secret, str) else list(secret)
    expected = [_digest(Webhook(key).sign(msg_id, when, text)) for key in secrets]
    for candidate in signature.split():
        version, _, value = candidate.partition(",")
        if version != "v1":
            continue
        try:
            given = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            continue
        if any(hmac.compare_digest(given, digest) for digest in expected):
            try:
                return json.loads(text)
            except ValueError:
                raise VerificationError("the signed body is not JSON") from None
    raise VerificationError("no signature matches")


def _digest(signed: str) -> bytes:
    """The HMAC bytes of a `v1,<base64>` signature."""
    return base64.b64decode(signed.partition(",")[2])
