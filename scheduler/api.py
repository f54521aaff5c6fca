"""The REST API of the scheduler's resources (/api/v1/): jobs (submit, list, read, history),
workflows (versioned definitions), and the callback URL where remotes report results later.
Built on the shared base in sas_project.api."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from sas_project.api import (
    WRITE_ERRORS,
    ApiView,
    SubmitterAccess,
    WorkflowAccess,
    errors,
    location,
    one_writer,
    query_params,
    refuse_rename,
    validated,
)
from sas_project.errors import InvalidInput
from scheduler import selectors
from scheduler.callbacks import callback_record
from scheduler.definitions import workflow_create
from scheduler.serializers import (
    AttemptCallbackResultSerializer,
    AttemptCallbackSerializer,
    EventSerializer,
    JobFilterSerializer,
    JobSerializer,
    JobSubmitSerializer,
    JobSummarySerializer,
    StepDefinitionSerializer,
    WorkflowReplaceSerializer,
    WorkflowSerializer,
    WorkflowVersionSerializer,
)
from scheduler.services import job_submit

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

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        # A submission is one transaction, from the token's lookup to the job's last row: one
        # commit for the whole request.
        if request.method == "POST":
            with transaction.atomic():
                return super().dispatch(request, *args, **kwargs)
        return super().dispatch(request, *args, **kwargs)

    @extend_schema(
        operation_id="jobs_list",
        tags=["jobs"],
        summary="List jobs, newest first",
        description="Operators see every job; submitters see the jobs they submitted.",
        parameters=[JobFilterSerializer],
        responses={200: JobSummarySerializer(many=True), **errors(400, 401, 403, 404)},
    )
    def get(self, request: Request) -> Response:
        filters = query_params(JobFilterSerializer, request)
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
        body = validated(JobSubmitSerializer, request.data)
        key = request.headers.get("Idempotency-Key")
        if key is not None and not all(" " <= ch <= "~" for ch in key):
            raise InvalidInput("Idempotency-Key must be printable ASCII", field="Idempotency-Key")
        submission = job_submit(
            workflow=body["workflow"],
            input=body["input"],
            submitter=request.user,
            idempotency_key=key,
            callback_url=body.get("callback_url", ""),
        )
        job = selectors.job_for_reading(user=request.user, job_id=submission.job_id)
        return Response(
            JobSerializer(job).data,
            status=status.HTTP_201_CREATED if submission.created else status.HTTP_200_OK,
            headers=location("api-job", job_id=job.pk) if submission.created else None,
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
        return Response(JobSerializer(selectors.job_for_reading(user=request.user, job_id=job_id)).data)


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
        data = validated(WorkflowSerializer, request.data)
        name = data["name"]
        if selectors.workflow_list().filter(name=name).exists():
            raise InvalidInput(
                f"workflow {name!r} already exists: PUT or PATCH "
                f"/api/v1/workflows/{name}/ makes its next version",
                field="name",
            )
        with one_writer(f"workflow {name!r}"):
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
            headers=location("api-workflow", name=name),
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
        query = query_params(WorkflowVersionSerializer, request)
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
        data = validated(WorkflowReplaceSerializer, request.data, partial=partial)
        refuse_rename(data, name, "workflow")
        latest = selectors.workflow_get(name)
        if "steps" in data:
            steps = [dict(step) for step in data["steps"]]
        else:
            steps = [dict(StepDefinitionSerializer(step).data) for step in latest.steps.all()]
        with one_writer(f"workflow {name!r}"):
            workflow = workflow_create(
                name=name,
                steps=steps,
                actor=request.user,
                description=data.get("description", latest.description),
                deadline_seconds=data.get("deadline_seconds", latest.deadline_seconds),
            )
        return Response(WorkflowSerializer(selectors.workflow_get(name, workflow.version)).data)


# --- results reported later -----------------------------------------------------------------


class AttemptCallbackView(ApiView):
    """Where a remote that answered 202 POSTs the attempt's result (X-SAS-Callback-URL).

    The signed token in the URL is the credential: no user token, no session (so no CSRF), and no
    per-user throttle (a busy remote posts many results; a bad token costs one signature check).
    """

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    throttle_classes: list[Any] = []

    @extend_schema(
        operation_id="attempts_callback",
        tags=["callbacks"],
        summary="Report the result of a call the remote accepted (202)",
        description=(
            "The URL comes from the X-SAS-Callback-URL header of the call; its token names one "
            "attempt, is signed, and expires. The first result wins: another POST with the same "
            "token is a 409 and changes nothing. 403: an invalid token; 410: an expired one."
        ),
        request=AttemptCallbackSerializer,
        responses={
            200: AttemptCallbackResultSerializer,
            **errors(400, 403, 409, 410, 413),
        },
        auth=[],
    )
    def post(self, request: Request, token: str) -> Response:
        body = validated(AttemptCallbackSerializer, request.data)
        verdict = callback_record(token, body)
        return Response({"recorded": verdict})
