"""The operator console (/ops/): access, pages, htmx fragments, actions and their events, query
counts that do not grow with the data, bad input to every action (a clear 4xx, never a 500, and
nothing changes), and what viewers, reruns and key searches look like there."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from agents.fake import FakeRemote
from agents.outcome import CallResult
from sas_project.permissions import role_groups_ensure
from scheduler.models import (
    Attempt,
    Event,
    EventKind,
    Job,
    JobStatus,
    Outcome,
    Schedule,
    Step,
    StepStatus,
    Workflow,
)
from scheduler.schedules import schedule_create
from scheduler.services import job_submit
from supervisor.models import SupervisorLease
from tests.api.support import failed_at_s2, make_user
from tests.conftest import run_queued_tasks
from tests.factories import chain, diamond, make_policy, make_pool, make_workflow, step

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
PAGES = [
    "/ops/",
    "/ops/attention/",
    "/ops/jobs/",
    "/ops/calibration/",
    "/ops/keys/",
    "/ops/at-risk/",
    "/ops/events/",
    "/ops/workflows/",
    "/ops/pools/",
    "/ops/policies/",
]


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def operator() -> User:
    role_groups_ensure()
    user = User.objects.create_user("olga", password="olga-password-1")
    user.groups.add(Group.objects.get(name="operators"))
    return user


@pytest.fixture
def ops(client: Client, operator: User) -> Client:
    client.force_login(operator)
    return client


@pytest.fixture
def submitter_client(client: Client) -> Client:
    role_groups_ensure()
    user = User.objects.create_user("sam")
    user.groups.add(Group.objects.get(name="submitters"))
    client.force_login(user)
    return client


def held_job(drain: Callable, fake_remote: FakeRemote, supervise: Callable, workflow: str = "h") -> Job:
    """A job whose first step failed once and is held for an operator."""
    make_policy("holding", on_exhausted="hold", max_attempts=1)
    if not Workflow.objects.filter(name=workflow).exists():
        make_workflow(workflow, step("s1", policy="holding"), step("s2", "s1"))
    fake_remote.script(
        "s1", CallResult(Outcome.TRANSIENT_FAILURE, error="upstream <b>503</b>", status_code=503)
    )
    job = job_submit(workflow=workflow, input={}).job
    drain()
    supervise()
    job.refresh_from_db()
    assert job.status == JobStatus.NEEDS_ATTENTION
    return job


def held_step(job: Job) -> Step:
    return job.steps.get(name="s1")


# --- access ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", [*PAGES, "/ops/jobs/00000000-0000-0000-0000-000000000000/"])
def test_anonymous_users_are_sent_to_the_login_page(client: Client, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={url}"


def test_an_anonymous_htmx_poll_sends_the_whole_page_to_the_login_page(client: Client) -> None:
    response = client.get(
        "/ops/attention/",
        HTTP_HX_REQUEST="true",
        HTTP_HX_CURRENT_URL="http://testserver/ops/attention/?pool=x",
    )
    assert response.status_code == 200
    assert response["HX-Redirect"] == "/accounts/login/?next=/ops/attention/%3Fpool%3Dx"


@pytest.mark.parametrize("url", PAGES)
def test_users_without_the_operate_permission_get_403(submitter_client: Client, url: str) -> None:
    response = submitter_client.get(url)
    assert response.status_code == 403
    assert b"operators" in response.content


def test_a_user_without_the_permission_cannot_act(
    submitter_client: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    response = submitter_client.post(f"/ops/steps/{held_step(job).pk}/retry/", HTMX)
    assert response.status_code == 403
    assert not Event.objects.filter(kind="operator_retry").exists()


def test_an_anonymous_post_changes_nothing(
    client: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    response = client.post(f"/ops/jobs/{job.pk}/act/", {"action": "cancel"})
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    job.refresh_from_db()
    assert job.status == JobStatus.NEEDS_ATTENTION


def test_the_login_page_signs_in_and_returns_to_the_console(client: Client, operator: User) -> None:
    page = client.get("/accounts/login/?next=/ops/attention/")
    assert page.status_code == 200 and b"Sign in" in page.content
    response = client.post(
        "/accounts/login/", {"username": "olga", "password": "olga-password-1", "next": "/ops/attention/"}
    )
    assert response.status_code == 302 and response["Location"] == "/ops/attention/"
    assert b"Log out" in client.get("/ops/attention/").content


def test_logout_is_a_post_form(ops: Client) -> None:
    page = ops.get("/ops/").content.decode()
    assert re.search(r'<form method="post" action="/accounts/logout/">', page)
    assert ops.post("/accounts/logout/").status_code == 302
    assert ops.get("/ops/").status_code == 302


# --- CSRF -----------------------------------------------------------------------------------------


def test_an_action_without_a_csrf_token_is_refused(
    operator: User, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    response = strict.post(f"/ops/steps/{held_step(job).pk}/retry/", HTMX)
    assert response.status_code == 403
    assert Attempt.objects.filter(step=held_step(job)).count() == 1


def test_an_htmx_action_with_the_token_in_its_header_is_accepted(
    operator: User, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    page = strict.get("/ops/attention/").content.decode()
    token = re.search(r'"X-CSRFToken": "([^"]+)"', page)
    assert token, "the page sends the CSRF token with every htmx request"
    response = strict.post(
        f"/ops/steps/{held_step(job).pk}/retry/",
        {"fragment": "row"},
        HTTP_HX_REQUEST="true",
        HTTP_X_CSRFTOKEN=token.group(1),
    )
    assert response.status_code == 200
    assert Attempt.objects.filter(step=held_step(job)).count() == 2


# --- overview -------------------------------------------------------------------------------------


def test_the_overview_is_a_whole_page_and_its_live_part_a_fragment(ops: Client) -> None:
    page = ops.get("/ops/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<html" in html and 'id="overview-live"' in html
    assert 'hx-trigger="every 3s"' in html
    fragment = ops.get("/ops/", **HTMX).content.decode()
    assert "<html" not in fragment and fragment.lstrip().startswith('<div id="overview-live"')
    assert page["Vary"] and "HX-Request" in page["Vary"]


def test_the_overview_counts_jobs_and_live_steps_by_status(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    held_job(drain, fake_remote, supervise)
    chain(n=2)
    job_submit(workflow="chain", input={})
    html = ops.get("/ops/", **HTMX).content.decode()
    counts = dict(
        re.findall(r'data-status="(\w+)">\s*<span class="pill[^"]*">[^<]*</span><b>(\d+)</b>', html)
    )
    assert counts["needs_attention"] == "1" and counts["running"] == "1"
    assert counts["held"] == "1" and counts["dispatched"] == "1" and counts["pending"] == "2"


def test_the_overview_counts_finished_jobs_of_the_last_day_only(
    ops: Client, drain: Callable, fake_remote: FakeRemote
) -> None:
    chain(n=1)
    old, _ = (job_submit(workflow="chain", input={"n": n}).job for n in range(2))
    drain()
    Job.objects.filter(pk=old.pk).update(created_at=timezone.now() - dt.timedelta(days=3))
    html = ops.get("/ops/", **HTMX).content.decode()
    assert re.search(r'data-status="succeeded">\s*<span class="pill[^"]*">Succeeded</span><b>1</b>', html)


def test_throughput_counts_steps_and_jobs_of_the_last_hour(
    ops: Client, drain: Callable, fake_remote: FakeRemote
) -> None:
    chain(n=3)
    for n in range(2):
        job_submit(workflow="chain", input={"n": n})
    drain()
    Event.objects.create(
        job=Job.objects.first(),
        kind="step_succeeded",
        source="agent",
        created_at=timezone.now() - dt.timedelta(hours=2),
    )
    html = ops.get("/ops/", **HTMX).content.decode()
    assert "Totals: 2 jobs finished, 6 steps succeeded." in html
    # The chart's axes: its peak and unit on the left, its times (UTC) below.
    assert '<span class="y-max">6</span><span class="y-unit">per 5 min</span><span>0</span>' in html
    assert "Time (UTC), each bar the 5 minutes from its label." in html


def test_throughput_counts_a_step_completed_by_a_late_success(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    from django_q.models import OrmQ

    from agents.outcome import CallResult
    from scheduler.services import step_record_outcome

    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    step = job.steps.get()
    OrmQ.objects.all().delete()  # attempt 1's answer is still on its way
    Step.objects.filter(pk=step.pk).update(deadline=timezone.now() - dt.timedelta(minutes=1))
    Attempt.objects.filter(step=step).update(deadline=timezone.now() - dt.timedelta(minutes=1))
    supervise()  # times attempt 1 out and dispatches attempt 2
    step_record_outcome(step.pk, number=1, result=CallResult(Outcome.SUCCEEDED, output={}))
    assert Event.objects.filter(step=step, kind=EventKind.LATE_SUCCESS).count() == 1
    assert not Event.objects.filter(kind=EventKind.STEP_SUCCEEDED).exists()
    html = ops.get("/ops/", **HTMX).content.decode()
    assert "Totals: 1 jobs finished, 1 steps succeeded." in html


def test_a_late_success_after_the_step_settled_is_not_counted_again(
    ops: Client, drain: Callable, fake_remote: FakeRemote
) -> None:
    from agents.outcome import CallResult
    from scheduler.services import step_record_outcome

    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    drain()
    step = job.steps.get()
    # A duplicate answer:
    step_record_outcome(step.pk, number=1, result=CallResult(Outcome.SUCCEEDED, output={}))
    (repeat,) = Event.objects.filter(step=step, kind=EventKind.LATE_OUTCOME_IGNORED)
    assert "a repeat of its result" in repeat.reason
    html = ops.get("/ops/", **HTMX).content.decode()
    assert "Totals: 1 jobs finished, 1 steps succeeded." in html


def test_a_missing_supervisor_is_flagged_in_red(ops: Client) -> None:
    html = ops.get("/ops/").content.decode()
    assert 'id="supervisor-warning"' in html and "No scan has ever been recorded" in html


def test_a_recent_scan_shows_its_figures_and_no_warning(ops: Client, supervise: Callable) -> None:
    supervise()
    html = ops.get("/ops/", **HTMX).content.decode()
    assert 'id="supervisor-warning"' not in html
    assert "test-supervisor" in html and "examined 0" in html


def test_a_scan_older_than_three_intervals_is_flagged(
    ops: Client, supervise: Callable, settings: Any
) -> None:
    settings.SAS_SUPERVISOR_INTERVAL = 5
    supervise()
    SupervisorLease.objects.update(last_scan_at=timezone.now() - dt.timedelta(seconds=16))
    html = ops.get("/ops/", **HTMX).content.decode()
    assert 'id="supervisor-warning"' in html and "more than three intervals" in html
    SupervisorLease.objects.update(last_scan_at=timezone.now() - dt.timedelta(seconds=10))
    assert 'id="supervisor-warning"' not in ops.get("/ops/", **HTMX).content.decode()


def test_endpoint_health_counts_the_recent_bad_calls_of_each_endpoint(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    make_pool("web", kind="http", endpoints=["http://a.example", "http://b.example"])
    make_policy()
    make_workflow("w", step("s1", pool="web", path="/do", compensation="/undo"))
    fake_remote.script("s1", Outcome.TRANSIENT_FAILURE, Outcome.TRANSIENT_FAILURE)
    job_submit(workflow="w", input={})
    drain()
    supervise()
    drain()
    supervise()
    drain()
    html = ops.get("/ops/", **HTMX).content.decode()
    rows = re.findall(
        r'<td class="mono">(http://[ab].example)</td>\s*'
        r'<td class="num">(\d+)</td>\s*<td class="num">(\d+)</td>',
        html,
    )
    assert sum(int(recent) for _, recent, _ in rows) == 3
    assert sum(int(bad) for _, _, bad in rows) == 2
    assert "in-process: no endpoints" in html  # the python pool of the factories


def test_the_overview_runs_a_constant_number_of_queries(
    ops: Client,
    drain: Callable,
    fake_remote: FakeRemote,
    supervise: Callable,
    django_assert_max_num_queries: Any,
) -> None:
    held_job(drain, fake_remote, supervise)
    # Ten, the remediation debt's one aggregate (supervisor.debt) and the broker queue's count.
    with django_assert_max_num_queries(12):
        ops.get("/ops/")
    make_pool("web", kind="http", endpoints=[f"http://h{i}.example" for i in range(6)])
    make_pool("web2", kind="http", endpoints=[f"http://k{i}.example" for i in range(6)])
    chain(n=4)
    for n in range(15):
        job_submit(workflow="chain", input={"n": n})
    drain()
    with django_assert_max_num_queries(12):
        ops.get("/ops/")


# --- needs attention ------------------------------------------------------------------------------


def test_a_held_step_is_listed_with_why_it_is_there(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    html = ops.get("/ops/attention/").content.decode()
    s1 = held_step(job)
    assert f'id="attention-{s1.pk}"' in html
    assert "held for an operator" in html
    assert "step_held" in html and "supervisor:test-supervisor" in html
    assert "1 of 1 attempts used" in html  # the decision's reason
    assert "upstream &lt;b&gt;503&lt;/b&gt;" in html and "<b>503</b>" not in html  # remote text is escaped
    assert 'hx-trigger="every 3s, ops:changed from:body"' in html


def test_an_overdue_call_and_a_call_with_no_deadline_are_listed(ops: Client) -> None:
    chain(n=1)
    late, missing = (job_submit(workflow="chain", input={"n": n}).job for n in range(2))
    Step.objects.filter(job=late).update(deadline=timezone.now() - dt.timedelta(seconds=30))
    Step.objects.filter(job=missing).update(deadline=None)
    html = ops.get("/ops/attention/").content.decode()
    assert "overdue: no outcome" in html and "dispatched with no deadline" in html
    # A call in flight before its deadline does not need attention.
    job_submit(workflow="chain", input={"n": 3})
    assert html.count('class="attention-item"') == 2


@pytest.mark.usefixtures("one_delivery_per_task")
def test_a_failing_compensation_is_listed(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    make_policy()
    make_workflow("c", step("s1"), step("s2", "s1"))
    fake_remote.script("s1.compensate", Outcome.TRANSIENT_FAILURE)
    job = job_submit(workflow="c", input={}).job
    from scheduler.tasks import run_attempt
    from supervisor.services import job_compensate

    run_attempt(job.steps.get(name="s1").pk, 1)
    job_compensate(actor=User.objects.create_user("x"), job_id=job.pk)
    drain()
    supervise()  # compensation retried: attempt 2 is dispatched
    html = ops.get("/ops/attention/").content.decode()
    assert "compensation failing: attempt 2" in html
    assert "s1.compensate" in html


def test_filters_narrow_the_list(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    held_job(drain, fake_remote, supervise, workflow="h")
    held_job(drain, fake_remote, supervise, workflow="other")
    assert ops.get("/ops/attention/").content.decode().count('class="attention-item"') == 2
    assert ops.get("/ops/attention/?workflow=other").content.decode().count('class="attention-item"') == 1
    assert ops.get("/ops/attention/?step=s2").content.decode().count('class="attention-item"') == 0
    assert ops.get("/ops/attention/?pool=local&step=s1").content.decode().count('class="attention-item"') == 2
    assert ops.get("/ops/attention/?pool=nowhere").content.decode().count('class="attention-item"') == 0
    assert ops.get("/ops/attention/?older_than=10").content.decode().count('class="attention-item"') == 0
    Step.objects.filter(status=StepStatus.HELD).update(updated_at=timezone.now() - dt.timedelta(minutes=11))
    assert ops.get("/ops/attention/?older_than=10").content.decode().count('class="attention-item"') == 2


def test_the_list_fragment_keeps_its_filters_when_it_polls(ops: Client) -> None:
    fragment = ops.get("/ops/attention/?workflow=h&older_than=5", **HTMX).content.decode()
    assert fragment.lstrip().startswith('<div id="attention-live"')
    assert re.search(
        r'hx-get="/ops/attention/\?workflow=h&amp;older_than=5&amp;since=[0-9a-f]{16}"', fragment
    )


def test_a_poll_that_finds_nothing_changed_gets_204_and_renders_nothing(
    ops: Client, operator: User, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    fragment = ops.get("/ops/attention/", **HTMX).content.decode()
    poll = re.search(r'hx-get="([^"]+)"', fragment).group(1).replace("&amp;", "&")  # type: ignore[union-attr]
    unchanged = ops.get(poll, **HTMX)
    assert unchanged.status_code == 204 and unchanged.content == b""
    from supervisor.services import job_pause

    job_pause(actor=operator, job_id=job.pk)
    changed = ops.get(poll, **HTMX)
    assert changed.status_code == 200 and "paused" in changed.content.decode()
    # A whole page is always rendered, whatever `since` says.
    assert ops.get(poll).status_code == 200


def test_the_list_runs_a_constant_number_of_queries(
    ops: Client,
    drain: Callable,
    fake_remote: FakeRemote,
    supervise: Callable,
    django_assert_max_num_queries: Any,
) -> None:
    held_job(drain, fake_remote, supervise)
    with django_assert_max_num_queries(10):
        ops.get("/ops/attention/")
    for _ in range(8):
        held_job(drain, fake_remote, supervise)
    with django_assert_max_num_queries(10):
        html = ops.get("/ops/attention/").content.decode()
    assert html.count('class="attention-item"') == 9


def test_retry_from_the_list_dispatches_the_step_and_names_the_operator(
    ops: Client, operator: User, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    s1 = held_step(job)
    response = ops.post(f"/ops/steps/{s1.pk}/retry/", {"fragment": "row", "reason": "remote is back"}, **HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith(f'<tbody id="attention-{s1.pk}" class="notice')
    assert "Retried s1: attempt 2 dispatched." in html and "no longer needs attention" in html
    assert "ops:message" in response["HX-Trigger"]
    s1.refresh_from_db()
    assert s1.status == StepStatus.DISPATCHED and s1.attempt == 2
    event = Event.objects.get(step=s1, kind="operator_retry")
    assert event.actor == operator and event.reason == "remote is back" and event.source == "operator:olga"
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED


def test_a_second_retry_says_the_state_no_longer_allows_it(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    s1 = held_step(job)
    assert ops.post(f"/ops/steps/{s1.pk}/retry/", {"fragment": "row"}, **HTMX).status_code == 200
    response = ops.post(f"/ops/steps/{s1.pk}/retry/", {"fragment": "row"}, **HTMX)
    assert response.status_code == 409
    html = response.content.decode()
    assert "Not done:" in html and "nothing to retry" in html
    assert "somebody else acted first" not in html  # nobody did: the state says why
    assert Attempt.objects.filter(step=s1).count() == 2


def test_a_step_of_a_settled_job_is_refused_saying_why_in_plain_words(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    chain(n=1)
    fake_remote.script("s1", "business_failure")
    job = job_submit(workflow="chain", input={}).job
    drain()
    supervise()
    drain()
    s1 = Step.objects.get(job=job, name="s1")
    assert s1.status == StepStatus.FAILED
    response = ops.post(f"/ops/steps/{s1.pk}/retry/", {"fragment": "row"}, **HTMX)
    assert response.status_code == 409
    html = response.content.decode()
    assert "its steps cannot be retried now" in html and "retryd" not in html
    assert "somebody else acted first" not in html


def test_a_refused_action_on_a_step_still_listed_re_renders_its_row_with_the_reason(
    ops: Client, operator: User, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    from supervisor.services import job_pause

    job = held_job(drain, fake_remote, supervise)
    job_pause(actor=operator, job_id=job.pk)
    s1 = held_step(job)
    response = ops.post(f"/ops/steps/{s1.pk}/retry/", {"fragment": "row"}, **HTMX)
    assert response.status_code == 409
    html = response.content.decode()
    assert f'<tbody id="attention-{s1.pk}" class="attention-item"' in html
    assert "is paused: resume it" in html and 'class="alert error"' in html


def test_retry_on_another_pool(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    make_pool("spare")
    s1 = held_step(job)
    html = ops.get("/ops/attention/").content.decode()
    assert '<option value="spare">spare</option>' in html
    response = ops.post(f"/ops/steps/{s1.pk}/retry/", {"fragment": "row", "pool": "spare"}, **HTMX)
    assert response.status_code == 200 and "on pool spare" in response.content.decode()
    s1.refresh_from_db()
    assert s1.pool.name == "spare"


def test_retry_on_an_unknown_pool_is_a_clear_400(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    response = ops.post(
        f"/ops/steps/{held_step(job).pk}/retry/", {"fragment": "row", "pool": "nowhere"}, **HTMX
    )
    assert response.status_code == 400
    assert "unknown pool" in response.content.decode()


def test_resolve_with_an_output_completes_the_step(
    ops: Client, operator: User, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    s1 = held_step(job)
    response = ops.post(
        f"/ops/steps/{s1.pk}/resolve/",
        {"fragment": "row", "output": '{"ref": "manual-1"}', "reason": "confirmed by phone"},
        **HTMX,
    )
    assert response.status_code == 200 and "Resolved s1" in response.content.decode()
    s1.refresh_from_db()
    assert s1.status == StepStatus.SUCCEEDED and s1.output == {"ref": "manual-1"}
    assert Event.objects.get(step=s1, kind="step_resolved").actor == operator


@pytest.mark.parametrize(
    ("output", "message"),
    [("{not json", "output is not valid JSON"), ("[1, 2]", "output must be a JSON object")],
)
def test_resolve_with_bad_output_explains_what_is_wrong(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable, output: str, message: str
) -> None:
    job = held_job(drain, fake_remote, supervise)
    s1 = held_step(job)
    response = ops.post(
        f"/ops/steps/{s1.pk}/resolve/", {"fragment": "row", "output": output, "reason": "x"}, **HTMX
    )
    assert response.status_code == 400
    assert message in response.content.decode()
    s1.refresh_from_db()
    assert s1.status == StepStatus.HELD


def test_compensate_and_cancel_from_a_row(
    ops: Client, operator: User, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    first = held_job(drain, fake_remote, supervise)
    second = held_job(drain, fake_remote, supervise)
    response = ops.post(
        f"/ops/jobs/{first.pk}/act/",
        {"action": "compensate", "fragment": "row", "step": held_step(first).pk},
        **HTMX,
    )
    assert response.status_code == 200 and "no longer needs attention" in response.content.decode()
    response = ops.post(
        f"/ops/jobs/{second.pk}/act/",
        {"action": "cancel", "fragment": "row", "step": held_step(second).pk},
        **HTMX,
    )
    assert response.status_code == 200
    drain()
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, second.status) == (JobStatus.COMPENSATED, JobStatus.CANCELLED)
    assert Event.objects.get(job=first, kind="operator_compensate").actor == operator
    assert Event.objects.get(job=second, kind="operator_cancel").actor == operator


def test_a_plain_post_redirects_back_with_a_message(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    s1 = held_step(job)
    response = ops.post(f"/ops/steps/{s1.pk}/retry/", {"next": "/ops/attention/"}, follow=True)
    assert response.redirect_chain == [("/ops/attention/", 302)]
    assert "Retried s1: attempt 2 dispatched." in response.content.decode()
    response = ops.post(f"/ops/steps/{s1.pk}/retry/", {"next": "https://evil.example/"}, follow=True)
    assert response.redirect_chain == [("/ops/attention/", 302)]
    assert "Not done:" in response.content.decode()


def test_a_bulk_retry_previews_then_runs_and_lists_each_result(
    ops: Client, operator: User, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    jobs = [held_job(drain, fake_remote, supervise) for _ in range(3)]
    ids = [held_step(j).pk for j in jobs]
    pending = jobs[0].steps.get(name="s2").pk
    before = Event.objects.count()
    preview = ops.post(
        "/ops/attention/bulk/",
        {"action": "retry", "stage": "preview", "scope": "selected", "step": [*ids, pending]},
        **HTMX,
    )
    assert preview.status_code == 200
    html = preview.content.decode()
    assert "Dry run: retry 4 steps" in html and "<strong>3</strong> would be retried now" in html
    assert html.count("will run") == 3 and html.count(">refused<") == 1
    assert "dispatch attempt 2 now (was held)" in html
    assert Event.objects.count() == before  # a dry run changes nothing
    hidden = re.findall(r'<input type="hidden" name="step" value="(\d+)">', html)
    assert sorted(map(int, hidden)) == sorted(ids)
    run = ops.post(
        "/ops/attention/bulk/",
        {"action": "retry", "stage": "run", "step": hidden, "reason": "outage over"},
        **HTMX,
    )
    assert run.status_code == 200
    assert "Bulk retry: 3 done" in run.content.decode()
    assert "ops:changed" in run["HX-Trigger"]
    assert Event.objects.filter(kind="operator_retry", actor=operator, reason="outage over").count() == 3
    assert set(Step.objects.filter(pk__in=ids).values_list("status", flat=True)) == {StepStatus.DISPATCHED}


def test_a_bulk_action_on_every_matching_step_uses_the_filters(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    held_job(drain, fake_remote, supervise, workflow="h")
    held_job(drain, fake_remote, supervise, workflow="h")
    held_job(drain, fake_remote, supervise, workflow="other")
    preview = ops.post(
        "/ops/attention/bulk/",
        {"action": "compensate", "stage": "preview", "scope": "matching", "workflow": "h"},
        **HTMX,
    )
    html = preview.content.decode()
    assert "Dry run: compensate 2 steps" in html and "stop the job and undo what it did" in html
    assert len(re.findall(r'<input type="hidden" name="step" value="(\d+)">', html)) == 2


def test_a_bulk_action_with_nothing_selected_says_so(ops: Client) -> None:
    response = ops.post(
        "/ops/attention/bulk/", {"action": "retry", "stage": "preview", "scope": "selected"}, **HTMX
    )
    assert response.status_code == 400
    assert "Nothing selected" in response.content.decode()


def test_a_bulk_form_without_htmx_renders_a_page(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    response = ops.post(
        "/ops/attention/bulk/", {"action": "retry", "stage": "preview", "step": [held_step(job).pk]}
    )
    assert response.status_code == 200
    assert "<html" in response.content.decode() and "Dry run: retry 1 step" in response.content.decode()


# --- the job page ---------------------------------------------------------------------------------


def test_the_job_page_draws_the_dag_and_lists_every_attempt(
    ops: Client, operator: User, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    Attempt.objects.filter(step=held_step(job)).update(response_excerpt='<script>alert("x")</script>')
    from supervisor.services import step_retry

    step_retry(actor=operator, step_id=held_step(job).pk, reason="try again")
    drain()
    html = ops.get(f"/ops/jobs/{job.pk}/").content.decode()
    assert "<html" in html
    svg = re.search(r"<svg class=\"dag\".*?</svg>", html, re.S)
    assert svg
    assert len(re.findall(r'<g class="dag-node"', svg.group(0))) == 2
    assert 'data-from="s1" data-to="s2"' in svg.group(0)
    assert "2 / 2</strong> steps done" in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html and '<script>alert("x")' not in html
    assert "Transient failure" in html and "Succeeded" in html and ">503<" in html
    assert "1 of 1 attempts used" in html  # why it was held
    assert "<strong>olga</strong> (operator:olga)" in html and "try again" in html
    assert 'id="job-live"' in html and "hx-get" not in html.split('id="job-live"')[0][-200:]


def test_the_job_page_fragment_polls_while_the_job_is_live(ops: Client) -> None:
    chain(n=2)
    job = job_submit(workflow="chain", input={}).job
    fragment = ops.get(f"/ops/jobs/{job.pk}/", **HTMX).content.decode()
    assert "<html" not in fragment
    assert re.match(
        rf'\s*<div id="job-live" hx-get="/ops/jobs/{job.pk}/\?since=[0-9a-f]{{16}}" hx-trigger="every 3s"',
        fragment,
    )
    poll = re.search(r'hx-get="([^"]+)"', fragment).group(1)  # type: ignore[union-attr]
    assert ops.get(poll, **HTMX).status_code == 204
    run_queued_tasks()
    assert ops.get(poll, **HTMX).status_code == 200


def test_a_finished_job_page_stops_polling(ops: Client, drain: Callable, fake_remote: FakeRemote) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    drain()
    fragment = ops.get(f"/ops/jobs/{job.pk}/", **HTMX).content.decode()
    assert "every 3s" not in fragment and "Finished · not refreshing" in fragment


def test_an_unknown_job_is_404(ops: Client) -> None:
    assert ops.get("/ops/jobs/00000000-0000-0000-0000-000000000000/").status_code == 404


def test_pause_and_resume_from_the_job_page(ops: Client, operator: User) -> None:
    chain(n=2)
    job = job_submit(workflow="chain", input={}).job
    response = ops.post(
        f"/ops/jobs/{job.pk}/act/", {"action": "pause", "fragment": "job", "reason": "investigating"}, **HTMX
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert (
        html.lstrip().startswith('<div id="job-live"') and "paused since" in html and 'value="resume"' in html
    )
    assert Event.objects.get(job=job, kind="job_paused").actor == operator
    again = ops.post(f"/ops/jobs/{job.pk}/act/", {"action": "pause", "fragment": "job"}, **HTMX)
    assert again.status_code == 409 and "already paused" in again.content.decode()
    assert (
        ops.post(f"/ops/jobs/{job.pk}/act/", {"action": "resume", "fragment": "job"}, **HTMX).status_code
        == 200
    )
    job.refresh_from_db()
    assert job.paused_at is None


def test_an_unknown_job_action_is_refused(ops: Client) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={}).job
    response = ops.post(f"/ops/jobs/{job.pk}/act/", {"action": "explode", "fragment": "job"}, **HTMX)
    assert response.status_code == 400 and "action" in response.content.decode()


def test_the_job_page_runs_a_constant_number_of_queries(
    ops: Client, drain: Callable, fake_remote: FakeRemote, django_assert_max_num_queries: Any
) -> None:
    diamond()
    small = job_submit(workflow="diamond", input={}).job
    chain("long", n=12)
    large = job_submit(workflow="long", input={}).job
    drain()
    for job in (small, large):
        with django_assert_max_num_queries(9):
            assert ops.get(f"/ops/jobs/{job.pk}/").status_code == 200


# --- the job list ---------------------------------------------------------------------------------


def test_the_job_list_searches_by_id_status_workflow_and_date(
    ops: Client, drain: Callable, fake_remote: FakeRemote
) -> None:
    chain(n=1)
    diamond()
    a = job_submit(workflow="chain", input={}).job
    drain()
    b = job_submit(workflow="diamond", input={}).job
    Job.objects.filter(pk=a.pk).update(created_at=timezone.now() - dt.timedelta(days=10))

    def listed(query: str) -> set[str]:
        return set(
            re.findall(r'<tr data-job="([0-9a-f-]+)">', ops.get(f"/ops/jobs/?{query}").content.decode())
        )

    assert listed("") == {str(a.pk), str(b.pk)}
    assert listed(f"id={a.pk}") == {str(a.pk)}
    assert listed("status=succeeded") == {str(a.pk)}
    assert listed("workflow=diamond") == {str(b.pk)}
    day = timezone.localdate(b.created_at)  # b's day, not the clock's: midnight may have passed since
    assert listed(f"created_from={day}") == {str(b.pk)}
    assert listed(f"created_to={day - dt.timedelta(days=5)}") == {str(a.pk)}
    page = ops.get("/ops/jobs/?id=not-a-uuid").content.decode()
    assert "Enter a valid UUID" in page


def test_the_job_list_is_paginated_newest_first(ops: Client, django_assert_max_num_queries: Any) -> None:
    chain(n=1)
    jobs = [job_submit(workflow="chain", input={"n": n}).job for n in range(55)]
    with django_assert_max_num_queries(8):
        first = ops.get("/ops/jobs/").content.decode()
    assert first.count("<tr data-job=") == 50 and "Page 1 of 2" in first
    assert first.index(str(jobs[-1].pk)) < first.index(str(jobs[-2].pk))
    second = ops.get("/ops/jobs/?page=2").content.decode()
    assert second.count("<tr data-job=") == 5
    fragment = ops.get("/ops/jobs/?page=2&status=running", **HTMX).content.decode()
    assert fragment.lstrip().startswith('<section class="card" id="jobs-results">')
    assert "status=running&amp;page=1" in fragment


# --- calibration ----------------------------------------------------------------------------------


def test_calibration_reports_percentiles_and_flags_a_short_timeout(
    ops: Client, drain: Callable, fake_remote: FakeRemote
) -> None:
    make_policy("tight", timeout_seconds=1)
    make_policy()
    make_workflow("cal", step("fast"), step("slow", policy="tight"))
    latencies = {"fast": [100, 200, 300, 400], "slow": [500, 900, 1500, 2500]}
    for n in range(4):
        fake_remote.script("fast", CallResult(Outcome.SUCCEEDED, output={}, latency_ms=latencies["fast"][n]))
        fake_remote.script("slow", CallResult(Outcome.SUCCEEDED, output={}, latency_ms=latencies["slow"][n]))
        job_submit(workflow="cal", input={"n": n})
        drain()
    html = ops.get("/ops/calibration/").content.decode()
    fast = re.search(r'<tr class="" data-step="fast" data-flagged="no">.*?</tr>', html, re.S)
    slow = re.search(r'<tr class="flagged" data-step="slow" data-flagged="yes">.*?</tr>', html, re.S)
    assert fast and slow
    assert "250 ms" in fast.group(0)  # p50 of 100..400, interpolated
    assert "2470 ms" in slow.group(0)  # p99 of 500..2500 by percentile_cont
    assert "timeout below p99" in slow.group(0) and "consider ≥ 4 s" in slow.group(0)


def test_calibration_flags_late_successes(ops: Client, drain: Callable, fake_remote: FakeRemote) -> None:
    chain(n=1)
    job_submit(workflow="chain", input={})
    drain()
    Attempt.objects.update(late_outcome=Outcome.SUCCEEDED, latency_ms=10)
    html = ops.get("/ops/calibration/").content.decode()
    assert 'data-flagged="yes"' in html and "late successes" in html


def test_calibration_percentiles_match_the_python_fallback() -> None:
    from supervisor.selectors.calibration import percentile

    values = [500, 900, 1500, 2500]
    assert percentile(values, 0.5) == 1200
    assert percentile(values, 0.99) == pytest.approx(2470)
    assert percentile([], 0.5) is None


# --- bad input: a clear 4xx, never a 500, and nothing changes -------------------------------------


def counts() -> tuple[int, int, int, int]:
    return Job.objects.count(), Step.objects.count(), Attempt.objects.count(), Event.objects.count()


@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("/ops/steps/999999999/retry/", {}),
        ("/ops/steps/999999999/resolve/", {"output": "{}", "reason": "checked by phone"}),
        ("/ops/steps/99999999999999999999999/retry/", {}),
        ("/ops/jobs/0b8a1c3e-5d7f-4e21-9a6b-2c4d6e8f0a1b/act/", {"action": "cancel"}),
        ("/ops/jobs/not-a-uuid/act/", {"action": "cancel"}),
        ("/ops/steps/abc/retry/", {}),
    ],
)
def test_unknown_ids_are_404_and_change_nothing(ops: Client, path: str, data: dict) -> None:
    before = counts()
    response = ops.post(path, data, **HTMX)
    assert response.status_code == 404
    assert ops.post(path, data).status_code in (302, 404)
    assert counts() == before


@pytest.mark.parametrize(
    "data",
    [
        {"output": "[1, 2]", "reason": "r"},
        {"output": "not json", "reason": "r"},
        {"output": '{"a": "\\u0000"}', "reason": "r"},
        {"output": "[" * 5000 + "]" * 5000, "reason": "r"},
        {"output": "{}", "reason": "x" * 100_000},
        {"output": "{}"},
    ],
)
def test_a_bad_resolve_is_a_clear_400_and_changes_nothing(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable, data: dict
) -> None:
    step = held_step(held_job(drain, fake_remote, supervise))
    before = counts()
    response = ops.post(f"/ops/steps/{step.pk}/resolve/", data, **HTMX)
    assert 400 <= response.status_code < 500
    assert ops.post(f"/ops/steps/{step.pk}/resolve/", data).status_code in (302, 400)
    assert counts() == before


@pytest.mark.parametrize(
    "data",
    [
        {"action": "explode"},
        {"action": "retry", "stage": "run", "step": "abc"},
        {"action": "retry", "stage": "nonsense", "step": "1"},
        {},
    ],
)
def test_a_bad_bulk_request_is_a_clear_400_and_changes_nothing(ops: Client, data: dict) -> None:
    before = counts()
    response = ops.post("/ops/attention/bulk/", data)
    assert response.status_code == 400
    assert counts() == before


def test_an_unknown_job_action_is_400(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    before = counts()
    response = ops.post(f"/ops/jobs/{job.pk}/act/", {"action": "delete_everything"}, **HTMX)
    assert response.status_code == 400
    assert counts() == before


def test_a_body_over_the_limit_is_refused_without_a_500(ops: Client, settings: Any) -> None:
    response = ops.post("/ops/attention/bulk/", {"reason": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)})
    assert 400 <= response.status_code < 500


@pytest.mark.parametrize(
    "query", ["?older_than=abc", "?older_than=-5", "?workflow=" + "x" * 5000, "?page=999999", "?page=abc"]
)
def test_bad_filters_never_break_the_lists(ops: Client, query: str) -> None:
    assert ops.get("/ops/attention/" + query).status_code in (200, 400)
    assert ops.get("/ops/jobs/" + query).status_code in (200, 400, 404)


# --- the console's operator features (the browser tests drive the same views) ---------------------


Supervise = Callable[..., Any]


def console_for(user: Any) -> Any:
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


def test_the_console_is_read_by_viewers_and_its_actions_refuse_them(
    fake_remote: FakeRemote, drain: Callable, supervise: Supervise
) -> None:
    job = failed_at_s2(drain, fake_remote, supervise)
    schedule_create(
        name="s", actor=make_user("schedule-owner", "submitters"), workflow="three", cron="* * * * *"
    )
    viewer = console_for(make_user("vera", "viewers"))
    for path in ("/ops/", "/ops/attention/", "/ops/jobs/", f"/ops/jobs/{job.pk}/", "/ops/schedules/"):
        page = viewer.get(path)
        assert page.status_code == 200, path
        assert b'method="post" action="/ops/' not in page.content, path
    s2 = Step.objects.get(job=job, name="s2")
    for path, body in (
        (f"/ops/jobs/{job.pk}/rerun/", {"from_step": "s2"}),
        (f"/ops/steps/{s2.pk}/retry/", {}),
        (f"/ops/jobs/{job.pk}/act/", {"action": "compensate"}),
        ("/ops/schedules/s/act/", {"action": "pause"}),
    ):
        assert viewer.post(path, body).status_code == 403, path
    assert not Job.objects.filter(rerun_of=job).exists()
    assert Schedule.objects.get(name="s").paused_at is None
    # A user with no role reads nothing.
    assert console_for(make_user("nobody")).get("/ops/jobs/").status_code == 403


def test_a_console_rerun_with_bad_input_or_of_a_live_job_changes_nothing(
    fake_remote: FakeRemote, drain: Callable, supervise: Supervise
) -> None:
    job = failed_at_s2(drain, fake_remote, supervise)
    ops = console_for(make_user("olga", "operators"))
    bad_json = ops.post(
        f"/ops/jobs/{job.pk}/rerun/", {"from_step": "s2", "input": "{nope"}, HTTP_HX_REQUEST="true"
    )
    assert bad_json.status_code == 400 and b"input is not valid JSON" in bad_json.content
    unknown = ops.post(f"/ops/jobs/{job.pk}/rerun/", {"from_step": "zz"}, HTTP_HX_REQUEST="true")
    assert unknown.status_code == 400
    live = job_submit(workflow="three", input={"order": 2}).job
    refused = ops.post(f"/ops/jobs/{live.pk}/rerun/", {"from_step": "s1"}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 409 and b"once it has settled" in refused.content
    assert not Job.objects.filter(rerun_of__isnull=False).exists()
    done = ops.post(f"/ops/jobs/{job.pk}/rerun/", {"from_step": "s2", "reason": "again"})
    rerun = Job.objects.get(rerun_of=job)
    assert done.status_code == 302 and done["Location"] == f"/ops/jobs/{rerun.pk}/"


def test_the_console_finds_jobs_by_business_or_idempotency_key(fake_remote: FakeRemote) -> None:
    chain(n=1)
    one = job_submit(workflow="chain", input={}, business_key="order-1001").job
    two = job_submit(workflow="chain", input={}, idempotency_key="client-key-7").job
    ops = console_for(make_user("olga", "operators"))
    page = ops.get("/ops/jobs/", {"key": "order-1001"}).content.decode()
    assert str(one.pk) in page and str(two.pk) not in page
    page = ops.get("/ops/jobs/", {"key": "client-key-7"}).content.decode()
    assert str(two.pk) in page and str(one.pk) not in page
