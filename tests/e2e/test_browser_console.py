"""The operator console in a real headless Chromium (Debian's), driven by Playwright, against the
live test server.

The main scenario runs the whole system: a real `qcluster` (agents and supervisor) and the sandbox
remote. A job's last step is refused once by the remote and held; it appears on the open
Needs-attention page by itself (htmx polling, no reload); the operator retries it, the row leaves
the list, the retry really runs and the job succeeds; the job page draws the DAG. A screenshot of
each page is saved under test-artifacts/screenshots/.

Every page runs under the service's Content-Security-Policy: each browser context reports every
violation (the `securitypolicyviolation` event, and the console's "Refused to ..." messages), and
a test with any fails.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, expect, sync_playwright

from agents.fake import FakeRemote
from agents.models import AgentEndpoint, AgentPool
from agents.outcome import CallResult
from agents.services import pool_save
from sas_project.permissions import role_groups_ensure
from scheduler.models import Attempt, Job, JobStatus, Outcome, RemediationPolicy, Step, StepStatus, Workflow
from scheduler.services import job_submit
from supervisor.policies import policy_update
from supervisor.services import job_pause
from tests.conftest import run_queued_tasks
from tests.factories import make_policy, make_pool, make_workflow, step
from tests.processes import ARTIFACTS, Cluster, Sandbox, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
SHOTS = ARTIFACTS / "screenshots"
TIMEOUT = 30_000  # ms: generous, the page polls every 3 s and the cluster needs a moment
PASSWORD = "operator-password-1"

#: Content-Security-Policy violations seen by the current test's pages.
CSP_VIOLATIONS: list[str] = []
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", function (e) {
    window.__reportCsp(e.violatedDirective + " blocked " + (e.blockedURI || "inline") +
        " on " + e.documentURI + (e.sample ? ": " + e.sample : ""));
});
"""


@pytest.fixture(autouse=True)
def no_csp_violation() -> Iterator[list[str]]:
    """Fails the test when any page broke the Content-Security-Policy."""
    CSP_VIOLATIONS.clear()
    yield CSP_VIOLATIONS
    assert not CSP_VIOLATIONS, f"Content-Security-Policy violations: {CSP_VIOLATIONS}"


def watched_context(browser: Browser, **options: Any) -> BrowserContext:
    """A browser context whose pages report every CSP violation to CSP_VIOLATIONS (`options`:
    Playwright's, such as viewport, color_scheme or storage_state)."""
    context = browser.new_context(**{"viewport": {"width": 1440, "height": 900}, **options})
    context.set_default_timeout(TIMEOUT)
    # expect() waits 5 s unless told otherwise: a bound a busy machine can miss. Wait as long as
    # the actions do for what the page must come to show.
    expect.set_options(timeout=TIMEOUT)
    context.expose_binding("__reportCsp", lambda source, text: CSP_VIOLATIONS.append(text))
    context.add_init_script(REPORT_VIOLATIONS)

    def on_console(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            CSP_VIOLATIONS.append(message.text)

    context.on("console", on_console)
    return context


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Browser]:
    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls (setup,
    # checks) are plain synchronous code all the same.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    executable = shutil.which("chromium") or CHROMIUM
    if not Path(executable).exists():
        pytest.fail("Chromium is missing: run scripts/ensure-system-packages (make test does)")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=executable,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def operator(settings: Any) -> User:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    role_groups_ensure()
    user = User.objects.create_user("olga", password=PASSWORD)
    user.groups.add(Group.objects.get(name="operators"))
    return user


def sign_in(
    browser: Browser, base: str, username: str, password: str, path: str, login: str = "/accounts/login/"
) -> Page:
    """A new browser session, signed in through the login page a protected `path` redirects to."""
    page = watched_context(browser).new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # hx-confirm asks with window.confirm
    page.goto(f"{base}{path}")
    expect(page).to_have_url(f"{base}{login}?next={path}")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("[type=submit]")
    expect(page).to_have_url(f"{base}{path}")
    return page


def shot(page: Page, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def load_demo(sandbox: Sandbox) -> None:
    call_command(
        "load_demo", sandbox_url=sandbox.url, backup_url=sandbox.url.replace("127.0.0.1", "localhost")
    )
    quick = {
        "timeout_seconds": 3,
        "backoff_initial_seconds": 0.2,
        "backoff_max_seconds": 1,
        "backoff_jitter": 0,
    }
    for policy in RemediationPolicy.objects.all():
        # One refusal of the shipment holds it for an operator (its policy holds when exhausted).
        extra = {"max_attempts": 1} if policy.name == "shipping" else {}
        policy_update(policy.pk, actor=None, changes={**quick, **extra})


@pytest.fixture
def demo_cluster(operator: User, sandbox: Sandbox, clusters: Callable[..., Cluster]) -> Sandbox:
    """The demo definitions against the sandbox, and a running qcluster (started before the
    browser, so that its environment is the suite's own)."""
    load_demo(sandbox)
    User.objects.create_superuser("root", "root@example.invalid", PASSWORD)
    clusters("c1")
    return sandbox


def test_an_operator_sees_a_held_step_appear_retries_it_and_the_job_succeeds(
    live_server: Any, demo_cluster: Sandbox, browser: Browser, operator: User
) -> None:
    sandbox = demo_cluster
    base = live_server.url

    page = sign_in(browser, base, "olga", PASSWORD, "/ops/attention/")
    expect(page.locator("#attention-empty")).to_be_visible()
    page.evaluate("window.__notReloaded = true")

    # The held step is created after the page is open: the remote refuses the shipment once.
    sandbox.config(script={"/shipping/schedule": ["error"]})
    job = job_submit(
        workflow="order_fulfilment", input={"sku": "A1", "quantity": 1, "amount": 10}, submitter=operator
    ).job
    row = page.locator('tbody.attention-item[data-step="ship"][data-status="held"]')
    expect(row).to_be_visible(timeout=60_000)
    expect(row).to_contain_text("held for an operator")
    expect(row).to_contain_text("1 of 1 attempts used")
    assert page.evaluate("window.__notReloaded") is True, "the row must arrive without a reload"
    shot(page, "needs-attention")

    row.get_by_role("button", name="Retry", exact=True).click()
    expect(page.locator("#flash")).to_contain_text("Retried ship: attempt 2 dispatched.")
    expect(page.locator('tbody.attention-item[data-step="ship"]')).to_have_count(0)
    expect(page.locator("#attention-empty")).to_be_visible()

    wait_until(
        lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED,
        timeout=60,
        interval=0.25,
        message="the retried job to succeed",
    )
    ship = Step.objects.get(job=job, name="ship")
    assert ship.attempt == 2 and ship.status == StepStatus.SUCCEEDED
    assert sandbox.stats()["duplicates"] == 0

    page.goto(f"{base}/ops/jobs/{job.pk}/")
    expect(page.locator("#job-status")).to_have_text("Succeeded")
    dag = page.locator("svg.dag")
    expect(dag).to_be_visible()
    expect(dag.locator("g.dag-node")).to_have_count(3)
    expect(dag.locator('g.dag-node[data-status="succeeded"]')).to_have_count(3)
    expect(dag.locator("path.dag-edge")).to_have_count(2)
    expect(page.locator("#job-timeline")).to_contain_text("operator:olga")
    expect(page.locator(f"#step-{ship.pk} table.attempts tbody tr")).to_have_count(2)
    shot(page, "job")

    page.goto(f"{base}/ops/")
    expect(page.locator("#supervisor")).to_contain_text("scanning", timeout=TIMEOUT)
    expect(page.locator("#supervisor-warning")).to_have_count(0)
    expect(page.locator("#endpoint-health")).to_contain_text(sandbox.url)
    shot(page, "overview")

    page.goto(f"{base}/ops/jobs/")
    expect(page.locator(f'tr[data-job="{job.pk}"]')).to_contain_text("Succeeded")
    shot(page, "jobs")

    page.goto(f"{base}/ops/calibration/")
    expect(page.locator('#calibration tr[data-step="ship"]').first).to_be_visible()
    shot(page, "calibration")

    admin = sign_in(browser, base, "root", PASSWORD, "/admin/", login="/admin/login/")
    expect(admin.locator("#content")).to_contain_text("Remediation policies")
    policy = RemediationPolicy.objects.get(name="shipping")
    admin.goto(f"{base}/admin/scheduler/remediationpolicy/{policy.pk}/change/")
    expect(admin.locator("body")).to_contain_text("change history", ignore_case=True)
    shot(admin, "admin-policy")
    admin.goto(f"{base}/admin/scheduler/workflow/")
    expect(admin.locator("#result_list")).to_contain_text("order_fulfilment")
    workflow = Workflow.objects.get(name="order_fulfilment")
    admin.goto(f"{base}/admin/scheduler/workflow/add/?from={workflow.pk}")
    expect(admin.locator('input[name="steps-2-name"]')).to_have_value("ship")
    shot(admin, "admin-workflow-next-version")
    AgentEndpoint.objects.filter(pool__name="payments").update(
        secret_header_name="Authorization", secret_header_value="Bearer not-for-your-eyes"
    )
    pool = AgentPool.objects.get(name="payments")
    admin.goto(f"{base}/admin/agents/agentpool/{pool.pk}/change/")
    expect(admin.locator("#endpoints-group")).to_contain_text("stored")
    assert "not-for-your-eyes" not in admin.content()
    shot(admin, "admin-pool")
    admin.goto(f"{base}/admin/scheduler/job/")
    expect(admin.locator("#result_list")).to_contain_text(str(job.pk))
    shot(admin, "admin-jobs")


def test_a_bulk_retry_keeps_the_selection_across_refreshes_previews_then_runs(
    live_server: Any, browser: Browser, operator: User, fake_remote: FakeRemote
) -> None:
    from supervisor.scan import scan

    # A long timeout: the retried calls stay in flight (nothing runs them here), not overdue.
    make_policy("holding", on_exhausted="hold", max_attempts=1, timeout_seconds=600)
    make_workflow("h", step("s1", policy="holding"), step("s2", "s1"))
    fake_remote.script("s1", *[Outcome.TRANSIENT_FAILURE] * 3)
    jobs = [job_submit(workflow="h", input={"n": n}).job for n in range(3)]
    run_queued_tasks()
    scan(holder="test", draw=lambda: 0.0)
    held = [Step.objects.get(job=j, name="s1") for j in jobs]
    assert {s.status for s in held} == {StepStatus.HELD}

    page = sign_in(browser, live_server.url, "olga", PASSWORD, "/ops/attention/")
    expect(page.locator("tbody.attention-item")).to_have_count(3)
    page.evaluate(
        """window.__swaps = 0;
        document.body.addEventListener("htmx:afterSwap", function (e) {
            if (e.detail.target.id === "attention-live") { window.__swaps += 1; }
        });"""
    )
    for s in held[:2]:
        page.check(f"#pick-{s.pk}")
    # A change elsewhere re-renders the list; the ticked boxes are kept (hx-preserve).
    job_pause(actor=operator, job_id=held[2].job_id)
    # Polled from here: a predicate evaluated in the page would need eval, which the CSP forbids.
    wait_until(lambda: page.evaluate("window.__swaps") >= 1, timeout=TIMEOUT / 1000, message="a swap")
    expect(page.locator(f"tbody#attention-{held[2].pk}")).to_contain_text("paused")
    for s in held[:2]:
        expect(page.locator(f"#pick-{s.pk}")).to_be_checked()
    expect(page.locator(f"#pick-{held[2].pk}")).not_to_be_checked()

    page.fill("#bulk-form input[name=reason]", "remote fixed")
    page.click("#bulk-form button[type=submit]")
    preview = page.locator("#bulk-preview")
    expect(preview).to_be_visible()
    expect(page.locator("#bulk-panel")).to_contain_text("Dry run: retry 2 steps")
    expect(preview.locator("tbody tr")).to_have_count(2)
    shot(page, "needs-attention-bulk-preview")
    assert Step.objects.filter(pk__in=[s.pk for s in held], status=StepStatus.HELD).count() == 3

    page.click("#bulk-run")
    expect(page.locator("#bulk-results")).to_be_visible()
    expect(page.locator("#bulk-panel")).to_contain_text("Bulk retry: 2 done")
    expect(page.locator("tbody.attention-item")).to_have_count(1)
    statuses = dict(Step.objects.filter(pk__in=[s.pk for s in held]).values_list("pk", "status"))
    assert [statuses[s.pk] for s in held] == [StepStatus.DISPATCHED, StepStatus.DISPATCHED, StepStatus.HELD]


def test_the_pages_are_served_with_the_policy_and_a_violation_is_caught(
    live_server: Any, browser: Browser, operator: User, no_csp_violation: list[str]
) -> None:
    base = live_server.url
    page = sign_in(browser, base, "olga", PASSWORD, "/ops/")
    response = page.goto(f"{base}/ops/jobs/")
    assert response is not None and "script-src 'self'" in response.headers["content-security-policy"]
    docs = watched_context(browser).new_page()
    docs.goto(f"{base}/api/docs/")
    expect(docs.locator(".swagger-ui .info .title")).to_contain_text("Scheduler Agent Supervisor API")
    shot(docs, "api-docs")
    assert no_csp_violation == []
    # The watch itself: an inline style and an inline script are refused and reported.
    page.evaluate(
        """document.body.insertAdjacentHTML("beforeend", '<p id="bad" style="color: red">x</p>');
        var s = document.createElement("script"); s.textContent = "window.__ran = true";
        document.body.appendChild(s);"""
    )
    expect(page.locator("#bad")).to_have_count(1)
    wait_until(lambda: len(no_csp_violation) >= 2, timeout=10, message="the violations reported")
    assert page.evaluate("window.__ran === undefined")
    assert any("style-src" in v for v in no_csp_violation)
    assert any("script-src" in v for v in no_csp_violation)
    no_csp_violation.clear()


# --- operator features: rerun, edited retry, schedules, search, limits, the viewer role ----------


def _failed_at_s2(fake_remote: FakeRemote) -> Job:
    """A job of s1 → s2 → s3 whose s2 was refused and failed the job (nothing to compensate)."""
    from supervisor.scan import scan

    make_policy("once", max_attempts=1, on_exhausted="fail")
    make_workflow("three", step("s1"), step("s2", "s1", policy="once"), step("s3", "s2"))
    fake_remote.script("s2", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="three", input={"order": 1}).job
    run_queued_tasks()
    scan(holder="test", draw=lambda: 0.0)
    run_queued_tasks()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    return job


def test_an_operator_reruns_a_job_from_a_step_and_both_pages_link_each_other(
    live_server: Any, browser: Browser, operator: User, fake_remote: FakeRemote
) -> None:
    original = _failed_at_s2(fake_remote)
    base = live_server.url
    page = sign_in(browser, base, "olga", PASSWORD, f"/ops/jobs/{original.pk}/")
    page.click("#job-rerun summary")
    page.select_option("#rerun-from", "s2")
    page.fill("#rerun-input", '{"order": 1, "card": "new"}')
    page.fill("#rerun-reason", "card replaced")
    page.click("#job-rerun button[type=submit]")

    # The browser lands on the new job's page, which names the original.
    rerun = wait_for_rerun(original)
    expect(page).to_have_url(f"{base}/ops/jobs/{rerun.pk}/")
    expect(page.locator("#rerun-of")).to_have_attribute("href", f"/ops/jobs/{original.pk}/")
    assert rerun.input == {"order": 1, "card": "new"}
    run_queued_tasks()
    rerun.refresh_from_db()
    assert rerun.status == JobStatus.SUCCEEDED
    reused = Step.objects.get(job=rerun, name="s1")
    assert reused.reused_from_id == Step.objects.get(job=original, name="s1").pk
    expect(page.locator("#job-status")).to_have_text("Succeeded")
    expect(page.locator("#job-timeline")).to_contain_text("card replaced")
    shot(page, "job-rerun")

    page.goto(f"{base}/ops/jobs/{original.pk}/")
    expect(page.locator("#job-reruns a.rerun")).to_have_attribute("href", f"/ops/jobs/{rerun.pk}/")
    expect(page.locator("#job-timeline")).to_contain_text("operator:olga")


def wait_for_rerun(original: Job) -> Job:
    wait_until(lambda: Job.objects.filter(rerun_of=original).exists(), timeout=30, message="the rerun job")
    return Job.objects.get(rerun_of=original)


def test_a_refused_step_is_retried_with_an_edited_input_from_its_job_page(
    live_server: Any, browser: Browser, operator: User, fake_remote: FakeRemote
) -> None:
    from supervisor.scan import scan

    make_policy("holding", on_exhausted="hold", max_attempts=1)
    make_workflow("pay", step("charge", policy="holding"))
    fake_remote.script("charge", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="pay", input={"card": "expired"}).job
    run_queued_tasks()
    scan(holder="test", draw=lambda: 0.0)
    charge = Step.objects.get(job=job, name="charge")
    assert charge.status == StepStatus.HELD
    old_operation = charge.operation_id

    page = sign_in(browser, live_server.url, "olga", PASSWORD, f"/ops/jobs/{job.pk}/")
    box = page.locator(f"#job-edit-{charge.pk}")
    box.locator("summary").click()
    expect(box.locator("textarea[name=input]")).to_contain_text('"card": "expired"')
    box.locator("textarea[name=input]").fill('{"card": "valid"}')
    box.locator("button[type=submit]").click()
    expect(page.locator("#job-live .alert.success")).to_contain_text("with the edited input")
    charge.refresh_from_db()
    assert charge.input_override == {"card": "valid"} and charge.operation_id != old_operation
    run_queued_tasks()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert fake_remote.calls[-1].payload["input"] == {"card": "valid"}


def test_schedules_are_listed_paused_and_resumed_jobs_found_by_key_and_waiting_steps_shown(
    live_server: Any, browser: Browser, operator: User, fake_remote: FakeRemote
) -> None:
    from scheduler.schedules import schedule_create
    from scheduler.services.capacity import forget_limits_cache

    make_policy("default")
    make_pool("narrow", kind="python")
    AgentPool.objects.filter(name="narrow").update(max_in_flight=1)
    forget_limits_cache()
    make_workflow("one", step("s1", pool="narrow"))
    schedule_create(name="nightly", actor=operator, workflow="one", cron="0 3 * * *", timezone="Europe/Paris")
    first = job_submit(workflow="one", input={}, business_key="order-1001").job
    second = job_submit(workflow="one", input={}, business_key="order-1002").job
    from scheduler.services.capacity import pump
    from scheduler.services.dispatch import step_dispatch

    pump(dispatch=step_dispatch)
    # One slot: the first job's step is in flight, the second's waits for capacity.
    assert Step.objects.get(job=second).status == StepStatus.WAITING
    base = live_server.url

    page = sign_in(browser, base, "olga", PASSWORD, "/ops/schedules/")
    row = page.locator('tr[data-schedule="nightly"]')
    expect(row).to_contain_text("cron 0 3 * * * (Europe/Paris)")
    expect(row).to_have_attribute("data-paused", "no")
    shot(page, "schedules")
    row.get_by_role("button", name="Pause").click()
    expect(page.locator("main")).to_contain_text("Schedule nightly paused.")
    expect(page.locator('tr[data-schedule="nightly"]')).to_have_attribute("data-paused", "yes")
    page.locator('tr[data-schedule="nightly"]').get_by_role("button", name="Resume").click()
    expect(page.locator('tr[data-schedule="nightly"]')).to_have_attribute("data-paused", "no")
    from scheduler.models import Schedule

    assert Schedule.objects.get(name="nightly").paused_at is None

    page.goto(f"{base}/ops/jobs/")
    page.fill("#job-key", "order-1002")
    page.click("#job-search button[type=submit]")
    expect(page.locator("#jobs-results tbody tr[data-job]")).to_have_count(1)
    expect(page.locator(f'tr[data-job="{second.pk}"]')).to_contain_text("order-1002")
    expect(page.locator(f'tr[data-job="{first.pk}"]')).to_have_count(0)

    page.goto(f"{base}/ops/jobs/{second.pk}/")
    block = page.locator('.step-block[data-step="s1"]')
    expect(block.locator(".pill.s-waiting")).to_have_text("Waiting for capacity")
    expect(block.locator(".waiting-note")).to_contain_text("1 in flight at most")
    shot(page, "job-waiting-for-capacity")


def test_a_viewer_reads_every_page_and_sees_no_action(
    live_server: Any, browser: Browser, operator: User, fake_remote: FakeRemote
) -> None:
    from scheduler.schedules import schedule_create
    from supervisor.scan import scan

    viewer = User.objects.create_user("vera", password=PASSWORD)
    viewer.groups.add(Group.objects.get(name="viewers"))
    make_policy("holding", on_exhausted="hold", max_attempts=1)
    make_workflow("h", step("s1", policy="holding"))
    fake_remote.script("s1", Outcome.TRANSIENT_FAILURE)
    job = job_submit(workflow="h", input={}).job
    run_queued_tasks()
    scan(holder="test", draw=lambda: 0.0)
    schedule_create(name="hourly", actor=operator, workflow="h", cron="0 * * * *")
    base = live_server.url

    page = sign_in(browser, base, "vera", PASSWORD, "/ops/attention/")
    expect(page.locator("#read-only")).to_be_visible()
    expect(page.locator("tbody.attention-item")).to_have_count(1)
    expect(page.locator("#bulk-form")).to_have_count(0)
    expect(page.locator("main button:not(#attention-filters button)")).to_have_count(0)
    expect(page.locator("main form[method=post]")).to_have_count(0)
    shot(page, "viewer-attention")
    for path in (f"/ops/jobs/{job.pk}/", "/ops/jobs/", "/ops/", "/ops/schedules/", "/ops/calibration/"):
        response = page.goto(f"{base}{path}")
        assert response is not None and response.status == 200, path
        expect(page.locator("main form[method=post]")).to_have_count(0)
    # The forms are not there; a request made by hand is refused all the same.
    csrf = page.context.cookies()
    token = next(c["value"] for c in csrf if c["name"] == "csrftoken")
    step_id = Step.objects.get(job=job).pk
    refused = page.request.post(
        f"{base}/ops/steps/{step_id}/retry/",
        form={"reason": "viewer"},
        headers={"X-CSRFToken": token, "Referer": f"{base}/ops/"},
    )
    assert refused.status == 403
    assert Step.objects.get(pk=step_id).status == StepStatus.HELD


def test_an_operator_approves_a_waiting_step_with_a_comment_and_a_viewer_sees_no_button(
    live_server: Any, browser: Browser, operator: User, fake_remote: FakeRemote
) -> None:
    from scheduler.models import Event, EventKind

    viewer = User.objects.create_user("vera", password=PASSWORD)
    viewer.groups.add(Group.objects.get(name="viewers"))
    make_workflow(
        "approve",
        {"name": "ok", "kind": "approval", "timeout_seconds": 600},
        step("ship", "ok"),
    )
    # Submitted by someone else: the operator does not approve their own job.
    sam = User.objects.create_user("sam", password=PASSWORD)
    job = job_submit(workflow="approve", input={"amount": 12}, submitter=sam).job
    ok = Step.objects.get(job=job, name="ok")
    assert ok.status == StepStatus.WAITING
    base = live_server.url

    # The viewer sees what the step waits for, and no way to decide it.
    seen = sign_in(browser, base, "vera", PASSWORD, f"/ops/jobs/{job.pk}/")
    expect(seen.locator(f"#wait-{ok.pk}")).to_contain_text("Waiting for an approval by an operator")
    expect(seen.locator('#job-waits li[data-step="ok"]')).to_be_visible()
    expect(seen.locator('svg.dag g.dag-node[data-step="ok"][data-wait="approval"]')).to_contain_text(
        "approval: operators"
    )
    expect(seen.get_by_role("button", name="Approve")).to_have_count(0)
    expect(seen.locator("main form[method=post]")).to_have_count(0)
    seen.goto(f"{base}/ops/attention/")
    expect(seen.locator(f'tbody#attention-{ok.pk}[data-wait="approval"]')).to_contain_text(
        "waiting for an approval by an operator"
    )
    expect(seen.get_by_role("button", name="Approve")).to_have_count(0)
    token = next(c["value"] for c in seen.context.cookies() if c["name"] == "csrftoken")
    forged = seen.request.post(
        f"{base}/ops/steps/{ok.pk}/decide/",
        form={"decision": "approve", "comment": "viewer"},
        headers={"X-CSRFToken": token, "Referer": f"{base}/ops/"},
    )
    assert forged.status == 403
    assert Step.objects.get(pk=ok.pk).status == StepStatus.WAITING

    # The operator approves it with a comment; the job moves on.
    page = sign_in(browser, base, "olga", PASSWORD, f"/ops/jobs/{job.pk}/")
    expect(page.locator(f"#step-{ok.pk} .pill.s-waiting")).to_have_text("Waiting for approval")
    shot(page, "job-waiting-for-approval")
    page.fill(f"#job-comment-{ok.pk}", "budget checked")
    page.locator(f"#job-approval-{ok.pk}").get_by_role("button", name="Approve").click()
    expect(page.locator("#job-live .alert.success")).to_contain_text("Approved ok: the job moves on.")
    expect(page.locator(f"#decision-{ok.pk}")).to_contain_text("Approved by olga: budget checked")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    ok.refresh_from_db()
    assert ok.status == StepStatus.SUCCEEDED
    approved = Event.objects.get(step=ok, kind=EventKind.STEP_APPROVED)
    assert approved.actor == operator and approved.reason == "budget checked"
    run_queued_tasks()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    expect(page.locator("#job-status")).to_have_text("Succeeded")
    expect(page.locator('#job-timeline li[data-kind="step_approved"]')).to_contain_text("olga")
    expect(page.locator('svg.dag g.dag-node[data-step="ship"]')).to_have_attribute("data-status", "succeeded")
    shot(page, "job-approved")


def test_an_operator_follows_a_fan_out_from_its_dag_to_its_items_and_filters_the_failed_one(
    live_server: Any, browser: Browser, operator: User, fake_remote: FakeRemote
) -> None:
    make_policy("once", max_attempts=1)
    make_workflow(
        "lines",
        {
            **step("ship", policy="once"),
            "for_each": "input.lines",
            "join": {"mode": "at_least", "count": 59},
            "max_parallel": 5,
        },
    )
    fake_remote.script("ship", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="lines", input={"lines": [f"L{n}" for n in range(60)]}, submitter=operator).job
    run_queued_tasks()
    from supervisor.scan import scan

    scan(holder="browser-test", draw=lambda: 0.0)
    run_queued_tasks()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    base = live_server.url
    page = sign_in(browser, base, "olga", PASSWORD, f"/ops/jobs/{job.pk}/")
    node = page.locator('svg.dag g.dag-node[data-step="ship"][data-kind="fan-out"]')
    expect(node).to_contain_text("59/60 items succeeded")
    ship = Step.objects.get(job=job, name="ship")
    expect(page.locator(f"#items-of-{ship.pk}")).to_contain_text("60 items")
    shot(page, "job-fan-out")
    page.get_by_role("link", name="see the items").click()
    expect(page).to_have_url(f"{base}/ops/jobs/{job.pk}/steps/ship/items/")
    expect(page.locator("table.items tbody tr")).to_have_count(50)
    expect(page.locator(".pager")).to_contain_text("page 1 of 2")
    page.get_by_role("link", name="next →").click()
    expect(page.locator("table.items tbody tr")).to_have_count(10)
    page.locator(".item-filter a", has_text="failed").click()
    expect(page.locator("table.items tbody tr")).to_have_count(1)
    expect(page.locator("#item-0")).to_contain_text("scripted business_failure")
    shot(page, "fan-out-items-failed")


#: The controls of a page that lie outside the viewport horizontally: each, unless it sits in a
#: box that scrolls sideways (a table in its card, the DAG), then that box. Controls not drawn
#: (hidden inputs, the insides of closed pop-ups) have no box and are skipped.
CONTROLS_OUTSIDE = """() => {
    const width = document.documentElement.clientWidth;
    const outside = [];
    for (const control of document.querySelectorAll("a, button, input, select, textarea, summary")) {
        const own = control.getBoundingClientRect();
        if (own.width === 0 && own.height === 0) continue;
        let box = control.parentElement, scroller = null;
        while (box && box !== document.body) {
            const overflow = getComputedStyle(box).overflowX;
            if ((overflow === "auto" || overflow === "scroll") && box.scrollWidth > box.clientWidth) {
                scroller = box;
                break;
            }
            box = box.parentElement;
        }
        const rect = (scroller || control).getBoundingClientRect();
        if (rect.left < -1 || rect.right > width + 1) {
            const name = (control.textContent || control.getAttribute("name") || "").trim().slice(0, 40);
            outside.push(control.tagName.toLowerCase() + " '" + name + "' at " + Math.round(rect.left) +
                ".." + Math.round(rect.right) + (scroller ? " (its scroll box)" : ""));
        }
    }
    if (document.documentElement.scrollWidth > width + 1) {
        outside.push("the page itself: " + document.documentElement.scrollWidth + " px wide");
    }
    return outside;
}"""


#: The pages with SVG drawings: the job's DAG and timeline, a workflow's DAG, the pools' latency.
DRAWN = ("job", "workflow", "pools")

#: The SVG drawings' words that read badly on what lies behind them: each text's fill against the
#: fill of the shape drawn under it (a DAG node's box), else the background of the nearest element
#: that has one (the card). WCAG's contrast ratio, at least 4.5 (small text).
SVG_TEXT_CONTRAST = """() => {
    const rgb = (value) => {
        const m = (value || "").match(/rgba?\\(([\\d.]+),\\s*([\\d.]+),\\s*([\\d.]+)(?:,\\s*([\\d.]+))?/);
        const seen = m && (m[4] === undefined || Number(m[4]) > 0);
        return seen ? [Number(m[1]), Number(m[2]), Number(m[3])] : null;
    };
    const luminance = ([r, g, b]) => {
        const c = [r, g, b].map((v) => {
            v /= 255;
            return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
        });
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
    };
    const inside = (outer, inner) => outer.left <= inner.left + 1 && outer.right >= inner.right - 1 &&
        outer.top <= inner.top + 1 && outer.bottom >= inner.bottom - 1;
    const found = [];
    let count = 0;
    for (const text of document.querySelectorAll("svg.dag text, svg.timeline text, svg.latency-chart text")) {
        const box = text.getBoundingClientRect();
        if (box.width === 0) continue;
        const ink = rgb(getComputedStyle(text).fill);
        let behind = null;
        for (const shape of text.closest("svg").querySelectorAll("rect")) {
            if (shape.compareDocumentPosition(text) & Node.DOCUMENT_POSITION_FOLLOWING &&
                inside(shape.getBoundingClientRect(), box)) {
                behind = rgb(getComputedStyle(shape).fill) || behind;
            }
        }
        for (let el = text.closest("svg"); !behind && el; el = el.parentElement) {
            behind = rgb(getComputedStyle(el).backgroundColor);
        }
        count += 1;
        const pair = [luminance(ink || [0, 0, 0]), luminance(behind || [255, 255, 255])];
        const [a, b] = pair.sort((x, y) => y - x);
        const ratio = (a + 0.05) / (b + 0.05);
        if (!ink || ratio < 4.5) {
            found.push(text.closest("svg").getAttribute("class") + " '" + text.textContent.slice(0, 30) +
                "': " +
                getComputedStyle(text).fill + " on " + (behind ? "rgb(" + behind.join(", ") + ")" : "?") +
                ", contrast " + ratio.toFixed(2));
        }
    }
    return {count, found};
}"""


def test_every_page_fits_375_800_and_1400_pixels_in_light_and_dark(
    live_server: Any, browser: Browser, operator: User, fake_remote: FakeRemote
) -> None:
    """No control (link, button, field) lies outside the viewport sideways, whatever the width
    and theme: the header wraps, tables scroll inside their card. A screenshot of each page at
    each width and theme is saved under test-artifacts/screenshots/layout/."""
    from supervisor.scan import scan

    make_policy("holding", on_exhausted="hold", max_attempts=1)
    make_workflow("h", step("s1", policy="holding"), step("s2", "s1"))
    fake_remote.script("s1", CallResult(Outcome.TRANSIENT_FAILURE, error="upstream answered 503 " * 6))
    held = job_submit(workflow="h", input={"order": "order-1001", "lines": list(range(30))}).job
    job_submit(workflow="h", input={"order": "order-1002"})
    run_queued_tasks()
    scan(holder="test", draw=lambda: 0.0)
    pool_save(name="payments", kind="http", endpoints=["https://payments.example.com"], max_in_flight=4)
    # Latencies for the Pools page's chart (the fake remote measures none).
    for n, attempt in enumerate(Attempt.objects.filter(finished_at__isnull=False).order_by("pk")):
        Attempt.objects.filter(pk=attempt.pk).update(latency_ms=40 + 90 * n)
    # An event on the Events page: its row carries the Replay form.
    from scheduler.services.events import event_receive

    event_receive(type="order.placed", id="e-layout", source="shop", data={"order": 1}, sender=operator)
    base = live_server.url
    signed_in = sign_in(browser, base, "olga", PASSWORD, "/ops/").context.storage_state()
    pages = {
        "overview": "/ops/",
        "attention": "/ops/attention/",
        "jobs": "/ops/jobs/",
        "job": f"/ops/jobs/{held.pk}/",
        "workflows": "/ops/workflows/",
        "workflow": "/ops/workflows/h/",
        "pools": "/ops/pools/",
        "policies": "/ops/policies/",
        "timeouts": "/ops/calibration/",
        "events": "/ops/events/",
        "schedules": "/ops/schedules/",
        "at risk": "/ops/at-risk/",
    }
    (SHOTS / "layout").mkdir(parents=True, exist_ok=True)
    backgrounds: dict[str, set[str]] = {"light": set(), "dark": set()}
    problems = []
    drawn: dict[tuple[str, str], int] = {}
    for scheme in ("light", "dark"):
        for width in (375, 800, 1400):
            context = watched_context(
                browser,
                viewport={"width": width, "height": 900},
                color_scheme=scheme,
                storage_state=signed_in,
            )
            page = context.new_page()
            for name, path in pages.items():
                page.goto(f"{base}{path}")
                expect(page.get_by_role("button", name="Log out")).to_be_visible()
                backgrounds[scheme].add(page.evaluate("getComputedStyle(document.body).backgroundColor"))
                page.screenshot(path=str(SHOTS / "layout" / f"{name}-{width}-{scheme}.png"), full_page=True)
                problems += [f"{name} at {width} px, {scheme}: {p}" for p in page.evaluate(CONTROLS_OUTSIDE)]
                if name in DRAWN and width == 1400:
                    # The drawings' words stand out from what lies behind them, in either theme.
                    contrast = page.evaluate(SVG_TEXT_CONTRAST)
                    drawn[(name, scheme)] = contrast["count"]
                    problems += [f"{name}, {scheme}: {p}" for p in contrast["found"]]
            context.close()
    assert not problems, "\n".join(problems)
    # Each page's drawings were there to be read: the DAG and timeline, the latency chart.
    assert all(drawn.get((name, scheme), 0) >= 5 for name in DRAWN for scheme in ("light", "dark")), drawn
    # The dark theme is really dark, and the light one light: one background each.
    assert len(backgrounds["light"]) == len(backgrounds["dark"]) == 1
    assert backgrounds["light"] != backgrounds["dark"]
