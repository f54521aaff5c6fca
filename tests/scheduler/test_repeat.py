"""Loops: a `repeat` step calls again, one iteration after another, each an item with its own
operation ID (`<op>/iter-<n>`) and attempts, until its `until` holds over the iteration's answer;
the wait between iterations is a deadline the waits' sweep reads; exhausting `max_iterations`
holds, fails (the job compensates) or continues; undoing it undoes its last iteration that
succeeded, once."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from agents.fake import FakeRemote
from agents.outcome import CallResult, Outcome
from sas_project.errors import InvalidInput
from scheduler.models import Event, EventKind, Job, JobStatus, Step, StepKind, StepStatus
from scheduler.services import job_submit
from tests.api.support import V1, client_for, make_user, submit
from tests.factories import make_policy, make_workflow, step

pytestmark = pytest.mark.django_db
S = StepStatus
PENDING = CallResult(Outcome.SUCCEEDED, output={"state": "pending"})
DONE = CallResult(Outcome.SUCCEEDED, output={"state": "done"})


def poll_step(**loop: Any) -> dict[str, Any]:
    call = {k: v for k, v in step("poll").items() if k not in ("name", "depends_on")}
    return {
        "name": "poll",
        "kind": "repeat",
        "depends_on": ["start"],
        "call": call,
        "until": "output.state == 'done'",
        "interval_seconds": 60,
        "max_iterations": 5,
        **loop,
    }


def monitor(**loop: Any) -> None:
    make_workflow("monitor", step("start"), poll_step(**loop), step("finish", "poll"))


def iterations(job: Job) -> list[Step]:
    return list(Step.objects.filter(job=job, parent__name="poll", kind=StepKind.ITEM).order_by("item_index"))


def named(job: Job, name: str) -> Step:
    return Step.objects.get(job=job, name=name, kind=StepKind.ACTION)


def interval_passes(job: Job) -> None:
    Step.objects.filter(job=job, name="poll", kind=StepKind.ACTION).update(
        deadline=timezone.now() - dt.timedelta(seconds=1)
    )


def run_iterations(job: Job, n: int, drain: Callable[[], int], supervise: Callable[..., Any]) -> None:
    drain()
    for _ in range(n - 1):
        interval_passes(job)
        supervise()
        drain()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"call": None}, "call must be an object"),
        ({"until": None}, "until must be a JMESPath"),
        ({"until": "output.state =="}, "until: not a JMESPath"),
        ({"until": "results.start"}, "until"),
        ({"interval_seconds": None}, "interval_seconds is required"),
        ({"interval_seconds": -1}, "interval_seconds must be a number"),
        ({"max_iterations": 0}, "max_iterations must be a whole number"),
        ({"max_iterations": 1001}, "max_iterations must be a whole number"),
        ({"on_exhausted": "retry"}, "on_exhausted must be one of hold, fail, continue"),
        ({"call": {"pool": "nowhere", "path": "agents.builtin.noop", "policy": "default"}}, "unknown pool"),
        ({"call": {**step("x"), "for_each": "input"}}, "unknown fields for call"),
        ({"for_each": "input.lines"}, "unknown fields for repeat steps: for_each"),
    ],
)
def test_a_repeat_definition_is_refused_naming_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        monitor(**change)


def test_a_repeat_definition_is_refused_with_a_400_through_the_api() -> None:
    make_workflow("seed", step("start"))  # the pool and policy exist
    olga = client_for(make_user("olga", "administrators"))
    body = {"name": "monitor", "steps": [step("start"), poll_step(max_iterations=0)]}
    response = olga.post(f"{V1}/workflows/", body, format="json")
    assert response.status_code == 400, response.content
    assert "max_iterations" in str(response.json())


def test_until_true_on_the_third_iteration_succeeds_with_its_output_after_three_operations(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    monitor()
    fake_remote.script("poll", PENDING, PENDING, DONE)
    job = job_submit(workflow="monitor", input={"id": 7}).job
    run_iterations(job, 3, drain, supervise)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    poll = named(job, "poll")
    assert poll.status == S.SUCCEEDED and poll.output == {"state": "done"}
    ops = [c.operation_id for c in fake_remote.calls_for("poll")]
    assert ops == [f"{poll.operation_id}/iter-{n}" for n in (1, 2, 3)]
    assert [i.status for i in iterations(job)] == [S.SUCCEEDED] * 3
    assert Event.objects.filter(step=poll, kind=EventKind.ITERATION_SCHEDULED).count() == 2
    assert Event.objects.filter(step=poll, kind=EventKind.UNTIL_MET).count() == 1
    assert fake_remote.calls_for("finish")[0].payload["results"]["poll"] == {"state": "done"}


def test_no_iteration_starts_before_its_interval_has_passed(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    monitor(interval_seconds=3600)
    fake_remote.script("poll", PENDING, DONE)
    job = job_submit(workflow="monitor", input={}).job
    drain()
    poll = named(job, "poll")
    assert poll.status == S.WAITING and poll.pool_id is None
    assert 3590 < (poll.deadline - poll.updated_at).total_seconds() <= 3600
    second = iterations(job)[1]
    assert second.status == S.PENDING and second.operation_id == f"{poll.operation_id}/iter-2"
    supervise()
    drain()
    assert len(fake_remote.calls_for("poll")) == 1  # not due: no call, no attempt
    assert not second.attempts.exists()
    interval_passes(job)
    assert supervise().decisions.get("iteration_started") == 1
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert len(fake_remote.calls_for("poll")) == 2


def test_an_iterations_transient_failure_is_retried_within_the_same_iteration(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    monitor()
    fake_remote.script("poll", Outcome.TRANSIENT_FAILURE, DONE)
    job = job_submit(workflow="monitor", input={}).job
    drain()
    supervise()  # the policy retries the first iteration
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    (first,) = iterations(job)
    ops = {c.operation_id for c in fake_remote.calls_for("poll")}
    assert ops == {first.operation_id} and first.attempts.count() == 2


def test_exhausted_with_hold_holds_the_step_for_an_operator(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    monitor(max_iterations=2, on_exhausted="hold")
    fake_remote.script("poll", PENDING, PENDING)
    job = job_submit(workflow="monitor", input={}).job
    run_iterations(job, 2, drain, supervise)
    job.refresh_from_db()
    assert job.status == JobStatus.NEEDS_ATTENTION
    poll = named(job, "poll")
    assert poll.status == S.HELD
    assert Event.objects.filter(step=poll, kind=EventKind.ITERATIONS_EXHAUSTED).count() == 1
    assert len(iterations(job)) == 2


def test_exhausted_with_continue_succeeds_with_the_last_output(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    monitor(max_iterations=2, on_exhausted="continue")
    fake_remote.script("poll", PENDING, CallResult(Outcome.SUCCEEDED, output={"state": "late"}))
    job = job_submit(workflow="monitor", input={}).job
    run_iterations(job, 2, drain, supervise)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert named(job, "poll").output == {"state": "late"}


def test_exhausted_with_fail_compensates_the_job_undoing_the_last_iteration_once(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    monitor(max_iterations=3, on_exhausted="fail")
    fake_remote.script("poll", PENDING, PENDING, PENDING)
    job = job_submit(workflow="monitor", input={}).job
    run_iterations(job, 3, drain, supervise)
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPENSATED
    poll = named(job, "poll")
    assert poll.status == S.FAILED
    undone = [c for c in fake_remote.calls if c.payload.get("compensates") and c.payload["step"] == "poll"]
    assert [c.operation_id for c in undone] == [f"{poll.operation_id}/iter-3:compensate"]
    assert [i.status for i in iterations(job)] == [S.SUCCEEDED, S.SUCCEEDED, S.COMPENSATED]
    assert fake_remote.compensations() == ["poll", "start"]


def test_a_later_failure_undoes_the_repeat_once_for_its_last_iteration(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    make_policy("once", max_attempts=1)
    make_workflow("monitor", step("start"), poll_step(), step("finish", "poll", policy="once"))
    fake_remote.script("poll", PENDING, DONE)
    fake_remote.script("finish", Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="monitor", input={}).job
    run_iterations(job, 2, drain, supervise)
    supervise()
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPENSATED
    poll = named(job, "poll")
    assert poll.status == S.COMPENSATED
    assert [i.status for i in iterations(job)] == [S.SUCCEEDED, S.COMPENSATED]
    assert fake_remote.compensations() == ["poll", "start"]


def test_an_iteration_failing_for_good_fails_the_repeat_as_a_failed_call_would(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    make_policy("once", max_attempts=1)
    call = {k: v for k, v in step("poll", policy="once").items() if k not in ("name", "depends_on")}
    make_workflow("monitor", step("start"), {**poll_step(), "call": call}, step("finish", "poll"))
    fake_remote.script("poll", PENDING, Outcome.BUSINESS_FAILURE)
    job = job_submit(workflow="monitor", input={}).job
    run_iterations(job, 2, drain, supervise)
    supervise()
    drain()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPENSATED
    assert named(job, "poll").status == S.FAILED
    # The last iteration that succeeded (the first: the second was refused) is undone, once.
    assert fake_remote.compensations() == ["poll", "start"]
    assert [i.status for i in iterations(job)] == [S.COMPENSATED, S.FAILED]


def test_the_items_api_lists_the_iterations(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    monitor()
    fake_remote.script("poll", PENDING, DONE)
    sam = client_for(make_user("sam", "submitters"))
    job_id = submit(sam, "monitor", {}).json()["id"]
    job = Job.objects.get(pk=job_id)
    run_iterations(job, 2, drain, supervise)
    document = sam.get(f"{V1}/jobs/{job_id}/").json()
    poll = next(s for s in document["steps"] if s["name"] == "poll")
    assert poll["items"] == {"total": 2, "succeeded": 2}
    page = sam.get(f"{V1}/jobs/{job_id}/steps/poll/items/").json()
    op = named(job, "poll").operation_id
    assert [i["operation_id"] for i in page["results"]] == [f"{op}/iter-1", f"{op}/iter-2"]
    assert [i["index"] for i in page["results"]] == [1, 2]


def test_the_console_draws_a_repeat_with_its_iteration_and_its_loop(
    drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    monitor(max_iterations=4)
    fake_remote.script("poll", PENDING, PENDING)
    ops = Client()
    ops.force_login(make_user("olga", "operators"))
    job = job_submit(workflow="monitor", input={}).job
    run_iterations(job, 2, drain, supervise)
    dag = _dag(ops.get(f"/ops/jobs/{job.pk}/").content.decode())
    # Two iterations answered "pending": the third is the one due next.
    assert "iteration 3 of at most 4" in dag
    # The workflow's page names the loop: its until and interval (whole in the node's title),
    # its most iterations.
    definition = _dag(ops.get("/ops/workflows/monitor/").content.decode())
    poll = definition[definition.index("<title>poll:") :]
    assert poll.startswith(
        "<title>poll: repeat step \u00b7 at most 4 (until output.state == &#x27;done&#x27; \u00b7 every 60 s)"
    )
    assert ">until output.state == &#x27;\u2026<" in poll


def _dag(html: str) -> str:
    start = html.index('<svg class="dag"')
    return html[start : html.index("</svg>", start)]


def test_a_looping_jobs_document_is_the_python_rendering_on_postgresql(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    from django.db import connection

    from tests.api.test_job_document import built_by_the_database, rendered_by_python

    if connection.vendor != "postgresql":
        pytest.skip("the job document is PostgreSQL's")
    monitor(interval_seconds=3600)
    fake_remote.script("poll", PENDING, DONE)
    ada = make_user("ada", "operators")
    job = job_submit(workflow="monitor", input={}, submitter=ada).job
    drain()
    assert named(job, "poll").status == S.WAITING
    document = built_by_the_database(ada, job.pk)
    assert document == rendered_by_python(ada, job.pk)
    poll = next(s for s in document["steps"] if s["name"] == "poll")
    assert poll["waiting_for"] == {"kind": "items"} and poll["items"]["succeeded"] == 1


def test_the_admin_step_form_writes_a_repeat_as_the_api_does() -> None:
    import json

    from agents.models import AgentPool
    from scheduler.admin import StepDefinitionForm
    from scheduler.definitions import validate_steps
    from scheduler.models import RemediationPolicy

    make_workflow("base", step("start"))
    form = StepDefinitionForm(
        data={
            "name": "poll",
            "kind": "repeat",
            "pool": AgentPool.objects.get(name="local").pk,
            "path": "agents.builtin.noop",
            "policy": RemediationPolicy.objects.get(name="default").pk,
            "depends_on": "",
            "repeat": json.dumps(
                {
                    "until": "output.state == 'done'",
                    "interval_seconds": 30,
                    "max_iterations": 10,
                    "on_exhausted": "fail",
                }
            ),
        }
    )
    assert form.is_valid(), form.errors
    spec = form.spec()
    assert spec["call"]["pool"] == "local" and spec["call"]["path"] == "agents.builtin.noop"
    (cleaned,) = validate_steps([spec])
    assert cleaned["repeat"] == {
        "until": "output.state == 'done'",
        "interval_seconds": 30.0,
        "max_iterations": 10,
        "on_exhausted": "fail",
    }
