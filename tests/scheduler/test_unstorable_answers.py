"""Answers the database cannot store: the remote did the work, so the success is recorded (with a
null output and an error saying why), never lost to a write that raises."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agents.fake import FakeRemote
from agents.outcome import CallResult, Outcome
from scheduler.models import Attempt, Job, JobStatus, Step, StepStatus
from scheduler.services import job_submit
from tests.agents.test_http import Remote, _reply
from tests.factories import chain, make_pool, make_workflow, step


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def steps_of(job: Job) -> dict[str, Step]:
    return {s.name: s for s in Step.objects.filter(job=job)}


@pytest.mark.parametrize(
    ("output", "why"),
    [
        ({"note": "a\x00b"}, "NUL"),
        ({"amount": float("nan")}, "not finite"),
        ({"amount": float("inf")}, "not finite"),
        (_nested(100), "deeper than 64"),
    ],
)
@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.sqlite
def test_a_success_the_database_cannot_store_completes_the_step_with_a_null_output(
    drain: Callable, fake_remote: FakeRemote, settings: Any, fast_path: bool, output: Any, why: str
) -> None:
    settings.SAS_FAST_PATH = fast_path
    chain(n=2)
    fake_remote.script("s1", CallResult(Outcome.SUCCEEDED, output=output, status_code=200))
    job = job_submit(workflow="chain", input={}).job
    drain()
    s1 = steps_of(job)["s1"]
    assert s1.status == StepStatus.SUCCEEDED
    assert s1.output is None
    attempt = Attempt.objects.get(step=s1)
    assert attempt.outcome == Outcome.SUCCEEDED
    assert why in attempt.error and "recorded as null" in attempt.error
    assert len(fake_remote.calls_for("s1")) == 1
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED


@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.sqlite
def test_a_nul_in_an_answers_excerpt_or_error_is_stored_as_a_replacement_character(
    drain: Callable, fake_remote: FakeRemote, settings: Any, fast_path: bool
) -> None:
    settings.SAS_FAST_PATH = fast_path
    chain(n=1)
    fake_remote.script(
        "s1", CallResult(Outcome.TRANSIENT_FAILURE, status_code=503, excerpt="busy\x00", error="HTTP\x00 503")
    )
    job = job_submit(workflow="chain", input={}).job
    drain()
    attempt = Attempt.objects.get(step=steps_of(job)["s1"])
    assert attempt.outcome == Outcome.TRANSIENT_FAILURE
    assert attempt.response_excerpt == "busy\ufffd"
    assert attempt.error == "HTTP\ufffd 503"
    assert steps_of(job)["s1"].error == "HTTP\ufffd 503"


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


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"note": "\\u0000"}', "NUL"),
        (b'{"amount": NaN}', "not finite"),
        (b'{"amount": 1e999}', "not finite"),
        (b"[" * 2000, "nests too deeply"),
        (b'{"note": "raw \x00 byte"}', ""),
    ],
)
def test_a_real_http_success_with_a_body_the_database_cannot_store_is_recorded(
    drain: Callable, remote: Remote, body: bytes, why: str
) -> None:
    make_pool("web", kind="http", endpoints=[remote.url])
    make_workflow("pay", step("s1", pool="web", path="/pay", compensation=""), step("s2", "s1"))
    remote.handler = lambda h: _reply(h, 200, body)
    job = job_submit(workflow="pay", input={}).job
    drain()
    s1 = steps_of(job)["s1"]
    assert s1.status == StepStatus.SUCCEEDED
    assert s1.output is None
    attempt = Attempt.objects.get(step=s1)
    assert attempt.outcome == Outcome.SUCCEEDED and attempt.status_code == 200
    assert why in attempt.error
    assert "\x00" not in attempt.response_excerpt
    assert len(remote.requests) == 1
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
