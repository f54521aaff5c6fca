"""Alert subscriptions: who is told, where, about what. Every change goes through here (the API
and the admin alike), checked the same way and recorded with its user in the admin log."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction

from agents.validation import validate_webhook_url
from sas_project.audit import definition_deleted, definition_logged
from sas_project.editing import fields_known, locked_one
from sas_project.errors import InvalidInput, NotFound, StaleWrite
from sas_project.validation import valid_name
from scheduler.models import AlertKind, AlertSubscription

#: What a subscription holds besides its name.
SUBSCRIPTION_FIELDS = ("webhook_url", "email", "kinds", "enabled")


def subscription_settings(subscription: AlertSubscription) -> dict[str, Any]:
    return {name: getattr(subscription, name) for name in SUBSCRIPTION_FIELDS}


def subscription_validate(values: dict[str, Any]) -> dict[str, Any]:
    """The values, cleaned: the webhook checked as one (http(s), no credentials, the webhook
    lists of the outbound-URL guard), the email address's form, the kinds known and not repeated, and at least
    one of webhook and email."""
    clean = dict(values)
    webhook = str(clean.get("webhook_url") or "")
    if webhook:
        try:
            webhook = validate_webhook_url(webhook)
        except InvalidInput as exc:
            raise InvalidInput(f"webhook_url: {exc.message}", field="webhook_url") from exc
    clean["webhook_url"] = webhook
    email = str(clean.get("email") or "")
    if email:
        try:
            validate_email(email)
        except ValidationError as exc:
            raise InvalidInput("email must be an email address", field="email") from exc
    clean["email"] = email
    if not webhook and not email:
        raise InvalidInput("a subscription needs a webhook_url, an email, or both", field="webhook_url")
    kinds = clean.get("kinds")
    if not isinstance(kinds, list) or not kinds:
        raise InvalidInput("kinds must name at least one alert kind", field="kinds")
    unknown = [k for k in kinds if k not in AlertKind.values]
    if unknown:
        raise InvalidInput(
            f"unknown alert kinds: {', '.join(map(str, unknown))} (known: {', '.join(AlertKind.values)})",
            field="kinds",
        )
    clean["kinds"] = [k for k in AlertKind.values if k in kinds]  # known order, no repeats
    clean["enabled"] = bool(clean.get("enabled", True))
    return clean


def subscription_get(name: str) -> AlertSubscription:
    subscription = AlertSubscription.objects.filter(name=name).first()
    if subscription is None:
        raise NotFound(f"alert subscription {name!r} does not exist")
    return subscription


@transaction.atomic
def subscription_create(*, name: str, actor: Any, **fields: Any) -> AlertSubscription:
    valid_name(name, "subscription name", "name")
    values = subscription_validate({"kinds": list(AlertKind.values), "enabled": True, **fields})
    if AlertSubscription.objects.filter(name=name).exists():
        raise InvalidInput(f"an alert subscription named {name!r} already exists", field="name")
    try:
        with transaction.atomic():
            subscription = AlertSubscription.objects.create(
                name=name, created_by=actor if getattr(actor, "is_authenticated", False) else None, **values
            )
    except IntegrityError as exc:
        raise StaleWrite(f"subscription {name!r} was created at the same moment; send yours again") from exc
    definition_logged(actor, subscription, created=True)
    return subscription


@transaction.atomic
def subscription_update(name: str, *, actor: Any, changes: dict[str, Any]) -> AlertSubscription:
    fields_known(changes, SUBSCRIPTION_FIELDS, "subscription")
    subscription = locked_one(
        AlertSubscription.objects.filter(name=name), f"alert subscription {name!r} does not exist"
    )
    old = subscription_settings(subscription)
    new = subscription_validate({**old, **changes})
    diff = {k: [old[k], new[k]] for k in SUBSCRIPTION_FIELDS if old[k] != new[k]}
    if diff:
        for field, value in new.items():
            setattr(subscription, field, value)
        subscription.save(update_fields=[*SUBSCRIPTION_FIELDS, "updated_at"])
        definition_logged(actor, subscription, created=False, changes=diff)
    return subscription


@transaction.atomic
def subscription_delete(name: str, *, actor: Any) -> None:
    """Delete a subscription. What it was sent stays in the outbox (without it); what was not
    sent yet is sent still: an alert written is an alert delivered."""
    subscription = locked_one(
        AlertSubscription.objects.filter(name=name), f"alert subscription {name!r} does not exist"
    )
    definition_deleted(actor, subscription)
    subscription.delete()
