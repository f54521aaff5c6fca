"""The REST API, version 1 (/api/v1/): job submission and inspection, operator actions, definitions.

Views are thin: they check the caller's role, parse the request with a serializer, call one
service or selector, and render. Roles (scheduler.permissions):

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

import math
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import IntegrityError
from django.db.models import QuerySet
from django.urls import Resolver404, resolve, reverse
from django.utils.encoding import force_str
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import force_instance
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.parsers import JSONParser
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer
from rest_framework.utils import json
from rest_framework.views import APIView, set_rollback
from rest_framework.views import exception_handler as drf_exception_handler

from agents.services import pool_save
from scheduler import selectors
from scheduler.definitions import workflow_create
from scheduler.errors import InvalidInput, SasError
from scheduler.models import Job
from scheduler.permissions import can_manage, can_operate, can_submit
from scheduler.serializers import (
    ActionSerializer,
    ErrorSerializer,
    EventSerializer,
    JobFilterSerializer,
    JobSerializer,
    JobSubmitSerializer,
    JobSummarySerializer,
    PolicyReplaceSerializer,
    PolicyRevisionSerializer,
    PolicySerializer,
    PolicyWriteSerializer,
    PoolReplaceSerializer,
    PoolSerializer,
    PoolWriteSerializer,
    StepActionResultSerializer,
    StepDefinitionSerializer,
    StepResolveSerializer,
    StepRetrySerializer,
    StrictSerializer,
    WorkflowReplaceSerializer,
    WorkflowSerializer,
    WorkflowVersionSerializer,
)
from scheduler.services import job_submit
from supervisor.policies import POLICY_FIELDS, policy_create, policy_update
from supervisor.services import job_cancel, job_compensate, job_pause, job_resume, step_resolve, step_retry

# --- parsing ----------------------------------------------------------------------------------

#: Deepest nesting of arrays and objects a request body may have.
MAX_JSON_DEPTH = 64


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def _check_document(data: Any) -> None:
    """Refuse what the database or the renderer cannot hold, walking the parsed body iteratively
    (a recursive walk could itself overflow): too deep a nesting, NUL characters (PostgreSQL text
    and jsonb refuse them), unpaired surrogates (not encodable as UTF-8) and non-finite numbers
    (1e999 parses as infinity, which JSON cannot represent)."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth >= MAX_JSON_DEPTH:
                raise exceptions.ParseError(f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
            if isinstance(value, dict):
                for key, item in value.items():
                    _check_text(key)
                    stack.append((item, depth + 1))
            else:
                stack.extend((item, depth + 1) for item in value)
        elif isinstance(value, str):
            _check_text(value)
        elif isinstance(value, float) and not math.isfinite(value):
            raise exceptions.ParseError("JSON numbers must be finite")


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise exceptions.ParseError("JSON strings must not contain NUL (\\u0000) characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise exceptions.ParseError("JSON strings must not contain unpaired surrogates") from None


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

    - the service's errors (scheduler.errors.SasError) answer with their own HTTP status;
    - a body over DATA_UPLOAD_MAX_MEMORY_SIZE is a 413; undecodable or too deep JSON a 400;
    - everything DRF knows (validation, authentication, permission, 404, 405, 415...) keeps its
      status and gets the same shape: `detail`, `code`, and for field errors `field` plus DRF's
      `{field: [message]}` entries.
    Anything else is a bug and stays a 500.
    """
    if isinstance(exc, SasError):
        set_rollback()
        return Response(_sas_error_body(exc), status=exc.http_status)
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
        response.data = _drf_error_body(response.data, exc)
    return response


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
    413: "The request body is larger than the limit.",
}


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    return {code: OpenApiResponse(ErrorSerializer, description=ERROR_DESCRIPTIONS[code]) for code in codes}


WRITE_ERRORS = errors(400, 401, 403, 413)


class ApiSchema(AutoSchema):
    """drf-spectacular's inspector; request bodies of strict serializers refuse other keys."""

    def _map_basic_serializer(self, serializer: Any, direction: str) -> dict[str, Any]:
        schema: dict[str, Any] = super()._map_basic_serializer(serializer, direction)
        if direction == "request" and isinstance(force_instance(serializer), StrictSerializer):
            schema["additionalProperties"] = False
        return schema


# --- roles --------------------------------------------------------------------------------------


class SubmitterAccess(BasePermission):
    message = "This needs the submitter role (or operator, or administrator)."

    def has_permission(self, request: Request, view: Any) -> bool:
        return can_submit(request.user)


class OperatorAccess(BasePermission):
    message = "This needs the operator role (or administrator)."

    def has_permission(self, request: Request, view: Any) -> bool:
        return can_operate(request.user)


class DefinitionAccess(BasePermission):
    """Pools and policies: operators read them, administrators change them."""

    message = "Reading needs the operator role; changing needs the administrator role."

    def has_permission(self, request: Request, view: Any) -> bool:
        check = can_operate if request.method in SAFE_METHODS else can_manage
        return check(request.user)


class WorkflowAccess(BasePermission):
    """Workflows: every role reads them (submitters need them), administrators change them."""

    message = "Reading needs the submitter role; changing needs the administrator role."

    def has_permission(self, request: Request, view: Any) -> bool:
        check = can_submit if request.method in SAFE_METHODS else can_manage
        return check(request.user)


# --- helpers ----------------------------------------------------------------------------------


class Pagination(PageNumberPagination):
    """`?page=n`; `?page_size=n` up to 200. Lists answer `count`, `next`, `previous`, `results`."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class ApiView(APIView):
    """The API's views: JSON bodies only (JSONDocumentParser), the schema inspector above, pages of
    `Pagination`."""

    parser_classes = [JSONDocumentParser]
    schema = ApiSchema()
    pagination_class = Pagination

    def paginated(self, queryset: QuerySet[Any] | list[Any], serializer: type[Serializer]) -> Response:
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(queryset, self.request, view=self)
        return paginator.get_paginated_response(serializer(page, many=True).data)


def _valid(serializer_class: type[Serializer], data: Any, **kwargs: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data, **kwargs)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _query(serializer_class: type[Serializer], request: Request) -> dict[str, Any]:
    return _valid(serializer_class, request.query_params)


def _same_name(data: dict[str, Any], name: str, what: str) -> None:
    if data.get("name", name) != name:
        raise InvalidInput(f"a {what} cannot be renamed (the URL names {name!r})", field="name")


@contextmanager
def _one_writer(what: str) -> Iterator[None]:
    """Two requests saving the same name at the same moment: the database's unique constraint
    lets one win; the other is told to try again rather than failing with a 500."""
    try:
        yield
    except IntegrityError as exc:
        raise Conflict(f"{what} was saved by another request at the same moment; send yours again") from exc


def _location(url_name: str, **kwargs: Any) -> dict[str, str]:
    return {"Location": reverse(f"api:{url_name}", kwargs=kwargs)}


# --- jobs -------------------------------------------------------------------------------------

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    required=False,
    pattern=r"^[ -~]{1,255}$",
    description="Sending the same key and body again returns the same job (200) instead of a new one; "
    "the same key with a different body is a 409. Keys are per user.",
)


class JobsView(ApiView):
    permission_classes = [SubmitterAccess]

    @extend_schema(
        operation_id="jobs_list",
        tags=["jobs"],
        summary="List jobs, newest first",
        description="Operators see every job; submitters see the jobs they submitted.",
        parameters=[JobFilterSerializer],
        responses={200: JobSummarySerializer(many=True), **errors(400, 401, 403, 404)},
    )
    def get(self, request: Request) -> Response:
        filters = _query(JobFilterSerializer, request)
        return self.paginated(selectors.job_list(user=request.user, **filters), JobSummarySerializer)

    @extend_schema(
        operation_id="jobs_submit",
        tags=["jobs"],
        summary="Submit a job",
        description="Creates a job of the workflow's latest version and dispatches its first steps.",
        parameters=[IDEMPOTENCY_KEY],
        request=JobSubmitSerializer,
        responses={
            201: JobSerializer,
            200: OpenApiResponse(JobSerializer, description="A replay: the job made by the same request."),
            **WRITE_ERRORS,
            **errors(409),
        },
    )
    def post(self, request: Request) -> Response:
        body = _valid(JobSubmitSerializer, request.data)
        key = request.headers.get("Idempotency-Key")
        if key is not None and not all(" " <= ch <= "~" for ch in key):
            raise InvalidInput("Idempotency-Key must be printable ASCII", field="Idempotency-Key")
        submission = job_submit(
            workflow=body["workflow"], input=body["input"], submitter=request.user, idempotency_key=key
        )
        job = selectors.job_detail(user=request.user, job_id=submission.job.pk)
        if not submission.created:
            return Response(JobSerializer(job).data, status=status.HTTP_200_OK)
        return Response(
            JobSerializer(job).data, status=status.HTTP_201_CREATED, headers=_location("job", job_id=job.pk)
        )


class JobView(ApiView):
    permission_classes = [SubmitterAccess]

    @extend_schema(
        operation_id="jobs_read",
        tags=["jobs"],
        summary="A job with its steps and their attempts",
        responses={200: JobSerializer, **errors(401, 403, 404)},
    )
    def get(self, request: Request, job_id: uuid.UUID) -> Response:
        return Response(JobSerializer(selectors.job_detail(user=request.user, job_id=job_id)).data)


class JobEventsView(ApiView):
    permission_classes = [SubmitterAccess]

    @extend_schema(
        operation_id="jobs_events",
        tags=["jobs"],
        summary="A job's history, oldest first",
        responses={200: EventSerializer(many=True), **errors(401, 403, 404)},
    )
    def get(self, request: Request, job_id: uuid.UUID) -> Response:
        return self.paginated(selectors.job_events(user=request.user, job_id=job_id), EventSerializer)


class JobActionView(ApiView):
    """An operator action on a job: the service checks the state (409 when it does not allow the
    action) and records the operator and the reason in the job's history."""

    permission_classes = [OperatorAccess]
    service: ClassVar[Callable[..., Job]]

    def post(self, request: Request, job_id: uuid.UUID) -> Response:
        body = _valid(ActionSerializer, request.data)
        type(self).service(actor=request.user, job_id=job_id, reason=body["reason"])
        return Response(JobSerializer(selectors.job_detail(user=request.user, job_id=job_id)).data)


def _job_action_schema(verb: str, summary: str) -> Callable[[type[JobActionView]], type[JobActionView]]:
    return extend_schema_view(
        post=extend_schema(
            operation_id=f"jobs_{verb}",
            tags=["operator actions"],
            summary=summary,
            request=ActionSerializer,
            responses={200: JobSerializer, **WRITE_ERRORS, **errors(404, 409)},
        )
    )


@_job_action_schema("cancel", "Cancel a job: stop dispatching and compensate what ran")
class JobCancelView(JobActionView):
    service = staticmethod(job_cancel)


@_job_action_schema("compensate", "Compensate a job: undo what its steps did")
class JobCompensateView(JobActionView):
    service = staticmethod(job_compensate)


@_job_action_schema("pause", "Pause a job: no new dispatches until resumed")
class JobPauseView(JobActionView):
    service = staticmethod(job_pause)


@_job_action_schema("resume", "Resume a paused job")
class JobResumeView(JobActionView):
    service = staticmethod(job_resume)


class StepRetryView(ApiView):
    permission_classes = [OperatorAccess]

    @extend_schema(
        operation_id="steps_retry",
        tags=["operator actions"],
        summary="Dispatch a waiting, failed or held step now, optionally on another pool",
        request=StepRetrySerializer,
        responses={200: StepActionResultSerializer, **WRITE_ERRORS, **errors(404, 409)},
    )
    def post(self, request: Request, step_id: int) -> Response:
        body = _valid(StepRetrySerializer, request.data)
        step = selectors.step_detail(user=request.user, step_id=step_id)
        step_retry(actor=request.user, step_id=step.pk, pool=body.get("pool") or None, reason=body["reason"])
        return Response(
            StepActionResultSerializer(selectors.step_detail(user=request.user, step_id=step_id)).data
        )


class StepResolveView(ApiView):
    permission_classes = [OperatorAccess]

    @extend_schema(
        operation_id="steps_resolve",
        tags=["operator actions"],
        summary="Complete a step by hand with its output",
        description="The operator asserts that the step happened; the job moves on as if it had "
        "succeeded. Give the evidence in `reason`.",
        request=StepResolveSerializer,
        responses={200: StepActionResultSerializer, **WRITE_ERRORS, **errors(404, 409)},
    )
    def post(self, request: Request, step_id: int) -> Response:
        body = _valid(StepResolveSerializer, request.data)
        step = selectors.step_detail(user=request.user, step_id=step_id)
        step_resolve(actor=request.user, step_id=step.pk, output=body["output"], reason=body["reason"])
        return Response(
            StepActionResultSerializer(selectors.step_detail(user=request.user, step_id=step_id)).data
        )


# --- policies ---------------------------------------------------------------------------------


def _policy_settings(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k in POLICY_FIELDS}


class PoliciesView(ApiView):
    permission_classes = [DefinitionAccess]

    @extend_schema(
        operation_id="policies_list",
        tags=["policies"],
        summary="Remediation policies",
        responses={200: PolicySerializer(many=True), **errors(401, 403, 404)},
    )
    def get(self, request: Request) -> Response:
        return self.paginated(selectors.policy_list(), PolicySerializer)

    @extend_schema(
        operation_id="policies_create",
        tags=["policies"],
        summary="Create a policy (version 1)",
        description="Settings left out take their defaults. Each later change makes a new version.",
        request=PolicyWriteSerializer,
        responses={201: PolicySerializer, **WRITE_ERRORS, **errors(409)},
    )
    def post(self, request: Request) -> Response:
        data = _valid(PolicyWriteSerializer, request.data)
        with _one_writer(f"policy {data['name']!r}"):
            policy = policy_create(name=data["name"], actor=request.user, **_policy_settings(data))
        return Response(
            PolicySerializer(policy).data,
            status=status.HTTP_201_CREATED,
            headers=_location("policy", name=policy.name),
        )


class PolicyView(ApiView):
    permission_classes = [DefinitionAccess]

    @extend_schema(
        operation_id="policies_read",
        tags=["policies"],
        summary="A policy (by name)",
        responses={200: PolicySerializer, **errors(401, 403, 404)},
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(PolicySerializer(selectors.policy_get(name)).data)

    @extend_schema(
        operation_id="policies_replace",
        tags=["policies"],
        summary="Change a policy, stating every setting (a new version)",
        description="Steps in flight use the new version at their next decision.",
        request=PolicyReplaceSerializer,
        responses={200: PolicySerializer, **WRITE_ERRORS, **errors(404)},
    )
    def put(self, request: Request, name: str) -> Response:
        return self._update(request, name, partial=False)

    @extend_schema(
        operation_id="policies_update",
        tags=["policies"],
        summary="Change some settings of a policy (a new version)",
        description="A change that changes nothing makes no version.",
        request=PolicyReplaceSerializer,
        responses={200: PolicySerializer, **WRITE_ERRORS, **errors(404)},
    )
    def patch(self, request: Request, name: str) -> Response:
        return self._update(request, name, partial=True)

    def _update(self, request: Request, name: str, *, partial: bool) -> Response:
        data = _valid(PolicyReplaceSerializer, request.data, partial=partial)
        _same_name(data, name, "policy")
        policy = selectors.policy_get(name)
        policy = policy_update(policy.pk, actor=request.user, changes=_policy_settings(data))
        return Response(PolicySerializer(policy).data)


class PolicyRevisionsView(ApiView):
    permission_classes = [DefinitionAccess]

    @extend_schema(
        operation_id="policies_revisions",
        tags=["policies"],
        summary="A policy's versions, newest first: who changed what, and when",
        responses={200: PolicyRevisionSerializer(many=True), **errors(401, 403, 404)},
    )
    def get(self, request: Request, name: str) -> Response:
        return self.paginated(selectors.policy_revisions(name), PolicyRevisionSerializer)


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
        description="Endpoint URLs must be http or https, and hosts allowed by SAS_AGENT_ALLOWED_HOSTS "
        "when it is set. Secret header values are write-only.",
        request=PoolWriteSerializer,
        responses={201: PoolSerializer, **WRITE_ERRORS, **errors(409)},
    )
    def post(self, request: Request) -> Response:
        data = _valid(PoolWriteSerializer, request.data)
        with _one_writer(f"pool {data['name']!r}"):
            pool = pool_save(
                name=data["name"],
                kind=data["kind"],
                endpoints=data["endpoints"],
                alternate=data["alternate"] or None,
                actor=request.user,
            )
        return Response(
            PoolSerializer(selectors.pool_state(pool.name)).data,
            status=status.HTTP_201_CREATED,
            headers=_location("pool", name=pool.name),
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

    def _update(self, request: Request, name: str, *, partial: bool) -> Response:
        data = _valid(PoolReplaceSerializer, request.data, partial=partial)
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
        with _one_writer(f"pool {data.get('name', name)!r}"):
            pool = pool_save(
                name=data.get("name", pool.name),
                kind=data.get("kind", pool.kind),
                endpoints=endpoints,
                alternate=alternate or None,
                pool=pool,
                actor=request.user,
            )
        return Response(PoolSerializer(selectors.pool_state(pool.name)).data)


# --- workflows --------------------------------------------------------------------------------


class WorkflowsView(ApiView):
    permission_classes = [WorkflowAccess]

    @extend_schema(
        operation_id="workflows_list",
        tags=["workflows"],
        summary="Workflows (latest version of each)",
        responses={200: WorkflowSerializer(many=True), **errors(401, 403, 404)},
    )
    def get(self, request: Request) -> Response:
        return self.paginated(selectors.workflow_list(), WorkflowSerializer)

    @extend_schema(
        operation_id="workflows_create",
        tags=["workflows"],
        summary="Create a workflow (version 1)",
        description="A name already in use is refused: PUT or PATCH /api/v1/workflows/{name}/ makes its "
        "next version. Unknown pools, policies or dependencies and cycles are refused, named.",
        request=WorkflowSerializer,
        responses={201: WorkflowSerializer, **WRITE_ERRORS, **errors(409)},
    )
    def post(self, request: Request) -> Response:
        data = _valid(WorkflowSerializer, request.data)
        name = data["name"]
        if selectors.workflow_list().filter(name=name).exists():
            raise InvalidInput(
                f"workflow {name!r} already exists: PUT or PATCH "
                f"/api/v1/workflows/{name}/ makes its next version",
                field="name",
            )
        with _one_writer(f"workflow {name!r}"):
            workflow = workflow_create(
                name=name,
                steps=[dict(step) for step in data["steps"]],
                actor=request.user,
                description=data["description"],
                deadline_seconds=data["deadline_seconds"],
            )
        return Response(
            WorkflowSerializer(selectors.workflow_get(name, workflow.version)).data,
            status=status.HTTP_201_CREATED,
            headers=_location("workflow", name=name),
        )


class WorkflowView(ApiView):
    permission_classes = [WorkflowAccess]

    @extend_schema(
        operation_id="workflows_read",
        tags=["workflows"],
        summary="A workflow (by name): its latest version, or ?version=n",
        parameters=[WorkflowVersionSerializer],
        responses={200: WorkflowSerializer, **errors(400, 401, 403, 404)},
    )
    def get(self, request: Request, name: str) -> Response:
        query = _query(WorkflowVersionSerializer, request)
        return Response(WorkflowSerializer(selectors.workflow_get(name, query.get("version"))).data)

    @extend_schema(
        operation_id="workflows_replace",
        tags=["workflows"],
        summary="Make the next version of a workflow, stating all of it",
        description="Jobs already submitted keep the version they started with.",
        request=WorkflowReplaceSerializer,
        responses={200: WorkflowSerializer, **WRITE_ERRORS, **errors(404, 409)},
    )
    def put(self, request: Request, name: str) -> Response:
        return self._new_version(request, name, partial=False)

    @extend_schema(
        operation_id="workflows_update",
        tags=["workflows"],
        summary="Make the next version of a workflow, changing some fields",
        description="Fields left out are copied from the latest version.",
        request=WorkflowReplaceSerializer,
        responses={200: WorkflowSerializer, **WRITE_ERRORS, **errors(404, 409)},
    )
    def patch(self, request: Request, name: str) -> Response:
        return self._new_version(request, name, partial=True)

    def _new_version(self, request: Request, name: str, *, partial: bool) -> Response:
        data = _valid(WorkflowReplaceSerializer, request.data, partial=partial)
        _same_name(data, name, "workflow")
        latest = selectors.workflow_get(name)
        if "steps" in data:
            steps = [dict(step) for step in data["steps"]]
        else:
            steps = [dict(StepDefinitionSerializer(step).data) for step in latest.steps.all()]
        with _one_writer(f"workflow {name!r}"):
            workflow = workflow_create(
                name=name,
                steps=steps,
                actor=request.user,
                description=data.get("description", latest.description),
                deadline_seconds=data.get("deadline_seconds", latest.deadline_seconds),
            )
        return Response(WorkflowSerializer(selectors.workflow_get(name, workflow.version)).data)


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
