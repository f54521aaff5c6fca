"""The shared shape of the API's definitions: a collection (list, create) and one resource
addressed by name (read, replace, update, delete), for workflows, schedules, pools, policies,
alert subscriptions and tokens.

A view says how to find, change and delete its resource (`lookup`, `change`, `remove`) and its
serializer; the base answers every method the same way: 200 with the resource, 201 with a
`Location`, 204 for a delete. Its OpenAPI description is built the same way too
(`collection_schema`, `resource_schema`): the operations' IDs, tags, answers and usual errors from
the resource's tag and serializers, the words (`Doc`) from the view.

The classes here carry no docstring on purpose: drf-spectacular describes an operation that has no
description of its own with the first docstring of its view's classes, and a docstring here would
change the published schema of those operations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer

from sas_project.api import WRITE_ERROR_CODES, ApiView, errors, location

# The views the schema functions below describe (defined after them).
Collection = TypeVar("Collection", bound="type[NamedResourcesView]")
Resource = TypeVar("Resource", bound="type[NamedResourceView]")

#: The error answers each operation documents unless its `Doc` names others.
READ_ERRORS = (401, 403, 404)
CREATE_ERRORS = (*WRITE_ERROR_CODES, 409)
CHANGE_ERRORS = (*WRITE_ERROR_CODES, 404, 409)
#: A change documented without a conflict (409): policies' and alert subscriptions'.
UNCONTESTED_CHANGE_ERRORS = (*WRITE_ERROR_CODES, 404)
DELETE_ERRORS = (401, 403, 404, 409)


@dataclass(frozen=True)
class Doc:
    """What one operation says of itself: its summary, and if it has them a description, its own
    parameters and error answers other than its kind's usual ones (the `*_ERRORS` above)."""

    summary: str
    description: str | None = None
    parameters: Sequence[Any] | None = None
    errors: tuple[int, ...] | None = None


def operation(tag: str, operation_id: str, summary: str, **schema: Any) -> Any:
    """The OpenAPI description of one operation (drf-spectacular's `extend_schema`): its one tag,
    its ID and summary, then whatever else `extend_schema` takes (description, parameters,
    request, responses)."""
    return extend_schema(operation_id=operation_id, tags=[tag], summary=summary, **schema)


def _operation(
    tag: str, verb: str, doc: Doc, usual: tuple[int, ...], answer: dict[int, Any], **schema: Any
) -> Any:
    # The operation ID is the tag and the verb (`pools_create`); the errors follow the answer.
    return operation(
        tag,
        f"{tag}_{verb}",
        doc.summary,
        description=doc.description,
        parameters=doc.parameters,
        responses={**answer, **errors(*(doc.errors or usual))},
        **schema,
    )


def collection_schema(
    tag: str, *, listing: Doc, create: Doc, request: type[Serializer], created: type[Serializer] | None = None
) -> Callable[[Collection], Collection]:
    """The OpenAPI description of a `NamedResourcesView`: GET `<tag>_list`, pages of the view's
    `serializer`; POST `<tag>_create`, `request` answered 201 with `created` (by default the
    view's `serializer`)."""

    def describe(view: Collection) -> Collection:
        shown = view.serializer
        return extend_schema_view(
            get=_operation(tag, "list", listing, READ_ERRORS, {200: shown(many=True)}),
            post=_operation(tag, "create", create, CREATE_ERRORS, {201: created or shown}, request=request),
        )(view)

    return describe


def resource_schema(
    tag: str, *, read: Doc, replace: Doc, update: Doc, delete: Doc, request: type[Serializer]
) -> Callable[[Resource], Resource]:
    """The OpenAPI description of a `NamedResourceView`: GET `<tag>_read`, PUT `<tag>_replace` and
    PATCH `<tag>_update` (both `request`, answered with the view's `serializer`), DELETE
    `<tag>_delete` (204)."""

    def describe(view: Resource) -> Resource:
        shown = {200: view.serializer}
        return extend_schema_view(
            get=_operation(tag, "read", read, READ_ERRORS, shown),
            put=_operation(tag, "replace", replace, CHANGE_ERRORS, shown, request=request),
            patch=_operation(tag, "update", update, CHANGE_ERRORS, shown, request=request),
            delete=_operation(tag, "delete", delete, DELETE_ERRORS, {204: None}),
        )(view)

    return describe


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
