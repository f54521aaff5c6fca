"""REST API representations of the scheduler's resources (version 1), one module per resource:
jobs as read (`jobs`, rendered from the one declaration in `rendering`), submissions and the job
list's filters (`submissions`), what reaches a running job from outside (`messages`), workflows
(`workflows`) and schedules (`schedules`).

Request serializers check shapes, types and the limits of the columns the values end up in; the
rules of the domain (unknown workflow, cycles, ...) stay in the services, which name the offending
field. Every serializer and renderer is importable from here (`from scheduler.serializers import
JobSerializer`).
"""

from __future__ import annotations

from scheduler.serializers.jobs import (
    AttemptSerializer,
    CallbackSerializer,
    EventSerializer,
    JobSerializer,
    JobSummarySerializer,
    StepItemSerializer,
    StepSerializer,
    WaitingForSerializer,
)
from scheduler.serializers.messages import (
    ApprovalDecisionSerializer,
    AttemptCallbackResultSerializer,
    AttemptCallbackSerializer,
    AttemptHeartbeatResultSerializer,
    AttemptHeartbeatSerializer,
    EventRefusalSerializer,
    EventReplayAnswerSerializer,
    EventReplaySerializer,
    InboundEventAnswerSerializer,
    InboundEventSerializer,
    KeyedSignalAnswerSerializer,
    KeyedSignalSendSerializer,
    SignalSendSerializer,
    SignalSerializer,
    SignalWaitSerializer,
    SignalWithStartSerializer,
)
from scheduler.serializers.rendering import (
    ATTEMPT_FIELDS,
    CALLBACK_FIELDS,
    JOB_FIELDS,
    JOB_SUMMARY_FIELDS,
    STEP_FIELDS,
    child_job,
    drf_datetime,
    job_data,
    job_summary_data,
    rerun_ids,
    step_data,
    waiting_for,
)
from scheduler.serializers.schedules import (
    BackfilledFiringSerializer,
    ScheduleBackfillAnswerSerializer,
    ScheduleBackfillSerializer,
    ScheduleReplaceSerializer,
    ScheduleSerializer,
    ScheduleWriteSerializer,
)
from scheduler.serializers.submissions import (
    JobBatchItemSerializer,
    JobBatchResponseSerializer,
    JobBatchResultSerializer,
    JobBatchSerializer,
    JobFilterSerializer,
    JobSubmitSerializer,
)
from scheduler.serializers.workflows import (
    StepDefinitionSerializer,
    TriggerSerializer,
    WorkflowReplaceSerializer,
    WorkflowSerializer,
    WorkflowVersionSerializer,
)

__all__ = [
    "ATTEMPT_FIELDS",
    "CALLBACK_FIELDS",
    "JOB_FIELDS",
    "JOB_SUMMARY_FIELDS",
    "STEP_FIELDS",
    "ApprovalDecisionSerializer",
    "AttemptCallbackResultSerializer",
    "AttemptCallbackSerializer",
    "AttemptHeartbeatResultSerializer",
    "AttemptHeartbeatSerializer",
    "AttemptSerializer",
    "BackfilledFiringSerializer",
    "CallbackSerializer",
    "EventRefusalSerializer",
    "EventReplayAnswerSerializer",
    "EventReplaySerializer",
    "EventSerializer",
    "InboundEventAnswerSerializer",
    "InboundEventSerializer",
    "JobBatchItemSerializer",
    "JobBatchResponseSerializer",
    "JobBatchResultSerializer",
    "JobBatchSerializer",
    "JobFilterSerializer",
    "JobSerializer",
    "JobSubmitSerializer",
    "JobSummarySerializer",
    "KeyedSignalAnswerSerializer",
    "KeyedSignalSendSerializer",
    "ScheduleBackfillAnswerSerializer",
    "ScheduleBackfillSerializer",
    "ScheduleReplaceSerializer",
    "ScheduleSerializer",
    "ScheduleWriteSerializer",
    "SignalSendSerializer",
    "SignalSerializer",
    "SignalWaitSerializer",
    "SignalWithStartSerializer",
    "StepDefinitionSerializer",
    "StepItemSerializer",
    "StepSerializer",
    "TriggerSerializer",
    "WaitingForSerializer",
    "WorkflowReplaceSerializer",
    "WorkflowSerializer",
    "WorkflowVersionSerializer",
    "child_job",
    "drf_datetime",
    "job_data",
    "job_summary_data",
    "rerun_ids",
    "step_data",
    "waiting_for",
]
