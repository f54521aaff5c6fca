"""The pure remediation decision, table-driven, and the audited policy edits."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest
from django.contrib.auth.models import User

from sas_project.errors import InvalidInput
from scheduler.models import AttemptKind, Outcome, PolicyRevision, StepKind, StepStatus
from supervisor.policies import (
    GiveUp,
    PolicySnapshot,
    Reconcile,
    Retry,
    StepFacts,
    backoff_delay,
    decide,
    policy_create,
    policy_update,
)

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)

POLICY = PolicySnapshot(
    name="p",
    version=3,
    timeout_seconds=5,
    max_attempts=4,
    backoff_initial_seconds=1,
    backoff_multiplier=2,
    backoff_max_seconds=5,
    backoff_jitter=0,
    retry_on=frozenset({"transient_failure", "no_answer"}),
    reassign_after_attempts=None,
    on_exhausted="compensate",
    reconcile_before_retry=False,
    step_budget_seconds=None,
)

FACTS = StepFacts(
    kind=StepKind.ACTION,
    status=StepStatus.ATTEMPT_FAILED,
    last_outcome=Outcome.TRANSIENT_FAILURE,
    last_attempt_kind=AttemptKind.CALL,
    calls=1,
    first_dispatched_at=NOW - dt.timedelta(seconds=10),
    job_deadline=None,
    has_status_path=True,
    on_alternate_pool=False,
    alternate_available=True,
)

UNKNOWN = replace(FACTS, status=StepStatus.UNKNOWN, last_outcome=Outcome.NO_ANSWER)


@pytest.mark.parametrize(
    ("calls", "expected"), [(1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (10, 5.0), (2000, 5.0)]
)
def test_backoff_grows_exponentially_up_to_its_cap(calls: int, expected: float) -> None:
    assert backoff_delay(POLICY, calls, draw=0.0) == expected


@pytest.mark.parametrize("jitter", [0.0, 0.25, 0.5, 1.0])
def test_jitter_keeps_the_delay_within_its_bounds(jitter: float) -> None:
    policy = replace(POLICY, backoff_jitter=jitter)
    for draw in [0.0, 0.1, 0.5, 0.9, 0.999999]:
        delay = backoff_delay(policy, 3, draw)
        assert 4.0 * (1 - jitter) <= delay <= 4.0
    assert backoff_delay(policy, 3, 0.0) == 4.0


@pytest.mark.parametrize(
    ("facts", "policy", "expected"),
    [
        # retryable outcomes with attempts left: retry after the backoff
        (FACTS, POLICY, Retry(delay=1.0, reassign=False, reason="")),
        (UNKNOWN, POLICY, Retry(delay=1.0, reassign=False, reason="")),
        (replace(FACTS, calls=3), POLICY, Retry(delay=4.0, reassign=False, reason="")),
        # a business failure is not retried by default ...
        (replace(FACTS, last_outcome=Outcome.BUSINESS_FAILURE), POLICY, GiveUp("compensate", "")),
        # ... unless the policy says so
        (
            replace(FACTS, last_outcome=Outcome.BUSINESS_FAILURE),
            replace(POLICY, retry_on=frozenset({"business_failure"})),
            Retry(delay=1.0, reassign=False, reason=""),
        ),
        # no answer is not retried when the policy leaves it out
        (UNKNOWN, replace(POLICY, retry_on=frozenset({"transient_failure"})), GiveUp("compensate", "")),
        # attempts exhausted: the policy's on_exhausted
        (replace(FACTS, calls=4), POLICY, GiveUp("compensate", "")),
        (replace(FACTS, calls=4), replace(POLICY, on_exhausted="hold"), GiveUp("hold", "")),
        (replace(FACTS, calls=4), replace(POLICY, on_exhausted="fail"), GiveUp("fail", "")),
        # reconcile an unknown outcome first, once
        (UNKNOWN, replace(POLICY, reconcile_before_retry=True), Reconcile("")),
        (
            replace(UNKNOWN, last_attempt_kind=AttemptKind.RECONCILE),
            replace(POLICY, reconcile_before_retry=True),
            Retry(delay=1.0, reassign=False, reason=""),
        ),
        # no status path: nothing to ask
        (
            replace(UNKNOWN, has_status_path=False),
            replace(POLICY, reconcile_before_retry=True),
            Retry(delay=1.0, reassign=False, reason=""),
        ),
        # a known failure is not reconciled
        (FACTS, replace(POLICY, reconcile_before_retry=True), Retry(delay=1.0, reassign=False, reason="")),
        # "did not happen" from a status query retries like the unanswered call it stands for
        (
            replace(FACTS, last_outcome=Outcome.NOT_HAPPENED, last_attempt_kind=AttemptKind.RECONCILE),
            replace(POLICY, reconcile_before_retry=True),
            Retry(delay=1.0, reassign=False, reason=""),
        ),
        # reassignment after N calls, once, only when an alternate exists
        (replace(FACTS, calls=2), replace(POLICY, reassign_after_attempts=2), Retry(2.0, True, "")),
        (replace(FACTS, calls=1), replace(POLICY, reassign_after_attempts=2), Retry(1.0, False, "")),
        (
            replace(FACTS, calls=3, on_alternate_pool=True),
            replace(POLICY, reassign_after_attempts=2),
            Retry(4.0, False, ""),
        ),
        (
            replace(FACTS, calls=2, alternate_available=False),
            replace(POLICY, reassign_after_attempts=2),
            Retry(2.0, False, ""),
        ),
        # an unhealthy pool moves to a healthy alternate early
        (replace(FACTS, pool_healthy=False), POLICY, Retry(1.0, True, "")),
        (replace(FACTS, pool_healthy=False, alternate_healthy=False), POLICY, Retry(1.0, False, "")),
        # the step's budget and the job's deadline stop retries
        (FACTS, replace(POLICY, step_budget_seconds=10), GiveUp("compensate", "")),
        (FACTS, replace(POLICY, step_budget_seconds=11), Retry(1.0, False, "")),
        (replace(FACTS, job_deadline=NOW), POLICY, GiveUp("compensate", "")),
        (replace(FACTS, job_deadline=NOW + dt.timedelta(seconds=1)), POLICY, Retry(1.0, False, "")),
    ],
)
def test_decide(facts: StepFacts, policy: PolicySnapshot, expected: object) -> None:
    decision = decide(facts, policy, NOW, draw=0.0)
    assert type(decision) is type(expected)
    if isinstance(expected, Retry):
        assert isinstance(decision, Retry)
        assert (decision.delay, decision.reassign) == (expected.delay, expected.reassign)
    if isinstance(expected, GiveUp):
        assert isinstance(decision, GiveUp)
        assert decision.action == expected.action
    assert decision.reason  # every decision says why


def test_a_decision_names_the_policy_version_it_applied() -> None:
    decision = decide(replace(FACTS, calls=4), POLICY, NOW, draw=0.0)
    assert "policy p v3" in decision.reason and "4 of 4 attempts" in decision.reason


@pytest.mark.django_db
def test_a_policy_edit_is_a_new_version_with_who_when_old_and_new() -> None:
    admin = User.objects.create_user("ada")
    policy = policy_create(name="pay", actor=admin, max_attempts=3)
    policy_update(policy.pk, actor=admin, changes={"max_attempts": 5, "timeout_seconds": 2.5})
    policy.refresh_from_db()
    assert policy.version == 2 and policy.max_attempts == 5
    revision = PolicyRevision.objects.get(policy=policy, version=2)
    assert revision.changed_by == admin and revision.changed_at is not None
    assert revision.changes == {"max_attempts": [3, 5], "timeout_seconds": [10.0, 2.5]}
    assert revision.settings["max_attempts"] == 5


@pytest.mark.django_db
def test_an_edit_that_changes_nothing_makes_no_version() -> None:
    policy = policy_create(name="pay", actor=None)
    policy_update(policy.pk, actor=None, changes={"max_attempts": policy.max_attempts})
    assert PolicyRevision.objects.filter(policy=policy).count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"timeout_seconds": 0}, "timeout_seconds"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": "3"}, "max_attempts"),
        ({"backoff_multiplier": 0.5}, "backoff_multiplier"),
        ({"backoff_max_seconds": 0.1, "backoff_initial_seconds": 1}, "backoff_max_seconds"),
        ({"backoff_jitter": 1.5}, "backoff_jitter"),
        ({"retry_on": ["everything"]}, "retry_on"),
        ({"on_exhausted": "explode"}, "on_exhausted"),
        ({"reassign_after_attempts": 0}, "reassign_after_attempts"),
        ({"step_budget_seconds": -1}, "step_budget_seconds"),
    ],
)
def test_an_invalid_edit_is_refused_and_changes_nothing(changes: dict, field: str) -> None:
    policy = policy_create(name="pay", actor=None)
    with pytest.raises(InvalidInput) as error:
        policy_update(policy.pk, actor=None, changes=changes)
    assert error.value.detail["field"] == field
    policy.refresh_from_db()
    assert policy.version == 1
