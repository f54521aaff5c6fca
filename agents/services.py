"""Agent pool definitions: create or update a pool with its endpoints, validated."""

from __future__ import annotations

import re
from typing import Any

from django.db import IntegrityError, transaction

from agents.models import AgentEndpoint, AgentKind, AgentPool
from agents.validation import validate_endpoint_url
from sas_project.audit import definition_logged
from sas_project.errors import InvalidInput, StaleWrite
from sas_project.validation import valid_name


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
        spec = {"url": item} if isinstance(item, str) else item
        if not isinstance(spec, dict) or not isinstance(spec.get("url"), str):
            raise InvalidInput("each endpoint is a URL or an object with a url", field="endpoints")
        try:
            url = validate_endpoint_url(spec["url"])
        except InvalidInput as exc:
            raise InvalidInput(exc.message, field="endpoints") from exc
        if url in seen:
            raise InvalidInput(f"endpoint {url} is listed twice", field="endpoints")
        seen.add(url)
        header_name = spec.get("secret_header_name", "") or ""
        header_value = spec.get("secret_header_value", "") or ""
        if not isinstance(header_name, str) or not isinstance(header_value, str):
            raise InvalidInput("secret header name and value must be strings", field="endpoints")
        if header_name and not re.match(r"^[A-Za-z0-9-]{1,100}$", header_name):
            raise InvalidInput("secret_header_name must be an HTTP header name", field="endpoints")
        if len(header_value) > 500 or any(ch in header_value for ch in "\r\n\x00"):
            raise InvalidInput(
                "secret_header_value must be at most 500 characters on one line", field="endpoints"
            )
        specs.append(
            {
                "url": url,
                "enabled": bool(spec.get("enabled", True)),
                "secret_header_name": header_name,
                "secret_header_value": header_value,
            }
        )
    return specs


def pool_save(
    *,
    name: str,
    kind: str = AgentKind.HTTP,
    endpoints: Any = None,
    alternate: str | None = None,
    pool: AgentPool | None = None,
    actor: Any = None,
) -> AgentPool:
    """Create a pool (or update `pool`) with exactly the given endpoints.

    Endpoints are matched by URL: kept ones keep their history and health, missing ones are
    removed. A secret header value left empty on update keeps the stored one. The endpoints are
    checked (their hosts resolved) before the transaction opens.
    """
    valid_name(name, "pool name", "name")
    if kind not in AgentKind.values:
        raise InvalidInput(f"kind must be one of {', '.join(AgentKind.values)}", field="kind")
    specs = _endpoint_specs(kind, endpoints)
    return _pool_write(name=name, kind=kind, specs=specs, alternate=alternate, pool=pool, actor=actor)


@transaction.atomic
def _pool_write(
    *,
    name: str,
    kind: str,
    specs: list[dict[str, Any]],
    alternate: str | None,
    pool: AgentPool | None,
    actor: Any,
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
                pool = AgentPool.objects.create(name=name, kind=kind, alternate=alternate_pool)
        except IntegrityError as exc:
            raise StaleWrite(f"pool {name!r} was created at the same moment; send yours again") from exc
    else:
        pool.name, pool.kind, pool.alternate = name, kind, alternate_pool
        pool.save(update_fields=["name", "kind", "alternate", "updated_at"])
    existing = {e.url: e for e in pool.endpoints.all()}
    for spec in specs:
        endpoint = existing.pop(spec["url"], None)
        if endpoint is None:
            AgentEndpoint.objects.create(pool=pool, **spec)
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
    if created or changes:
        definition_logged(actor, pool, created=created, changes=changes)
    return pool


def _pool_state(pool: AgentPool) -> dict[str, Any]:
    """What an audit entry compares (a secret only as whether one is set)."""
    return {
        "name": pool.name,
        "kind": pool.kind,
        "alternate": pool.alternate.name if pool.alternate is not None else None,
        "endpoints": sorted(
            [e.url, e.enabled, e.secret_header_name, bool(e.secret_header_value)]
            for e in pool.endpoints.all()
        ),
    }
