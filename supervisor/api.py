"""The REST API of the supervisor's resources (/api/v1/): operator actions on jobs and steps,
remediation policies (versioned, audited) and alert subscriptions. Built on the shared base in
sas_project.api."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, ClassVar

from drf_spectacular.utils import extend_schema_view
from rest_framework import status
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer

from sas_project.api import (
    WRITE_ERRORS,
    ApiView,
    DefinitionAccess,
    OperatorAccess,
    ViewerAccess,
    errors,
    idempotency_key_parameter,
    location,
    one_writer,
    query_params,
    refuse_rename,
    validated,
)
from sas_project.idempotency import idempotent
from sas_project.named_views import (
    READ_ERRORS,
    UNCONTESTED_CHANGE_ERRORS,
    Doc,
    NamedResourcesView,
    NamedResourceView,
    collection_schema,
    operation,
    resource_schema,
)
from sas_project.permissions import can_submit
from scheduler import selectors as job_selectors
from scheduler.models import AlertSubscription, Job
from scheduler.serializers import JobSerializer, drf_datetime
from scheduler.unit import db_now
from supervisor import selectors
from supervisor.debt import remediation_debt
from supervisor.policies import POLICY_FIELDS, policy_create, policy_delete, policy_update
from supervisor.selectors.attention import AttentionFilters, needs_attention
from supervisor.selectors.overview import endpoint_health, supervisor_health
from supervisor.serializers import (
    ActionSerializer,
    AlertSubscriptionCreatedSerializer,
    AlertSubscriptionReplaceSerializer,
    AlertSubscriptionSerializer,
    AlertSubscriptionWriteSerializer,
    AttentionFilterSerializer,
    AttentionItemSerializer,
    BulkActionSerializer,
    BulkResultSerializer,
    CallbackSecretSerializer,
    JobRerunSerializer,
    PolicyReplaceSerializer,
    PolicyRevisionSerializer,
    PolicySerializer,
    PolicyWriteSerializer,
    StepActionResultSerializer,
    StepResolveSerializer,
    StepRetrySerializer,
    SupervisorStatusSerializer,
)
from supervisor.services import (
    BULK_LIMIT,
    bulk_preview,
    bulk_run,
    job_cancel,
    job_compensate,
    job_pause,
    job_rerun,
    job_resume,
    step_resolve,
    step_retry,
)
from supervisor.signing import callback_secret_get, callback_secret_rotate
from supervisor.subscriptions import (
    SUBSCRIPTION_FIELDS,
    subscription_create,
    subscription_delete,
    subscription_get,
    subscription_update,
)


def _operator_action(operation_id: str, summary: str, **schema: Any) -> Any:
    """An operation listed with the other operator actions (their one tag)."""
    return operation("operator actions", operation_id, summary, **schema)


class JobActionView(ApiView):
    """An operator action on a job: the service checks the state (409 when it does not allow the
    action) and records the operator and the reason in the job's history."""

    permission_classes = [OperatorAccess]
    service: ClassVar[Callable[..., Job]]

    def post(self, request: Request, job_id: uuid.UUID) -> Response:
        body = validated(ActionSerializer, request.data)
        type(self).service(actor=request.user, job_id=job_id, reason=body["reason"])
        return Response(JobSerializer(job_selectors.job_for_reading(user=request.user, job_id=job_id)).data)


def _job_action(verb: str, summary: str, service: Callable[..., Job]) -> type[JobActionView]:
    """The view of the job action `jobs_<verb>`, which calls `service`."""
    name = f"Job{verb.capitalize()}View"
    attributes = {"service": staticmethod(service), "__module__": __name__, "__qualname__": name}
    view = type(name, (JobActionView,), attributes)
    return extend_schema_view(
        post=_operator_action(
            f"jobs_{verb}",
            summary,
            request=ActionSerializer,
            responses={200: JobSerializer, **WRITE_ERRORS, **errors(404, 409)},
        )
    )(view)


JobCancelView = _job_action("cancel", "Cancel a job: stop dispatching and compensate what ran", job_cancel)
JobCompensateView = _job_action("compensate", "Compensate a job: undo what its steps did", job_compensate)
JobPauseView = _job_action("pause", "Pause a job: no new dispatches until resumed", job_pause)
JobResumeView = _job_action("resume", "Resume a paused job", job_resume)


class JobRerunView(ApiView):
    permission_classes = [OperatorAccess]

    @_operator_action(
        "jobs_rerun",
        "Run a settled job again from a step, as a new job",
        description=(
            "The new job (`rerun_of` names this one) runs `from_step` and every step downstream of it "
            "again, with new operation IDs; the other steps that succeeded keep their outputs and are "
            "not called again (nor compensated by the new job). Other steps that had not succeeded run "
            "too. Both jobs record who did it and why."
        ),
        parameters=[idempotency_key_parameter("returns the job the first rerun made (201)")],
        request=JobRerunSerializer,
        responses={201: JobSerializer, **WRITE_ERRORS, **errors(404, 409, 422)},
    )
    def post(self, request: Request, job_id: uuid.UUID) -> Response:
        body = validated(JobRerunSerializer, request.data)

        def rerun() -> Response:
            made = job_rerun(
                actor=request.user,
                job_id=job_id,
                from_step=body["from_step"],
                input=body.get("input"),
                reason=body["reason"],
                version=body.get("version") or "job",
            )
            return Response(
                JobSerializer(job_selectors.job_for_reading(user=request.user, job_id=made.pk)).data,
                status=status.HTTP_201_CREATED,
                headers=location("api-job", job_id=made.pk),
            )

        return idempotent(request, request.data, rerun)


class StepActionView(ApiView):
    # An operator action on a step the caller may see (404 otherwise): `act` with the body
    # `body_serializer` validated, then the step re-read as the answer. No docstring: the schema
    # would describe the actions with it.
    permission_classes = [OperatorAccess]
    body_serializer: ClassVar[type[Serializer]]

    def post(self, request: Request, step_id: int) -> Response:
        body = validated(self.body_serializer, request.data)
        step = job_selectors.step_detail(user=request.user, step_id=step_id)
        self.act(request, step.pk, body)
        return Response(
            StepActionResultSerializer(job_selectors.step_detail(user=request.user, step_id=step_id)).data
        )

    def act(self, request: Request, step_id: int, body: dict[str, Any]) -> None:
        raise NotImplementedError


def _step_action_schema(
    operation_id: str, summary: str, description: str | None = None
) -> Callable[[type[StepActionView]], type[StepActionView]]:
    """The schema of a step action: the view's body, the step re-read as the answer."""

    def describe(view: type[StepActionView]) -> type[StepActionView]:
        return extend_schema_view(
            post=_operator_action(
                operation_id,
                summary,
                description=description,
                request=view.body_serializer,
                responses={200: StepActionResultSerializer, **WRITE_ERRORS, **errors(404, 409)},
            )
        )(view)

    return describe


@_step_action_schema("steps_retry", "Dispatch a waiting, failed or held step now, optionally on another pool")
class StepRetryView(StepActionView):
    body_serializer = StepRetrySerializer

    def act(self, request: Request, step_id: int, body: dict[str, Any]) -> None:
        step_retry(
            actor=request.user,
            step_id=step_id,
            pool=body.get("pool") or None,
            reason=body["reason"],
            input=body.get("input"),
        )


@_step_action_schema(
    "steps_resolve",
    "Complete a step by hand with its output",
    "The operator asserts that the step happened; the job moves on as if it had succeeded. Give the "
    "evidence in `reason`.",
)
class StepResolveView(StepActionView):
    body_serializer = StepResolveSerializer

    def act(self, request: Request, step_id: int, body: dict[str, Any]) -> None:
        step_resolve(actor=request.user, step_id=step_id, output=body["output"], reason=body["reason"])


# --- policies ---------------------------------------------------------------------------------


def _policy_settings(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k in POLICY_FIELDS}


@collection_schema(
    "policies",
    listing=Doc("Remediation policies"),
    create=Doc(
        "Create a policy (version 1)",
        "Settings left out take their defaults. Each later change makes a new version.",
    ),
    request=PolicyWriteSerializer,
)
class PoliciesView(NamedResourcesView):
    permission_classes = [DefinitionAccess]
    serializer = PolicySerializer
    item_url = "api-policy"

    def listing(self, request: Request) -> Any:
        return selectors.policy_list()

    def post(self, request: Request) -> Response:
        data = validated(PolicyWriteSerializer, request.data)
        with one_writer(f"policy {data['name']!r}"):
            policy = policy_create(name=data["name"], actor=request.user, **_policy_settings(data))
        return self.created(PolicySerializer(policy).data, name=policy.name)


@resource_schema(
    "policies",
    read=Doc("A policy (by name)"),
    replace=Doc(
        "Change a policy, stating every setting (a new version)",
        "Steps in flight use the new version at their next decision.",
        errors=UNCONTESTED_CHANGE_ERRORS,
    ),
    update=Doc(
        "Change some settings of a policy (a new version)",
        "A change that changes nothing makes no version.",
        errors=UNCONTESTED_CHANGE_ERRORS,
    ),
    delete=Doc("Delete a policy that no workflow uses", "409 names the workflow that uses it."),
    request=PolicyReplaceSerializer,
)
class PolicyView(NamedResourceView):
    permission_classes = [DefinitionAccess]
    serializer = PolicySerializer

    def lookup(self, request: Request, name: str) -> Any:
        return selectors.policy_get(name)

    def remove(self, request: Request, name: str) -> None:
        policy_delete(name, actor=request.user)

    def change(self, request: Request, name: str, *, partial: bool) -> Any:
        data = validated(PolicyReplaceSerializer, request.data, partial=partial)
        refuse_rename(data, name, "policy")
        policy = selectors.policy_get(name)
        return policy_update(policy.pk, actor=request.user, changes=_policy_settings(data))


class PolicyRevisionsView(ApiView):
    permission_classes = [DefinitionAccess]

    @operation(
        "policies",
        "policies_revisions",
        "A policy's versions, newest first: who changed what, and when",
        responses={200: PolicyRevisionSerializer(many=True), **errors(401, 403, 404)},
    )
    def get(self, request: Request, name: str) -> Response:
        return self.paginated(selectors.policy_revisions(name), PolicyRevisionSerializer)


# --- alert subscriptions ----------------------------------------------------------------------


@collection_schema(
    "alerts",
    listing=Doc("Alert subscriptions"),
    create=Doc(
        "Subscribe a webhook and/or an email address to alerts",
        "Kinds: step_needs_attention, job_failed, job_compensated, supervisor_stale, "
        "circuit_opened. Each alert is sent once per subscription (retried until delivered). "
        "The answer holds the subscription's signing secret, this once.",
    ),
    request=AlertSubscriptionWriteSerializer,
    created=AlertSubscriptionCreatedSerializer,
)
class AlertsView(NamedResourcesView):
    permission_classes = [DefinitionAccess]
    serializer = AlertSubscriptionSerializer
    item_url = "api-alert"

    def listing(self, request: Request) -> Any:
        return AlertSubscription.objects.select_related("created_by").order_by("name")

    def post(self, request: Request) -> Response:
        data = validated(AlertSubscriptionWriteSerializer, request.data)
        name = data.pop("name")
        with one_writer(f"subscription {name!r}"):
            subscription = subscription_create(name=name, actor=request.user, **data)
        return self.created(
            AlertSubscriptionCreatedSerializer(subscription, context={"request": request}).data,
            name=subscription.name,
        )


@resource_schema(
    "alerts",
    read=Doc("An alert subscription (by name)"),
    replace=Doc("Change an alert subscription, stating every value", errors=UNCONTESTED_CHANGE_ERRORS),
    update=Doc("Change some values of an alert subscription", errors=UNCONTESTED_CHANGE_ERRORS),
    delete=Doc(
        "Delete an alert subscription", "Alerts already written to it are still sent.", errors=READ_ERRORS
    ),
    request=AlertSubscriptionReplaceSerializer,
)
class AlertView(NamedResourceView):
    permission_classes = [DefinitionAccess]
    serializer = AlertSubscriptionSerializer

    def lookup(self, request: Request, name: str) -> Any:
        return subscription_get(name)

    def remove(self, request: Request, name: str) -> None:
        subscription_delete(name, actor=request.user)

    def change(self, request: Request, name: str, *, partial: bool) -> Any:
        data = validated(AlertSubscriptionReplaceSerializer, request.data, partial=partial)
        refuse_rename(data, name, "subscription")
        changes = {k: v for k, v in data.items() if k in SUBSCRIPTION_FIELDS}
        return subscription_update(name, actor=request.user, changes=changes)


# --- the submitter's callback secret -------------------------------------------------------------


class CallbackSecretAccess(BasePermission):
    """A submitter's own callback secret: only its own, so the path names no user."""

    message = "This needs the submitter role (or operator, or administrator)."

    def has_permission(self, request: Request, view: Any) -> bool:
        return can_submit(request.user)


class CallbackSecretView(ApiView):
    permission_classes = [CallbackSecretAccess]

    @operation(
        "callbacks",
        "callback_secret_read",
        "Your callback signing secret (created on first read)",
        description="The completion callbacks of your jobs are signed with it, the Standard Webhooks "
        "way (webhook-id, webhook-timestamp, webhook-signature): docs/api.md shows how to verify.",
        responses={200: CallbackSecretSerializer, **errors(401, 403)},
    )
    def get(self, request: Request) -> Response:
        return Response(CallbackSecretSerializer(callback_secret_get(request.user)).data)


class CallbackSecretRotateView(ApiView):
    permission_classes = [CallbackSecretAccess]

    @operation(
        "callbacks",
        "callback_secret_rotate",
        "Replace your callback signing secret",
        description="The previous secret still signs, beside the new one, for "
        "SAS_SIGNING_ROTATION_GRACE_SECONDS (a day by default): change your receiver's key within "
        "that time. Recorded with your user in the admin log.",
        request=None,
        responses={200: CallbackSecretSerializer, **errors(401, 403)},
    )
    def post(self, request: Request) -> Response:
        return Response(CallbackSecretSerializer(callback_secret_rotate(user=request.user)).data)


# --- what the console shows: the Needs-attention list, bulk actions, the supervisor ---------------


class AttentionView(ApiView):
    permission_classes = [ViewerAccess]

    @_operator_action(
        "attention_list",
        "Steps that need an operator, oldest in their state first",
        description="Held steps, unknown outcomes, failed attempts and overdue calls, with why each "
        "is listed, as the console's Needs attention page shows them.",
        parameters=[AttentionFilterSerializer],
        responses={200: AttentionItemSerializer(many=True), **errors(400, 401, 403, 404)},
    )
    def get(self, request: Request) -> Response:
        filters = query_params(AttentionFilterSerializer, request)
        listed = needs_attention(
            AttentionFilters(
                workflow=filters.get("workflow") or "",
                step=filters.get("step") or "",
                pool=filters.get("pool") or "",
                older_than_minutes=filters.get("older_than_minutes"),
            ),
            limit=BULK_LIMIT,
        )
        return self.paginated(listed.items, AttentionItemSerializer)


class AttentionBulkView(ApiView):
    permission_classes = [OperatorAccess]

    @_operator_action(
        "attention_bulk",
        "Retry, compensate or cancel many at once, or say what would happen (dry_run)",
        description="Each item is done (or refused) on its own: one refusal does not stop the others. "
        "Compensate and cancel act on each step's job, once per job.",
        parameters=[idempotency_key_parameter("returns the first answer (a dry run is answered afresh)")],
        request=BulkActionSerializer,
        responses={200: BulkResultSerializer, **WRITE_ERRORS, **errors(422)},
    )
    def post(self, request: Request) -> Response:
        body = validated(BulkActionSerializer, request.data)

        def act() -> Response:
            if body["dry_run"]:
                items = bulk_preview(action=body["action"], step_ids=body["step_ids"])
            else:
                items = bulk_run(
                    actor=request.user,
                    action=body["action"],
                    step_ids=body["step_ids"],
                    reason=body["reason"],
                )
            return Response(
                {
                    "action": body["action"],
                    "dry_run": body["dry_run"],
                    "done": sum(1 for i in items if i.allowed),
                    "refused": sum(1 for i in items if not i.allowed),
                    "items": [asdict(i) for i in items],
                }
            )

        # A dry run changes nothing: answered afresh every time, its key not kept.
        return act() if body["dry_run"] else idempotent(request, request.data, act)


class SupervisorView(ApiView):
    permission_classes = [ViewerAccess]

    @_operator_action(
        "supervisor_read",
        "The supervisor: who holds the lease, the last scan, and every endpoint's health",
        responses={200: SupervisorStatusSerializer, **errors(401, 403, 404)},
    )
    def get(self, request: Request) -> Response:
        now = db_now()
        health = supervisor_health(now)
        pools = endpoint_health(now)
        return Response(
            {
                "lease": {
                    "holder": health.holder,
                    "token": health.token,
                    "expires_at": drf_datetime(health.expires_at),
                    "handovers": health.handovers,
                    "valid": health.lease_valid,
                },
                "interval_seconds": health.interval,
                "last_scan_at": drf_datetime(health.last_scan_at),
                "last_scan_age_seconds": round(health.scan_age, 3) if health.scan_age is not None else None,
                "stale": health.stale,
                "last_scan": health.figures,
                "remediation_debt": remediation_debt(now).as_dict(),
                "pools": [
                    {
                        "name": p.name,
                        "kind": p.kind,
                        "alternate": p.alternate,
                        "endpoints": [
                            {
                                "url": e.url,
                                "enabled": e.enabled,
                                "recent_calls": e.recent,
                                "bad_calls": e.bad,
                                "circuit_open": e.circuit_open,
                                "circuit_open_until": drf_datetime(e.circuit_open_until),
                                "wait_asked_until": drf_datetime(e.wait_asked_until),
                            }
                            for e in p.endpoints
                        ],
                    }
                    for p in pools
                ],
            }
        )
