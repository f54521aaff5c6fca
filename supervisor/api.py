"""The REST API of the supervisor's resources (/api/v1/): operator actions on jobs and steps,
remediation policies (versioned, audited) and alert subscriptions. Built on the shared base in
sas_project.api."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, ClassVar

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from sas_project.api import (
    WRITE_ERRORS,
    ApiView,
    DefinitionAccess,
    OperatorAccess,
    errors,
    location,
    one_writer,
    refuse_rename,
    validated,
)
from scheduler import selectors as job_selectors
from scheduler.models import Job
from scheduler.serializers import JobSerializer
from supervisor import selectors
from supervisor.models import AlertSubscription
from supervisor.policies import POLICY_FIELDS, policy_create, policy_update
from supervisor.serializers import (
    ActionSerializer,
    AlertSubscriptionReplaceSerializer,
    AlertSubscriptionSerializer,
    AlertSubscriptionWriteSerializer,
    PolicyReplaceSerializer,
    PolicyRevisionSerializer,
    PolicySerializer,
    PolicyWriteSerializer,
    StepActionResultSerializer,
    StepResolveSerializer,
    StepRetrySerializer,
)
from supervisor.services import job_cancel, job_compensate, job_pause, job_resume, step_resolve, step_retry
from supervisor.subscriptions import (
    SUBSCRIPTION_FIELDS,
    subscription_create,
    subscription_delete,
    subscription_get,
    subscription_update,
)


class JobActionView(ApiView):
    """An operator action on a job: the service checks the state (409 when it does not allow the
    action) and records the operator and the reason in the job's history."""

    permission_classes = [OperatorAccess]
    service: ClassVar[Callable[..., Job]]

    def post(self, request: Request, job_id: uuid.UUID) -> Response:
        body = validated(ActionSerializer, request.data)
        type(self).service(actor=request.user, job_id=job_id, reason=body["reason"])
        return Response(JobSerializer(job_selectors.job_for_reading(user=request.user, job_id=job_id)).data)


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
        body = validated(StepRetrySerializer, request.data)
        step = job_selectors.step_detail(user=request.user, step_id=step_id)
        step_retry(actor=request.user, step_id=step.pk, pool=body.get("pool") or None, reason=body["reason"])
        return Response(
            StepActionResultSerializer(job_selectors.step_detail(user=request.user, step_id=step_id)).data
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
        body = validated(StepResolveSerializer, request.data)
        step = job_selectors.step_detail(user=request.user, step_id=step_id)
        step_resolve(actor=request.user, step_id=step.pk, output=body["output"], reason=body["reason"])
        return Response(
            StepActionResultSerializer(job_selectors.step_detail(user=request.user, step_id=step_id)).data
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
        data = validated(PolicyWriteSerializer, request.data)
        with one_writer(f"policy {data['name']!r}"):
            policy = policy_create(name=data["name"], actor=request.user, **_policy_settings(data))
        return Response(
            PolicySerializer(policy).data,
            status=status.HTTP_201_CREATED,
            headers=location("api-policy", name=policy.name),
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
        data = validated(PolicyReplaceSerializer, request.data, partial=partial)
        refuse_rename(data, name, "policy")
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


# --- alert subscriptions ----------------------------------------------------------------------


class AlertsView(ApiView):
    permission_classes = [DefinitionAccess]

    @extend_schema(
        operation_id="alerts_list",
        tags=["alerts"],
        summary="Alert subscriptions",
        responses={200: AlertSubscriptionSerializer(many=True), **errors(401, 403, 404)},
    )
    def get(self, request: Request) -> Response:
        return self.paginated(
            AlertSubscription.objects.select_related("created_by").order_by("name"),
            AlertSubscriptionSerializer,
        )

    @extend_schema(
        operation_id="alerts_create",
        tags=["alerts"],
        summary="Subscribe a webhook and/or an email address to alerts",
        description=(
            "Kinds: step_needs_attention, job_failed, job_compensated, supervisor_stale, "
            "circuit_opened. Each alert is sent once per subscription (retried until delivered)."
        ),
        request=AlertSubscriptionWriteSerializer,
        responses={201: AlertSubscriptionSerializer, **WRITE_ERRORS, **errors(409)},
    )
    def post(self, request: Request) -> Response:
        data = validated(AlertSubscriptionWriteSerializer, request.data)
        name = data.pop("name")
        with one_writer(f"subscription {name!r}"):
            subscription = subscription_create(name=name, actor=request.user, **data)
        return Response(
            AlertSubscriptionSerializer(subscription).data,
            status=status.HTTP_201_CREATED,
            headers=location("api-alert", name=subscription.name),
        )


class AlertView(ApiView):
    permission_classes = [DefinitionAccess]

    @extend_schema(
        operation_id="alerts_read",
        tags=["alerts"],
        summary="An alert subscription (by name)",
        responses={200: AlertSubscriptionSerializer, **errors(401, 403, 404)},
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(AlertSubscriptionSerializer(subscription_get(name)).data)

    @extend_schema(
        operation_id="alerts_replace",
        tags=["alerts"],
        summary="Change an alert subscription, stating every value",
        request=AlertSubscriptionReplaceSerializer,
        responses={200: AlertSubscriptionSerializer, **WRITE_ERRORS, **errors(404)},
    )
    def put(self, request: Request, name: str) -> Response:
        return self._update(request, name, partial=False)

    @extend_schema(
        operation_id="alerts_update",
        tags=["alerts"],
        summary="Change some values of an alert subscription",
        request=AlertSubscriptionReplaceSerializer,
        responses={200: AlertSubscriptionSerializer, **WRITE_ERRORS, **errors(404)},
    )
    def patch(self, request: Request, name: str) -> Response:
        return self._update(request, name, partial=True)

    @extend_schema(
        operation_id="alerts_delete",
        tags=["alerts"],
        summary="Delete an alert subscription",
        description="Alerts already written to it are still sent.",
        responses={204: None, **errors(401, 403, 404)},
    )
    def delete(self, request: Request, name: str) -> Response:
        subscription_delete(name, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _update(self, request: Request, name: str, *, partial: bool) -> Response:
        data = validated(AlertSubscriptionReplaceSerializer, request.data, partial=partial)
        refuse_rename(data, name, "subscription")
        changes = {k: v for k, v in data.items() if k in SUBSCRIPTION_FIELDS}
        return Response(
            AlertSubscriptionSerializer(subscription_update(name, actor=request.user, changes=changes)).data
        )
