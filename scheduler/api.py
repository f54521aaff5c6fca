"""The REST API of the scheduler's resources (/api/v1/): jobs (submit, list, read, history),
signals and approvals, workflows (versioned definitions) and schedules. Built on the shared base
in sas_project.api, the named resources on sas_project.named_views; the callback URL where
remotes report results later is scheduler.callback_api."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, ClassVar

from django.db import transaction
from django.http import HttpResponse, HttpResponseBase
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_view
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer

from sas_project.api import (
    WRITE_ERRORS,
    ApiView,
    CursorOrNumberPagination,
    SubmitterAccess,
    WorkflowAccess,
    errors,
    idempotency_key_parameter,
    location,
    one_writer,
    query_params,
    refuse_rename,
    validated,
)
from sas_project.errors import InvalidInput, NotFound
from sas_project.idempotency import idempotency_key, replayed
from sas_project.named_views import (
    READ_ERRORS,
    Doc,
    NamedResourcesView,
    NamedResourceView,
    collection_schema,
    operation,
    resource_schema,
)
from sas_project.permissions import can_operate, can_read_all_jobs
from sas_project.validation import json_storable
from scheduler import selectors
from scheduler.definitions import workflow_create, workflow_delete
from scheduler.models import Job, Schedule, Signal
from scheduler.schedules import (
    SCHEDULE_FIELDS,
    schedule_create,
    schedule_delete,
    schedule_set_paused,
    schedule_update,
)
from scheduler.serializers import (
    ApprovalDecisionSerializer,
    EventSerializer,
    JobBatchResponseSerializer,
    JobBatchSerializer,
    JobFilterSerializer,
    JobSerializer,
    JobSubmitSerializer,
    JobSummarySerializer,
    KeyedSignalAnswerSerializer,
    KeyedSignalSendSerializer,
    ScheduleReplaceSerializer,
    ScheduleSerializer,
    ScheduleWriteSerializer,
    SignalSendSerializer,
    SignalSerializer,
    SignalWaitSerializer,
    StepDefinitionSerializer,
    StepItemSerializer,
    StepSerializer,
    WorkflowReplaceSerializer,
    WorkflowSerializer,
    WorkflowVersionSerializer,
    step_data,
)
from scheduler.services import job_submit
from scheduler.services.correlation import signals_by_key
from scheduler.services.submission import jobs_submit_batch, submission_prepare
from scheduler.services.wakeups import NotPermitted, approval_decide, signal_consumed_within, signal_send

# --- jobs -------------------------------------------------------------------------------------


def _job_operation(verb: str, summary: str, **schema: Any) -> Any:
    """An operation on jobs: tagged `jobs`, its ID `jobs_<verb>`."""
    return operation("jobs", f"jobs_{verb}", summary, **schema)


IDEMPOTENCY_KEY = idempotency_key_parameter("returns the same job (200) instead of a new one")


def _submission_answers(made: type[Serializer], replay: str) -> dict[Any, Any]:
    """What a submission answers: 201 with what it made, 200 with the same for a replay (`replay`
    says what that is), or refused: bad input, a conflict (409), a key used for another request (422)."""
    return {201: made, 200: OpenApiResponse(made, description=replay), **WRITE_ERRORS, **errors(409, 422)}


class JobsView(ApiView):
    permission_classes = [SubmitterAccess]
    pagination_class = CursorOrNumberPagination
    cursor_ordering = ("-created_at", "-id")

    @_job_operation(
        "list",
        "List jobs, newest first",
        description="Operators see every job; submitters see the jobs they submitted.",
        parameters=[JobFilterSerializer],
        responses={200: JobSummarySerializer(many=True), **errors(400, 401, 403, 404)},
    )
    def get(self, request: Request) -> Response:
        filters = query_params(JobFilterSerializer, request)
        input_fields = _input_filters(request, filters.get("workflow"))
        return self.paginated(
            selectors.job_list(user=request.user, input_fields=input_fields, **filters), JobSummarySerializer
        )

    @_job_operation(
        "submit",
        "Submit a job",
        description="Creates a job of the workflow's latest version and dispatches its first steps.",
        parameters=[IDEMPOTENCY_KEY],
        request=JobSubmitSerializer,
        responses=_submission_answers(JobSerializer, "A replay: the job made by the same request."),
    )
    def post(self, request: Request) -> HttpResponseBase:
        body = validated(JobSubmitSerializer, request.data)
        key = idempotency_key(request)
        # The submission and the read that answers it are one transaction: one commit (each read
        # on its own was a commit of its own: 3.5-4.1 commits per step measured, and no faster).
        # The token's check and the client's rate bucket come before it, each its own statement:
        # inside it, the bucket's row lock would last the whole submission, and one client's
        # requests would run one at a time.
        with transaction.atomic():
            submission = job_submit(
                **submission_fields(body),
                signal=body.get("signal"),
                submitter=request.user,
                idempotency_key=key,
            )
            answer = job_answer(request, submission.job_id)
        if submission.signalled and not submission.created:
            # Signal-with-start found the business key's live job: it took the signal.
            answer["Content-Location"] = location("api-job", job_id=submission.job_id)["Location"]
            return answer
        if not submission.created:
            return replayed(answer)
        answer.status_code = status.HTTP_201_CREATED
        answer["Location"] = location("api-job", job_id=submission.job_id)["Location"]
        return answer


def job_answer(request: Request, job_id: uuid.UUID | str) -> HttpResponseBase:
    """The job as the API shows it (JobSerializer): on PostgreSQL, for a JSON answer, the text the
    database builds in one statement (selectors.job_json); else rendered from its rows."""
    if getattr(request.accepted_renderer, "format", None) == "json":
        text = selectors.job_json(user=request.user, job_id=job_id)
        if text is not None:
            return HttpResponse(text, content_type="application/json")
    return Response(JobSerializer(selectors.job_for_reading(user=request.user, job_id=job_id)).data)


def submission_fields(body: dict[str, Any]) -> dict[str, Any]:
    """A validated submission body (one job, or one item of a batch) as the submission's arguments."""
    return {
        "workflow": body["workflow"],
        "input": body["input"],
        "callback_url": body.get("callback_url") or "",
        "business_key": body.get("business_key") or "",
        "priority": body.get("priority") or 0,
    }


class JobsBatchView(ApiView):
    permission_classes = [SubmitterAccess]

    @_job_operation(
        "submit_batch",
        "Submit several jobs at once",
        description="Submits up to SAS_MAX_BATCH_JOBS (100) jobs in one transaction: all are "
        "created, or none. Each item is a single submission's body with its own optional "
        "`idempotency_key`; an item whose key was used before with the same body answers the job "
        "that request made (`created: false`). A malformed request is a 400 naming the items' "
        "fields; an item refused (an unknown workflow, an input its contract refuses, a key used "
        "for another request) refuses the batch with the item's `index`. 201 when at least one "
        "job was created, 200 when every item was a replay.",
        request=JobBatchSerializer,
        responses=_submission_answers(JobBatchResponseSerializer, "Every item was a replay."),
    )
    def post(self, request: Request) -> Response:
        body = validated(JobBatchSerializer, request.data)
        prepared = []
        for index, item in enumerate(body["jobs"]):
            try:
                prepared.append(
                    submission_prepare(**submission_fields(item), idempotency_key=item.get("idempotency_key"))
                )
            except InvalidInput as exc:
                raise InvalidInput(f"jobs[{index}]: {exc.message}", **{**exc.detail, "index": index}) from exc
        submissions = jobs_submit_batch(prepared, submitter=request.user)  # one transaction
        jobs = [
            {
                "index": index,
                "id": str(submission.job_id),
                "created": submission.created,
                "url": location("api-job", job_id=submission.job_id)["Location"],
            }
            for index, submission in enumerate(submissions)
        ]
        if any(submission.created for submission in submissions):
            return Response({"jobs": jobs}, status=status.HTTP_201_CREATED)
        return replayed(Response({"jobs": jobs}))


INPUT_FIELD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")


def _input_filters(request: Request, workflow: str | None) -> dict[str, Any]:
    """`input.<field>=<value>` query parameters: a field of the input (one level), with a JSON
    value or, failing that, the text as it is. Only within one workflow (its inputs share a shape)."""
    found: dict[str, Any] = {}
    for name in request.query_params:
        if not name.startswith("input."):
            continue
        value = str(request.query_params.get(name, ""))
        field = name.removeprefix("input.")
        if not INPUT_FIELD.match(field) or "__" in field:
            raise InvalidInput(f"{name!r}: an input field is 1-100 letters, digits, '_' or '-'", field=name)
        try:
            found[field] = json.loads(value)
        except ValueError:
            found[field] = value
        json_storable(found[field], name)
    if found and not workflow:
        raise InvalidInput("a search by input field needs `workflow`", field="workflow")
    if len(found) > 5:
        raise InvalidInput("at most 5 input fields per search", field="input")
    return found


class JobView(ApiView):
    permission_classes = [SubmitterAccess]

    @_job_operation(
        "read",
        "A job with its steps and their attempts",
        responses={200: JobSerializer, **errors(401, 403, 404, 410)},
    )
    def get(self, request: Request, job_id: uuid.UUID) -> HttpResponseBase:
        return job_answer(request, job_id)


class JobEventsView(ApiView):
    permission_classes = [SubmitterAccess]
    pagination_class = CursorOrNumberPagination
    cursor_ordering = ("id",)

    @_job_operation(
        "events",
        "A job's history, oldest first",
        responses={200: EventSerializer(many=True), **errors(401, 403, 404, 410)},
    )
    def get(self, request: Request, job_id: uuid.UUID) -> Response:
        return self.paginated(selectors.job_events(user=request.user, job_id=job_id), EventSerializer)


class StepItemsView(ApiView):
    permission_classes = [SubmitterAccess]

    @_job_operation(
        "steps_items",
        "A fan-out step's items, in list order",
        description="Each item of a step with `for_each`: its `index`, element, `status`, `operation_id` "
        "(the step's, plus the index or the key `item_key` names), output and undo; in pages.",
        responses={200: StepItemSerializer(many=True), **errors(401, 403, 404, 410)},
    )
    def get(self, request: Request, job_id: uuid.UUID, step_name: str) -> Response:
        items = selectors.step_items(user=request.user, job_id=job_id, step_name=step_name)
        return self.paginated(items, StepItemSerializer)


# --- signals and approvals ----------------------------------------------------------------------

SIGNAL_KEY = idempotency_key_parameter("to the same job is the same signal (200)")


def _job_signallable(user: Any, job_id: uuid.UUID) -> None:
    """Submitters signal their own jobs, operators any: 404 for a job the user cannot see (410
    when archived), 403 for one they see without the right to signal it (a viewer's)."""
    if not selectors.jobs_visible_to(user).filter(pk=job_id).exists():
        raise selectors.job_missing(user=user, job_id=job_id)
    if not can_operate(user) and not Job.objects.filter(pk=job_id, submitter_id=user.pk).exists():
        raise PermissionDenied("only the job's submitter or an operator may signal it")


class JobSignalsView(ApiView):
    permission_classes = [SubmitterAccess]

    @_job_operation(
        "signals_list",
        "The signals sent to a job, oldest first",
        responses={200: SignalSerializer(many=True), **errors(401, 403, 404, 410)},
    )
    def get(self, request: Request, job_id: uuid.UUID) -> Response:
        if not selectors.jobs_visible_to(request.user).filter(pk=job_id).exists():
            raise selectors.job_missing(user=request.user, job_id=job_id)
        signals = Signal.objects.filter(job_id=job_id).select_related("sender", "consumed_by").order_by("id")
        return self.paginated(signals, SignalSerializer)

    @_job_operation(
        "signals_send",
        "Send a signal to a job",
        description=(
            "A step of the job that waits for this signal's name takes it, now or as soon as it starts "
            "waiting (a signal that comes early is kept); its payload becomes that step's output. "
            "202: accepted (`consumed_by` names the step if one took it at once). With `?wait=<seconds>`: "
            "200 once a step consumed it (with its `output`), 202 when none did in time. 400: no step of "
            "the job's workflow waits for this name. 409: the job is settled or compensating (nothing "
            "changes). 422: the Idempotency-Key was used for another signal."
        ),
        parameters=[SIGNAL_KEY, SignalWaitSerializer],
        request=SignalSendSerializer,
        responses={
            202: SignalSerializer,
            200: OpenApiResponse(
                SignalSerializer,
                description="Consumed within `wait` (or a replay: the signal sent with this key).",
            ),
            **WRITE_ERRORS,
            **errors(404, 409, 410, 422),
        },
    )
    def post(self, request: Request, job_id: uuid.UUID) -> Response:
        body = validated(SignalSendSerializer, request.data)
        wait = query_params(SignalWaitSerializer, request).get("wait")
        key = idempotency_key(request)
        _job_signallable(request.user, job_id)
        receipt = signal_send(
            job_id=job_id,
            name=body["name"],
            payload=body.get("payload"),
            sender=request.user,
            idempotency_key=key,
        )
        consumed = wait is not None and signal_consumed_within(receipt.signal.pk, seconds=wait)
        signal = Signal.objects.select_related("sender", "consumed_by").get(pk=receipt.signal.pk)
        if not receipt.created:
            return replayed(Response(SignalSerializer(signal).data))
        answer = status.HTTP_200_OK if consumed else status.HTTP_202_ACCEPTED
        return Response(SignalSerializer(signal).data, status=answer)


class KeyedSignalsView(ApiView):
    permission_classes = [SubmitterAccess]

    @operation(
        "signals",
        "signals_send_by_key",
        "Send a signal to the jobs of a business key",
        description=(
            "Every live job with the business key (of `workflow`, when named) whose workflow has a "
            "signal step taking the name receives the signal, as `POST /jobs/{id}/signals/` gives it; "
            "submitters reach their own jobs only. With none, the signal is kept for "
            "SAS_SIGNAL_LOOKBACK_SECONDS (an hour) and the first job with the key that starts "
            "meanwhile takes it (`buffered: true`). 400: no workflow takes the name. 422: the "
            "Idempotency-Key was used for another signal."
        ),
        parameters=[idempotency_key_parameter("is the same signal (200, the first answer)")],
        request=KeyedSignalSendSerializer,
        responses={
            202: KeyedSignalAnswerSerializer,
            200: OpenApiResponse(KeyedSignalAnswerSerializer, description="A replay: the first answer."),
            **WRITE_ERRORS,
            **errors(422),
        },
    )
    def post(self, request: Request) -> Response:
        body = validated(KeyedSignalSendSerializer, request.data)
        receipt = signals_by_key(
            business_key=body["business_key"],
            workflow=body.get("workflow"),
            name=body["name"],
            payload=body.get("payload"),
            sender=request.user,
            idempotency_key=idempotency_key(request),
        )
        data = KeyedSignalAnswerSerializer(receipt.signal).data
        if not receipt.created:
            return replayed(Response(data))
        return Response(data, status=status.HTTP_202_ACCEPTED)


STEP_NAME = OpenApiParameter("step_name", str, OpenApiParameter.PATH, description="The step's name.")


class StepApprovalView(ApiView):
    """Approve or reject a step waiting for an approval (`approve` is set by the subclass)."""

    permission_classes = [IsAuthenticated]
    approve: ClassVar[bool] = True

    def post(self, request: Request, job_id: uuid.UUID, step_name: str) -> Response:
        body = validated(ApprovalDecisionSerializer, request.data)
        visible = selectors.jobs_visible_to(request.user).filter(pk=job_id).exists()
        try:
            step = approval_decide(
                job_id=job_id,
                step_name=step_name,
                actor=request.user,
                approve=self.approve,
                comment=body.get("comment") or "",
            )
        except (NotPermitted, NotFound, Job.DoesNotExist):
            # A user who may not see the job learns nothing about it, not even that it exists.
            if not visible:
                raise selectors.job_missing(user=request.user, job_id=job_id) from None
            raise
        if not visible:
            # A member of the step's group who may not read the job: the decision, not the job.
            return Response({"name": step.name, "status": step.status, "output": step.output})
        job = selectors.job_for_reading(user=request.user, job_id=job_id)
        return Response(step_data(next(s for s in job.steps.all() if s.pk == step.pk)))


def _decision_schema(verb: str, description: str) -> Any:
    """The schema of approve and reject: the same request, answers and errors."""
    return extend_schema_view(
        post=_job_operation(
            f"steps_{verb}",
            f"{verb.capitalize()} a step waiting for an approval",
            parameters=[STEP_NAME],
            description=description,
            request=ApprovalDecisionSerializer,
            responses={200: StepSerializer, **WRITE_ERRORS, **errors(404, 409, 410)},
        )
    )


@_decision_schema(
    "approve",
    "The step succeeds; its output is the decision (`approved`, `by`, `comment`, `at`) and the job "
    "moves on. Members of the group the step names may decide (operators when it names none). 403: "
    "not one of them. 409: the step is not waiting for an approval.",
)
class StepApproveView(StepApprovalView):
    approve = True


@_decision_schema(
    "reject",
    "The step fails with the comment as its reason; the step's policy decides the job (compensate "
    "when it names none; hold parks the step for an operator). 403: not a member of the step's group "
    "(an operator when it names none). 409: the step is not waiting.",
)
class StepRejectView(StepApprovalView):
    approve = False


# --- workflows --------------------------------------------------------------------------------


@collection_schema(
    "workflows",
    listing=Doc("Workflows (latest version of each)"),
    create=Doc(
        "Create a workflow (version 1)",
        "A name already in use is refused: PUT or PATCH /api/v1/workflows/{name}/ makes its next version. "
        "Unknown pools, policies or dependencies and cycles are refused, named.",
    ),
    request=WorkflowSerializer,
)
class WorkflowsView(NamedResourcesView):
    permission_classes = [WorkflowAccess]
    serializer = WorkflowSerializer
    item_url = "api-workflow"

    def listing(self, request: Request) -> Any:
        return selectors.workflow_list()

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
                input_schema=data.get("input_schema"),
                concurrency=data.get("concurrency"),
                debounce=data.get("debounce"),
                throttle=data.get("throttle"),
                triggers=_triggers(data.get("triggers")),
                sla_seconds=data.get("sla_seconds"),
                warn_fraction=data.get("warn_fraction"),
            )
        return self.created(
            WorkflowSerializer(selectors.workflow_get(name, workflow.version)).data, name=name
        )


@resource_schema(
    "workflows",
    read=Doc(
        "A workflow (by name): its latest version, or ?version=n",
        parameters=[WorkflowVersionSerializer],
        errors=(400, *READ_ERRORS),
    ),
    replace=Doc(
        "Make the next version of a workflow, stating all of it",
        "Jobs already submitted keep the version they started with.",
    ),
    update=Doc(
        "Make the next version of a workflow, changing some fields",
        "Fields left out are copied from the latest version.",
    ),
    delete=Doc(
        "Delete a workflow (every version) that no job and no schedule uses",
        "409 names a job (or schedule) that uses it: history keeps its definitions.",
    ),
    request=WorkflowReplaceSerializer,
)
class WorkflowView(NamedResourceView):
    permission_classes = [WorkflowAccess]
    serializer = WorkflowSerializer

    def lookup(self, request: Request, name: str) -> Any:
        return selectors.workflow_get(name, query_params(WorkflowVersionSerializer, request).get("version"))

    def remove(self, request: Request, name: str) -> None:
        workflow_delete(name, actor=request.user)

    def change(self, request: Request, name: str, *, partial: bool) -> Any:
        """The next version: what the request states, the rest copied from the latest."""
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
                input_schema=data.get("input_schema", latest.input_schema),
                concurrency=data.get("concurrency", latest.concurrency),
                debounce=data.get("debounce", latest.debounce),
                throttle=data.get("throttle", latest.throttle),
                triggers=_triggers(data["triggers"]) if "triggers" in data else latest.triggers,
                sla_seconds=data.get("sla_seconds", latest.sla_seconds),
                warn_fraction=data.get("warn_fraction", latest.warn_fraction),
            )
        return selectors.workflow_get(name, workflow.version)


def _triggers(value: Any) -> Any:
    """The validated triggers as plain objects; an entry that is not one (a null: DRF lets a list
    that allows null hold nulls) is left for the definition's check to refuse (400)."""
    if not isinstance(value, list):
        return value
    return [dict(trigger) if isinstance(trigger, dict) else trigger for trigger in value]


# --- schedules ------------------------------------------------------------------------------------


def _schedules_visible(user: Any) -> Any:
    schedules = Schedule.objects.select_related("created_by").order_by("name")
    return schedules if can_read_all_jobs(user) else schedules.filter(created_by=user)


def schedule_for(user: Any, name: str, *, change: bool) -> Schedule:
    """The schedule, if the user may see it (and change it: its creator, or an operator)."""
    schedule = _schedules_visible(user).filter(name=name).first()
    if schedule is None:
        raise NotFound(f"schedule {name!r} does not exist")
    if change and schedule.created_by_id != user.pk and not can_operate(user):
        raise PermissionDenied(f"schedule {name!r} is not yours: an operator may change it")
    return schedule


@collection_schema(
    "schedules",
    listing=Doc("Schedules (yours; viewers and operators see all)"),
    create=Doc(
        "Submit a job at an instant, or at every time of a cron expression",
        "Each firing submits exactly once (even with several clusters); its job carries the "
        "idempotency key `schedule:<id>:<fire time>` and a `job_scheduled` event. A user "
        "owns at most SAS_SCHEDULES_PER_USER schedules: one more is a 409 `limit_reached`.",
    ),
    request=ScheduleWriteSerializer,
)
class SchedulesView(NamedResourcesView):
    permission_classes = [SubmitterAccess]
    serializer = ScheduleSerializer
    item_url = "api-schedule"

    def listing(self, request: Request) -> Any:
        return _schedules_visible(request.user)

    def post(self, request: Request) -> Response:
        data = validated(ScheduleWriteSerializer, request.data)
        name = data.pop("name")
        with one_writer(f"schedule {name!r}"):
            schedule = schedule_create(name=name, actor=request.user, **data)
        return self.created(ScheduleSerializer(schedule).data, name=schedule.name)


@resource_schema(
    "schedules",
    read=Doc("A schedule (by name)"),
    replace=Doc("Change a schedule, stating every value"),
    update=Doc("Change some values of a schedule (its next firing is computed again)"),
    delete=Doc("Delete a schedule (the jobs it submitted stay)"),
    request=ScheduleReplaceSerializer,
)
class ScheduleView(NamedResourceView):
    permission_classes = [SubmitterAccess]
    serializer = ScheduleSerializer

    def lookup(self, request: Request, name: str) -> Any:
        return schedule_for(request.user, name, change=False)

    def remove(self, request: Request, name: str) -> None:
        schedule_for(request.user, name, change=True)
        schedule_delete(name, actor=request.user)

    def change(self, request: Request, name: str, *, partial: bool) -> Any:
        schedule_for(request.user, name, change=True)
        data = validated(ScheduleReplaceSerializer, request.data, partial=partial)
        refuse_rename(data, name, "schedule")
        changes = {k: v for k, v in data.items() if k in SCHEDULE_FIELDS}
        return schedule_update(name, actor=request.user, changes=changes)


class SchedulePauseView(ApiView):
    permission_classes = [SubmitterAccess]
    paused: ClassVar[bool] = True

    def post(self, request: Request, name: str) -> Response:
        schedule_for(request.user, name, change=True)
        return Response(
            ScheduleSerializer(schedule_set_paused(name, actor=request.user, paused=type(self).paused)).data
        )


def _pause_schema(verb: str, summary: str) -> Any:
    """The schema of pause and resume: no body, the schedule as the answer."""
    return extend_schema_view(
        post=operation(
            "schedules",
            f"schedules_{verb}",
            summary,
            request=None,
            responses={200: ScheduleSerializer, **errors(401, 403, 404, 409)},
        )
    )


@_pause_schema("pause", "Pause a schedule: it does not fire until resumed")
class ScheduleStopView(SchedulePauseView):
    paused = True


@_pause_schema(
    "resume", "Resume a paused schedule (with catch_up once, a firing missed meanwhile fires once)"
)
class ScheduleResumeView(SchedulePauseView):
    paused = False
