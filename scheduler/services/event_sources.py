"""Events from providers, verified: a provider posts its events straight to the service
(`POST /api/v1/events/<source>/`), each signed the Standard Webhooks way
(https://www.standardwebhooks.com/) with its source's secret (scheduler.models.EventSource).

The signature is the credential: `webhook-id`, `webhook-timestamp` (within five minutes of now, so
a captured request cannot be replayed later) and `webhook-signature` (`v1,<base64 HMAC-SHA256 of
"<id>.<timestamp>.<body>">`, several space separated) are checked against the source's current
secret and, during a rotation, the one it replaced (until `previous_signing_until`), so a provider
may change its key at any moment of that period. A request that does not verify is a 401 and
does nothing. The body is the provider's: `{"type", "data", ...}` (a Standard Webhooks payload);
the event's id is `webhook-id`, its source the source's name, and the jobs its triggers start
are submitted by the source's `run_as`; its events reach every job whose wait matches them.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from django.utils import timezone
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from sas_project.audit import definition_logged
from sas_project.conf import sas_settings
from sas_project.errors import InvalidInput, NotFound, SasError
from scheduler.models import EventSource
from scheduler.models.outbox import signing_secret_new
from scheduler.services.events import EventReceipt, event_receive

#: The headers a signed event carries.
SIGNED_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")


class SignatureRefused(SasError, http_status=401, code="authentication_failed"):
    """The event's signature does not verify with its source's secrets (or is missing, or its
    timestamp is too far from now)."""


def _keys(source: EventSource, *, now: dt.datetime) -> list[str]:
    """The secrets a source's events verify with: its current one, and during a rotation's grace
    period the one it replaced."""
    keys = [source.signing_secret]
    if (
        source.previous_signing_secret
        and source.previous_signing_until
        and source.previous_signing_until > now
    ):
        keys.append(source.previous_signing_secret)
    return keys


def event_verify(name: str, *, body: bytes, headers: Mapping[str, str]) -> tuple[EventSource, dict[str, Any]]:
    """The source named `name` and the event its provider sent (type, id, data), once the
    signature verifies. NotFound for no such (enabled) source; SignatureRefused (401) for a
    signature that does not verify; InvalidInput (400) for a body that is not a JSON object with
    a `type`."""
    source = EventSource.objects.filter(name=name, enabled=True).select_related("run_as").first()
    if source is None:
        raise NotFound(f"no event source {name!r}")
    given = {h: headers.get(h, "") for h in SIGNED_HEADERS}
    missing = [h for h, v in given.items() if not v]
    if missing:
        raise SignatureRefused(f"a signed event carries {', '.join(missing)}")
    try:
        text = body.decode()
    except UnicodeDecodeError as exc:
        raise InvalidInput("the event's body is not UTF-8", field="body") from exc
    for key in _keys(source, now=timezone.now()):
        try:
            Webhook(key).verify(text, given, json_parse=False)
        except (WebhookVerificationError, ValueError):
            # ValueError: a signature not of the form `v1,<base64>`, which verifies nothing.
            continue
        break
    else:
        raise SignatureRefused(
            f"the signature does not verify with the secret of event source {name!r} "
            "(or its timestamp is more than five minutes from now)"
        )
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(f"the event's body is not JSON: {type(exc).__name__}", field="body") from exc
    if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
        raise InvalidInput("a provider's event is a JSON object with a `type`", field="type")
    data = payload["data"] if "data" in payload else {k: v for k, v in payload.items() if k != "type"}
    return source, {"type": payload["type"], "id": given["webhook-id"], "data": data}


def event_receive_signed(name: str, *, body: bytes, headers: Mapping[str, str]) -> EventReceipt:
    """Verify and receive a provider's event (see the module's docstring)."""
    source, event = event_verify(name, body=body, headers=headers)
    return event_receive(
        type=event["type"],
        id=event["id"],
        source=source.name,
        data=event["data"],
        sender=source.run_as,
        everyone=True,
    )


def event_source_rotate(name: str, *, actor: Any, now: dt.datetime | None = None) -> EventSource:
    """A new secret for the source; the one it replaces still verifies for
    SAS_SIGNING_ROTATION_GRACE_SECONDS (audited, the secrets never logged)."""
    source = EventSource.objects.filter(name=name).first()
    if source is None:
        raise NotFound(f"no event source {name!r}")
    at = now or timezone.now()
    source.previous_signing_secret = source.signing_secret
    source.previous_signing_until = at + dt.timedelta(seconds=sas_settings.signing_rotation_grace_seconds)
    source.signing_secret = signing_secret_new()
    source.signing_rotated_at = at
    source.save(
        update_fields=[
            "previous_signing_secret",
            "previous_signing_until",
            "signing_secret",
            "signing_rotated_at",
        ]
    )
    definition_logged(actor, source, created=False, changes={"signing_secret": ["(rotated)", "(new)"]})
    return source
