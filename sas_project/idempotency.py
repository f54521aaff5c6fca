"""Idempotency keys on the API's actions beyond submissions and signals (which keep the key on
the job or the signal they make): a rerun and a bulk action sent with `Idempotency-Key` are done
once, however often the client sends them.

The IETF draft "The Idempotency-Key HTTP Header Field" (draft-ietf-httpapi-idempotency-key-header)
and Stripe's practice: the same user sending the same key and the same request again gets the
first answer back, marked `Idempotent-Replayed: true`, and nothing is done twice; the key reused
for another request (another path or body) is a 422; a copy sent while the first is still running
waits for it (the first's uncommitted row holds the key's unique index) and then gets its answer.
Only answers that did something are kept: a refusal (4xx) rolls the record back with the action,
so the same request sent again is decided again.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import IntegrityError, transaction
from django.http import HttpResponseBase
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils import json

from sas_project.conf import sas_settings
from sas_project.errors import IdempotencyConflict, InvalidInput

#: The header a replayed answer carries.
REPLAYED = "Idempotent-Replayed"


def idempotency_key(request: Request) -> str | None:
    """The request's `Idempotency-Key`, checked: 1-255 printable ASCII characters."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not 0 < len(key) <= 255 or not all(" " <= ch <= "~" for ch in key):
        raise InvalidInput(
            "Idempotency-Key must be 1 to 255 printable ASCII characters", field="Idempotency-Key"
        )
    return key


AnswerT = TypeVar("AnswerT", bound=HttpResponseBase)


def replayed(response: AnswerT) -> AnswerT:
    response[REPLAYED] = "true"
    return response


def fingerprint(request: Request, body: Any) -> str:
    """What makes two requests the same: the method, the path and the body (as JSON with sorted
    keys, so that the order a client writes its fields in does not matter)."""
    canonical = json.dumps([request.method, request.path, body], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def idempotent(request: Request, body: Any, act: Callable[[], Response]) -> Response:
    """`act()` once per key: its answer is recorded in its own transaction and replayed for the
    same key and request; without a key, `act()` as it is."""
    from sas_project.tokens.models import IdempotentRequest

    key = idempotency_key(request)
    if key is None:
        return act()
    user: Any = request.user  # signed in: every view that keeps keys needs a role
    sought = fingerprint(request, body)
    with transaction.atomic():
        try:
            with transaction.atomic():
                record = IdempotentRequest.objects.create(
                    user=user,
                    key=key,
                    fingerprint=sought,
                    status=0,
                    body={},
                    created_at=timezone.now(),
                )
        except IntegrityError:
            # The key's row exists (committed: a concurrent first request held the index until
            # it committed, and its answer is there now).
            earlier = IdempotentRequest.objects.get(user=user, key=key)
            if earlier.fingerprint != sought:
                raise IdempotencyConflict(
                    f"Idempotency-Key {key!r} was already used for a different request "
                    f"(sent {earlier.created_at.isoformat()})",
                    field="Idempotency-Key",
                ) from None
            headers = {"Location": earlier.location} if earlier.location else None
            return replayed(Response(earlier.body, status=earlier.status, headers=headers))
        response = act()
        record.status = response.status_code
        record.body = response.data
        record.location = response.get("Location", "")
        record.save(update_fields=["status", "body", "location"])
    return response


def idempotent_requests_prune(*, now: dt.datetime | None = None) -> int:
    """Forget the keys older than SAS_IDEMPOTENCY_KEY_HOURS (run by the supervisor's lease
    holder): a request sent again after that is a new request. Returns how many went."""
    from sas_project.tokens.models import IdempotentRequest

    before = (now or timezone.now()) - dt.timedelta(hours=sas_settings.idempotency_key_hours)
    deleted, _ = IdempotentRequest.objects.filter(created_at__lt=before).delete()
    return int(deleted)
