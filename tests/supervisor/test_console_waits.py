"""Waiting steps in the operator console: what each waits for, since and until when, on the job
page, its DAG and the Needs-attention list; Approve and Reject with a comment for those who may
decide (the members of the step's group, or the operators when it names none), and a 403 that
changes nothing for everyone else, CSRF included."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from scheduler.models import Event, EventKind, Job, JobStatus, Step, StepStatus
from scheduler.services import job_submit
from tests.api.support import make_user
from tests.factories import make_workflow, state_arranged, step

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def console_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def approval_job(group: str = "", workflow: str = "approve", **wait: Any) -> Job:
    """A job whose first step waits for an approval (by `group`, or by the operators), then ships."""
    if group:
        Group.objects.get_or_create(name=group)
    make_workflow(
        workflow,
        {"name": "ok", "kind": "approval", "group": group, "timeout_seconds": 600, **wait},
        step("ship", "ok"),
    )
    job = job_submit(workflow=workflow, input={}, submitter=make_user(f"sub-{workflow}", "submitters")).job
    assert job.steps.get(name="ok").status == StepStatus.WAITING
    return job


def ok_step(job: Job) -> Step:
    return Step.objects.get(job=job, name="ok")


def utc_hms(moment: dt.datetime | None) -> str:
    assert moment is not None
    return f"{moment.astimezone(dt.UTC):%H:%M:%S}"


# --- what a step waits for ------------------------------------------------------------------------


@pytest.mark.sqlite
def test_the_job_page_says_what_an_approval_waits_for_since_when_and_until_when() -> None:
    job = approval_job(group="finance")
    ok = ok_step(job)
    page = console_for(make_user("olga", "operators")).get(f"/ops/jobs/{job.pk}/").content.decode()
    block = page[page.index(f'id="step-{ok.pk}"') :]
    assert 'data-kind="approval"' in page and "approval step" in block
    assert "Waiting for approval" in block
    note = re.search(r'id="wait-\d+" data-wait="approval">([^<]+)<', page)
    assert note, page
    assert "an approval by finance" in note.group(1)
    assert f"since {ok.updated_at:%Y-%m-%d %H:%M:%S} UTC" in note.group(1)
    assert f"times out at {utc_hms(ok.deadline)} UTC, then held for an operator" in note.group(1)
    waits = re.search(r'<ul class="waits small" id="job-waits">(.*?)</ul>', page, re.S)
    assert waits and 'data-step="ok"' in waits.group(1) and "an approval by finance" in waits.group(1)
    # The call step after it is still a call with its pool and policy.
    assert 'data-kind="call"' in page and "pool local" in page


def test_the_job_page_and_its_dag_name_a_signal_and_a_timer() -> None:
    make_workflow(
        "waits",
        {"name": "shipped", "kind": "signal", "signal": "shipped", "timeout_seconds": 3600},
        {"name": "cool", "kind": "timer", "wait_seconds": 7200},
        step("bill", "shipped", "cool"),
    )
    job = job_submit(workflow="waits", input={}).job
    shipped, cool = Step.objects.get(job=job, name="shipped"), Step.objects.get(job=job, name="cool")
    assert shipped.status == cool.status == StepStatus.WAITING
    page = console_for(make_user("vera", "viewers")).get(f"/ops/jobs/{job.pk}/").content.decode()
    assert "Waiting for a signal" in page and "Waiting for its time" in page
    assert "signal &#x27;shipped&#x27;" in page
    assert f"fires at {utc_hms(cool.deadline)} UTC" in page
    start = page.index('<svg class="dag"')
    dag = page[start : page.index("</svg>", start)]
    shipped_node = re.search(r'data-step="shipped" data-status="waiting" data-wait="signal">(.*?)</g>', dag)
    cool_node = re.search(r'data-step="cool" data-status="waiting" data-wait="timer">(.*?)</g>', dag)
    assert shipped_node and cool_node, dag
    assert "signal shipped" in shipped_node.group(1)
    assert f"timer {cool.deadline.astimezone(dt.UTC):%H:%M}" in cool_node.group(1)  # type: ignore[union-attr]
    # Waits are drawn dashed; the call that follows them is not, and names no wait.
    assert 'stroke-dasharray="7 3"' in shipped_node.group(1)
    bill_node = re.search(r'<g class="dag-node" data-step="bill" data-status="pending">(.*?)</g>', dag)
    assert bill_node and "stroke-dasharray" not in bill_node.group(1)


def test_the_dag_names_an_approvals_group_and_a_wait_that_ended_keeps_its_kind() -> None:
    job = approval_job(group="finance")
    ops = console_for(make_user("olga", "operators"))
    dag = ops.get(f"/ops/jobs/{job.pk}/").content.decode()
    assert re.search(r'data-step="ok" data-status="waiting" data-wait="approval">.*?approval: finance', dag)
    assert "ok: waiting (approval: finance)" in dag  # the node's title
    finance = make_user("fiona", "viewers")
    finance.groups.add(Group.objects.get(name="finance"))
    decided = console_for(finance).post(f"/ops/steps/{ok_step(job).pk}/decide/", {"decision": "approve"})
    assert decided.status_code == 302
    dag = ops.get(f"/ops/jobs/{job.pk}/").content.decode()
    assert re.search(r'data-step="ok" data-status="succeeded" data-wait="approval">.*?approval: finance', dag)


# --- approve and reject ---------------------------------------------------------------------------


@pytest.mark.sqlite
def test_an_operator_approves_from_the_job_page_with_a_comment_and_the_job_moves_on() -> None:
    job = approval_job()
    ok = ok_step(job)
    ops = console_for(make_user("olga", "operators"))
    page = ops.get(f"/ops/jobs/{job.pk}/").content.decode()
    assert f'id="job-approval-{ok.pk}"' in page and ">Approve</button>" in page and ">Reject</button>" in page
    response = ops.post(
        f"/ops/steps/{ok.pk}/decide/",
        {"decision": "approve", "comment": "budget checked", "fragment": "job"},
        **HTMX,
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="job-live"') and "Approved ok: the job moves on." in html
    ok.refresh_from_db()
    assert ok.status == StepStatus.SUCCEEDED
    assert ok.output["approved"] is True and ok.output["by"] == "olga"
    assert ok.output["comment"] == "budget checked"
    event = Event.objects.get(step=ok, kind=EventKind.STEP_APPROVED)
    assert event.actor is not None and event.actor.get_username() == "olga"
    assert event.source == "operator:olga" and event.reason == "budget checked"
    assert Step.objects.get(job=job, name="ship").status != StepStatus.PENDING
    assert f'id="job-approval-{ok.pk}"' not in html
    assert re.search(rf'id="decision-{ok.pk}">Approved by <strong>olga</strong>: budget checked<', html)


def test_a_rejection_fails_the_step_names_the_user_and_its_policy_decides_the_job() -> None:
    job = approval_job()
    ok = ok_step(job)
    response = console_for(make_user("olga", "operators")).post(
        f"/ops/steps/{ok.pk}/decide/",
        {"decision": "reject", "comment": "not this month", "fragment": "job"},
        **HTMX,
    )
    assert response.status_code == 200 and "Rejected ok: the step failed" in response.content.decode()
    ok.refresh_from_db()
    assert ok.status == StepStatus.FAILED
    event = Event.objects.get(step=ok, kind=EventKind.STEP_REJECTED)
    assert event.actor is not None and event.actor.get_username() == "olga"
    assert "not this month" in event.reason
    assert Job.objects.get(pk=job.pk).status in (JobStatus.COMPENSATING, JobStatus.COMPENSATED)


@pytest.mark.sqlite
def test_a_plain_post_decides_and_redirects_back_with_a_message() -> None:
    job = approval_job()
    ops = console_for(make_user("olga", "operators"))
    response = ops.post(
        f"/ops/steps/{ok_step(job).pk}/decide/",
        {"decision": "approve", "fragment": "job", "next": f"/ops/jobs/{job.pk}/"},
    )
    assert response.status_code == 302 and response["Location"] == f"/ops/jobs/{job.pk}/"
    assert "Approved ok" in ops.get(response["Location"]).content.decode()
    assert ok_step(job).status == StepStatus.SUCCEEDED


def test_a_second_decision_is_409_with_the_reason_and_changes_nothing() -> None:
    job = approval_job()
    ok = ok_step(job)
    ops = console_for(make_user("olga", "operators"))
    first = ops.post(f"/ops/steps/{ok.pk}/decide/", {"decision": "approve", "fragment": "job"}, **HTMX)
    assert first.status_code == 200
    again = ops.post(f"/ops/steps/{ok.pk}/decide/", {"decision": "reject", "fragment": "job"}, **HTMX)
    assert again.status_code == 409
    assert "it waits for no approval" in again.content.decode()
    assert ok_step(job).status == StepStatus.SUCCEEDED
    assert not Event.objects.filter(kind=EventKind.STEP_REJECTED).exists()


@pytest.mark.parametrize(
    ("data", "status"),
    [({"decision": "maybe"}, 400), ({"decision": "approve", "comment": "x" * 2001}, 400), ({}, 400)],
)
def test_a_bad_decision_is_a_clear_400_and_changes_nothing(data: dict[str, Any], status: int) -> None:
    job = approval_job()
    response = console_for(make_user("olga", "operators")).post(
        f"/ops/steps/{ok_step(job).pk}/decide/", {**data, "fragment": "job"}, **HTMX
    )
    assert response.status_code == status
    assert ok_step(job).status == StepStatus.WAITING


def test_deciding_an_unknown_step_is_404_and_a_call_step_409() -> None:
    job = approval_job()
    ops = console_for(make_user("olga", "operators"))
    assert ops.post("/ops/steps/999999/decide/", {"decision": "approve"}).status_code == 404
    ship = Step.objects.get(job=job, name="ship")
    refused = ops.post(f"/ops/steps/{ship.pk}/decide/", {"decision": "approve", "fragment": "job"}, **HTMX)
    assert refused.status_code == 409 and "nothing to approve" in refused.content.decode()


# --- who may decide -------------------------------------------------------------------------------


@pytest.mark.sqlite
def test_a_viewer_sees_the_waiting_step_but_no_buttons_and_a_forged_post_is_403() -> None:
    job = approval_job()
    ok = ok_step(job)
    viewer = console_for(make_user("vera", "viewers"))
    for path in (f"/ops/jobs/{job.pk}/", "/ops/attention/"):
        page = viewer.get(path).content.decode()
        assert "an approval by an operator" in page, path
        assert ">Approve</button>" not in page and 'action="/ops/steps/' not in page, path
    for fragment in ("job", "row"):
        forged = viewer.post(
            f"/ops/steps/{ok.pk}/decide/", {"decision": "approve", "fragment": fragment}, **HTMX
        )
        assert forged.status_code == 403
    assert viewer.post(f"/ops/steps/{ok.pk}/decide/", {"decision": "reject"}).status_code == 403
    assert ok_step(job).status == StepStatus.WAITING
    assert not Event.objects.filter(kind__in=[EventKind.STEP_APPROVED, EventKind.STEP_REJECTED]).exists()


def test_an_operator_outside_the_steps_group_sees_no_buttons_and_is_refused() -> None:
    job = approval_job(group="finance")
    ok = ok_step(job)
    ops = console_for(make_user("olga", "operators"))
    page = ops.get(f"/ops/jobs/{job.pk}/").content.decode()
    assert "an approval by finance" in page and ">Approve</button>" not in page
    # Operators still have their own actions on the job.
    assert 'id="job-actions"' in page
    row = ops.get("/ops/attention/").content.decode()
    assert f'id="attention-{ok.pk}"' in row and f'id="approval-{ok.pk}"' not in row
    forged = ops.post(f"/ops/steps/{ok.pk}/decide/", {"decision": "approve", "fragment": "job"}, **HTMX)
    assert forged.status_code == 403
    assert ok_step(job).status == StepStatus.WAITING


def test_a_member_of_the_steps_group_decides_even_with_the_viewer_role_only() -> None:
    job = approval_job(group="finance")
    ok = ok_step(job)
    fiona = make_user("fiona", "viewers")
    fiona.groups.add(Group.objects.get(name="finance"))
    member = console_for(fiona)
    page = member.get(f"/ops/jobs/{job.pk}/").content.decode()
    assert f'id="job-approval-{ok.pk}"' in page
    # No other action: she is not an operator.
    assert 'id="job-actions"' not in page and ">Retry</button>" not in page
    response = member.post(
        f"/ops/steps/{ok.pk}/decide/",
        {"decision": "approve", "comment": "ok by finance", "fragment": "job"},
        **HTMX,
    )
    assert response.status_code == 200
    assert Event.objects.get(step=ok, kind=EventKind.STEP_APPROVED).actor == fiona


def test_a_user_without_a_console_role_and_an_anonymous_user_cannot_decide(client: Client) -> None:
    job = approval_job()
    ok = ok_step(job)
    anonymous = client.post(f"/ops/steps/{ok.pk}/decide/", {"decision": "approve"})
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")
    nobody = console_for(make_user("nobody", "submitters"))
    assert nobody.post(f"/ops/steps/{ok.pk}/decide/", {"decision": "approve"}).status_code == 403
    assert ok_step(job).status == StepStatus.WAITING


@pytest.mark.sqlite
def test_a_decision_without_a_csrf_token_is_refused_and_one_with_it_accepted() -> None:
    job = approval_job()
    ok = ok_step(job)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(make_user("olga", "operators"))
    refused = strict.post(f"/ops/steps/{ok.pk}/decide/", {"decision": "approve", "fragment": "job"}, **HTMX)
    assert refused.status_code == 403
    assert ok_step(job).status == StepStatus.WAITING
    page = strict.get(f"/ops/jobs/{job.pk}/").content.decode()
    token = re.search(r'"X-CSRFToken": "([^"]+)"', page)
    assert token
    accepted = strict.post(
        f"/ops/steps/{ok.pk}/decide/",
        {"decision": "approve", "fragment": "job"},
        HTTP_HX_REQUEST="true",
        HTTP_X_CSRFTOKEN=token.group(1),
    )
    assert accepted.status_code == 200
    assert ok_step(job).status == StepStatus.SUCCEEDED


# --- needs attention ------------------------------------------------------------------------------


def test_needs_attention_lists_an_approval_and_decides_it_from_its_row() -> None:
    job = approval_job(group="finance")
    ok = ok_step(job)
    admin = User.objects.create_superuser("root", "root@example.invalid", "root-password-1")
    console = console_for(admin)
    page = console.get("/ops/attention/").content.decode()
    row = re.search(rf'<tbody id="attention-{ok.pk}"(.*?)</tbody>', page, re.S)
    assert row, page
    assert 'data-wait="approval"' in row.group(1) and "Waiting for approval" in row.group(1)
    assert "waiting for an approval by finance: times out at" in row.group(1)
    assert f"until {utc_hms(ok.deadline)} UTC" in row.group(1)
    assert f'id="approval-{ok.pk}"' in row.group(1) and ">Retry</button>" not in row.group(1)
    response = console.post(
        f"/ops/steps/{ok.pk}/decide/", {"decision": "approve", "comment": "fine", "fragment": "row"}, **HTMX
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert f'<tbody id="attention-{ok.pk}" class="notice">' in html
    assert "It no longer needs attention." in html
    assert ok_step(job).status == StepStatus.SUCCEEDED


def test_needs_attention_lists_a_signal_about_to_time_out_not_one_far_off_or_that_continues() -> None:
    make_workflow(
        "signals",
        {"name": "soon", "kind": "signal", "signal": "a", "timeout_seconds": 300},
        {"name": "later", "kind": "signal", "signal": "b", "timeout_seconds": 86400},
        {"name": "goes_on", "kind": "signal", "signal": "c", "timeout_seconds": 60, "on_timeout": "continue"},
        {"name": "timer", "kind": "timer", "wait_seconds": 60},
    )
    job = job_submit(workflow="signals", input={}).job
    assert set(Step.objects.filter(job=job).values_list("status", flat=True)) == {StepStatus.WAITING}
    page = console_for(make_user("olga", "operators")).get("/ops/attention/").content.decode()
    soon = Step.objects.get(job=job, name="soon")
    row = re.search(rf'<tbody id="attention-{soon.pk}"(.*?)</tbody>', page, re.S)
    assert row and "signal &#x27;a&#x27; not received yet: times out at" in row.group(1)
    for name in ("later", "goes_on", "timer"):
        assert f'data-step="{name}"' not in page, name


def test_a_held_wait_is_listed_without_a_pool_and_retried_by_waiting_again(supervise: Any) -> None:
    job = approval_job()
    ok = ok_step(job)
    with state_arranged():
        Step.objects.filter(pk=ok.pk).update(deadline=ok.created_at - dt.timedelta(minutes=1))
    supervise()
    assert ok_step(job).status == StepStatus.HELD
    ops = console_for(make_user("olga", "operators"))
    page = ops.get("/ops/attention/").content.decode()
    row = re.search(rf'<tbody id="attention-{ok.pk}"(.*?)</tbody>', page, re.S)
    assert row and "held for an operator" in row.group(1)
    assert ">Retry</button>" in row.group(1) and "Resolve…" in row.group(1)
    # A retry waits again, with a new timeout.
    response = ops.post(f"/ops/steps/{ok.pk}/retry/", {"reason": "ask again", "fragment": "row"}, **HTMX)
    assert response.status_code == 200
    assert ok_step(job).status == StepStatus.WAITING
    with state_arranged():
        Step.objects.filter(pk=ok.pk).update(deadline=ok.created_at - dt.timedelta(minutes=1))
    supervise()
    assert ok_step(job).status == StepStatus.HELD
    # An action from the row re-renders it, with no pool to read.
    response = ops.post(
        f"/ops/steps/{ok.pk}/resolve/", {"reason": "approved by phone", "fragment": "row"}, **HTMX
    )
    assert response.status_code == 200
    assert ok_step(job).status == StepStatus.SUCCEEDED


def test_the_list_and_the_job_page_cost_as_many_queries_for_one_approval_as_for_many() -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    first = approval_job(group="finance")
    fiona = make_user("fiona", "operators")
    fiona.groups.add(Group.objects.get(name="finance"))
    console = console_for(fiona)

    def queries(path: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            page = console.get(path)
        assert page.status_code == 200 and ">Approve</button>" in page.content.decode()
        return len(captured)

    one = queries("/ops/attention/"), queries(f"/ops/jobs/{first.pk}/")
    for n in range(4):
        job_submit(workflow="approve", input={"n": n})
    assert (queries("/ops/attention/"), queries(f"/ops/jobs/{first.pk}/")) == one
