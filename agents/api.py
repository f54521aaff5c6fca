"""The REST API of the agents' resources (/api/v1/): pools and their endpoints, with the health
of each endpoint. Built on the shared base in sas_project.api."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from agents import selectors
from agents.serializers import PoolReplaceSerializer, PoolSerializer, PoolWriteSerializer
from agents.services import pool_delete, pool_save
from sas_project.api import DefinitionAccess, one_writer, validated
from sas_project.named_views import (
    Doc,
    NamedResourcesView,
    NamedResourceView,
    collection_schema,
    resource_schema,
)

# --- pools ------------------------------------------------------------------------------------


@collection_schema(
    "pools",
    listing=Doc("Agent pools, with the health of their endpoints"),
    create=Doc(
        "Create a pool",
        "Endpoint URLs must be http or https, to hosts allowed by SAS_AGENT_ALLOWED_HOSTS "
        "when it is set, and to public addresses unless SAS_OUTBOUND_INTERNAL_HOSTS names the host. "
        "Secret header values are write-only; a secret header may not take a name the service sets "
        "or that frames the request (Host, Content-Length, Idempotency-Key, X-SAS-*...).",
    ),
    request=PoolWriteSerializer,
)
class PoolsView(NamedResourcesView):
    permission_classes = [DefinitionAccess]
    serializer = PoolSerializer
    item_url = "api-pool"

    def get(self, request: Request) -> Response:
        # The endpoints' health is read for the page only.
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(selectors.pool_list(), request, view=self)
        states = selectors.pool_states(list(page or []))
        return paginator.get_paginated_response(PoolSerializer(states, many=True).data)

    def post(self, request: Request) -> Response:
        data = validated(PoolWriteSerializer, request.data)
        with one_writer(f"pool {data['name']!r}"):
            pool = pool_save(
                name=data["name"],
                kind=data["kind"],
                endpoints=data["endpoints"],
                alternate=data["alternate"] or None,
                actor=request.user,
                max_in_flight=data.get("max_in_flight"),
                max_per_second=data.get("max_per_second"),
                rate=data.get("rate"),
            )
        return self.created(PoolSerializer(selectors.pool_state(pool.name)).data, name=pool.name)


@resource_schema(
    "pools",
    read=Doc("A pool (by name), with the health of its endpoints"),
    replace=Doc(
        "Replace a pool: kind, exactly these endpoints, alternate",
        "Endpoints are matched by URL: kept ones keep their history and health. "
        "A secret header value left empty keeps the stored one. A different name renames the pool.",
    ),
    update=Doc(
        "Change some fields of a pool", "Fields left out keep their values (endpoints with their secrets)."
    ),
    delete=Doc(
        "Delete a pool that no workflow, job or other pool uses",
        "409 names what uses it: history keeps the pools its steps ran on.",
    ),
    request=PoolReplaceSerializer,
)
class PoolView(NamedResourceView):
    permission_classes = [DefinitionAccess]
    serializer = PoolSerializer

    def lookup(self, request: Request, name: str) -> Any:
        return selectors.pool_state(name)

    def remove(self, request: Request, name: str) -> None:
        pool_delete(name, actor=request.user)

    def change(self, request: Request, name: str, *, partial: bool) -> Any:
        """Fields left out keep their values; a different name renames the pool."""
        data = validated(PoolReplaceSerializer, request.data, partial=partial)
        pool = selectors.pool_get(name)
        if "endpoints" in data:
            endpoints = data["endpoints"]
        else:
            endpoints = [
                {"url": e.url, "enabled": e.enabled, "secret_header_name": e.secret_header_name}
                for e in pool.endpoints.all()
            ]
        if "alternate" in data:
            alternate = data["alternate"]
        else:
            alternate = pool.alternate.name if pool.alternate else None
        with one_writer(f"pool {data.get('name', name)!r}"):
            pool = pool_save(
                name=data.get("name", pool.name),
                kind=data.get("kind", pool.kind),
                endpoints=endpoints,
                alternate=alternate or None,
                pool=pool,
                actor=request.user,
                max_in_flight=data.get("max_in_flight", pool.max_in_flight),
                max_per_second=data.get("max_per_second", pool.max_per_second),
                rate=data.get("rate", pool.rate),
            )
        return selectors.pool_state(pool.name)
