"""REST API: `POST /api/v1/jobs/batch/`, several jobs in one transaction: all or none, per-item
results, each item's own idempotency key, nothing written for a malformed request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from scheduler.models import Event, EventKind, Job, JobStatus, Step
from tests.api.support import V1, client_for, make_user, submit
from tests.factories import chain, make_workflow, step

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

URL = f"{V1}/jobs/batch/"


@pytest.fixture
def alice() -> APIClient:
    return client_for(make_user("alice", "submitters"))


def batch(client: APIClient, jobs: list[dict[str, Any]]) -> Any:
    return client.post(URL, {"jobs": jobs}, format="json")


def test_a_batch_creates_every_job_and_answers_each_in_order(
    alice: APIClient, drain: Callable[[], int]
) -> None:
    chain(n=2)
    make_workflow("other", step("only"))
    response = batch(
        alice,
        [
            {"workflow": "chain", "input": {"n": 1}},
            {"workflow": "other", "input": {"n": 2}, "business_key": "order 2", "priority": 5},
            {"workflow": "chain", "input": {"n": 3}, "idempotency_key": "k-3"},
        ],
    )
    assert response.status_code == 201, response.json()
    items = response.json()["jobs"]
    assert [i["index"] for i in items] == [0, 1, 2] and all(i["created"] for i in items)
    jobs = [Job.objects.get(pk=i["id"]) for i in items]
    assert [j.workflow.name for j in jobs] == ["chain", "other", "chain"]
    assert [j.input for j in jobs] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert jobs[1].business_key == "order 2" and jobs[1].priority == 5
    assert jobs[2].idempotency_key == "k-3" and jobs[0].idempotency_key is None
    assert all(j.submitter.username == "alice" and j.status == JobStatus.RUNNING for j in jobs)
    assert items[0]["url"] == f"{V1}/jobs/{jobs[0].pk}/"
    # Each job was dispatched and recorded like a single submission.
    assert Event.objects.filter(kind=EventKind.JOB_SUBMITTED).count() == 3
    drain()
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.SUCCEEDED}


def test_a_batch_sent_again_answers_the_jobs_it_made(alice: APIClient) -> None:
    chain(n=1)
    jobs = [{"workflow": "chain", "input": {"n": n}, "idempotency_key": f"k-{n}"} for n in range(3)]
    first = batch(alice, jobs)
    again = batch(alice, jobs)
    assert (first.status_code, again.status_code) == (201, 200)
    assert [i["id"] for i in again.json()["jobs"]] == [i["id"] for i in first.json()["jobs"]]
    assert not any(i["created"] for i in again.json()["jobs"]) and Job.objects.count() == 3
    # A key a single submission used is the same key.
    single = submit(alice, "chain", {"n": 0}, HTTP_IDEMPOTENCY_KEY="k-0")
    assert single.status_code == 200 and single.json()["id"] == first.json()["jobs"][0]["id"]
    # Partly new: the new one is made, the others found.
    mixed = batch(alice, [*jobs, {"workflow": "chain", "input": {"n": 9}, "idempotency_key": "k-9"}])
    assert mixed.status_code == 201 and [i["created"] for i in mixed.json()["jobs"]] == [False] * 3 + [True]


def test_an_item_refused_refuses_the_batch_naming_it_and_nothing_is_written(alice: APIClient) -> None:
    chain(n=1)
    batch(alice, [{"workflow": "chain", "input": {"n": 0}, "idempotency_key": "used"}])
    before = (Job.objects.count(), Step.objects.count(), Event.objects.count())
    for item, status, code in (
        ({"workflow": "nope", "input": {}}, 400, "invalid"),
        ({"workflow": "chain", "input": {"n": 5}, "idempotency_key": "used"}, 422, "idempotency_conflict"),
        ({"workflow": "chain", "input": {}, "callback_url": "ftp://example.com/x"}, 400, "invalid"),
    ):
        response = batch(alice, [{"workflow": "chain", "input": {"n": 1}}, item])
        assert response.status_code == status, response.json()
        body = response.json()
        assert body["code"] == code and body["index"] == 1 and body["detail"].startswith("jobs[1]: ")
        assert (Job.objects.count(), Step.objects.count(), Event.objects.count()) == before


@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.sqlite
def test_an_item_whose_timer_time_cannot_be_read_refuses_the_batch_naming_it(
    alice: APIClient, settings: Any, fast_path: bool
) -> None:
    settings.SAS_FAST_PATH = fast_path
    make_workflow(
        "at", step("a"), {"name": "wait", "kind": "timer", "until": "input.at", "depends_on": ["a"]}
    )
    response = batch(
        alice,
        [
            {"workflow": "at", "input": {"at": "2024-02-29T00:00:00Z"}},
            {"workflow": "at", "input": {"at": "2024-02-30T00:00:00+20:00"}},
        ],
    )
    assert response.status_code == 400, response.json()
    body = response.json()
    assert body["index"] == 1 and body["field"] == "input.at"
    assert body["detail"].startswith("jobs[1]: step 'wait': cannot read the time at input.at: ")
    assert (Job.objects.count(), Step.objects.count(), Event.objects.count()) == (0, 0, 0)


def test_an_input_its_contract_refuses_refuses_the_batch(alice: APIClient) -> None:
    from scheduler.definitions import workflow_create

    make_workflow("untyped", step("s1"))
    workflow_create(
        name="typed",
        steps=[step("s1")],
        input_schema={"type": "object", "required": ["order"], "properties": {"order": {"type": "integer"}}},
    )
    response = batch(
        alice, [{"workflow": "typed", "input": {"order": 1}}, {"workflow": "typed", "input": {}}]
    )
    assert response.status_code == 400 and response.json()["index"] == 1
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"jobs": []},
        {"jobs": "all"},
        {"jobs": [{"workflow": "chain"}]},
        {"jobs": [{"workflow": "chain", "input": {}, "surprise": 1}]},
        {"jobs": [{"workflow": "chain", "input": {}, "idempotency_key": "é"}]},
        {"jobs": [{"workflow": "chain", "input": {}, "idempotency_key": ""}]},
        {"jobs": [{"workflow": "chain", "input": {}, "priority": 5000}]},
        {"jobs": [{"workflow": "chain", "input": {}}], "extra": True},
        {
            "jobs": [
                {"workflow": "chain", "input": {"a": 1}, "idempotency_key": "twice"},
                {"workflow": "chain", "input": {"a": 2}, "idempotency_key": "twice"},
            ]
        },
    ],
)
def test_a_malformed_batch_is_a_400_and_writes_nothing(alice: APIClient, body: dict[str, Any]) -> None:
    chain(n=1)
    response = alice.post(URL, body, format="json")
    assert response.status_code == 400, response.json()
    assert not Job.objects.exists()


def test_a_batch_larger_than_the_limit_is_refused(alice: APIClient, settings: Any) -> None:
    chain(n=1)
    settings.SAS_MAX_BATCH_JOBS = 3
    response = batch(alice, [{"workflow": "chain", "input": {"n": n}} for n in range(4)])
    assert response.status_code == 400 and "at most 3 jobs" in str(response.json())
    assert batch(alice, [{"workflow": "chain", "input": {"n": n}} for n in range(3)]).status_code == 201


def test_only_submitters_send_batches_and_keys_are_per_user() -> None:
    chain(n=1)
    viewer = client_for(make_user("vera", "viewers"))
    assert batch(viewer, [{"workflow": "chain", "input": {}}]).status_code == 403
    assert APIClient().post(URL, {"jobs": []}, format="json").status_code == 401
    alice = client_for(make_user("alice", "submitters"))
    bob = client_for(make_user("bob", "submitters"))
    item = {"workflow": "chain", "input": {}, "idempotency_key": "same"}
    first, other = batch(alice, [item]), batch(bob, [item])
    assert first.status_code == other.status_code == 201
    assert first.json()["jobs"][0]["id"] != other.json()["jobs"][0]["id"]


@pytest.mark.django_db(transaction=True)
def test_two_batches_racing_with_one_key_make_one_job_and_neither_is_a_500() -> None:
    import threading

    from django.db import connection

    chain(n=1)
    user = make_user("alice", "submitters")
    answers: list[int] = []
    start = threading.Barrier(2)

    def send() -> None:
        try:
            client = client_for(user)
            start.wait()
            answers.append(
                batch(client, [{"workflow": "chain", "input": {}, "idempotency_key": "race"}]).status_code
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(answers) in ([200, 201], [201, 409]), answers
    assert Job.objects.filter(idempotency_key="race").count() == 1
