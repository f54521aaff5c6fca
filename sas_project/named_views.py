"""The shared shape of the API's definitions: a collection (list, create) and one resource
addressed by name (read, replace, update, delete), for workflows, schedules, pools, policies,
alert subscriptions and tokens.

A view says how to find, change and delete its resource (`lookup`, `change`, `remove`) and its
serializer; the base answers every method the same way: 200 with the resource, 201 with a
`Location`, 204 for a delete. Each view keeps its own OpenAPI description, attached with
`extend_schema_view` to the methods it inherits.

The classes here carry no docstring on purpose: drf-spectacular describes an operation that has no
description of its own with the first docstring of its view's classes, and a docstring here would
change the published schema of those operations.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db.models import QuerySet
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer

from sas_project.api import ApiView, location


class NamedResourcesView(ApiView):
    # A collection: GET lists `listing` in pages of `serializer`; a subclass's POST answers what
    # it made with `created`, whose Location is the URL named `item_url`.
    serializer: ClassVar[type[Serializer]]
    item_url: ClassVar[str]

    def get(self, request: Request) -> Response:
        return self.paginated(self.listing(request), self.serializer)

    def listing(self, request: Request) -> QuerySet[Any] | list[Any]:
        raise NotImplementedError

    def created(self, data: Any, **url_kwargs: Any) -> Response:
        return Response(data, status=status.HTTP_201_CREATED, headers=location(self.item_url, **url_kwargs))


class NamedResourceView(ApiView):
    # One resource by name: GET answers `lookup`; PUT (every field) and PATCH (some) answer what
    # `change` returns; DELETE calls `remove` and answers 204. Each is rendered by `serializer`
    # with the request in its context (a serializer may show less to some readers).
    serializer: ClassVar[type[Serializer]]

    def get(self, request: Request, name: str) -> Response:
        return Response(self.represent(request, self.lookup(request, name)))

    def put(self, request: Request, name: str) -> Response:
        return Response(self.represent(request, self.change(request, name, partial=False)))

    def patch(self, request: Request, name: str) -> Response:
        return Response(self.represent(request, self.change(request, name, partial=True)))

    def delete(self, request: Request, name: str) -> Response:
        self.remove(request, name)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def represent(self, request: Request, resource: Any) -> Any:
        return self.serializer(resource, context={"request": request}).data

    def lookup(self, request: Request, name: str) -> Any:
        raise NotImplementedError

    def change(self, request: Request, name: str, *, partial: bool) -> Any:
        raise NotImplementedError

    def remove(self, request: Request, name: str) -> None:
        raise NotImplementedError
