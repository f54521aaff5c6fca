"""Waits that escalate (scheduler.services.escalation, scheduler.wait_definitions): a signal or an
approval with no decision walks its ladder on time (remind, reassign, then hold, fail or
continue), one event and one alert per rung, and a decision at any rung ends it; separation of
duties (a submitter does not approve their own job) and a signal's sender group."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.utils import timezone

from agents.fake import FakeRemote
from sas_project.errors import InvalidInput
from scheduler import selectors
from scheduler.definitions import validate_steps
from scheduler.models import (
    Delivery,
    Event,
    EventKind,
    Job,
    JobStatus,
    KeyedSignal,
    Signal,
    Step,
    StepStatus,
)
from scheduler.serializers import JobSerializer
from scheduler.services import job_submit
from scheduler.services.correlation import signals_by_key
from scheduler.services.wakeups import NotPermitted, approval_decide, signal_send
from scheduler.wait_definitions import due_after, wait_deadline
from supervisor.alerts import reactions_handle
from supervisor.scan import ScanReport
from supervisor.subscriptions import subscription_create
from tests.factories import make_policy, make_pool, make_workflow, step
from tests.scheduler.test_waits import operator, steps_of, submitter

pytestmark = pytest.mark.django_db
Supervise = Callable[..., ScanReport]
S = StepStatus
E = EventKind
LADDER = [
    {"after_seconds": 60, "do": "remind"},
    {"after_seconds": 120, "do": "reassign", "group": "finance"},
    {"after_seconds": 180, "do": "fail"},
]


def refund_workflow(**wait: Any) -> None:
    """check -> [approve: an approval] -> pay."""
    make_workflow(
        "refund",
        step("check"),
        {"name": "approve", "kind": "approval", "depends_on": ["check"], **wait},
        step("pay", "approve"),
    )


def waited(job: Job, name: str, seconds: float) -> Step:
    """The step began waiting `seconds` ago (its deadline where the escalation would have it),
    as time passing would."""
    row = Step.objects.select_related("definition").get(job=job, name=name)
    since = timezone.now() - dt.timedelta(seconds=seconds)
    deadline = wait_deadline(row.definition, since=since, rung=row.escalation_rung)
    Step.objects.filter(pk=row.pk).update(waiting_since=since, deadline=deadline)
    return row


def rung_events(job: Job) -> list[tuple[str, int]]:
    kinds = (E.WAIT_REMINDED, E.WAIT_ESCALATED)
    return [(e.kind, e.data["rung"]) for e in Event.objects.filter(job=job, kind__in=kinds).order_by("id")]


@pytest.fixture
def finance() -> User:
    group = Group.objects.create(name="finance")
    fiona = User.objects.create_user("fiona")
    fiona.groups.add(group)
    return fiona


# --- the definition -------------------------------------------------------------------------------


def test_a_wait_is_due_its_seconds_after_its_start_fractions_and_none_included() -> None:
    since = dt.datetime(2025, 1, 1, 12, tzinfo=dt.UTC)
    assert due_after(since, seconds=90) == dt.datetime(2025, 1, 1, 12, 1, 30, tzinfo=dt.UTC)
    assert due_after(since, seconds=0.25) == since + dt.timedelta(milliseconds=250)
    assert due_after(since, seconds=0) == since


@pytest.mark.parametrize(
    ("wait", "message"),
    [
        ({"escalation": "soon"}, "must be a list"),
        ({"escalation": [{"after_seconds": 0, "do": "remind"}]}, "after_seconds must be a number above 0"),
        ({"escalation": [{"after_seconds": 5, "do": "shout"}]}, "do must be one of"),
        ({"escalation": [{"after_seconds": 5, "do": "reassign"}]}, "names the group"),
        ({"escalation": [{"after_seconds": 5, "do": "reassign", "group": "nobody"}]}, "unknown group"),
        ({"escalation": [{"after_seconds": 9, "do": "remind"}, {"after_seconds": 5, "do": "fail"}]}, "later"),
        (
            {"escalation": [{"after_seconds": 5, "do": "hold"}, {"after_seconds": 9, "do": "remind"}]},
            "after a hold",
        ),
        ({"escalation": [{"after_seconds": 5, "do": "remind", "when": 1}]}, "must be an object"),
        (
            {"timeout_seconds": 30, "escalation": [{"after_seconds": 30, "do": "remind"}]},
            "before the step's timeout",
        ),
        ({"allow_self_approval": "yes"}, "true or false"),
        ({"sender_group": "finance"}, "unknown fields for approval steps: sender_group"),
    ],
)
def test_a_wrong_ladder_or_duty_is_refused_naming_the_step(
    wait: dict[str, Any], message: str, finance: User
) -> None:
    make_pool()
    make_policy()
    spec = [step("check"), {"name": "approve", "kind": "approval", "depends_on": ["check"], **wait}]
    with pytest.raises(InvalidInput, match=message) as refused:
        validate_steps(spec)
    assert "'approve'" in refused.value.message or "steps[1]" in refused.value.message


def test_a_signals_ladder_may_not_reassign_and_its_sender_group_must_exist() -> None:
    make_pool()
    make_policy()
    signal = {"name": "paid", "kind": "signal", "signal": "paid"}
    Group.objects.create(name="finance")
    with pytest.raises(InvalidInput, match="only an approval is reassigned"):
        validate_steps(
            [{**signal, "escalation": [{"after_seconds": 5, "do": "reassign", "group": "finance"}]}]
        )
    with pytest.raises(InvalidInput, match="unknown group"):
        validate_steps([{**signal, "sender_group": "nobody"}])
    event_wait = {"name": "paid", "kind": "signal", "event": "order.paid", "match": "`true`"}
    with pytest.raises(InvalidInput, match="sender_group is a named signal's"):
        validate_steps([{**event_wait, "sender_group": "finance"}])
    with pytest.raises(InvalidInput, match="unknown fields for signal steps: allow_self_approval"):
        validate_steps([{**signal, "allow_self_approval": True}])


# --- the ladder -----------------------------------------------------------------------------------


def test_an_approval_walks_remind_then_reassign_then_fail_on_time_one_event_and_alert_per_rung(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise, finance: User
) -> None:
    subscription_create(
        name="leads", actor=None, email="lead@example.com", kinds=["approval_reminder", "wait_escalated"]
    )
    refund_workflow(timeout_seconds=3600, escalation=LADDER)
    job = job_submit(workflow="refund", input={}, submitter=submitter()).job
    drain()
    approve = steps_of(job)["approve"]
    assert approve.status == S.WAITING and approve.waiting_since is not None
    assert approve.deadline == approve.waiting_since + dt.timedelta(seconds=60)
    waited(job, "approve", 30)
    supervise()
    assert rung_events(job) == []  # not yet
    waited(job, "approve", 61)
    assert supervise().decisions["wait_reminded"] == 1
    assert rung_events(job) == [(E.WAIT_REMINDED, 1)]
    # Before the reassign, finance may not decide; the operators may (the definition's deciders).
    with pytest.raises(NotPermitted, match=r"only operators may decide"):
        approval_decide(job_id=job.pk, step_name="approve", actor=finance, approve=True)
    waited(job, "approve", 121)
    assert supervise().decisions["wait_reassigned"] == 1
    approve = steps_of(job)["approve"]
    assert (approve.status, approve.escalation_rung, approve.escalation_group) == (S.WAITING, 2, "finance")
    waited(job, "approve", 181)
    assert supervise().decisions["wait_escalated_fail"] == 1
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPENSATED and steps_of(job)["approve"].status == S.FAILED
    assert rung_events(job) == [(E.WAIT_REMINDED, 1), (E.WAIT_ESCALATED, 2), (E.WAIT_ESCALATED, 3)]
    # Each rung is one alert (the scan again finds nothing more to walk).
    supervise()
    reactions_handle()
    alerts = sorted(d.payload["event"] for d in Delivery.objects.filter(subscription__name="leads"))
    assert alerts == ["wait_escalated", "wait_escalated", "wait_reminded"]
    assert rung_events(job) == [(E.WAIT_REMINDED, 1), (E.WAIT_ESCALATED, 2), (E.WAIT_ESCALATED, 3)]


def test_a_reassigned_group_may_decide_and_a_decision_ends_the_ladder_once(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise, finance: User
) -> None:
    refund_workflow(escalation=LADDER)
    job = job_submit(workflow="refund", input={}, submitter=submitter()).job
    drain()
    waited(job, "approve", 121)
    supervise()
    supervise()
    assert steps_of(job)["approve"].escalation_group == "finance"
    approval_decide(job_id=job.pk, step_name="approve", actor=finance, approve=True, comment="ok")
    waited_row = Step.objects.get(job=job, name="approve")
    Step.objects.filter(pk=waited_row.pk).update(waiting_since=timezone.now() - dt.timedelta(seconds=500))
    supervise()
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert [n for _, n in rung_events(job)] == [1, 2]  # the fail rung never came


@pytest.mark.parametrize(
    ("do", "status", "job_status"),
    [("continue", S.SUCCEEDED, JobStatus.SUCCEEDED), ("hold", S.HELD, JobStatus.NEEDS_ATTENTION)],
)
def test_a_ladder_that_ends_in_continue_or_hold_does_so(
    drain: Callable[[], int],
    fake_remote: FakeRemote,
    supervise: Supervise,
    do: str,
    status: str,
    job_status: str,
) -> None:
    extra = {"default_output": {"approved": False, "by": "ladder"}} if do == "continue" else {}
    refund_workflow(escalation=[{"after_seconds": 10, "do": do}], **extra)
    job = job_submit(workflow="refund", input={}, submitter=submitter()).job
    drain()
    waited(job, "approve", 11)
    assert supervise().decisions[f"wait_escalated_{do}"] == 1
    drain()
    job.refresh_from_db()
    approve = steps_of(job)["approve"]
    assert (approve.status, job.status) == (status, job_status)
    if do == "continue":
        assert approve.output == {"approved": False, "by": "ladder"}
    assert rung_events(job) == [(E.WAIT_ESCALATED, 1)]


def test_the_api_shows_where_a_wait_is_on_its_ladder_on_either_read(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise, finance: User
) -> None:
    refund_workflow(timeout_seconds=3600, escalation=LADDER)
    sam = submitter()
    job = job_submit(workflow="refund", input={}, submitter=sam).job
    drain()
    since = waited(job, "approve", 61).pk and Step.objects.get(job=job, name="approve").waiting_since
    supervise()
    assert since is not None
    full = JobSerializer(Job.objects.get(pk=job.pk)).data
    light = JobSerializer(selectors.job_for_reading(user=sam, job_id=job.pk)).data
    assert full == light
    waiting_for = next(s for s in full["steps"] if s["name"] == "approve")["waiting_for"]
    assert waiting_for["escalation"]["rung"] == 1 and waiting_for["escalation"]["rungs"] == 3
    assert waiting_for["escalation"]["next"]["do"] == "reassign"
    assert waiting_for["escalation"]["group"] is None
    assert waiting_for["timeout_at"].startswith(
        (since + dt.timedelta(seconds=3600)).strftime("%Y-%m-%dT%H:%M")
    )


# --- who decides ------------------------------------------------------------------------------------


def test_a_submitter_may_not_approve_their_own_job_unless_the_step_allows_it(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    refund_workflow()
    olga = operator()
    job = job_submit(workflow="refund", input={}, submitter=olga).job
    drain()
    with pytest.raises(NotPermitted, match="another person approves it"):
        approval_decide(job_id=job.pk, step_name="approve", actor=olga, approve=True)
    assert steps_of(job)["approve"].status == S.WAITING
    # Rejecting their own job they may.
    approval_decide(job_id=job.pk, step_name="approve", actor=olga, approve=False, comment="withdrawn")
    assert steps_of(job)["approve"].status == S.FAILED
    make_workflow(
        "refund",
        step("check"),
        {"name": "approve", "kind": "approval", "depends_on": ["check"], "allow_self_approval": True},
        step("pay", "approve"),
    )
    own = job_submit(workflow="refund", input={}, submitter=olga).job
    drain()
    approval_decide(job_id=own.pk, step_name="approve", actor=olga, approve=True)
    assert steps_of(own)["approve"].status == S.SUCCEEDED


def test_a_signal_with_a_sender_group_takes_it_from_its_members_only(
    drain: Callable[[], int], fake_remote: FakeRemote, finance: User
) -> None:
    make_workflow(
        "order",
        step("reserve"),
        {
            "name": "paid",
            "kind": "signal",
            "signal": "paid",
            "depends_on": ["reserve"],
            "sender_group": "finance",
        },
        step("ship", "paid"),
    )
    olga = operator()
    job = job_submit(workflow="order", input={}, submitter=olga, business_key="o-1").job
    drain()
    with pytest.raises(NotPermitted, match="members of finance"):
        signal_send(job_id=job.pk, name="paid", payload={"by": "olga"}, sender=olga)
    assert not Signal.objects.exists()
    # By business key: the job is not reached, and a kept signal is not claimed by a new job.
    assert signals_by_key(business_key="o-1", name="paid", payload=None, sender=olga).jobs == []
    signal_send(job_id=job.pk, name="paid", payload={"by": "fiona"}, sender=finance)
    assert steps_of(job)["paid"].status == S.SUCCEEDED and steps_of(job)["paid"].output == {"by": "fiona"}
    signals_by_key(business_key="o-2", name="paid", payload=None, sender=olga)
    later = job_submit(workflow="order", input={}, submitter=olga, business_key="o-2").job
    assert KeyedSignal.objects.get(business_key="o-2").consumed_job_id is None
    assert not Signal.objects.filter(job=later).exists()


def test_the_job_page_says_where_the_wait_is_on_its_ladder(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Supervise, finance: User, client: Any
) -> None:
    refund_workflow(timeout_seconds=3600, escalation=LADDER)
    job = job_submit(workflow="refund", input={}, submitter=submitter()).job
    drain()
    waited(job, "approve", 121)
    supervise()
    supervise()
    client.force_login(operator())
    page = client.get(f"/ops/jobs/{job.pk}/").content.decode()
    assert "escalation: 2 of 3 rungs walked (reassigned to finance); next: fail at" in page
