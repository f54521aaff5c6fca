"""The API's shared base: JSON parsing, the one error mapping, roles as permission classes,
pagination, the strict request serializers, and the JSON 404 for unknown URLs under /api/.

Each app serves its own resources over this base (scheduler: jobs and workflows; supervisor:
policies and operator actions; agents: pools). Views are thin: they check the caller's role,
parse the request with a serializer, call one service or selector, and render. Roles
(sas_project.permissions):

- submitters submit jobs and read their own (another user's job is a 404 for them) and read
  workflows, so that they know what they may submit;
- operators also read every job, act on jobs and steps, and read pools and policies;
- administrators also create and change workflows, pools and policies.

An anonymous request is a 401 (token authentication comes first, so the answer carries
`WWW-Authenticate: Token`); a signed-in user without the role is a 403.

Every error has one shape, `{"detail": ..., "code": ..., "field": ...}` (see `exception_handler`),
with DRF's `{field: [message]}` entries beside it when a request field is at fault. Bad input is a
4xx, never a 500: the body parser refuses what PostgreSQL or the renderer could not hold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from django.db.models import QuerySet
from django.urls import Resolver404, resolve, reverse
from django.utils.encoding import force_str
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import force_instance
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework import pagination as drf_pagination
from rest_framework.pagination import BasePagination, PageNumberPagination
from rest_framework.parsers import JSONParser
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer
from rest_framework.utils import json
from rest_framework.views import APIView, set_rollback
from rest_framework.views import exception_handler as drf_exception_handler

from sas_project.errors import InvalidInput, SasError
from sas_project.inflight import body_bytes, large_request_begin, large_request_end
from sas_project.permissions import can_manage, can_operate, can_submit, can_view
from sas_project.problems import PROBLEM_JSON, pointer, problem, sas_field_errors
from sas_project.validation import unstorable

# --- serializers every app's API builds on ---------------------------------------------------

#: Largest value a PostgreSQL integer column holds.
MAX_INT = 2**31 - 1
NAME_PATTERN = r"^[A-Za-z0-9_-]{1,100}$"


class StrictSerializer(serializers.Serializer):
    """Refuses keys it does not declare. Read-only fields are declared, so a representation read
    from the API can be sent back as it is.

    A null for an optional field means "not given" (clients that write absent values as null need
    not leave the key out); for a text or list field a replacement must state, it is the empty
    value."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(str(key) for key in data if key not in self.fields)
            if unknown:
                raise serializers.ValidationError({key: ["Unknown field."] for key in unknown})
            data = self._nulls_as_absent(data)
        return super().to_internal_value(data)

    def _nulls_as_absent(self, data: Mapping[str, Any]) -> dict[str, Any]:
        cleaned: dict[str, Any] = {}
        for key, value in data.items():
            field = self.fields[key]
            if value is None and not field.allow_null and not field.read_only:
                if not field.required:
                    continue
                if not getattr(field, "optional_unless_replaced", False):
                    cleaned[key] = value  # a required field: null is an error, said as such
                    continue
                if isinstance(field, serializers.CharField):
                    value = ""
                elif isinstance(field, serializers.ListField | serializers.ListSerializer):
                    value = []
            cleaned[key] = value
        return cleaned


class ReplaceMixin(serializers.Serializer):
    """The PUT variant of a definition's write serializer: every writable field but the name is
    required and none falls back to a default, so a replacement states every value (PATCH, with
    partial=True, sends only the values to change). The name in the URL is the one that counts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, field in self.fields.items():
            if not field.read_only:
                if not field.required:
                    setattr(field, "optional_unless_replaced", True)  # noqa: B010
                field.required = name != "name"
                field.default = serializers.empty


class FieldErrorSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="What is wrong with it, readable.")
    pointer = serializers.CharField(
        help_text="Where: a JSON pointer (RFC 6901) into the request body, as a URI fragment "
        "(`#/jobs/2/input/amount`)."
    )
    input_pointer = serializers.CharField(
        required=False,
        help_text="An input contract's error: where in the job's input, a JSON pointer (`/amount`).",
    )
    field = serializers.CharField(
        required=False, help_text="Where, as a field path (`jobs[2].input`); absent for input contracts."
    )
    code = serializers.CharField(required=False, help_text="A machine-readable code (required, invalid...).")


class ErrorSerializer(serializers.Serializer):
    """Every error response: an RFC 9457 problem detail (`application/problem+json`) with the
    service's extensions. v1's earlier fields stay: `detail`, `code`, `field`, and for field
    errors DRF's `{field: [message, ...]}` entries beside them."""

    type = serializers.CharField(
        help_text="The problem type, a URI reference per code: `/problems/<code>/`, a page saying what it "
        "means and what to do (docs/api.md lists them)."
    )
    title = serializers.CharField(help_text="A short summary of the problem type (the HTTP status's phrase).")
    status = serializers.IntegerField(help_text="The HTTP status code, repeated.")
    detail = serializers.CharField(help_text="What went wrong this time, readable.")
    instance = serializers.CharField(help_text="The path of the request that failed.")
    code = serializers.CharField(help_text="A stable, machine-readable code (invalid, not_found...).")
    field = serializers.CharField(
        required=False, allow_null=True, help_text="The request field at fault, when there is one."
    )

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        # Declared here: a class attribute named `errors` would shadow Serializer.errors.
        fields["errors"] = FieldErrorSerializer(
            many=True, required=False, help_text="Every field at fault, when the request's fields are."
        )
        return fields


# --- parsing ----------------------------------------------------------------------------------


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def _check_document(data: Any) -> None:
    """Refuse a parsed body the database cannot store, by the check every stored value passes
    (sas_project.validation.unstorable: a NUL character, an unpaired surrogate, a number that is
    not finite, 1e999 parsing as infinity, more than MAX_JSON_DEPTH levels), naming where."""
    problem = unstorable(data)
    if problem is not None:
        raise exceptions.ParseError(f"the JSON body cannot be stored: it holds {problem}")


class JSONDocumentParser(JSONParser):
    """DRF's JSON parser, made total: any body it cannot turn into a storable document is a
    ParseError (400), including invalid UTF-8 and nesting deep enough to exhaust the stack."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            # str.encode() accepts only text codecs: no charset can make a small body expand.
            "".encode(encoding)
        except (LookupError, UnicodeError):
            raise exceptions.ParseError(f"unsupported charset {encoding!r}") from None
        try:
            data = json.loads(stream.read().decode(encoding), parse_constant=_refuse_constant)
        except UnicodeDecodeError as exc:
            raise exceptions.ParseError(f"the body is not valid {encoding}: {exc.reason}") from None
        except RecursionError:
            raise exceptions.ParseError("JSON nested too deeply") from None
        except ValueError as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None
        _check_document(data)
        return data


# --- errors -----------------------------------------------------------------------------------


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "too_large"


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "Another request changed this at the same moment; send yours again."
    default_code = "conflict"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """The API's one error mapping (REST_FRAMEWORK["EXCEPTION_HANDLER"]).

    - the service's errors (sas_project.errors.SasError) answer with their own HTTP status;
    - a body over DATA_UPLOAD_MAX_MEMORY_SIZE is a 413; undecodable or too deep JSON a 400;
    - everything DRF knows (validation, authentication, permission, 404, 405, 415...) keeps its
      status and gets the same shape: `detail`, `code`, and for field errors `field` plus DRF's
      `{field: [message]}` entries.
    Each answer is an RFC 9457 problem detail (`problem`). Anything else is a bug and stays a 500.
    """
    request = context.get("request")
    if isinstance(exc, SasError):
        set_rollback()
        answer = Response(_sas_error_body(exc), status=exc.http_status)
        if isinstance(exc.detail.get("retry_after"), int):
            answer["Retry-After"] = str(exc.detail["retry_after"])
        return problem(answer, request, sas_field_errors(exc))
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        exc = PayloadTooLarge(f"The request body is larger than the limit of {limit} bytes.")
    elif isinstance(exc, UnicodeDecodeError):
        exc = exceptions.ParseError(f"The request is not valid UTF-8: {exc.reason}")
    elif isinstance(exc, RecursionError):
        exc = exceptions.ParseError("JSON nested too deeply")
    elif isinstance(exc, exceptions.UnsupportedMediaType):
        message = force_str(exc.detail)
        exc = exceptions.UnsupportedMediaType(
            message, detail=f"{message} Send JSON, with the header Content-Type: application/json."
        )
    response = drf_exception_handler(exc, context)
    if response is not None:
        errors = _field_errors(response.data)
        response.data = _drf_error_body(response.data, exc)
        response = problem(response, request, errors)
    return response


def _field_errors(data: Any) -> list[dict[str, Any]]:
    """DRF's `{field: [message]}` errors (nested for lists and objects) as RFC 9457's `errors`."""
    found: list[dict[str, Any]] = []

    def walk(value: Any, path: tuple[Any, ...]) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, (*path, key))
        elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            for message in value:
                top = path and path[0] != "non_field_errors"
                found.append(
                    {
                        **({"field": _error_path(path)} if top else {}),
                        "pointer": pointer(path) if top else "#",
                        "detail": force_str(message),
                        "code": getattr(message, "code", None) or "invalid",
                    }
                )
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if item:
                    walk(item, (*path, index))

    single = isinstance(data, dict) and "detail" in data and not isinstance(data["detail"], list | dict)
    if isinstance(data, dict | list) and not single:
        walk(data, ())
    return found


def _sas_error_body(exc: SasError) -> dict[str, Any]:
    field = exc.detail.get("field")
    body: dict[str, Any] = {"detail": exc.message, "code": exc.code, "field": field}
    body.update({k: v for k, v in exc.detail.items() if k != "field" and k not in body})
    if isinstance(field, str):
        body[field] = [exc.message]
    return body


def _drf_error_body(data: Any, exc: Exception) -> dict[str, Any]:
    default_code = getattr(exc, "default_code", "error")
    if isinstance(data, dict) and "detail" in data and not isinstance(data["detail"], list | dict):
        code = getattr(data["detail"], "code", None) or default_code
        return {**data, "detail": force_str(data["detail"]), "code": code}
    path, message = _first_error(data)
    top = path[0] if path and isinstance(path[0], str) else None
    if top == "non_field_errors":
        top = None
    where = _error_path(path)
    detail = f"{where}: {message}" if where and top else message
    body: dict[str, Any] = {"detail": detail, "code": default_code, "field": top}
    if isinstance(data, dict):
        body.update({str(k): v for k, v in data.items() if k not in body})
    return body


def _first_error(data: Any, path: tuple[Any, ...] = ()) -> tuple[tuple[Any, ...], str]:
    """The first message in DRF's nested error structure, with where it was found."""
    if isinstance(data, dict):
        for key, value in data.items():
            if value:
                return _first_error(value, (*path, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            if value:
                nested = isinstance(value, dict | list)
                return _first_error(value, (*path, index) if nested else path)
    elif data:
        return path, force_str(data)
    return path, "Invalid request."


def _error_path(path: tuple[Any, ...]) -> str:
    where = ""
    for part in path:
        if isinstance(part, int) or (isinstance(part, str) and part.isdigit()):
            where += f"[{part}]"
        else:
            where += f".{part}" if where else str(part)
    return where


ERROR_DESCRIPTIONS = {
    400: "Invalid request: the body, a parameter or a field is wrong (`field` names it).",
    401: "Not authenticated: send `Authorization: Token <key>`.",
    403: "Authenticated, but your role does not allow this.",
    404: "No such object (or not visible to you).",
    409: "The current state does not allow this (or a conflicting request).",
    410: "Gone: it existed, but no longer can be used (an expired token; a job that history retention "
    "archived: `archive` names the file).",
    413: "The request body is larger than the limit.",
    422: "The Idempotency-Key was used before for a different request (another path or body): "
    "nothing was done. Use a new key for a new request.",
}


def errors(*codes: int) -> dict[tuple[int, str], OpenApiResponse]:
    """The documented error answers: problem details (`ErrorSerializer`) as application/problem+json."""
    return {
        (code, PROBLEM_JSON): OpenApiResponse(ErrorSerializer, description=ERROR_DESCRIPTIONS[code])
        for code in codes
    }


#: What any write may answer: a bad body, no or the wrong role, too large.
WRITE_ERROR_CODES = (400, 401, 403, 413)
WRITE_ERRORS = errors(*WRITE_ERROR_CODES)


def idempotency_key_parameter(what: str) -> OpenApiParameter:
    """The optional `Idempotency-Key` header of an action (sas_project.idempotency)."""
    return OpenApiParameter(
        "Idempotency-Key",
        str,
        OpenApiParameter.HEADER,
        required=False,
        pattern=r"^[ -~]{1,255}$",
        description=f"Sending the same key and body again {what}, with the header "
        "`Idempotent-Replayed: true`, and does nothing twice; the same key with another request is a "
        "422. Keys are per user.",
    )


REPLAYED_HEADER = OpenApiParameter(
    "Idempotent-Replayed",
    str,
    OpenApiParameter.HEADER,
    response=True,
    enum=["true"],
    description="Present on an answer replayed for an Idempotency-Key sent before.",
)


class ApiSchema(AutoSchema):
    """drf-spectacular's inspector; request bodies of strict serializers refuse other keys."""

    def _is_list_view(self, serializer: Any = None) -> bool:
        # The main response is the lowest 2xx: drf-spectacular takes the lowest key as text, and
        # the errors' `(400, "application/problem+json")` keys sort before "200", which hid the
        # lists' pages (and their page, page_size and cursor parameters) from the schema.
        if serializer is None:
            serializer = self.get_response_serializers()
        if isinstance(serializer, dict) and serializer:
            status_of = {
                (code[0] if isinstance(code, tuple) else int(code)): s for code, s in serializer.items()
            }
            serializer = status_of[min(status_of)]
        return bool(super()._is_list_view(serializer))

    def _map_basic_serializer(self, serializer: Any, direction: str) -> dict[str, Any]:
        schema: dict[str, Any] = super()._map_basic_serializer(serializer, direction)
        if direction == "request" and isinstance(force_instance(serializer), StrictSerializer):
            schema["additionalProperties"] = False
        return schema


# --- roles --------------------------------------------------------------------------------------


def _submits_or_views(user: Any) -> bool:
    return can_submit(user) or can_view(user)


def _nobody(user: Any) -> bool:
    return False


class RoleAccess(BasePermission):
    """Who may read (GET, HEAD, OPTIONS) and who may change, each a role check of
    sas_project.permissions; a subclass names both and its `message`."""

    readers: ClassVar[Callable[..., bool]]
    writers: ClassVar[Callable[..., bool]]

    def has_permission(self, request: Request, view: Any) -> bool:
        allowed = type(self).readers if request.method in SAFE_METHODS else type(self).writers
        return allowed(request.user)


class SubmitterAccess(RoleAccess):
    """Jobs: submitters submit and read their own; viewers (and operators) read every job."""

    message = "This needs the submitter role (or viewer for reading, operator, or administrator)."
    readers = staticmethod(_submits_or_views)
    writers = staticmethod(can_submit)


class OperatorAccess(RoleAccess):
    message = "This needs the operator role (or administrator)."
    readers = writers = staticmethod(can_operate)


class ViewerAccess(RoleAccess):
    """What the console shows: viewers read it; nothing here writes."""

    message = "This needs the viewer role (or operator, or administrator)."
    readers = staticmethod(can_view)
    writers = staticmethod(_nobody)


class DefinitionAccess(RoleAccess):
    """Pools, policies, alert subscriptions: viewers and operators read them, administrators
    change them."""

    message = "Reading needs the viewer or operator role; changing needs the administrator role."
    readers = staticmethod(can_view)
    writers = staticmethod(can_manage)


class WorkflowAccess(RoleAccess):
    """Workflows: every role reads them (submitters need them), administrators change them."""

    message = "Reading needs the submitter or viewer role; changing needs the administrator role."
    readers = staticmethod(_submits_or_views)
    writers = staticmethod(can_manage)


# --- helpers ----------------------------------------------------------------------------------


class Pagination(PageNumberPagination):
    """`?page=n`; `?page_size=n` up to 200. Lists answer `count`, `next`, `previous`, `results`."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class CursorPagination(drf_pagination.CursorPagination):
    """`?cursor=` pages in the view's `cursor_ordering`: each page starts after the last row of
    the one before, so rows arriving meanwhile neither shift a page nor repeat one (numbered pages
    of a newest-first list do both), and no page counts the whole list. A cursor that is not one
    this API made is a 400."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200
    cursor_query_param = "cursor"

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> list[Any] | None:
        self._model = queryset.model
        return super().paginate_queryset(queryset, request, view)

    def get_ordering(self, request: Any, queryset: Any, view: Any) -> tuple[str, ...]:
        return tuple(view.cursor_ordering)

    def decode_cursor(self, request: Any) -> Any:
        try:
            cursor = super().decode_cursor(request)
        except exceptions.NotFound:
            cursor = None
            valid = False
        else:
            valid = True
        if valid and cursor is not None and cursor.position is not None:
            field = self._model._meta.get_field(self.ordering[0].lstrip("-"))
            try:
                field.to_python(cursor.position)
            except (DjangoValidationError, ValueError, TypeError):
                valid = False
        if not valid:
            raise InvalidInput(
                "not a cursor of this list: follow the `next` and `previous` links as given", field="cursor"
            )
        return cursor


class CursorOrNumberPagination(BasePagination):
    """Cursor pages (`CursorPagination`: `next`, `previous`, `results`) unless the request asks
    for a numbered page with `?page=n`, which answers as `Pagination` does (with `count`) for
    clients written for numbered pages."""

    def __init__(self) -> None:
        self.delegate: BasePagination = CursorPagination()

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> list[Any] | None:
        self.delegate = Pagination() if "page" in request.query_params else CursorPagination()
        return self.delegate.paginate_queryset(queryset, request, view)

    def get_paginated_response(self, data: Any) -> Response:
        return self.delegate.get_paginated_response(data)

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        paged: dict[str, Any] = CursorPagination().get_paginated_response_schema(schema)
        paged["properties"]["count"] = {
            "type": "integer",
            "description": "How many rows the list holds: only on a numbered page (`?page=n`).",
            "example": 123,
        }
        return paged

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        cursor: list[dict[str, Any]] = CursorPagination().get_schema_operation_parameters(view)
        for parameter in cursor:
            if parameter["name"] == "cursor":
                parameter["description"] = "Where the page starts: the value in a `next` or `previous` link."
        numbered = [
            {
                "name": "page",
                "required": False,
                "in": "query",
                "description": "A numbered page instead (answers `count` too; rows arriving meanwhile "
                "shift the pages).",
                "schema": {"type": "integer"},
            }
        ]
        return cursor + numbered


#: Where a request's row of large requests in flight waits for its answer.
INFLIGHT_KEY = "sas.large_request"


class ApiView(APIView):
    """The API's views: JSON bodies only (JSONDocumentParser), the schema inspector above, pages of
    `Pagination` (or of `CursorOrNumberPagination` where a view says so, with its
    `cursor_ordering`)."""

    parser_classes = [JSONDocumentParser]
    schema = ApiSchema()
    pagination_class: type[BasePagination] = Pagination

    cursor_ordering: tuple[str, ...] = ()

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # After authentication, permissions and the rates: a large body is counted in flight
        # for its user before it is read (sas_project.inflight).
        request.META[INFLIGHT_KEY] = large_request_begin(request.user, size=body_bytes(request.META))

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        large_request_end(request.META.pop(INFLIGHT_KEY, None))
        return super().finalize_response(request, response, *args, **kwargs)

    def paginated(self, queryset: QuerySet[Any] | list[Any], serializer: type[Serializer]) -> Response:
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(queryset, self.request, view=self)
        return paginator.get_paginated_response(
            serializer(page, many=True, context={"request": self.request}).data
        )


def validated(serializer_class: type[Serializer], data: Any, **kwargs: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data, **kwargs)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def query_params(serializer_class: type[Serializer], request: Request) -> dict[str, Any]:
    return validated(serializer_class, request.query_params)


def refuse_rename(data: dict[str, Any], name: str, what: str) -> None:
    if data.get("name", name) != name:
        raise InvalidInput(f"a {what} cannot be renamed (the URL names {name!r})", field="name")


@contextmanager
def one_writer(what: str) -> Iterator[None]:
    """Two requests saving the same name at the same moment: the database's unique constraint
    lets one win; the other is told to try again rather than failing with a 500."""
    try:
        yield
    except IntegrityError as exc:
        raise Conflict(f"{what} was saved by another request at the same moment; send yours again") from exc


def location(url_name: str, **kwargs: Any) -> dict[str, str]:
    return {"Location": reverse(url_name, kwargs=kwargs)}


# --- anything else under /api/ ------------------------------------------------------------------


@extend_schema(exclude=True)
class NotFoundView(APIView):
    """Unknown URLs under /api/ answer in JSON like the rest of the API (and say when only the
    trailing slash is missing)."""

    authentication_classes = []
    permission_classes = []

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        path = request.path_info
        detail = "Not found."
        if not path.endswith("/"):
            try:
                match = resolve(path + "/")
            except Resolver404:
                match = None
            if match is not None and getattr(match.func, "cls", None) is not NotFoundView:
                detail = f"Not found. API URLs end with a slash: {path}/"
        raise exceptions.NotFound(detail)
