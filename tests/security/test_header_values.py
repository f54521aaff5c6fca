"""An endpoint secret the HTTP library cannot send never reaches an attempt's error (shown to the
job's submitter) and never crashes the agent task: the call is recorded as not sent."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from agents.models import AgentEndpoint
from scheduler.models import Attempt, Outcome, Step, StepStatus
from scheduler.services import job_submit
from tests.agents.test_http import Remote
from tests.factories import make_pool, make_workflow, step

SECRET = "s3cr3t-value"


@pytest.fixture
def remote() -> Iterator[Remote]:
    from agents import http

    r = Remote()
    yield r
    if http._client is not None:
        http._client.close()
        http._client = None
    r.server.shutdown()
    r.server.server_close()


@pytest.mark.parametrize("secret", [SECRET + " ", " " + SECRET, SECRET + "\u00e9"])
def test_a_stored_secret_http_cannot_send_fails_the_call_as_not_sent_without_quoting_it(
    drain: Callable, remote: Remote, secret: str
) -> None:
    make_pool("web", kind="http", endpoints=[remote.url])
    # A row saved before values were checked at save time.
    AgentEndpoint.objects.filter(url=remote.url).update(
        secret_header_name="Authorization", secret_header_value=secret
    )
    make_workflow("pay", step("s1", pool="web", path="/pay", compensation=""))
    job = job_submit(workflow="pay", input={}).job
    drain()
    s1 = Step.objects.get(job=job, name="s1")
    attempt = Attempt.objects.get(step=s1)
    assert attempt.outcome == Outcome.BUSINESS_FAILURE
    assert attempt.error.startswith("not sent")
    assert SECRET not in attempt.error and SECRET not in s1.error
    assert s1.status == StepStatus.ATTEMPT_FAILED
    assert remote.requests == []
