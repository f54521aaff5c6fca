"""Answers and expression values the database cannot store: the remote did the work, so the
success is recorded on its attempt and the step is held for an operator with the reason (never lost
to a write that raises, never retried or compensated as a failure); a value an expression makes
that cannot be stored holds its step the same way."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group, User

from agents.fake import FakeRemote
from agents.outcome import CallResult, Outcome
from sas_project.permissions import role_groups_ensure
from scheduler import expressions
from scheduler.models import Attempt, Event, EventKind, Job, JobStatus, Step, StepStatus
from scheduler.services import job_submit
from supervisor.services import step_resolve
from tests.agents.test_http import Remote, _reply
from tests.factories import chain, make_pool, make_workflow, step


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def operator(name: str = "olga") -> User:
    role_groups_ensure()
    user = User.objects.create_user(name)
    user.groups.add(Group.objects.get(name="operators"))
    return user


def steps_of(job: Job) -> dict[str, Step]:
    return {s.name: s for s in Step.objects.filter(job=job)}


UNSTORABLE_OUTPUTS = [
    pytest.param({"a": {"b": "\ud800"}}, "an unpaired surrogate at $.a.b", id="surrogate"),
    pytest.param({"note": "a\x00b"}, "a NUL character at $.note", id="nul"),
    pytest.param({"a\x00": 1}, "a NUL character in a key at $", id="nul-key"),
    pytest.param({"amount": float("nan")}, "a number that is not finite (nan) at $.amount", id="nan"),
    pytest.param({"amount": [float("-inf")]}, "not finite (-inf) at $.amount[0]", id="infinity"),
    pytest.param(_nested(100), "nesting deeper than 64 levels", id="deep"),
]


def assert_held_with_its_success_kept(job: Job, fake_remote: FakeRemote, why: str) -> Step:
    s1 = steps_of(job)["s1"]
    assert s1.status == StepStatus.HELD and s1.output is None
    assert s1.last_outcome == Outcome.SUCCEEDED
    assert s1.status_reason.startswith("the answer cannot be stored: ") and why in s1.status_reason
    held = Event.objects.get(step=s1, kind=EventKind.STEP_HELD)
    assert held.reason == s1.status_reason
    attempt = Attempt.objects.get(step=s1)
    assert attempt.outcome == Outcome.SUCCEEDED and attempt.finished_at is not None
    assert why in attempt.error
    job.refresh_from_db()
    assert job.status == JobStatus.NEEDS_ATTENTION
    return s1


@pytest.mark.parametrize(("output", "why"), UNSTORABLE_OUTPUTS)
@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.sqlite
def test_a_success_whose_answer_cannot_be_stored_holds_the_step_with_the_reason_and_the_attempt_kept(
    drain: Callable,
    fake_remote: FakeRemote,
    supervise: Callable,
    settings: Any,
    fast_path: bool,
    output: Any,
    why: str,
) -> None:
    settings.SAS_FAST_PATH = fast_path
    chain(n=2)
    fake_remote.script("s1", CallResult(Outcome.SUCCEEDED, output=output, status_code=200))
    job = job_submit(workflow="chain", input={}).job
    drain()
    assert_held_with_its_success_kept(job, fake_remote, why)
    # The remote did the work: the supervisor neither calls it again nor undoes it.
    supervise()
    drain()
    assert len(fake_remote.calls_for("s1")) == 1 and fake_remote.compensations() == []
    assert steps_of(job)["s2"].status == StepStatus.PENDING
    # An operator who knows the output resolves the step, and the job goes on.
    step_resolve(actor=operator(), step_id=steps_of(job)["s1"].pk, output={"amount": 1}, reason="read it")
    drain()
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
        (b'{"a": {"b": "\\ud800"}}', "an unpaired surrogate at $.a.b"),
        (b'{"note": "\\u0000"}', "a NUL character at $.note"),
        (b'{"amount": NaN}', "not finite (nan) at $.amount"),
        (b'{"amount": 1e999}', "not finite (inf) at $.amount"),
    ],
)
def test_a_real_http_success_whose_body_cannot_be_stored_holds_the_step_and_keeps_the_attempt(
    drain: Callable, remote: Remote, body: bytes, why: str
) -> None:
    make_pool("web", kind="http", endpoints=[remote.url])
    make_workflow("pay", step("s1", pool="web", path="/pay", compensation=""), step("s2", "s1"))
    remote.handler = lambda h: _reply(h, 200, body)
    job = job_submit(workflow="pay", input={}).job
    drain()
    s1 = steps_of(job)["s1"]
    assert s1.status == StepStatus.HELD and s1.output is None
    assert s1.status_reason == f"the answer cannot be stored: {why}" or why in s1.status_reason
    attempt = Attempt.objects.get(step=s1)
    assert attempt.outcome == Outcome.SUCCEEDED and attempt.status_code == 200
    assert why in attempt.error
    assert len(remote.requests) == 1
    job.refresh_from_db()
    assert job.status == JobStatus.NEEDS_ATTENTION


@pytest.mark.parametrize(
    ("body", "why"),
    [(b"[" * 2000, "nests too deeply"), (b'{"note": "raw \x00 byte"}', "")],
)
def test_a_real_http_success_whose_body_is_not_json_completes_the_step_with_a_null_output(
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


@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.sqlite
def test_an_output_projection_whose_value_cannot_be_stored_holds_the_step_with_the_reason(
    drain: Callable, fake_remote: FakeRemote, supervise: Callable, settings: Any, fast_path: bool
) -> None:
    settings.SAS_FAST_PATH = fast_path
    make_workflow("price", {**step("s1"), "output": "{amount: to_number(input.s)}"}, step("s2", "s1"))
    job = job_submit(workflow="price", input={"s": "NaN"}).job
    drain()
    s1 = steps_of(job)["s1"]
    assert s1.status == StepStatus.HELD and s1.output is None
    assert "'{amount: to_number(input.s)}'" in s1.status_reason
    assert "cannot be stored: a number that is not finite (nan) at $.amount" in s1.status_reason
    assert Attempt.objects.get(step=s1).outcome == Outcome.SUCCEEDED
    job.refresh_from_db()
    assert job.status == JobStatus.NEEDS_ATTENTION
    supervise()
    drain()
    assert len(fake_remote.calls_for("s1")) == 1 and fake_remote.compensations() == []


@pytest.mark.sqlite
def test_a_child_input_mapping_whose_value_cannot_be_stored_holds_the_step_and_starts_no_child(
    drain: Callable, fake_remote: FakeRemote, supervise: Callable
) -> None:
    make_workflow("refund", step("credit"))
    make_workflow(
        "order",
        step("charge"),
        {
            "name": "refund",
            "kind": "workflow",
            "workflow": "refund",
            "depends_on": ["charge"],
            "input": {"amount.$": "to_number(input.s)"},
        },
    )
    job = job_submit(workflow="order", input={"s": "NaN"}).job
    drain()
    supervise()
    drain()
    refund = steps_of(job)["refund"]
    assert refund.status == StepStatus.HELD
    assert refund.status_reason.startswith("its input mapping cannot be evaluated: ")
    assert "cannot be stored: a number that is not finite (nan) at $" in refund.status_reason
    assert not Job.objects.filter(parent_job=job).exists()
    job.refresh_from_db()
    assert job.status == JobStatus.NEEDS_ATTENTION


@pytest.mark.sqlite
def test_a_for_each_whose_items_cannot_be_stored_holds_the_step_and_makes_no_items(
    drain: Callable, fake_remote: FakeRemote
) -> None:
    make_workflow("each", {**step("s1"), "for_each": "input.prices[*].to_number(@)"})
    job = job_submit(workflow="each", input={"prices": ["1", "NaN"]}).job
    drain()
    s1 = steps_of(job)["s1"]
    assert s1.status == StepStatus.HELD
    assert "cannot be stored: a number that is not finite (nan) at $[1]" in s1.status_reason
    assert Step.objects.filter(job=job, parent=s1).count() == 0
    assert fake_remote.calls == []


@pytest.mark.parametrize(
    ("expression", "data", "why"),
    [
        ("to_number(s)", {"s": "NaN"}, "not finite (nan) at $"),
        ("{a: to_number(s)}", {"s": "-Infinity"}, "not finite (-inf) at $.a"),
        ("sum(xs)", {"xs": [1e308, 1e308]}, "not finite (inf) at $"),
        ("avg(xs)", {"xs": [1e308, 1e308]}, "not finite (inf) at $"),
    ],
)
def test_an_expression_whose_value_cannot_be_stored_raises_where_it_is_evaluated(
    expression: str, data: dict[str, Any], why: str
) -> None:
    with pytest.raises(expressions.NotStorable, match=re.escape(why)):
        expressions.evaluate(expression, data)
    # A condition's value is not stored: NaN is as true there as any number.
    assert expressions.truthy(expressions.evaluate(expression, data, stored=False))
