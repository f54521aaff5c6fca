"""Remediation policies: the pure decision (`decide`) and the audited edits of the policy rows.

`decide` takes plain values (the step's facts, a policy snapshot, the database clock and a random
draw for the jitter) and returns a Decision; it reads no database and no clock, so it is tested
table-driven. supervisor.scan applies the decision through the scheduler's services.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import ProtectedError

from sas_project.audit import definition_deleted, definition_logged
from sas_project.editing import fields_known, locked_one
from sas_project.errors import ActionNotAllowed, InvalidInput, StaleWrite
from sas_project.validation import valid_name
from scheduler.backoff import backoff_seconds
from scheduler.models import (
    RETRYABLE_OUTCOMES,
    AttemptKind,
    OnExhausted,
    Outcome,
    PolicyRevision,
    RemediationPolicy,
    StepDefinition,
    StepKind,
    StepStatus,
)
from scheduler.unit import User

# --- the decision -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicySnapshot:
    name: str
    version: int
    timeout_seconds: float
    max_attempts: int
    backoff_initial_seconds: float
    backoff_multiplier: float
    backoff_max_seconds: float
    backoff_jitter: float
    retry_on: frozenset[str]
    reassign_after_attempts: int | None
    on_exhausted: str
    reconcile_before_retry: bool
    step_budget_seconds: float | None
    heartbeat_seconds: float | None = None

    @classmethod
    def of(cls, policy: RemediationPolicy) -> PolicySnapshot:
        return cls(
            name=policy.name,
            version=policy.version,
            timeout_seconds=policy.timeout_seconds,
            max_attempts=policy.max_attempts,
            backoff_initial_seconds=policy.backoff_initial_seconds,
            backoff_multiplier=policy.backoff_multiplier,
            backoff_max_seconds=policy.backoff_max_seconds,
            backoff_jitter=policy.backoff_jitter,
            retry_on=frozenset(policy.retry_on or ()),
            reassign_after_attempts=policy.reassign_after_attempts,
            on_exhausted=policy.on_exhausted,
            reconcile_before_retry=policy.reconcile_before_retry,
            step_budget_seconds=policy.step_budget_seconds,
            heartbeat_seconds=policy.heartbeat_seconds,
        )

    @property
    def label(self) -> str:
        return f"policy {self.name} v{self.version}"


@dataclass(frozen=True)
class StepFacts:
    """What the decision may know about a step awaiting one."""

    kind: str  # StepKind
    status: str  # attempt_failed or unknown
    last_outcome: str  # Outcome
    last_attempt_kind: str  # AttemptKind
    calls: int
    first_dispatched_at: dt.datetime | None
    job_deadline: dt.datetime | None
    has_status_path: bool
    on_alternate_pool: bool
    alternate_available: bool
    pool_healthy: bool = True
    alternate_healthy: bool = True
    #: No call before then, as the remote asked (a 429 or 503 with Retry-After), if it did.
    asked_until: dt.datetime | None = None


@dataclass(frozen=True)
class Retry:
    delay: float
    reassign: bool
    reason: str


@dataclass(frozen=True)
class Reconcile:
    reason: str


@dataclass(frozen=True)
class GiveUp:
    action: str  # OnExhausted
    reason: str


Decision = Retry | Reconcile | GiveUp


def backoff_delay(policy: PolicySnapshot, calls: int, draw: float) -> float:
    """Capped exponential backoff after `calls` calls, with `draw` in [0, 1) for the jitter: the
    rule every retry follows (scheduler.backoff)."""
    return backoff_seconds(policy, tries=calls, draw=draw)


def decide(facts: StepFacts, policy: PolicySnapshot, now: dt.datetime, draw: float) -> Decision:
    """What to do with a step whose last attempt failed or got no answer."""
    outcome = facts.last_outcome
    unknown = facts.status == StepStatus.UNKNOWN or outcome == Outcome.NO_ANSWER
    if (
        unknown
        and policy.reconcile_before_retry
        and facts.has_status_path
        and facts.last_attempt_kind != AttemptKind.RECONCILE
    ):
        return Reconcile(f"outcome unknown: asking the remote before calling again ({policy.label})")
    # A status query that said "never happened" stands for the call it asked about, which got
    # no answer; the retry rules for no-answer apply to it.
    retry_class = Outcome.NO_ANSWER if unknown or outcome == Outcome.NOT_HAPPENED else outcome
    if retry_class not in policy.retry_on:
        return GiveUp(policy.on_exhausted, f"{outcome or 'unknown'} is not retried under {policy.label}")
    if facts.calls >= policy.max_attempts:
        return GiveUp(
            policy.on_exhausted,
            f"{facts.calls} of {policy.max_attempts} attempts used ({policy.label})",
        )
    if policy.step_budget_seconds is not None and facts.first_dispatched_at is not None:
        spent = (now - facts.first_dispatched_at).total_seconds()
        if spent >= policy.step_budget_seconds:
            return GiveUp(
                policy.on_exhausted,
                f"step budget of {policy.step_budget_seconds:g}s spent ({spent:.1f}s, {policy.label})",
            )
    if facts.job_deadline is not None and now >= facts.job_deadline:
        return GiveUp(policy.on_exhausted, "the job's deadline has passed")
    delay = backoff_delay(policy, facts.calls, draw)
    reassign = False
    why = ""
    if facts.asked_until is not None and (asked := (facts.asked_until - now).total_seconds()) > delay:
        # The remote knows its load better than the backoff: its ask wins, within the policy's
        # longest backoff (a longer ask is capped, and the reason says so).
        delay = max(delay, min(asked, policy.backoff_max_seconds))
        why = f"; the remote asked to wait {asked:.1f}s"
        if asked > policy.backoff_max_seconds:
            why += f" (capped at backoff_max_seconds, {policy.backoff_max_seconds:g}s)"
    if facts.alternate_available and not facts.on_alternate_pool:
        threshold = policy.reassign_after_attempts
        if threshold is not None and facts.calls >= threshold:
            reassign, why = True, f"{why}; reassigned after {facts.calls} failed calls"
        elif not facts.pool_healthy and facts.alternate_healthy:
            reassign, why = True, f"{why}; reassigned: no healthy endpoint left in the pool"
    attempt_word = "retry" if facts.kind != StepKind.COMPENSATION else "retry compensation"
    return Retry(
        delay=delay,
        reassign=reassign,
        reason=f"{retry_class}: {attempt_word} {facts.calls + 1} of {policy.max_attempts} "
        f"in {delay:.2f}s ({policy.label}){why}",
    )


# --- audited edits of the policy rows ------------------------------------------------------------

POLICY_FIELDS = (
    "timeout_seconds",
    "max_attempts",
    "backoff_initial_seconds",
    "backoff_multiplier",
    "backoff_max_seconds",
    "backoff_jitter",
    "retry_on",
    "reassign_after_attempts",
    "on_exhausted",
    "reconcile_before_retry",
    "step_budget_seconds",
    "heartbeat_seconds",
)


#: The longest heartbeat interval a policy may set (a year).
HEARTBEAT_SECONDS_MAX = 365 * 24 * 3600


def policy_settings(policy: RemediationPolicy) -> dict[str, Any]:
    return {name: getattr(policy, name) for name in POLICY_FIELDS}


def policy_validate(values: dict[str, Any]) -> None:
    """Raise InvalidInput naming the first field that is wrong."""

    def number(name: str) -> float | None:
        value = values.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidInput(f"{name} must be a number", field=name)
        return float(value)

    timeout = number("timeout_seconds")
    if timeout is None or timeout <= 0:
        raise InvalidInput("timeout_seconds must be greater than 0", field="timeout_seconds")
    attempts = values.get("max_attempts")
    if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
        raise InvalidInput("max_attempts must be an integer of at least 1", field="max_attempts")
    initial = number("backoff_initial_seconds")
    if initial is None or initial < 0:
        raise InvalidInput("backoff_initial_seconds must be 0 or more", field="backoff_initial_seconds")
    multiplier = number("backoff_multiplier")
    if multiplier is None or multiplier < 1:
        raise InvalidInput("backoff_multiplier must be at least 1", field="backoff_multiplier")
    cap = number("backoff_max_seconds")
    if cap is None or cap < initial:
        raise InvalidInput(
            "backoff_max_seconds must be at least backoff_initial_seconds", field="backoff_max_seconds"
        )
    jitter = number("backoff_jitter")
    if jitter is None or not 0 <= jitter <= 1:
        raise InvalidInput("backoff_jitter must be between 0 and 1", field="backoff_jitter")
    retry_on = values.get("retry_on")
    if not isinstance(retry_on, list) or any(o not in RETRYABLE_OUTCOMES for o in retry_on):
        raise InvalidInput(f"retry_on must be a list of {', '.join(RETRYABLE_OUTCOMES)}", field="retry_on")
    reassign = values.get("reassign_after_attempts")
    if reassign is not None and (not isinstance(reassign, int) or isinstance(reassign, bool) or reassign < 1):
        raise InvalidInput(
            "reassign_after_attempts must be empty or an integer of at least 1",
            field="reassign_after_attempts",
        )
    if values.get("on_exhausted") not in OnExhausted.values:
        raise InvalidInput(
            f"on_exhausted must be one of {', '.join(OnExhausted.values)}", field="on_exhausted"
        )
    if not isinstance(values.get("reconcile_before_retry"), bool):
        raise InvalidInput("reconcile_before_retry must be true or false", field="reconcile_before_retry")
    budget = number("step_budget_seconds")
    if budget is not None and budget <= 0:
        raise InvalidInput("step_budget_seconds must be empty or greater than 0", field="step_budget_seconds")
    heartbeat = number("heartbeat_seconds")
    # At most a year: a deadline that far ahead is already "never", and one past the calendar's
    # end could not be written.
    if heartbeat is not None and not 0 < heartbeat <= HEARTBEAT_SECONDS_MAX:
        raise InvalidInput(
            f"heartbeat_seconds must be empty, or greater than 0 and at most {HEARTBEAT_SECONDS_MAX}",
            field="heartbeat_seconds",
        )


def _defaults() -> dict[str, Any]:
    blank = RemediationPolicy()
    return policy_settings(blank)


@transaction.atomic
def policy_create(*, name: str, actor: User | None, **fields: Any) -> RemediationPolicy:
    """Create a policy at version 1 and record that revision."""
    fields_known(fields, POLICY_FIELDS, "policy")
    valid_name(name, "policy name", "name")
    values = {**_defaults(), **fields}
    policy_validate(values)
    if RemediationPolicy.objects.filter(name=name).exists():
        raise InvalidInput(f"a policy named {name!r} already exists", field="name")
    try:
        with transaction.atomic():
            policy = RemediationPolicy.objects.create(name=name, version=1, **values)
    except IntegrityError as exc:
        raise StaleWrite(f"policy {name!r} was created at the same moment; send yours again") from exc
    PolicyRevision.objects.create(
        policy=policy,
        version=1,
        settings=policy_settings(policy),
        changes={k: [None, v] for k, v in policy_settings(policy).items()},
        changed_by=_user(actor),
    )
    definition_logged(actor, policy, created=True)
    return policy


@transaction.atomic
def policy_update(policy_id: int, *, actor: User | None, changes: dict[str, Any]) -> RemediationPolicy:
    """Apply `changes` as a new version, recording who, when, and old and new values.

    Steps in flight read the policy at their next decision, so the change applies to them then;
    each attempt keeps the version it ran under. An edit that changes nothing makes no version.
    """
    fields_known(changes, POLICY_FIELDS, "policy")
    policy = locked_one(RemediationPolicy.objects.filter(pk=policy_id), f"policy {policy_id} does not exist")
    old = policy_settings(policy)
    new = {**old, **changes}
    policy_validate(new)
    diff = {k: [old[k], new[k]] for k in POLICY_FIELDS if old[k] != new[k]}
    if not diff:
        return policy
    for name, value in new.items():
        setattr(policy, name, value)
    policy.version += 1
    policy.save(update_fields=[*POLICY_FIELDS, "version", "updated_at"])
    PolicyRevision.objects.create(
        policy=policy,
        version=policy.version,
        settings=policy_settings(policy),
        changes=diff,
        changed_by=_user(actor),
    )
    definition_logged(actor, policy, created=False, changes=diff)
    return policy


def _user(actor: User | None) -> Any:
    return actor if actor is not None and actor.is_authenticated else None


def snapshot_dict(snapshot: PolicySnapshot) -> dict[str, Any]:
    data = asdict(snapshot)
    data["retry_on"] = sorted(snapshot.retry_on)
    return data


@transaction.atomic
def policy_delete(name: str, *, actor: User | None) -> None:
    """Delete a policy no workflow uses (with its revisions). Otherwise ActionNotAllowed names the
    workflow: history keeps the policies its steps ran under."""
    policy = locked_one(RemediationPolicy.objects.filter(name=name), f"policy {name!r} does not exist")
    step = StepDefinition.objects.filter(policy=policy).select_related("workflow").first()
    if step is not None:
        raise ActionNotAllowed(
            f"policy {name!r} is used by workflow {step.workflow.name!r} (version {step.workflow.version}): "
            "it cannot be deleted"
        )
    definition_deleted(actor, policy)
    try:
        with transaction.atomic():
            policy.delete()
    except ProtectedError as exc:
        raise ActionNotAllowed(f"policy {name!r} is still used: it cannot be deleted") from exc
