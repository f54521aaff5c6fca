"""The REST API of the agents' resources (/api/v1/): pools and their endpoints, with the health
of each endpoint. Built on the shared base in sas_project.api."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from agents import selectors
from agents.serializers import PoolReplaceSerializer, PoolSerializer, PoolWriteSerializer
from agents.services import pool_delete, pool_save
from sas_project.api import WRITE_ERRORS, ApiView, DefinitionAccess, errors, location, one_writer, validated

# --- pools ------------------------------------------------------------------------------------


class PoolsView(ApiView):
    permission_classes = [DefinitionAccess]

    @extend_schema(
        operation_id="pools_list",
        tags=["pools"],
        summary="Agent pools, with the health of their endpoints",
        responses={200: PoolSerializer(many=True), **errors(401, 403, 404)},
    )
    def get(self, request: Request) -> Response:
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(selectors.pool_list(), request, view=self)
        states = selectors.pool_states(list(page or []))
        return paginator.get_paginated_response(PoolSerializer(states, many=True).data)

    @extend_schema(
        operation_id="pools_create",
        tags=["pools"],
        summary="Create a pool",
        description="Endpoint URLs must be http or https, to hosts allowed by SAS_AGENT_ALLOWED_HOSTS "
        "when it is set, and to public addresses unless SAS_OUTBOUND_INTERNAL_HOSTS names the host. "
        "Secret header values are write-only; a secret header may not take a name the service sets "
        "or that frames the request (Host, Content-Length, Idempotency-Key, X-SAS-*...).",
        request=PoolWriteSerializer,
        responses={201: PoolSerializer, **WRITE_ERRORS, **errors(409)},
    )
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
            )
        return Response(
            PoolSerializer(selectors.pool_state(pool.name)).data,
            status=status.HTTP_201_CREATED,
            headers=location("api-pool", name=pool.name),
        )


class PoolView(ApiView):
    permission_classes = [DefinitionAccess]

    @extend_schema(
        operation_id="pools_read",
        tags=["pools"],
        summary="A pool (by name), with the health of its endpoints",
        responses={200: PoolSerializer, **errors(401, 403, 404)},
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(PoolSerializer(selectors.pool_state(name)).data)

    @extend_schema(
        operation_id="pools_replace",
        tags=["pools"],
        summary="Replace a pool: kind, exactly these endpoints, alternate",
        description="Endpoints are matched by URL: kept ones keep their history and health. "
        "A secret header value left empty keeps the stored one. A different name renames the pool.",
        request=PoolReplaceSerializer,
        responses={200: PoolSerializer, **WRITE_ERRORS, **errors(404, 409)},
    )
    def put(self, request: Request, name: str) -> Response:
        return self._update(request, name, partial=False)

    @extend_schema(
        operation_id="pools_update",
        tags=["pools"],
        summary="Change some fields of a pool",
        description="Fields left out keep their values (endpoints with their secrets).",
        request=PoolReplaceSerializer,
        responses={200: PoolSerializer, **WRITE_ERRORS, **errors(404, 409)},
    )
    def patch(self, request: Request, name: str) -> Response:
        return self._update(request, name, partial=True)

    @extend_schema(
        operation_id="pools_delete",
        tags=["pools"],
        summary="Delete a pool that no workflow, job or other pool uses",
        description="409 names what uses it: history keeps the pools its steps ran on.",
        responses={204: None, **errors(401, 403, 404, 409)},
    )
    def delete(self, request: Request, name: str) -> Response:
        pool_delete(name, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _update(self, request: Request, name: str, *, partial: bool) -> Response:
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
            )
        return Response(PoolSerializer(selectors.pool_state(pool.name)).data)
