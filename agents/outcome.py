"""What an agent is asked to do (CallSpec) and what it reports back (CallResult).

These are plain values: they cross the boundary between the durable state (scheduler) and the
remote call (agents), and they are what the fake remote in the unit tests produces.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from typing import Any

from django.db import models

from sas_project.validation import storable_text, unstorable


class Outcome(models.TextChoices):
    #: The remote did it; the answer is the step's output.
    SUCCEEDED = "succeeded", "Succeeded"
    #: The remote refused (4xx other than 408/429): not retried by default.
    BUSINESS_FAILURE = "business_failure", "Business failure"
    #: The remote could not do it now (408, 429, 5xx, connection refused).
    TRANSIENT_FAILURE = "transient_failure", "Transient failure"
    #: No answer in time: it may have happened.
    NO_ANSWER = "no_answer", "No answer"
    #: A status query said the operation never happened.
    NOT_HAPPENED = "not_happened", "Did not happen"
    #: The step was completed by another attempt or an operator while this one was in flight.
    SUPERSEDED = "superseded", "Superseded"


#: What an asynchronous agent reports when the remote took the call and will report its result
#: later (an HTTP 202, a message published to a queue). Not an outcome: the attempt stays in
#: flight, its deadline still applies, and the result arrives through the reply consumer or the
#: callback URL (scheduler.replies, scheduler.callbacks).
ACCEPTED = "accepted"

#: The largest heartbeat details kept, as JSON bytes: they are stored on the attempt and sent with
#: every later attempt of the operation, so a remote reports where it is, not what it made.
HEARTBEAT_DETAILS_MAX_BYTES = 16 * 1024


class AttemptKind(models.TextChoices):
    #: The step's action (or compensation) call.
    CALL = "call", "Call"
    #: A status query: did operation `operation_id` happen?
    RECONCILE = "reconcile", "Reconcile"
    #: A cancel of operation `operation_id`, sent to the step's `cancel_path` (HTTP) or request
    #: queue (queue) while its call was in flight and its job stopped; never a dispatch of the
    #: step (scheduler.services.cancels).
    CANCEL = "cancel", "Cancel"


class BusinessFailure(Exception):
    """Raised by a python action to say no (the equivalent of an HTTP 4xx)."""


class NotHappened(Exception):
    """Raised by a python status callable: the operation never happened."""


@dataclass(frozen=True)
class CallSpec:
    """Everything one attempt needs. Built in memory by the scheduler; never stored or queued,
    because `headers` may hold a secret."""

    job_id: str
    step_id: int
    attempt: int
    operation_id: str
    kind: str  # AttemptKind
    agent_kind: str  # AgentKind
    base_url: str
    path: str
    payload: dict[str, Any]
    timeout: float
    headers: dict[str, str] = field(default_factory=dict)
    #: The attempt's deadline (database clock), to tell a late outcome.
    deadline: dt.datetime | None = None
    #: The pool the call goes to (for logs and metrics).
    pool: str = ""
    #: The job's trace (W3C traceparent), when tracing is on.
    trace_parent: str = ""
    #: When the attempt was dispatched and claimed (database clock), for its trace.
    dispatched_at: dt.datetime | None = None
    claimed_at: dt.datetime | None = None
    #: Where the remote may POST the result later (HTTP agents; SAS_PUBLIC_URL set), naming this
    #: attempt with a signed token.
    callback_url: str = ""

    @property
    def is_reconcile(self) -> bool:
        return self.kind == AttemptKind.RECONCILE

    @property
    def is_cancel(self) -> bool:
        return self.kind == AttemptKind.CANCEL


@dataclass(frozen=True)
class CallResult:
    outcome: str  # Outcome
    output: Any = None
    status_code: int | None = None
    latency_ms: int | None = None
    excerpt: str = ""
    error: str = ""
    #: What keeps a successful answer's output out of the database, and where (set by
    #: `storable`, which then drops the output): the step is held, its success kept.
    unstorable: str = ""
    #: Seconds a remote answering 429 or 503 asked the caller to wait (its Retry-After), or None.
    retry_after: float | None = None

    @property
    def succeeded(self) -> bool:
        return self.outcome == Outcome.SUCCEEDED

    @property
    def accepted(self) -> bool:
        """The remote took the call; its result comes later (see ACCEPTED)."""
        return self.outcome == ACCEPTED


def storable(result: CallResult) -> CallResult:
    """`result` as the database can store it; the same result when it already can.

    What a remote answers is untrusted: PostgreSQL refuses a NUL character and an unpaired
    surrogate in text and jsonb, and a number that is not finite in jsonb. In the excerpt or
    the error they become U+FFFD (as undecodable bytes already do). A successful answer whose
    output cannot be stored (sas_project.validation.unstorable: also more than 64 levels) keeps
    its outcome, with no output and `unstorable` saying what and where; the attempt's error says
    it too. The remote did the work (the operation ID is the same: the effect happened once), so
    the step is neither retried nor failed: the outcome path holds it for an operator, who
    resolves it with the output it should have (scheduler.services.outcomes)."""
    error = storable_text(result.error)
    output = result.output
    why = ""
    if result.succeeded and output is not None:
        problem = unstorable(output)
        if problem is not None:
            output, why = None, problem
            note = f"the answer cannot be stored: {problem}"
            error = f"{error}; {note}" if error else note
    excerpt = storable_text(result.excerpt)
    if output is result.output and error == result.error and excerpt == result.excerpt:
        return result
    return replace(result, output=output, error=error, excerpt=excerpt, unstorable=why)
