"""Durable state of the scheduler, one module per aggregate: workflow definitions and remediation
policies (`definitions`), jobs (`jobs`), their steps, attempts and signals (`steps`), the event
history and what retention leaves (`history`), the outbox and the alert subscriptions it delivers
to (`outbox`), quarantined items (`quarantine`) and schedules (`schedules`).

Status fields are written only by scheduler.transitions (the state machines); everything else
reads them. Each table sits next to its vocabulary (statuses, event kinds) and its constraints,
which the PostgreSQL functions and the migrations mirror: one place to read what a row may hold.
Every public name is importable from here (`from scheduler.models import Job`), and so are the
callables the migrations name (`scheduler.models.default_retry_on`, `all_alert_kinds`,
`signing_secret_new`).
"""

from __future__ import annotations

from agents.outcome import AttemptKind, Outcome
from scheduler.models.correlation import EventSource, InboundEvent, KeyedSignal
from scheduler.models.definitions import (
    RETRYABLE_OUTCOMES,
    WAIT_KINDS,
    JoinMode,
    OnExhausted,
    OnTimeout,
    PolicyRevision,
    RemediationPolicy,
    StepDefinition,
    StepDefinitionKind,
    Workflow,
    default_retry_on,
)
from scheduler.models.history import (
    EVENT_KINDS,
    STEP_SUCCESS_KINDS,
    ArchivedJob,
    Event,
    EventKind,
    PruneRun,
)
from scheduler.models.jobs import CANARY_WORKFLOW, JOB_FINAL, JOB_LIVE, JOB_SETTLED, Job, JobStatus
from scheduler.models.outbox import (
    SIGNING_SECRET_PREFIX,
    AlertKind,
    AlertSubscription,
    CallbackSecret,
    Delivery,
    DeliveryKind,
    DeliveryStatus,
    EventReaction,
    SigningSecrets,
    all_alert_kinds,
    signing_secret_new,
)
from scheduler.models.quarantine import Quarantine, QuarantineLoop
from scheduler.models.schedules import (
    JITTER_MAX_SECONDS,
    CatchUp,
    FiringStatus,
    Overlap,
    Schedule,
    ScheduleFiring,
)
from scheduler.models.steps import (
    CANCEL_ATTEMPT_NUMBER,
    STEP_FINAL,
    STEP_LIVE,
    STEP_SCANNED,
    STEP_SETTLED,
    Attempt,
    RemoteCancel,
    Signal,
    Step,
    StepKind,
    StepStatus,
)

__all__ = [
    "CANARY_WORKFLOW",
    "CANCEL_ATTEMPT_NUMBER",
    "EVENT_KINDS",
    "JITTER_MAX_SECONDS",
    "JOB_FINAL",
    "JOB_LIVE",
    "JOB_SETTLED",
    "RETRYABLE_OUTCOMES",
    "SIGNING_SECRET_PREFIX",
    "STEP_FINAL",
    "STEP_LIVE",
    "STEP_SCANNED",
    "STEP_SETTLED",
    "STEP_SUCCESS_KINDS",
    "WAIT_KINDS",
    "AlertKind",
    "AlertSubscription",
    "ArchivedJob",
    "Attempt",
    "AttemptKind",
    "CallbackSecret",
    "CatchUp",
    "Delivery",
    "DeliveryKind",
    "DeliveryStatus",
    "Event",
    "EventKind",
    "EventReaction",
    "EventSource",
    "FiringStatus",
    "InboundEvent",
    "Job",
    "JobStatus",
    "JoinMode",
    "KeyedSignal",
    "OnExhausted",
    "OnTimeout",
    "Outcome",
    "Overlap",
    "PolicyRevision",
    "PruneRun",
    "Quarantine",
    "QuarantineLoop",
    "RemediationPolicy",
    "RemoteCancel",
    "Schedule",
    "ScheduleFiring",
    "Signal",
    "SigningSecrets",
    "Step",
    "StepDefinition",
    "StepDefinitionKind",
    "StepKind",
    "StepStatus",
    "Workflow",
    "all_alert_kinds",
    "default_retry_on",
    "signing_secret_new",
]
