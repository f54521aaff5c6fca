"""Agent pool definitions: create or update a pool with its endpoints, validated; the count of
queue replies set aside."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import jmespath
from django.db import IntegrityError, transaction
from django.db.models import F, ProtectedError
from django.db.models.functions import Now
from jmespath.exceptions import JMESPathError

from agents.http import CANARY_POOL
from agents.models import AgentEndpoint, AgentKind, AgentPool, ReplyDeadLetters
from agents.validation import (
    same_origin,
    valid_field_value,
    validate_broker_url,
    validate_endpoint_url,
    validate_secret_header_name,
)
from sas_project.audit import definition_deleted, definition_logged
from sas_project.errors import ActionNotAllowed, InvalidInput, NotFound, StaleWrite
from sas_project.validation import is_count, object_of, valid_name


def endpoint_spec_clean(kind: str, *, item: Any) -> dict[str, Any]:
    """One endpoint to save, checked for a pool of `kind`: its URL through the outbound-URL guard
    (a broker URL for a queue pool), its secret header's name (an HTTP header name that is not
    reserved; for a queue pool the broker user name) and value. Raises InvalidInput whose message
    names the part that is wrong (field "endpoints")."""
    spec = {"url": item} if isinstance(item, str) else item
    if not isinstance(spec, dict) or not isinstance(spec.get("url"), str):
        raise InvalidInput("each endpoint is a URL or an object with a url", field="endpoints")
    try:
        if kind == AgentKind.QUEUE:
            url = validate_broker_url(spec["url"])
        else:
            url = validate_endpoint_url(spec["url"])
    except InvalidInput as exc:
        raise InvalidInput(exc.message, field="endpoints") from exc
    header_name = spec.get("secret_header_name", "") or ""
    header_value = spec.get("secret_header_value", "") or ""
    if not isinstance(header_name, str) or not isinstance(header_value, str):
        raise InvalidInput("secret header name and value must be strings", field="endpoints")
    if kind == AgentKind.QUEUE:
        # A broker's credentials: the user name (optional) and the password.
        if header_name and not re.match(r"^[A-Za-z0-9._@-]{1,100}$", header_name):
            raise InvalidInput(
                "a broker user name (secret_header_name) is 1-100 plain characters", field="endpoints"
            )
    elif header_name:
        try:
            header_name = validate_secret_header_name(header_name)
        except InvalidInput as exc:
            raise InvalidInput(exc.message, field="endpoints") from exc
    if len(header_value) > 500 or any(ch in header_value for ch in "\r\n\x00"):
        raise InvalidInput(
            "secret_header_value must be at most 500 characters on one line", field="endpoints"
        )
    if kind != AgentKind.QUEUE and not valid_field_value(header_value):
        raise InvalidInput(
            "secret_header_value must be an HTTP header value: printable ASCII, with no space "
            "or tab at either end",
            field="endpoints",
        )
    return {
        "url": url,
        "enabled": bool(spec.get("enabled", True)),
        "secret_header_name": header_name,
        "secret_header_value": header_value,
    }


def _endpoint_specs(kind: str, endpoints: Any) -> list[dict[str, Any]]:
    if endpoints is None:
        endpoints = []
    if not isinstance(endpoints, list):
        raise InvalidInput("endpoints must be a list", field="endpoints")
    if kind == AgentKind.PYTHON and endpoints:
        raise InvalidInput("a python pool has no endpoints", field="endpoints")
    specs: list[dict[str, Any]] = []
    seen: set[str] = set()
    for item in endpoints:
        spec = endpoint_spec_clean(kind, item=item)
        if spec["url"] in seen:
            raise InvalidInput(f"endpoint {spec['url']} is listed twice", field="endpoints")
        seen.add(spec["url"])
        specs.append(spec)
    return specs


def _check_limits(max_in_flight: Any, max_per_second: Any) -> None:
    if max_in_flight is not None and (
        not isinstance(max_in_flight, int)
        or isinstance(max_in_flight, bool)
        or not 1 <= max_in_flight <= 100_000
    ):
        raise InvalidInput(
            "max_in_flight must be empty or a whole number from 1 to 100000", field="max_in_flight"
        )
    if max_per_second is not None and (
        not isinstance(max_per_second, int | float)
        or isinstance(max_per_second, bool)
        or not 0.001 <= max_per_second <= 100_000
    ):
        raise InvalidInput(
            "max_per_second must be empty or a number from 0.001 to 100000", field="max_per_second"
        )


#: The longest expression a keyed rate may name (as a condition's).
MAX_KEY_EXPRESSION = 1000


def rate_check(value: Any, *, field: str = "rate") -> dict[str, Any] | None:
    """A keyed rate as stored, or None: `{"key": "<JMESPath>" (optional: absent, one bucket for
    every call), "per_second": R (0.001 to 100000), "burst": B (1 to 100000, default 1)}`, the
    calls it counts started at most R a second per value of the key, B at once. InvalidInput
    names what is wrong (the key's syntax only: what it may read is the caller's to check)."""
    if value is None:
        return None
    object_of(value, where=field, members=("key", "per_second", "burst"), field=field)
    key = value.get("key")
    if key in (None, ""):
        key = ""
    elif not isinstance(key, str) or len(key) > MAX_KEY_EXPRESSION:
        raise InvalidInput(
            f"{field}.key must be a JMESPath expression of at most {MAX_KEY_EXPRESSION} characters",
            field=f"{field}.key",
        )
    else:
        try:
            jmespath.compile(key)
        except JMESPathError as exc:
            first = str(exc).splitlines()[0]
            raise InvalidInput(
                f"{field}.key: not a JMESPath expression ({first})", field=f"{field}.key"
            ) from exc
    per_second = value.get("per_second")
    if (
        isinstance(per_second, bool)
        or not isinstance(per_second, int | float)
        or not 0.001 <= per_second <= 100_000
    ):
        raise InvalidInput(
            f"{field}.per_second must be a number from 0.001 to 100000", field=f"{field}.per_second"
        )
    burst = value.get("burst", 1)
    if burst is None:
        burst = 1
    if not is_count(burst, 1, 100_000):
        raise InvalidInput(f"{field}.burst must be a whole number from 1 to 100000", field=f"{field}.burst")
    return {"key": key, "per_second": float(per_second), "burst": burst}


def pool_save(
    *,
    name: str,
    kind: str = AgentKind.HTTP,
    endpoints: Any = None,
    alternate: str | None = None,
    pool: AgentPool | None = None,
    actor: Any = None,
    max_in_flight: int | None = None,
    max_per_second: float | None = None,
    rate: Any = None,
    moved: Mapping[str, str] | None = None,
) -> AgentPool:
    """Create a pool (or update `pool`) with exactly the given endpoints and limits.

    Endpoints are matched by URL: kept ones keep their history and health, missing ones are
    removed. A secret header value left empty on update keeps the stored one. The endpoints are
    checked (their hosts resolved) before the transaction opens.

    `moved` maps a new URL to the URL that endpoint had, for an endpoint edited in place (a row
    of the admin's form). Its secret, left empty, is carried over only when both URLs have the
    same origin (scheme, host and port): a secret meant for one host is never sent to another.
    Moved to another origin, the secret is dropped, and the audit entry says so
    (`secret_dropped`). Without `moved` a new URL is a new endpoint, and no secret carries.
    """
    valid_name(name, "pool name", "name")
    if name == CANARY_POOL:
        raise InvalidInput(f"pool name {name!r} is reserved for the service's canary", field="name")
    if kind not in AgentKind.values:
        raise InvalidInput(f"kind must be one of {', '.join(AgentKind.values)}", field="kind")
    specs = _endpoint_specs(kind, endpoints)
    _check_limits(max_in_flight, max_per_second)
    rate = rate_check(rate)
    return _pool_write(
        name=name,
        kind=kind,
        specs=specs,
        alternate=alternate,
        pool=pool,
        actor=actor,
        max_in_flight=max_in_flight,
        max_per_second=max_per_second,
        rate=rate,
        moved=dict(moved or {}),
    )


@transaction.atomic
def _pool_write(
    *,
    name: str,
    kind: str,
    specs: list[dict[str, Any]],
    alternate: str | None,
    pool: AgentPool | None,
    actor: Any,
    max_in_flight: int | None,
    max_per_second: float | None,
    rate: dict[str, Any] | None,
    moved: dict[str, str],
) -> AgentPool:
    other = AgentPool.objects.filter(name=name)
    if pool is not None:
        other = other.exclude(pk=pool.pk)
    if other.exists():
        raise InvalidInput(f"a pool named {name!r} already exists", field="name")
    alternate_pool = None
    if alternate:
        alternate_pool = AgentPool.objects.filter(name=alternate).first()
        if alternate_pool is None:
            raise InvalidInput(f"unknown alternate pool {alternate!r}", field="alternate")
        if alternate_pool.name == name:
            raise InvalidInput("a pool cannot be its own alternate", field="alternate")
        if alternate_pool.kind != kind:
            raise InvalidInput("the alternate pool must be of the same kind", field="alternate")
    created = pool is None
    before = _pool_state(pool) if pool is not None else {}
    if pool is None:
        try:
            with transaction.atomic():
                pool = AgentPool.objects.create(
                    name=name,
                    kind=kind,
                    alternate=alternate_pool,
                    max_in_flight=max_in_flight,
                    max_per_second=max_per_second,
                    rate=rate,
                )
        except IntegrityError as exc:
            raise StaleWrite(f"pool {name!r} was created at the same moment; send yours again") from exc
    else:
        pool.name, pool.kind, pool.alternate = name, kind, alternate_pool
        pool.max_in_flight, pool.max_per_second, pool.rate = max_in_flight, max_per_second, rate
        pool.save(
            update_fields=[
                *("name", "kind", "alternate", "max_in_flight", "max_per_second", "rate", "updated_at")
            ]
        )
    existing = {e.url: e for e in pool.endpoints.all()}
    stored = dict(existing)
    dropped: list[tuple[str, str]] = []
    for spec in specs:
        endpoint = existing.pop(spec["url"], None)
        if endpoint is None:
            previous = stored.get(moved.get(spec["url"], ""))
            AgentEndpoint.objects.create(pool=pool, **_carried_secret(spec, previous, dropped))
            continue
        endpoint.enabled = spec["enabled"]
        endpoint.secret_header_name = spec["secret_header_name"]
        if spec["secret_header_value"] or not spec["secret_header_name"]:
            endpoint.secret_header_value = spec["secret_header_value"]
        endpoint.save(update_fields=["enabled", "secret_header_name", "secret_header_value"])
    for endpoint in existing.values():
        endpoint.delete()
    after = _pool_state(pool)
    changes = {k: [before.get(k), v] for k, v in after.items() if before.get(k) != v}
    if dropped:
        changes["secret_dropped"] = [[old for old, _ in dropped], [new for _, new in dropped]]
    if created or changes:
        definition_logged(actor, pool, created=created, changes=changes)
    return pool


def _carried_secret(
    spec: dict[str, Any], previous: AgentEndpoint | None, dropped: list[tuple[str, str]]
) -> dict[str, Any]:
    """The spec of an endpoint edited in place from `previous`: with a secret header named and its
    value left empty, the stored value when the origin is the same; else none, noted in
    `dropped`."""
    if previous is None or not previous.secret_header_value:
        return spec
    if spec["secret_header_value"] or not spec["secret_header_name"]:
        return spec
    if same_origin(previous.url, spec["url"]):
        return {**spec, "secret_header_value": previous.secret_header_value}
    dropped.append((previous.url, spec["url"]))
    return spec


def _pool_state(pool: AgentPool) -> dict[str, Any]:
    """What an audit entry compares (a secret only as whether one is set)."""
    return {
        "name": pool.name,
        "kind": pool.kind,
        "alternate": pool.alternate.name if pool.alternate is not None else None,
        "max_in_flight": pool.max_in_flight,
        "max_per_second": pool.max_per_second,
        "rate": pool.rate,
        "endpoints": sorted(
            [e.url, e.enabled, e.secret_header_name, bool(e.secret_header_value)]
            for e in pool.endpoints.all()
        ),
    }


@transaction.atomic
def pool_delete(name: str, *, actor: Any) -> None:
    """Delete a pool no workflow, job or other pool uses (with its endpoints). Otherwise
    ActionNotAllowed names what uses it: history keeps the pools its steps ran on."""
    pool = AgentPool.objects.select_for_update().filter(name=name).first()
    if pool is None:
        raise NotFound(f"pool {name!r} does not exist")
    primaries = list(pool.primaries.values_list("name", flat=True))
    if primaries:
        raise ActionNotAllowed(f"pool {name!r} is the alternate of pool {primaries[0]!r}: change that first")
    definition_deleted(actor, pool)
    try:
        with transaction.atomic():
            pool.delete()
    except ProtectedError as exc:
        # The scheduler's rows point at pools: named from the refusal, never imported here.
        raise ActionNotAllowed(
            f"pool {name!r} is used by {_named(exc.protected_objects)}: it cannot be deleted"
        ) from exc


def _named(rows: Any) -> str:
    """One of the rows that refer to a definition, in words: a job's step before a workflow's."""
    rows = list(rows)
    for row in rows:
        if getattr(row, "job_id", None) is not None:
            return f"job {row.job_id}"
    for row in rows:
        workflow: Any = getattr(row, "workflow", None)
        if workflow is not None:
            return f"workflow {workflow.name!r} (version {workflow.version})"
    return str(rows[0]) if rows else "another definition"


def reply_dead_letters_count(reason: str) -> None:
    """Count one queue reply sent to a dead-letter queue for `reason` (in the caller's
    transaction): the row is made once, then incremented in place, so concurrent consumers never
    lose a count."""
    ReplyDeadLetters.objects.bulk_create([ReplyDeadLetters(reason=reason)], ignore_conflicts=True)
    ReplyDeadLetters.objects.filter(reason=reason).update(count=F("count") + 1, last_at=Now())
