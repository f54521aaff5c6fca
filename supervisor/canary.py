"""The canary: a job of the service's own, every SAS_CANARY_SECONDS, that succeeds only if the
recovery path works end to end.

Its one step calls the service's own route `POST /canaryz` (under SAS_CANARY_URL, by default
SAS_PUBLIC_URL; served before the host check, as the probes are), which drops the first call of
each operation ID: it answers nothing until that call's deadline has passed.
Only the retry (the same operation ID in `Idempotency-Key`, from the supervisor) is answered
200. So a canary job succeeds only when the attempt timed out, the supervisor found the step and
retried it, and the retry was dispatched, called and recorded: a supervisor that renews its
lease but remediates nothing fails the canary as surely as a dead one.

- **Firing** (`canary_tick`, every supervisor loop pass): one row (`CanaryState`) taken with
  `FOR UPDATE SKIP LOCKED`, so two clusters make one job a period; the definitions (pool,
  endpoint, policy, workflow, all named `sas-canary`) are created by the service itself the
  first time, and the endpoint follows SAS_CANARY_URL.
- **Judging**, in the same pass: the last canary job succeeded (its submit-to-success time is
  recorded), or it is past its expected time (the attempt timeout, two scan intervals and a
  margin) or settled without success: the alert `canary_unremediated`, once per run of failures.
- **The outbound guard**: the pool's URL is the service's own, which may be internal; the HTTP
  agent lets the canary pool's calls to that one URL through (agents.http) and nothing else, so
  no user's endpoint gains a way in. The names are reserved: no user makes a pool or a workflow
  called `sas-canary`.
- **Out of users' sight**: the jobs are left out of the job lists (API and console) unless asked
  for by name, of the job counters of /metrics, and of the archive (retention deletes them).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterator
from typing import Any

from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from prometheus_client.core import GaugeMetricFamily

from agents.http import CANARY_PATH, CANARY_POOL, canary_url
from agents.models import AgentEndpoint, AgentKind, AgentPool
from sas_project.conf import sas_settings
from sas_project.errors import SasError
from scheduler.definitions import workflow_create, workflow_latest
from scheduler.models import CANARY_WORKFLOW, JOB_SETTLED, AlertKind, Job, JobStatus, RemediationPolicy, Step
from scheduler.services import job_submit
from supervisor.alerts import alert_write
from supervisor.models import CanaryCall, CanaryState
from supervisor.policies import policy_create

logger = logging.getLogger("supervisor.canary")

STATE = "canary"
#: What a tick may change on the canary's row.
STATE_FIELDS = ("last_fired_at", "last_job_id", "last_success_at", "last_recovery_seconds", "failing_since")
#: The deadline of one canary attempt (its policy's timeout).
TIMEOUT_SECONDS = 2.0
#: Beyond the attempt timeout and two scan intervals, before a canary job is late.
MARGIN_SECONDS = 5.0
#: How long past the call's deadline the route holds a first call before it lets go.
HOLD_PAST_DEADLINE = 1.0
#: The longest the route holds a call, whatever the step's deadline says.
HOLD_MAX = 30.0
#: How long the route remembers an operation ID.
CALLS_KEPT = dt.timedelta(days=1)

#: The canary's policy: every retry at once, no status query (the route has none), and a job
#: that fails when the retries run out (the alert says it), never one held for an operator.
POLICY: dict[str, Any] = {
    "timeout_seconds": TIMEOUT_SECONDS,
    "max_attempts": 3,
    "backoff_initial_seconds": 0,
    "backoff_multiplier": 1,
    "backoff_max_seconds": 0,
    "backoff_jitter": 0,
    "retry_on": ["transient_failure", "no_answer"],
    "on_exhausted": "fail",
    "reconcile_before_retry": False,
}


def enabled() -> bool:
    return sas_settings.canary_seconds > 0 and bool(canary_url())


def expected_seconds() -> float:
    """How long a canary job may take from submission to success: its attempt's timeout, two
    scan intervals (one to find it overdue, one of slack), and a margin for the retry's call."""
    return TIMEOUT_SECONDS + 2 * sas_settings.supervisor_interval + MARGIN_SECONDS


def period_seconds() -> float:
    """Seconds between two canary jobs: SAS_CANARY_SECONDS, and never less than one job's
    expected time and an interval, so that each job is judged before the next is submitted."""
    return max(sas_settings.canary_seconds, expected_seconds() + sas_settings.supervisor_interval)


def canary_definitions_ensure() -> None:
    """The canary's pool (its one endpoint SAS_CANARY_URL, by default SAS_PUBLIC_URL), policy and
    workflow, created by the service itself (not through the guard's save-time check: the URL is
    the service's own)."""
    base = sas_settings.canary_base_url
    if not RemediationPolicy.objects.filter(name=CANARY_POOL).exists():
        policy_create(name=CANARY_POOL, actor=None, **POLICY)
    pool, _ = AgentPool.objects.get_or_create(name=CANARY_POOL, defaults={"kind": AgentKind.HTTP})
    if sorted(pool.endpoints.values_list("url", flat=True)) != [base]:
        pool.endpoints.exclude(url=base).delete()
        AgentEndpoint.objects.get_or_create(pool=pool, url=base)
    if workflow_latest(CANARY_WORKFLOW) is None:
        workflow_create(
            name=CANARY_WORKFLOW,
            system=True,
            description="The service's canary: one call to its own route, which drops the first "
            "call of each operation, so the job succeeds only through the supervisor's retry.",
            steps=[{"name": "call", "pool": CANARY_POOL, "path": CANARY_PATH, "policy": CANARY_POOL}],
        )


def canary_tick(now: dt.datetime | None = None) -> bool:
    """Judge the last canary job and fire the next when one is due (every loop pass calls this;
    the loop that holds the canary's row acts). Returns whether a job was submitted."""
    if not enabled():
        return False
    with transaction.atomic():
        state = _state_locked()
        if state is None:
            return False  # another loop is at it
        now = now or timezone.now()
        before = {field: getattr(state, field) for field in STATE_FIELDS}
        _judge(state, now)
        fired = False
        if state.last_fired_at is None or (now - state.last_fired_at).total_seconds() >= period_seconds():
            fired = _fire(state, now)
        changed = [field for field in STATE_FIELDS if getattr(state, field) != before[field]]
        if changed:  # most passes change nothing, and write nothing
            state.save(update_fields=changed)
    return fired


def _state_locked() -> CanaryState | None:
    rows = CanaryState.objects.select_for_update(skip_locked=True).filter(pk=STATE)
    state = rows.first()
    if state is None and not CanaryState.objects.filter(pk=STATE).exists():
        CanaryState.objects.bulk_create([CanaryState(name=STATE)], ignore_conflicts=True)
        state = rows.first()
    return state


def _fire(state: CanaryState, now: dt.datetime) -> bool:
    state.last_fired_at = now
    CanaryCall.objects.filter(first_at__lt=now - CALLS_KEPT).delete()
    try:
        with transaction.atomic():
            canary_definitions_ensure()
            submission = job_submit(workflow=CANARY_WORKFLOW, input={})
    except SasError as exc:
        logger.warning("canary: no job submitted: %s", exc.message)
        return False
    state.last_job_id = submission.job_id
    return True


def _judge(state: CanaryState, now: dt.datetime) -> None:
    """Record the last job's success, or alert once when it is late or settled without one."""
    if state.last_job_id is None:
        return
    job = Job.objects.filter(pk=state.last_job_id).values("status", "created_at", "finished_at").first()
    if job is None:
        return  # deleted by retention long after it was judged
    created: dt.datetime = job["created_at"]
    if job["status"] == JobStatus.SUCCEEDED and job["finished_at"] is not None:
        finished: dt.datetime = job["finished_at"]
        state.last_success_at = finished
        state.last_recovery_seconds = max((finished - created).total_seconds(), 0.0)
        state.failing_since = None
        return
    age = (now - created).total_seconds()
    if state.failing_since is not None or (job["status"] not in JOB_SETTLED and age <= expected_seconds()):
        return
    state.failing_since = created
    logger.warning(
        "canary: job %s not succeeded %.1fs after submission (expected within %.1fs), status %s",
        state.last_job_id,
        age,
        expected_seconds(),
        job["status"],
    )
    alert_write(
        AlertKind.CANARY_UNREMEDIATED,
        f"canary-{created.isoformat()}",
        {
            "job_id": str(state.last_job_id),
            "status": job["status"],
            "submitted_at": created.isoformat(),
            "age_seconds": round(age, 3),
            "expected_seconds": expected_seconds(),
        },
    )


# --- the route the canary calls ----------------------------------------------------------------


@csrf_exempt
@never_cache
@require_POST
def canaryz(request: HttpRequest) -> JsonResponse:
    """The canary's remote: the first call of an operation ID gets no answer before its deadline
    (the call is held past it, then answered 408 to nobody: a transient failure, should a
    client still wait); every later call gets 200. Only the operation IDs of canary steps are
    served (404 otherwise), so a stranger can neither use the route nor fill its memory, which
    is a table every web process shares (CanaryCall)."""
    # Read, so that a kept-alive connection is left at the next request.
    _ = request.body
    key = request.headers.get("Idempotency-Key", "")
    step = (
        Step.objects.filter(operation_id=key, job__workflow__name=CANARY_WORKFLOW).values("deadline").first()
        if key
        else None
    )
    if step is None:
        return JsonResponse({"error": "not a canary operation"}, status=404)
    now = timezone.now()
    try:
        with transaction.atomic():
            CanaryCall.objects.create(operation_id=key, first_at=now)
    except IntegrityError:
        return JsonResponse({"operation_id": key, "canary": "answered"})
    deadline: dt.datetime | None = step["deadline"]
    left = (deadline - now).total_seconds() if deadline is not None else TIMEOUT_SECONDS
    time.sleep(min(max(left, 0.0) + HOLD_PAST_DEADLINE, HOLD_MAX))
    return JsonResponse({"operation_id": key, "canary": "dropped"}, status=408)


# --- what /metrics shows -------------------------------------------------------------------------


def canary_metrics(now: dt.datetime | None = None) -> Iterator[GaugeMetricFamily]:
    """The canary's gauges, while it is on: the age of its last success (+Inf before the first)
    and the submit-to-success time of that job, beside the time it is expected within."""
    if not enabled():
        return
    now = now or timezone.now()
    state = CanaryState.objects.filter(pk=STATE).first()
    last = state.last_success_at if state is not None else None
    yield GaugeMetricFamily(
        "sas_canary_last_success_age_seconds",
        "Seconds since the last canary job succeeded (+Inf when none has).",
        value=(now - last).total_seconds() if last is not None else float("inf"),
    )
    yield GaugeMetricFamily(
        "sas_canary_recovery_seconds",
        "Submission to success of the last canary job that succeeded (through one retry).",
        value=(state.last_recovery_seconds or 0.0) if state is not None else 0.0,
    )
    yield GaugeMetricFamily(
        "sas_canary_expected_seconds",
        "How long a canary job may take: attempt timeout, two scan intervals and a margin.",
        value=expected_seconds(),
    )
    yield GaugeMetricFamily(
        "sas_canary_period_seconds", "Seconds between two canary jobs.", value=period_seconds()
    )
