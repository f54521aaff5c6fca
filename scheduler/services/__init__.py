"""The scheduler's services, one module per concern:

- `locking`: take a job's row lock and read its steps (every service that changes a job starts here);
- `submission`: create a job and dispatch its first steps;
- `dispatch`: write a step's intent (attempt, deadline, event) and enqueue its agent task;
- `claims`: the agent's claim of one attempt, and what the call needs;
- `outcomes`: record an attempt's outcome and move the job on;
- `heartbeats`: a call that answers later reports it is alive, and its deadline moves;
- `remediation`: the moves the supervisor's decisions are applied through;
- `saga`: the job's way forward (the DAG advance) and back (compensation);
- `cancels`: a call still running at its remote when its job stops is cancelled there.

Transaction boundaries (docs/architecture.md, "How one step runs"): every service that changes a
job takes the job's row lock first, then reads its steps; dispatch writes the intent and the task
in one transaction; no remote is ever called inside a transaction.
"""

from scheduler.services.claims import NOT_CALLED, attempt_claim
from scheduler.services.correlation import valid_business_key
from scheduler.services.dispatch import step_dispatch
from scheduler.services.effects import needs_compensation
from scheduler.services.heartbeats import attempt_heartbeat, heartbeats_missed
from scheduler.services.locking import JOB_FORWARD, JobState, load_locked_jobs, lock_job
from scheduler.services.outcomes import (
    async_result_record,
    attempt_accepted,
    reply_dead_letter_record,
    step_record_outcome,
    step_succeed,
)
from scheduler.services.remediation import (
    step_abandon,
    step_give_up,
    step_keep_waiting,
    step_reconcile,
    step_retry_later,
    step_time_out,
    steps_still_queued,
)
from scheduler.services.saga import job_advance, job_fail, job_start_compensation, step_hold
from scheduler.services.submission import Submission, job_submit, rerun_create, valid_priority

__all__ = [
    "JOB_FORWARD",
    "NOT_CALLED",
    "JobState",
    "Submission",
    "async_result_record",
    "attempt_accepted",
    "attempt_claim",
    "attempt_heartbeat",
    "heartbeats_missed",
    "job_advance",
    "job_fail",
    "job_start_compensation",
    "job_submit",
    "load_locked_jobs",
    "lock_job",
    "needs_compensation",
    "reply_dead_letter_record",
    "rerun_create",
    "step_abandon",
    "step_dispatch",
    "step_give_up",
    "step_hold",
    "step_keep_waiting",
    "step_reconcile",
    "step_record_outcome",
    "step_retry_later",
    "step_succeed",
    "step_time_out",
    "steps_still_queued",
    "valid_business_key",
    "valid_priority",
]
