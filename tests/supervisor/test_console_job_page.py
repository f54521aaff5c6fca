"""The console's job page and job list: a job's input and result come first (pretty, collapsed
when long, cut when huge), and progress is drawn by how each step ended, so a job whose steps
were undone never reads as a full green bar."""

from __future__ import annotations

import re
from collections.abc import Callable
from html import unescape
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from agents.fake import FakeRemote
from sas_project.permissions import role_groups_ensure
from scheduler.models import Event, Job, JobStatus, Outcome, Signal, StepStatus
from scheduler.services import job_submit
from supervisor.selectors.jobs import JSON_SHOWN_CHARS
from tests.api.support import make_user
from tests.factories import chain, make_policy, make_workflow, step

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def ops(client: Client) -> Client:
    role_groups_ensure()
    user = User.objects.create_user("olga")
    user.groups.add(Group.objects.get(name="operators"))
    client.force_login(user)
    return client


def compensated_job(drain: Callable, fake_remote: FakeRemote, supervise: Callable) -> Job:
    """s1 succeeds and is undone, s2 is refused (no retry: compensate), s3 never runs."""
    make_policy("once-then-undo", max_attempts=1, on_exhausted="compensate")
    make_workflow("undone", step("s1"), step("s2", "s1", policy="once-then-undo"), step("s3", "s2"))
    fake_remote.script("s2", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="undone", input={"order": 7}).job
    for _ in range(3):
        drain()
        supervise()
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPENSATED
    return job


def document(html: str, name: str) -> str:
    """The text of the input's or the result's document as the page shows it."""
    found = re.search(rf'id="json-{name}".*?<pre class="json">(.*?)</pre>', html, re.S)
    assert found, name
    return unescape(found.group(1))


def segments(html: str) -> dict[str, int]:
    bar = re.search(r'<svg class="segbar job" id="job-progress".*?</svg>', html, re.S)
    assert bar, "the job's progress bar"
    return {s: int(n) for s, n in re.findall(r'data-status="(\w+)" data-count="(\d+)"', bar.group(0))}


def test_the_job_page_shows_input_and_result_before_the_dag(
    ops: Client, drain: Callable, fake_remote: FakeRemote
) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={"order": "<b>A-1</b>", "lines": [1, 2]}).job
    drain()
    Job.objects.filter(pk=job.pk).update(result={"shipped": True})
    html = ops.get(f"/ops/jobs/{job.pk}/").content.decode()
    assert html.index('id="job-input"') < html.index('id="job-result"') < html.index('id="job-dag"')
    assert "&lt;b&gt;A-1&lt;/b&gt;" in html and "<b>A-1" not in html  # escaped
    assert '"lines": [\n    1,\n    2\n  ]' in document(html, "input")  # pretty
    assert '"shipped": true' in document(html, "result")
    assert re.search(r'<details class="json-doc" id="json-input"[^>]* open', html)


def test_a_large_input_is_collapsed_and_a_huge_one_cut_with_a_link_to_the_api(
    ops: Client, drain: Callable, fake_remote: FakeRemote
) -> None:
    chain(n=1)
    job = job_submit(workflow="chain", input={f"k{i:04d}": "x" * 400 for i in range(2000)}).job
    Job.objects.filter(pk=job.pk).update(result={f"r{i}": i for i in range(60)})
    html = ops.get(f"/ops/jobs/{job.pk}/").content.decode()
    assert len(html) < 200_000, "a page never carries the whole megabyte"
    assert not re.search(r'id="json-input"[^>]* open', html)
    assert 'id="json-input-truncated"' in html and f"/api/v1/jobs/{job.pk}/" in html
    assert "k1999" not in html and "k0000" in html
    assert html.count("x" * 400) <= JSON_SHOWN_CHARS // 400 + 1
    # A long result starts collapsed, but is whole.
    assert not re.search(r'id="json-result"[^>]* open', html)
    assert '"r59": 59' in document(html, "result") and 'id="json-result-truncated"' not in html


def test_a_compensated_job_shows_its_steps_by_outcome_not_a_full_green_bar(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = compensated_job(drain, fake_remote, supervise)
    html = ops.get(f"/ops/jobs/{job.pk}/").content.decode()
    by_status = segments(html)
    assert "succeeded" not in by_status
    assert by_status == {"compensated": 1, "failed": 1, "skipped": 1}
    assert "0 succeeded" not in html
    text = re.search(r'id="job-progress-text">(.*?)</span>', html, re.S)
    assert text and "1 compensated, 1 failed, 1 skipped" in text.group(1)
    assert "No result: the job ended compensated." in html


def test_the_job_list_marks_jobs_that_did_not_succeed(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    bad = compensated_job(drain, fake_remote, supervise)
    chain(n=2)
    good = job_submit(workflow="chain", input={}).job
    drain()
    html = ops.get("/ops/jobs/").content.decode()
    bad_row = re.search(rf'<tr data-job="{bad.pk}"([^>]*)>(.*?)</tr>', html, re.S)
    good_row = re.search(rf'<tr data-job="{good.pk}"([^>]*)>(.*?)</tr>', html, re.S)
    assert bad_row and good_row
    assert 'class="ended ended-compensated"' in bad_row.group(1)
    assert "ended" not in good_row.group(1)
    assert 'data-status="compensated"' in bad_row.group(2) and 'data-status="succeeded"' not in bad_row.group(
        2
    )
    assert "1 compensated, 1 failed, 1 skipped" in bad_row.group(2)
    assert 'data-status="succeeded" data-count="2"' in good_row.group(2)


# --- actions offered by the services' rules -------------------------------------------------------

STEP_ACTIONS = ("Retry</button>", "Retry on…", "Retry with input…", "Resolve…")


def held_job(drain: Callable, fake_remote: FakeRemote, supervise: Callable) -> Job:
    """s1 refused once and held for an operator (its policy holds when exhausted)."""
    make_policy("holding", on_exhausted="hold", max_attempts=1)
    make_workflow("h", step("s1", policy="holding"), step("s2", "s1"))
    fake_remote.script("s1", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="h", input={}).job
    drain()
    supervise()
    job.refresh_from_db()
    assert job.status == JobStatus.NEEDS_ATTENTION
    return job


def step_block(html: str, name: str) -> str:
    found = re.search(rf'<div class="step-block" id="step-\d+" data-step="{name}".*?</table>', html, re.S)
    assert found, name
    return found.group(0)


def test_steps_of_a_settled_job_are_offered_no_retry_or_resolve(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = compensated_job(drain, fake_remote, supervise)
    failed = job.steps.get(name="s2")
    assert failed.status == "failed"
    html = ops.get(f"/ops/jobs/{job.pk}/").content.decode()
    for label in STEP_ACTIONS:
        assert label not in html, label
    assert 'id="job-actions"' not in html  # nothing to pause, compensate or cancel
    assert 'id="job-rerun"' in html
    # The service agrees: a retry is refused.
    refused = ops.post(f"/ops/steps/{failed.pk}/retry/", {"fragment": "job"}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 409 and "cannot be retried now" in refused.content.decode()


def test_a_paused_job_offers_resume_and_no_retry(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    before = step_block(ops.get(f"/ops/jobs/{job.pk}/").content.decode(), "s1")
    assert "Retry</button>" in before and "Resolve…" in before
    paused = ops.post(
        f"/ops/jobs/{job.pk}/act/", {"action": "pause", "fragment": "job"}, HTTP_HX_REQUEST="true"
    )
    html = paused.content.decode()
    assert "Paused job" in html and "nothing new is dispatched until it is resumed" in html
    block = step_block(html, "s1")
    assert "Retry</button>" not in block and "Retry with input…" not in block
    assert 'value="resume"' in html and 'value="pause"' not in html
    refused = ops.post(
        f"/ops/steps/{job.steps.get(name='s1').pk}/retry/", {"fragment": "job"}, HTTP_HX_REQUEST="true"
    )
    assert refused.status_code == 409 and "resume it before you retry" in refused.content.decode()


def test_a_failed_job_offers_retry_and_compensate_but_not_cancel(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    make_policy("once", max_attempts=1, on_exhausted="fail")
    make_workflow("three", step("s1"), step("s2", "s1", policy="once"))
    fake_remote.script("s2", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="three", input={}).job
    for _ in range(2):
        drain()
        supervise()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    html = ops.get(f"/ops/jobs/{job.pk}/").content.decode()
    assert "Retry</button>" in step_block(html, "s2")
    assert 'value="compensate"' in html and 'value="cancel"' not in html and 'value="pause"' not in html
    done = ops.post(
        f"/ops/jobs/{job.pk}/act/", {"action": "compensate", "fragment": "job"}, HTTP_HX_REQUEST="true"
    )
    assert done.status_code == 200 and "what its steps did is being undone" in done.content.decode()


def test_the_needs_attention_row_of_a_paused_job_offers_no_retry(
    ops: Client, drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    job = held_job(drain, fake_remote, supervise)
    held = job.steps.get(name="s1")
    row = re.compile(rf'<tbody id="attention-{held.pk}".*?</tbody>', re.S)
    listed = row.search(ops.get("/ops/attention/").content.decode())
    assert listed and "Retry</button>" in listed.group(0)
    ops.post(f"/ops/jobs/{job.pk}/act/", {"action": "pause", "fragment": "job"}, HTTP_HX_REQUEST="true")
    listed = row.search(ops.get("/ops/attention/").content.decode())
    assert listed and "Retry</button>" not in listed.group(0) and "Compensate job" in listed.group(0)


# --- sending a signal -----------------------------------------------------------------------------


def signal_job() -> Job:
    make_workflow(
        "waits-for-shipping",
        {"name": "shipped", "kind": "signal", "signal": "shipped", "timeout_seconds": 3600},
        step("bill", "shipped"),
    )
    job = job_submit(workflow="waits-for-shipping", input={}).job
    assert job.steps.get(name="shipped").status == StepStatus.WAITING
    return job


def test_a_step_waiting_for_a_signal_offers_the_form_to_operators_only(ops: Client) -> None:
    job = signal_job()
    html = ops.get(f"/ops/jobs/{job.pk}/").content.decode()
    form = re.search(r'<form class="signal-form" method="post" action="([^"]+)".*?</form>', html, re.S)
    assert form and form.group(1) == f"/ops/jobs/{job.pk}/signal/"
    assert 'name="name" value="shipped"' in form.group(0) and "csrfmiddlewaretoken" in form.group(0)
    viewer = Client()
    viewer.force_login(make_user("vera", "viewers"))
    assert "signal-form" not in viewer.get(f"/ops/jobs/{job.pk}/").content.decode()
    refused = viewer.post(f"/ops/jobs/{job.pk}/signal/", {"name": "shipped"})
    assert refused.status_code == 403 and not Signal.objects.exists()


def test_an_operator_sends_a_signal_and_the_waiting_step_takes_it(ops: Client, drain: Callable) -> None:
    job = signal_job()
    response = ops.post(
        f"/ops/jobs/{job.pk}/signal/",
        {"name": "shipped", "payload": '{"tracking": "T-1"}', "fragment": "job"},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    assert (
        "Sent signal shipped" in response.content.decode()
        and "step shipped took it" in response.content.decode()
    )
    shipped = job.steps.get(name="shipped")
    assert shipped.status == StepStatus.SUCCEEDED and shipped.output == {"tracking": "T-1"}
    signal = Signal.objects.get(job=job)
    assert signal.sender is not None and signal.sender.get_username() == "olga"
    assert Event.objects.get(job=job, kind="signal_received").actor == signal.sender


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"name": "shipped", "payload": "{not json"}, "payload is not valid JSON"),
        ({"name": "", "payload": "1"}, "name: This field is required."),
        ({"name": "delivered"}, "waits for signal &#x27;delivered&#x27;"),
        ({"name": "bad name!"}, "name"),
    ],
)
def test_a_bad_signal_is_a_clear_400_and_changes_nothing(ops: Client, data: dict, said: str) -> None:
    job = signal_job()
    response = ops.post(f"/ops/jobs/{job.pk}/signal/", {**data, "fragment": "job"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 400 and said in response.content.decode()
    assert not Signal.objects.exists()
    assert job.steps.get(name="shipped").status == StepStatus.WAITING


def test_a_signal_to_a_settled_job_is_refused_with_the_reason(ops: Client) -> None:
    job = signal_job()
    ops.post(f"/ops/jobs/{job.pk}/act/", {"action": "cancel", "fragment": "job"})
    job.refresh_from_db()
    assert job.status in (JobStatus.CANCELLED, JobStatus.COMPENSATING)
    assert "signal-form" not in ops.get(f"/ops/jobs/{job.pk}/").content.decode()
    response = ops.post(
        f"/ops/jobs/{job.pk}/signal/", {"name": "shipped", "fragment": "job"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 409 and "it takes no more signals" in response.content.decode()
    # Without htmx: back to the job page with the message.
    plain = ops.post(f"/ops/jobs/{job.pk}/signal/", {"name": "shipped"})
    assert plain.status_code == 302 and plain["Location"] == f"/ops/jobs/{job.pk}/"
