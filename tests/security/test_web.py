"""The web pages' defences: a strict Content-Security-Policy on every page (and templates that
need nothing it forbids), and CSRF on every console POST."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import resolve

from scheduler.models import Job, Schedule, StepStatus
from scheduler.schedules import schedule_create
from supervisor.urls import urlpatterns as ops_urls
from testbed.processes import ROOT
from tests.api.support import make_user

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

#: What the policy must say, directive by directive.
POLICY = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "object-src": "'none'",
    "base-uri": "'none'",
    "frame-ancestors": "'none'",
    "form-action": "'self'",
}


def policy_of(response: Any) -> dict[str, str]:
    header = response["Content-Security-Policy"]
    return {d.split(" ", 1)[0]: d.split(" ", 1)[1] for d in (p.strip() for p in header.split(";")) if d}


@pytest.mark.parametrize(
    ("path", "who"),
    [
        ("/accounts/login/", None),
        ("/ops/", "operator"),
        ("/ops/jobs/", "operator"),
        ("/admin/", "root"),
        ("/admin/login/", None),
        ("/api/docs/", None),
        ("/api/v1/jobs/", "operator"),
    ],
)
def test_every_page_carries_the_strict_policy(path: str, who: str | None) -> None:
    client = Client()
    if who == "operator":
        client.force_login(make_user("olga", "operators"))
    elif who == "root":
        client.force_login(User.objects.create_superuser("root"))
    response = client.get(path)
    assert response.status_code == 200
    policy = policy_of(response)
    assert {k: policy.get(k) for k in POLICY} == POLICY
    assert "unsafe-inline" not in response["Content-Security-Policy"]
    assert "unsafe-eval" not in response["Content-Security-Policy"]


INLINE = [
    (re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE), "an inline <script>"),
    (re.compile(r"<style\b", re.IGNORECASE), "a <style> element"),
    (re.compile(r"\sstyle\s*=", re.IGNORECASE), "a style attribute"),
    (re.compile(r"\son[a-z]+\s*=", re.IGNORECASE), "an inline event handler"),
    (re.compile(r"javascript:", re.IGNORECASE), "a javascript: URL"),
]


def test_no_template_needs_an_inline_script_or_style() -> None:
    found = []
    for path in sorted((ROOT / "templates").rglob("*.html")):
        text = path.read_text()
        for pattern, what in INLINE:
            for match in pattern.finditer(text):
                found.append(f"{path.relative_to(ROOT)}: {what}: {match.group(0)!r}")
    assert not found, found


# --- CSRF -----------------------------------------------------------------------------------------


def console_posts(job: Job) -> list[str]:
    """Every URL of the console (and its sign-in and sign-out) a form can post to."""
    step = job.steps.get(name="s1")
    return [
        f"/ops/steps/{step.pk}/retry/",
        f"/ops/steps/{step.pk}/resolve/",
        f"/ops/steps/{step.pk}/decide/",
        f"/ops/jobs/{job.pk}/act/",
        f"/ops/jobs/{job.pk}/rerun/",
        f"/ops/jobs/{job.pk}/signal/",
        "/ops/schedules/nightly/act/",
        "/ops/schedules/nightly/backfill/",
        "/ops/events/1/replay/",
        "/ops/schedules/",
        "/ops/attention/bulk/",
        "/ops/",
        "/ops/attention/",
        "/ops/jobs/",
        f"/ops/jobs/{job.pk}/",
        f"/ops/jobs/{job.pk}/steps/s1/items/",
        "/ops/calibration/",
        "/ops/keys/",
        "/ops/at-risk/",
        "/ops/events/",
        "/ops/workflows/",
        f"/ops/workflows/{job.workflow.name}/",
        "/ops/pools/",
        "/ops/policies/",
        "/ops/policies/default/",
        "/accounts/logout/",
        "/accounts/login/",
    ]


def test_every_console_post_without_the_csrf_token_is_refused_and_changes_nothing(
    drain: Any, fake_remote: Any, supervise: Any
) -> None:
    from scheduler.models import Outcome
    from scheduler.services import job_submit
    from tests.factories import make_policy, make_workflow, step

    make_policy("holding", on_exhausted="hold", max_attempts=1)
    make_workflow("held", step("s1", policy="holding"), step("s2", "s1"))
    fake_remote.script("s1", Outcome.TRANSIENT_FAILURE)
    job = job_submit(workflow="held", input={}).job
    drain()
    supervise()
    assert job.steps.get(name="s1").status == StepStatus.HELD
    schedule_create(
        name="nightly", actor=make_user("schedule-owner", "submitters"), workflow="held", cron="0 3 * * *"
    )
    urls = console_posts(job)
    # The list is every route of the console: a new one must be added here.
    assert {resolve(u).url_name for u in urls if u.startswith("/ops/")} == {p.name for p in ops_urls}
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user("olga", "operators"))
    for url in urls:
        body = {
            "action": "cancel",
            "reason": "x",
            "step": job.steps.get(name="s1").pk,
            "stage": "run",
            "from_step": "s1",
        }
        response = client.post(url, body, headers={"HX-Request": "true"})
        assert response.status_code == 403, url
        assert b"CSRF" in response.content, url
    assert job.steps.get(name="s1").status == StepStatus.HELD
    assert Job.objects.get(pk=job.pk).status == "needs_attention"
    assert not Job.objects.filter(rerun_of=job).exists()
    assert Schedule.objects.get(name="nightly").paused_at is None
    assert client.get("/ops/").status_code == 200  # still signed in: the logout was refused too
