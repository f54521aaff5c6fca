"""Contains all the data models used in inputs/outputs"""

from .action_enum import ActionEnum
from .action_request import ActionRequest
from .agent_kind_enum import AgentKindEnum
from .alert_subscription import AlertSubscription
from .alert_subscription_created import AlertSubscriptionCreated
from .alert_subscription_replace_request import AlertSubscriptionReplaceRequest
from .alert_subscription_write_request import AlertSubscriptionWriteRequest
from .alert_webhook_type_0 import AlertWebhookType0
from .alert_webhook_type_0_alert import AlertWebhookType0Alert
from .alert_webhook_type_1 import AlertWebhookType1
from .alert_webhook_type_1_alert import AlertWebhookType1Alert
from .alert_webhook_type_2 import AlertWebhookType2
from .alert_webhook_type_2_alert import AlertWebhookType2Alert
from .alert_webhook_type_3 import AlertWebhookType3
from .alert_webhook_type_3_alert import AlertWebhookType3Alert
from .alert_webhook_type_3_loop import AlertWebhookType3Loop
from .alert_webhook_type_4 import AlertWebhookType4
from .alert_webhook_type_4_alert import AlertWebhookType4Alert
from .alert_webhook_type_5 import AlertWebhookType5
from .alert_webhook_type_5_alert import AlertWebhookType5Alert
from .alert_webhook_type_6 import AlertWebhookType6
from .alert_webhook_type_6_alert import AlertWebhookType6Alert
from .approval_decision_request import ApprovalDecisionRequest
from .attempt import Attempt
from .attempt_callback_outcome_enum import AttemptCallbackOutcomeEnum
from .attempt_callback_request import AttemptCallbackRequest
from .attempt_callback_result import AttemptCallbackResult
from .attempt_heartbeat_request import AttemptHeartbeatRequest
from .attempt_heartbeat_result import AttemptHeartbeatResult
from .attempt_kind_enum import AttemptKindEnum
from .attention_item import AttentionItem
from .blank_enum import BlankEnum
from .bulk_action_request import BulkActionRequest
from .bulk_item import BulkItem
from .bulk_result import BulkResult
from .callback import Callback
from .callback_secret import CallbackSecret
from .callback_status_enum import CallbackStatusEnum
from .catch_up_enum import CatchUpEnum
from .completion_callback import CompletionCallback
from .completion_callback_status import CompletionCallbackStatus
from .endpoint import Endpoint
from .endpoint_health import EndpointHealth
from .error import Error
from .event import Event
from .event_kind_enum import EventKindEnum
from .field_error import FieldError
from .job import Job
from .job_batch_item_request import JobBatchItemRequest
from .job_batch_item_request_input import JobBatchItemRequestInput
from .job_batch_request import JobBatchRequest
from .job_batch_response import JobBatchResponse
from .job_batch_result import JobBatchResult
from .job_rerun_request import JobRerunRequest
from .job_rerun_request_input_type_0 import JobRerunRequestInputType0
from .job_status_enum import JobStatusEnum
from .job_submit_request import JobSubmitRequest
from .job_submit_request_input import JobSubmitRequestInput
from .job_summary import JobSummary
from .jobs_list_status import JobsListStatus
from .kinds_enum import KindsEnum
from .last_event import LastEvent
from .lease import Lease
from .on_exhausted_enum import OnExhaustedEnum
from .on_timeout_enum import OnTimeoutEnum
from .outcome_enum import OutcomeEnum
from .paginated_alert_subscription_list import PaginatedAlertSubscriptionList
from .paginated_attention_item_list import PaginatedAttentionItemList
from .paginated_event_list import PaginatedEventList
from .paginated_job_summary_list import PaginatedJobSummaryList
from .paginated_policy_list import PaginatedPolicyList
from .paginated_policy_revision_list import PaginatedPolicyRevisionList
from .paginated_pool_list import PaginatedPoolList
from .paginated_schedule_list import PaginatedScheduleList
from .paginated_signal_list import PaginatedSignalList
from .paginated_step_item_list import PaginatedStepItemList
from .paginated_token_list import PaginatedTokenList
from .paginated_workflow_list import PaginatedWorkflowList
from .patched_alert_subscription_replace_request import (
    PatchedAlertSubscriptionReplaceRequest,
)
from .patched_policy_replace_request import PatchedPolicyReplaceRequest
from .patched_pool_replace_request import PatchedPoolReplaceRequest
from .patched_pool_replace_request_endpoints_item_type_1 import (
    PatchedPoolReplaceRequestEndpointsItemType1,
)
from .patched_schedule_replace_request import PatchedScheduleReplaceRequest
from .patched_schedule_replace_request_input import PatchedScheduleReplaceRequestInput
from .patched_workflow_replace_request import PatchedWorkflowReplaceRequest
from .policy import Policy
from .policy_replace_request import PolicyReplaceRequest
from .policy_revision import PolicyRevision
from .policy_revision_changes import PolicyRevisionChanges
from .policy_revision_settings import PolicyRevisionSettings
from .policy_write_request import PolicyWriteRequest
from .pool import Pool
from .pool_health import PoolHealth
from .pool_replace_request import PoolReplaceRequest
from .pool_replace_request_endpoints_item_type_1 import (
    PoolReplaceRequestEndpointsItemType1,
)
from .pool_write_request import PoolWriteRequest
from .pool_write_request_endpoints_item_type_1 import PoolWriteRequestEndpointsItemType1
from .recorded_enum import RecordedEnum
from .remediation_debt import RemediationDebt
from .remote_call import RemoteCall
from .remote_call_results import RemoteCallResults
from .retry_on_enum import RetryOnEnum
from .revoke_request import RevokeRequest
from .schedule import Schedule
from .schedule_replace_request import ScheduleReplaceRequest
from .schedule_replace_request_input import ScheduleReplaceRequestInput
from .schedule_write_request import ScheduleWriteRequest
from .schedule_write_request_input import ScheduleWriteRequestInput
from .signal import Signal
from .signal_send_request import SignalSendRequest
from .step import Step
from .step_action_result import StepActionResult
from .step_action_result_items_type_0 import StepActionResultItemsType0
from .step_definition import StepDefinition
from .step_definition_kind_enum import StepDefinitionKindEnum
from .step_definition_request import StepDefinitionRequest
from .step_item import StepItem
from .step_items_type_0 import StepItemsType0
from .step_kind_enum import StepKindEnum
from .step_resolve_request import StepResolveRequest
from .step_resolve_request_output_type_0 import StepResolveRequestOutputType0
from .step_retry_request import StepRetryRequest
from .step_retry_request_input_type_0 import StepRetryRequestInputType0
from .step_status_enum import StepStatusEnum
from .supervisor_status import SupervisorStatus
from .supervisor_status_last_scan import SupervisorStatusLastScan
from .token import Token
from .token_create_request import TokenCreateRequest
from .token_created import TokenCreated
from .token_status_enum import TokenStatusEnum
from .version_enum import VersionEnum
from .waiting_for import WaitingFor
from .waiting_for_kind_enum import WaitingForKindEnum
from .workflow import Workflow
from .workflow_replace_request import WorkflowReplaceRequest
from .workflow_request import WorkflowRequest

__all__ = (
    "ActionEnum",
    "ActionRequest",
    "AgentKindEnum",
    "AlertSubscription",
    "AlertSubscriptionCreated",
    "AlertSubscriptionReplaceRequest",
    "AlertSubscriptionWriteRequest",
    "AlertWebhookType0",
    "AlertWebhookType0Alert",
    "AlertWebhookType1",
    "AlertWebhookType1Alert",
    "AlertWebhookType2",
    "AlertWebhookType2Alert",
    "AlertWebhookType3",
    "AlertWebhookType3Alert",
    "AlertWebhookType3Loop",
    "AlertWebhookType4",
    "AlertWebhookType4Alert",
    "AlertWebhookType5",
    "AlertWebhookType5Alert",
    "AlertWebhookType6",
    "AlertWebhookType6Alert",
    "ApprovalDecisionRequest",
    "Attempt",
    "AttemptCallbackOutcomeEnum",
    "AttemptCallbackRequest",
    "AttemptCallbackResult",
    "AttemptHeartbeatRequest",
    "AttemptHeartbeatResult",
    "AttemptKindEnum",
    "AttentionItem",
    "BlankEnum",
    "BulkActionRequest",
    "BulkItem",
    "BulkResult",
    "Callback",
    "CallbackSecret",
    "CallbackStatusEnum",
    "CatchUpEnum",
    "CompletionCallback",
    "CompletionCallbackStatus",
    "Endpoint",
    "EndpointHealth",
    "Error",
    "Event",
    "EventKindEnum",
    "FieldError",
    "Job",
    "JobBatchItemRequest",
    "JobBatchItemRequestInput",
    "JobBatchRequest",
    "JobBatchResponse",
    "JobBatchResult",
    "JobRerunRequest",
    "JobRerunRequestInputType0",
    "JobStatusEnum",
    "JobSubmitRequest",
    "JobSubmitRequestInput",
    "JobSummary",
    "JobsListStatus",
    "KindsEnum",
    "LastEvent",
    "Lease",
    "OnExhaustedEnum",
    "OnTimeoutEnum",
    "OutcomeEnum",
    "PaginatedAlertSubscriptionList",
    "PaginatedAttentionItemList",
    "PaginatedEventList",
    "PaginatedJobSummaryList",
    "PaginatedPolicyList",
    "PaginatedPolicyRevisionList",
    "PaginatedPoolList",
    "PaginatedScheduleList",
    "PaginatedSignalList",
    "PaginatedStepItemList",
    "PaginatedTokenList",
    "PaginatedWorkflowList",
    "PatchedAlertSubscriptionReplaceRequest",
    "PatchedPolicyReplaceRequest",
    "PatchedPoolReplaceRequest",
    "PatchedPoolReplaceRequestEndpointsItemType1",
    "PatchedScheduleReplaceRequest",
    "PatchedScheduleReplaceRequestInput",
    "PatchedWorkflowReplaceRequest",
    "Policy",
    "PolicyReplaceRequest",
    "PolicyRevision",
    "PolicyRevisionChanges",
    "PolicyRevisionSettings",
    "PolicyWriteRequest",
    "Pool",
    "PoolHealth",
    "PoolReplaceRequest",
    "PoolReplaceRequestEndpointsItemType1",
    "PoolWriteRequest",
    "PoolWriteRequestEndpointsItemType1",
    "RecordedEnum",
    "RemediationDebt",
    "RemoteCall",
    "RemoteCallResults",
    "RetryOnEnum",
    "RevokeRequest",
    "Schedule",
    "ScheduleReplaceRequest",
    "ScheduleReplaceRequestInput",
    "ScheduleWriteRequest",
    "ScheduleWriteRequestInput",
    "Signal",
    "SignalSendRequest",
    "Step",
    "StepActionResult",
    "StepActionResultItemsType0",
    "StepDefinition",
    "StepDefinitionKindEnum",
    "StepDefinitionRequest",
    "StepItem",
    "StepItemsType0",
    "StepKindEnum",
    "StepResolveRequest",
    "StepResolveRequestOutputType0",
    "StepRetryRequest",
    "StepRetryRequestInputType0",
    "StepStatusEnum",
    "SupervisorStatus",
    "SupervisorStatusLastScan",
    "Token",
    "TokenCreateRequest",
    "TokenCreated",
    "TokenStatusEnum",
    "VersionEnum",
    "WaitingFor",
    "WaitingForKindEnum",
    "Workflow",
    "WorkflowReplaceRequest",
    "WorkflowRequest",
)
