"""The job as PostgreSQL builds it (`sas_job_document`): on PostgreSQL the API answers a
submission and a read of a job with this one statement's text. Field for field it is what the
Python rendering gives (JobSerializer over the ORM's rows), for jobs of every kind of step and
status, and its fields at every level (job, step, attempt, callback) are those the Python declares
(scheduler.serializers.rendering), in its order; a job another submitter made stays hidden."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.renderers import JSONRenderer

from agents.fake import FakeRemote
from sas_project.errors import NotFound
from scheduler import selectors
from scheduler.models import Job, JobStatus, Step
from scheduler.serializers import (
    ATTEMPT_FIELDS,
    CALLBACK_FIELDS,
    JOB_FIELDS,
    STEP_FIELDS,
    JobSerializer,
)
from scheduler.services import job_submit
from supervisor.services import job_compensate, job_pause, job_rerun
from tests.api.support import V1, client_for, make_user, submit
from tests.factories import chain, make_workflow, step

pytestmark = pytest.mark.django_db


def rendered_by_python(user: Any, job_id: Any) -> Any:
    job = selectors.job_detail(user=user, job_id=job_id)
    return json.loads(JSONRenderer().render(JobSerializer(job).data))


def built_by_the_database(user: Any, job_id: Any) -> Any:
    text = selectors.job_json(user=user, job_id=job_id)
    assert text is not None
    return json.loads(text)


def field_names(documents: list[Any]) -> dict[str, set[tuple[str, ...]]]:
    """The field names, in order, of the jobs, steps, attempts and callbacks of `documents`: one
    tuple per distinct list of names at each level (one, when every row has the same fields)."""
    levels = ("job", "step", "attempt", "callback")
    found: dict[str, set[tuple[str, ...]]] = {level: set() for level in levels}
    for job in documents:
        found["job"].add(tuple(job))
        found["callback"].update(tuple(callback) for callback in job["callbacks"])
        for step_ in job["steps"]:
            found["step"].add(tuple(step_))
            found["attempt"].update(tuple(attempt) for attempt in step_["attempts"])
    return found


DECLARED = {
    "job": {tuple(JOB_FIELDS)},
    "step": {tuple(STEP_FIELDS)},
    "attempt": {tuple(ATTEMPT_FIELDS)},
    "callback": {tuple(CALLBACK_FIELDS)},
}


def test_the_document_is_the_python_rendering_for_jobs_of_every_kind(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    olga = make_user("olga", "operators")
    make_workflow("refund", step("credit"))
    make_workflow(
        "kinds",
        step("a"),
        {"name": "sig", "kind": "signal", "signal": "go", "timeout_seconds": 60, "depends_on": ["a"]},
        {"name": "ok", "kind": "approval", "group": "operators", "depends_on": ["a"]},
        {"name": "later", "kind": "timer", "wait_seconds": 300, "depends_on": ["a"]},
        {"name": "refund", "kind": "workflow", "workflow": "refund", "depends_on": ["a"]},
        {**step("ship", "a"), "for_each": "input.lines", "max_parallel": 1},
    )
    chain("c", n=2)
    # Waiting on a signal, an approval, a timer, a child that fails for now, and items.
    fake_remote.script("credit", "transient_failure")
    fake_remote.script("ship", "succeeded", "transient_failure")
    waiting = job_submit(
        workflow="kinds",
        input={"lines": ["x", "y", "z"], "note": 'é ✓ "quoted"', "n": 1.5, "big": 10**15},
        submitter=olga,
        business_key="order-7",
        priority=3,
    ).job
    drain()
    # Settled with a callback due; compensated; paused; a rerun of the first.
    done = job_submit(
        workflow="c", input={}, submitter=olga, callback_url="https://hooks.example.com/done"
    ).job
    drain()
    undone = job_submit(workflow="c", input={}).job
    fake_remote.script("s2", "transient_failure")
    drain()
    job_compensate(actor=olga, job_id=undone.pk, reason="test")
    drain()
    paused = job_submit(workflow="c", input={"p": None}).job
    job_pause(actor=olga, job_id=paused.pk, reason="hold on")
    rerun = job_rerun(actor=olga, job_id=done.pk, from_step="s2", input=None, reason="again")
    drain()
    # A timestamp on a whole second: written without microseconds, as Python's isoformat does.
    Job.objects.filter(pk=paused.pk).update(
        deadline=dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC), updated_at=timezone.now()
    )
    # One job holding its concurrency key, one waiting for it.
    make_workflow("keyed", step("k"), concurrency={"key": "input.account", "limit": 1})
    job_submit(workflow="keyed", input={"account": "acct-7"})
    queued = job_submit(workflow="keyed", input={"account": "acct-7"}).job

    kinds = {s["name"]: s for s in built_by_the_database(olga, waiting.pk)["steps"]}
    assert {n: (kinds[n]["waiting_for"] or {}).get("kind") for n in ("sig", "ok", "later", "refund")} == {
        "sig": "signal",
        "ok": "approval",
        "later": "timer",
        "refund": "workflow",
    }
    assert kinds["ship"]["waiting_for"] == {"kind": "items"}
    assert kinds["ship"]["items"] == {"total": 3, "succeeded": 1, "attempt_failed": 1, "pending": 1}
    assert built_by_the_database(olga, done.pk)["callbacks"], "the settled job's callback is listed"
    assert built_by_the_database(olga, done.pk)["reruns"] == [str(rerun.pk)]
    assert built_by_the_database(olga, paused.pk)["deadline"] == "2030-01-02T03:04:05Z"
    assert Job.objects.get(pk=undone.pk).status == JobStatus.COMPENSATED
    assert Step.objects.filter(job__parent_job=waiting).exists()
    assert built_by_the_database(olga, queued.pk)["waiting_for"] == {
        "kind": "concurrency",
        "key": "acct-7",
        "limit": 1,
    }

    jobs = list(Job.objects.values_list("pk", flat=True))
    assert len(jobs) >= 6
    for job_id in jobs:
        assert built_by_the_database(olga, job_id) == rendered_by_python(olga, job_id), job_id
    # A field added to the SQL document or to the Python declaration alone fails here, at every
    # level (the jobs above have steps, attempts and a callback), and so does a field out of order.
    assert field_names([built_by_the_database(olga, job_id) for job_id in jobs]) == DECLARED
    assert field_names([rendered_by_python(olga, job_id) for job_id in jobs]) == DECLARED
    assert JobSerializer.Meta.fields == list(JOB_FIELDS)


def test_the_submission_and_the_read_answer_with_the_document(fake_remote: FakeRemote) -> None:
    chain("c", n=2)
    sam = make_user("sam", "submitters")
    client = client_for(sam)
    made = submit(client, "c", {"k": [1, 2]}, HTTP_IDEMPOTENCY_KEY="key-1")
    assert made.status_code == 201 and made["Content-Type"] == "application/json"
    job_id = made.json()["id"]
    assert made["Location"].endswith(f"{V1}/jobs/{job_id}/")
    assert made.json() == rendered_by_python(sam, job_id)
    again = submit(client, "c", {"k": [1, 2]}, HTTP_IDEMPOTENCY_KEY="key-1")
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == job_id
    read = client.get(f"{V1}/jobs/{job_id}/")
    assert read.status_code == 200 and read.json() == rendered_by_python(sam, job_id)
    # Another submitter learns nothing of it.
    other = client_for(make_user("tim", "submitters")).get(f"{V1}/jobs/{job_id}/")
    assert other.status_code == 404
    with pytest.raises(NotFound):
        selectors.job_json(user=make_user("una", "submitters"), job_id=job_id)
