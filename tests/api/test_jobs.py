"""REST API: job submission (idempotent), the job list and its filters, a job's detail and history,
and what a submitter may see."""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from agents.fake import FakeRemote
from scheduler import selectors
from scheduler.models import Event, Job, JobStatus, Outcome
from scheduler.services import job_submit
from tests.api.support import V1, client_for, make_user, submit
from tests.factories import chain, diamond, make_workflow

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice() -> APIClient:
    return client_for(make_user("alice", "submitters"))


@pytest.fixture
def bob() -> APIClient:
    return client_for(make_user("bob", "submitters"))


@pytest.fixture
def olga() -> APIClient:
    return client_for(make_user("olga", "operators"))


# --- submission -------------------------------------------------------------------------------


def test_a_submission_creates_the_job_and_answers_it_with_its_steps(alice: APIClient) -> None:
    chain(n=2)
    response = submit(alice, "chain", {"order": 7})
    assert response.status_code == 201
    body = response.json()
    job = Job.objects.get(pk=body["id"])
    assert response["Location"] == f"{V1}/jobs/{job.pk}/"
    assert job.submitter.username == "alice"
    assert body["workflow"] == "chain" and body["workflow_version"] == 1
    assert body["status"] == JobStatus.RUNNING
    assert body["input"] == {"order": 7} and body["result"] is None
    assert body["paused"] is False and body["compensation_reason"] == ""
    assert [s["name"] for s in body["steps"]] == ["s1", "s2"]
    first = body["steps"][0]
    assert first["status"] == "dispatched" and first["attempt_count"] == 1 and first["pool"] == "local"
    assert first["attempts"][0]["number"] == 1 and first["attempts"][0]["outcome"] == ""


def test_the_same_key_and_body_answer_200_with_the_same_job(alice: APIClient) -> None:
    chain(n=1)
    first = submit(alice, "chain", {"a": 1}, HTTP_IDEMPOTENCY_KEY="order-1")
    again = submit(alice, "chain", {"a": 1}, HTTP_IDEMPOTENCY_KEY="order-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again["Idempotent-Replayed"] == "true" and not first.has_header("Idempotent-Replayed")
    assert Job.objects.count() == 1


def test_the_same_key_with_another_body_is_a_422_naming_the_job(alice: APIClient) -> None:
    chain(n=1)
    first = submit(alice, "chain", {"a": 1}, HTTP_IDEMPOTENCY_KEY="order-1")
    other = submit(alice, "chain", {"a": 2}, HTTP_IDEMPOTENCY_KEY="order-1")
    assert other.status_code == 422
    body = other.json()
    assert body["code"] == "idempotency_conflict"
    assert "already used for a different request" in body["detail"]
    assert body["job_id"] == first.json()["id"]
    assert Job.objects.count() == 1


def test_one_key_used_by_two_users_makes_two_jobs(alice: APIClient, bob: APIClient) -> None:
    chain(n=1)
    assert submit(alice, "chain", HTTP_IDEMPOTENCY_KEY="k").status_code == 201
    assert submit(bob, "chain", HTTP_IDEMPOTENCY_KEY="k").status_code == 201
    assert Job.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_submissions_with_one_key_make_one_job() -> None:
    chain(n=1)
    user = make_user("alice", "submitters")
    barrier = threading.Barrier(2)
    answers: list[tuple[int, str]] = []

    def send() -> None:
        try:
            client = client_for(user)
            barrier.wait()
            response = submit(client, "chain", {"a": 1}, HTTP_IDEMPOTENCY_KEY="same")
            answers.append((response.status_code, response.json()["id"]))
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(code for code, _ in answers) == [200, 201]
    assert len({job_id for _, job_id in answers}) == 1
    assert Job.objects.count() == 1


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"workflow": "nope", "input": {}}, "workflow", "unknown workflow 'nope'"),
        ({"workflow": "chain", "input": [1, 2]}, "input", "Expected a dictionary"),
        ({"workflow": "chain", "input": "x"}, "input", "Expected a dictionary"),
        ({"input": {}}, "workflow", "This field is required."),
        ({"workflow": "chain"}, "input", "This field is required."),
        ({"workflow": 12, "input": {}}, "workflow", "unknown workflow '12'"),
        ({"workflow": ["chain"], "input": {}}, "workflow", "Not a valid string."),
        ({"workflow": "chain", "input": {}, "urgency": 1}, "urgency", "Unknown field."),
        ({"workflow": "x" * 101, "input": {}}, "workflow", "no more than 100 characters"),
    ],
)
def test_a_bad_submission_is_a_400_naming_the_field_and_creates_nothing(
    alice: APIClient, body: dict[str, Any], field: str, message: str
) -> None:
    chain(n=1)
    response = alice.post(f"{V1}/jobs/", body, format="json")
    assert response.status_code == 400
    error = response.json()
    assert error["field"] == field and error["code"] == "invalid"
    assert message in error["detail"]
    assert message in error[field][0]
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"workflow": "chain", "input": {"note": "a\\u0000b"}}', "NUL"),
        (b'{"workflow": "chain", "input": {"note": "\\udfff"}}', "an unpaired surrogate at $.input.note"),
        (b'{"workflow": "chain", "input": {"n": 1e999}}', "not finite (inf) at $.input.n"),
        (
            b'{"workflow": "chain", "input": ' + b'{"a": ' * 70 + b"1" + b"}" * 71,
            "nesting deeper than 64 levels",
        ),
    ],
)
def test_input_the_database_could_not_store_is_a_400(alice: APIClient, raw: bytes, message: str) -> None:
    chain(n=1)
    response = alice.generic("POST", f"{V1}/jobs/", raw, content_type="application/json")
    assert response.status_code == 400 and message in response.json()["detail"]
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("key", "message"),
    [("", "1 to 255 printable"), ("k" * 256, "1 to 255 printable"), ("tab\there", "printable ASCII")],
)
def test_a_bad_idempotency_key_is_a_400(alice: APIClient, key: str, message: str) -> None:
    chain(n=1)
    response = submit(alice, "chain", HTTP_IDEMPOTENCY_KEY=key)
    assert response.status_code == 400
    assert response.json()["field"] == "Idempotency-Key" and message in response.json()["detail"]
    assert Job.objects.count() == 0


# --- reading ----------------------------------------------------------------------------------


def test_the_list_is_newest_first_in_cursor_pages(alice: APIClient) -> None:
    chain(n=1)
    ids = [submit(alice, "chain").json()["id"] for _ in range(3)]
    page = alice.get(f"{V1}/jobs/", {"page_size": 2}).json()
    assert page["previous"] is None and "count" not in page and "cursor=" in page["next"]
    assert [j["id"] for j in page["results"]] == ids[::-1][:2]
    rest = alice.get(page["next"]).json()
    assert [j["id"] for j in rest["results"]] == ids[:1] and rest["next"] is None
    assert [j["id"] for j in alice.get(rest["previous"]).json()["results"]] == ids[::-1][:2]
    assert set(page["results"][0]) >= {"id", "workflow", "workflow_version", "status", "paused", "created_at"}


def test_a_cursor_page_does_not_shift_when_jobs_arrive(alice: APIClient) -> None:
    chain(n=1)
    ids = [submit(alice, "chain").json()["id"] for _ in range(4)]
    first = alice.get(f"{V1}/jobs/", {"page_size": 2}).json()
    newer = [submit(alice, "chain").json()["id"] for _ in range(3)]
    second = alice.get(first["next"]).json()
    # The second page goes on where the first stopped: no job seen twice, none skipped.
    assert [j["id"] for j in first["results"] + second["results"]] == ids[::-1]
    assert second["next"] is None
    # A numbered page, as before, counts the list and shifts as jobs arrive.
    numbered = alice.get(f"{V1}/jobs/", {"page": 2, "page_size": 2}).json()
    assert numbered["count"] == 7 and [j["id"] for j in numbered["results"]] == [newer[0], ids[3]]


def test_a_cursor_this_api_did_not_make_is_a_400(alice: APIClient) -> None:
    import base64

    chain(n=1)
    submit(alice, "chain")
    forged = [
        "not base64!",
        base64.b64encode(b"p=yesterday").decode(),
        base64.b64encode(b"o=-1").decode(),
        "é",
    ]
    for cursor in forged:
        response = alice.get(f"{V1}/jobs/", {"cursor": cursor})
        assert response.status_code == 400, (cursor, response.json())
        assert response.json()["field"] == "cursor"
    events = alice.get(
        f"{V1}/jobs/{Job.objects.get().pk}/events/", {"cursor": base64.b64encode(b"p=x").decode()}
    )
    assert events.status_code == 400


def test_page_size_is_capped_at_200(alice: APIClient) -> None:
    chain(n=1)
    for _ in range(3):
        submit(alice, "chain")
    assert len(alice.get(f"{V1}/jobs/", {"page_size": 10_000}).json()["results"]) == 3


def test_an_out_of_range_page_is_a_404(alice: APIClient) -> None:
    response = alice.get(f"{V1}/jobs/", {"page": 9})
    assert response.status_code == 404 and response.json()["code"] == "not_found"


def test_the_list_filters_by_status_workflow_and_creation_time(
    olga: APIClient, drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    chain(n=1)
    diamond()
    done = submit(olga, "chain").json()["id"]
    drain()
    running = submit(olga, "diamond").json()["id"]
    Job.objects.filter(pk=done).update(created_at=timezone.now() - dt.timedelta(days=2))

    def ids(**params: str) -> list[str]:
        response = olga.get(f"{V1}/jobs/", params)
        assert response.status_code == 200, response.json()
        return [j["id"] for j in response.json()["results"]]

    assert ids(status="succeeded") == [done]
    assert ids(status="running") == [running]
    assert ids(workflow="diamond") == [running]
    assert ids(workflow="unknown") == []
    yesterday = (timezone.now() - dt.timedelta(days=1)).isoformat()
    assert ids(created_after=yesterday) == [running]
    assert ids(created_before=yesterday) == [done]
    assert ids(created_after="2000-01-01T00:00:00Z", status="succeeded", workflow="chain") == [done]
    assert ids(status="", workflow="") == [running, done]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "sleeping"}, "status"),
        ({"created_after": "yesterday"}, "created_after"),
        ({"created_before": "2024-13-01T00:00:00Z"}, "created_before"),
        ({"workflow": "a\x00b"}, "workflow"),
    ],
)
def test_a_bad_filter_is_a_400_naming_it(alice: APIClient, params: dict[str, str], field: str) -> None:
    response = alice.get(f"{V1}/jobs/", params)
    assert response.status_code == 400
    assert response.json()["field"] == field and response.json()[field]


def test_the_detail_shows_steps_and_attempts_with_their_outcomes(
    olga: APIClient, drain: Callable[[], int], fake_remote: FakeRemote, supervise: Callable[..., Any]
) -> None:
    chain(n=2)
    fake_remote.script("s1", Outcome.TRANSIENT_FAILURE)
    job_id = submit(olga, "chain", {"n": 1}).json()["id"]
    drain()
    supervise()
    drain()
    body = olga.get(f"{V1}/jobs/{job_id}/").json()
    assert body["status"] == JobStatus.SUCCEEDED
    assert body["result"] == {"s1": {"ok": "s1"}, "s2": {"ok": "s2"}}
    s1 = body["steps"][0]
    assert s1["status"] == "succeeded" and s1["attempt_count"] == 2 and s1["output"] == {"ok": "s1"}
    assert [a["outcome"] for a in s1["attempts"]] == ["transient_failure", "succeeded"]
    attempt = s1["attempts"][0]
    assert set(attempt) >= {
        "number",
        "kind",
        "endpoint",
        "pool",
        "policy_version",
        "dispatched_at",
        "deadline",
        "started_at",
        "finished_at",
        "outcome",
        "status_code",
        "latency_ms",
        "response_excerpt",
        "error",
        "late_outcome",
    }
    assert attempt["kind"] == "call" and attempt["pool"] == "local" and attempt["policy_version"] == 1
    assert attempt["error"] == "scripted transient_failure"


def test_an_unknown_or_malformed_job_id_is_a_json_404(alice: APIClient) -> None:
    for url in (f"{V1}/jobs/{uuid.uuid4()}/", f"{V1}/jobs/not-a-uuid/", f"{V1}/jobs/{uuid.uuid4()}/events/"):
        response = alice.get(url)
        assert response.status_code == 404, url
        assert response.json()["code"] == "not_found"


def test_the_history_is_oldest_first_and_names_the_actor(
    olga: APIClient, drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    chain(n=1)
    job_id = submit(olga, "chain").json()["id"]
    olga.post(f"{V1}/jobs/{job_id}/pause/", {"reason": "checking"}, format="json")
    response = olga.get(f"{V1}/jobs/{job_id}/events/")
    assert response.status_code == 200
    events = response.json()["results"]
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    assert events[0]["kind"] == "job_submitted" and events[0]["actor"] == "olga"
    assert events[0]["step"] is None and events[0]["from_status"] == ""
    dispatched = next(e for e in events if e["step"] == "s1")
    assert dispatched["attempt"] == 1 and dispatched["source"] == "scheduler"
    paused = events[-1]
    assert paused["actor"] == "olga" and paused["reason"] == "checking"
    assert set(paused) == {
        "id",
        "kind",
        "step",
        "from_status",
        "to_status",
        "attempt",
        "source",
        "actor",
        "reason",
        "data",
        "created_at",
    }
    assert len(response.json()["results"]) == Event.objects.filter(job_id=job_id).count()


# --- what a submitter sees --------------------------------------------------------------------


def test_a_submitter_sees_only_its_own_jobs(alice: APIClient, bob: APIClient, olga: APIClient) -> None:
    chain(n=1)
    mine = submit(alice, "chain").json()["id"]
    theirs = submit(bob, "chain").json()["id"]
    assert [j["id"] for j in alice.get(f"{V1}/jobs/").json()["results"]] == [mine]
    assert alice.get(f"{V1}/jobs/{mine}/").status_code == 200
    assert alice.get(f"{V1}/jobs/{theirs}/").status_code == 404
    assert alice.get(f"{V1}/jobs/{theirs}/events/").status_code == 404
    assert {j["id"] for j in olga.get(f"{V1}/jobs/").json()["results"]} == {mine, theirs}
    assert olga.get(f"{V1}/jobs/{theirs}/").status_code == 200


def test_a_submitter_replaying_a_key_of_another_user_gets_its_own_job(
    alice: APIClient, bob: APIClient
) -> None:
    chain(n=1)
    theirs = submit(bob, "chain", HTTP_IDEMPOTENCY_KEY="k").json()["id"]
    mine = submit(alice, "chain", HTTP_IDEMPOTENCY_KEY="k").json()["id"]
    assert mine != theirs


# --- query counts -------------------------------------------------------------------------------


def test_reading_a_job_costs_the_same_queries_whatever_its_size(
    olga: APIClient,
    drain: Callable[[], int],
    fake_remote: FakeRemote,
    supervise: Callable[..., Any],
    django_assert_max_num_queries: Any,
    django_assert_num_queries: Any,
) -> None:
    chain("small", n=1)
    chain("large", n=6)
    for name in ("s1", "s2", "s3", "s4", "s5", "s6"):
        fake_remote.script(name, Outcome.TRANSIENT_FAILURE)
    small = submit(olga, "small").json()["id"]
    large = submit(olga, "large").json()["id"]
    for _ in range(6):
        drain()
        supervise()
    drain()
    assert Job.objects.get(pk=large).steps.count() == 6
    with django_assert_max_num_queries(8) as captured:
        assert olga.get(f"{V1}/jobs/{small}/").status_code == 200
    queries = len(captured)
    with django_assert_num_queries(queries):
        body = olga.get(f"{V1}/jobs/{large}/").json()
    assert len(body["steps"]) == 6 and sum(len(s["attempts"]) for s in body["steps"]) >= 11


def test_a_page_of_jobs_costs_the_same_queries_whatever_its_length(
    olga: APIClient, django_assert_max_num_queries: Any, django_assert_num_queries: Any
) -> None:
    chain(n=1)
    submit(olga, "chain")
    with django_assert_max_num_queries(6) as captured:
        assert olga.get(f"{V1}/jobs/").status_code == 200
    queries = len(captured)
    for _ in range(10):
        submit(olga, "chain")
    with django_assert_num_queries(queries):
        assert len(olga.get(f"{V1}/jobs/").json()["results"]) == 11


def test_a_page_of_events_costs_the_same_queries_whatever_its_length(
    olga: APIClient, django_assert_max_num_queries: Any, django_assert_num_queries: Any
) -> None:
    chain(n=1)
    job_id = submit(olga, "chain").json()["id"]
    # Three of them are the rate limiter's statement in a savepoint (the test's transaction): one
    # statement in a real request.
    with django_assert_max_num_queries(9) as captured:
        short = olga.get(f"{V1}/jobs/{job_id}/events/").json()
    queries = len(captured)
    for _ in range(5):
        olga.post(f"{V1}/jobs/{job_id}/pause/", format="json")
        olga.post(f"{V1}/jobs/{job_id}/resume/", format="json")
    with django_assert_num_queries(queries):
        longer = olga.get(f"{V1}/jobs/{job_id}/events/").json()
    assert len(longer["results"]) >= len(short["results"]) + 10


def test_the_fast_renderings_equal_drfs_own(fake_remote: Any, drain: Callable[[], int]) -> None:
    """The job, step and attempt representations are rendered by hand for speed; field for field
    they must be what DRF's ModelSerializer renders (nulls, compensations, outcomes included)."""
    from rest_framework import serializers as drf

    from scheduler.serializers import AttemptSerializer, JobSerializer, JobSummarySerializer, StepSerializer
    from supervisor.serializers import StepActionResultSerializer
    from supervisor.services import job_compensate

    chain("c", n=2)
    user = make_user("operator-olga", "operators")
    done = job_submit(workflow="c", input={"x": [1, {"y": None}]}, submitter=user).job
    drain()
    undone = job_submit(workflow="c", input={}).job
    fake_remote.script("s2", "transient_failure")
    drain()
    job_compensate(actor=user, job_id=undone.pk, reason="test")
    drain()
    assert Job.objects.get(pk=undone.pk).status == JobStatus.COMPENSATED
    checked = 0
    for job in Job.objects.all():
        job = selectors.job_detail(user=user, job_id=job.pk)
        generic: Any = drf.ModelSerializer.to_representation
        assert JobSerializer(job).data == generic(JobSerializer(job), job)
        # The light rows the API reads on PostgreSQL render the same.
        assert (
            JobSerializer(selectors.job_for_reading(user=user, job_id=job.pk)).data == JobSerializer(job).data
        )
        assert JobSummarySerializer(job).data == generic(JobSummarySerializer(job), job)
        for step in job.steps.all():
            assert StepSerializer(step).data == generic(StepSerializer(step), step)
            assert StepActionResultSerializer(step).data == generic(StepActionResultSerializer(step), step)
            for attempt in step.attempts.all():
                assert AttemptSerializer(attempt).data == generic(AttemptSerializer(attempt), attempt)
                checked += 1
    assert checked >= 4 and done.pk


def test_the_light_read_keeps_another_submitters_job_hidden() -> None:
    from sas_project.errors import NotFound

    chain("c", n=1)
    owner = make_user("owner-sam", "submitters")
    other = make_user("other-sue", "submitters")
    job = job_submit(workflow="c", input={}, submitter=owner).job
    assert str(selectors.job_for_reading(user=owner, job_id=job.pk).pk) == str(job.pk)
    with pytest.raises(NotFound):
        selectors.job_for_reading(user=other, job_id=job.pk)
    with pytest.raises(NotFound):
        selectors.job_for_reading(user=owner, job_id="not-a-uuid")


# --- search ---------------------------------------------------------------------------------------


@pytest.mark.sqlite
def test_jobs_are_found_by_business_key_idempotency_key_and_input_field(fake_remote: FakeRemote) -> None:
    from tests.factories import step  # the module's loops name their own `step`

    chain(n=1)
    make_workflow("other", step("a"))
    sam = make_user("sam", "submitters")
    client = client_for(sam)
    one = client.post(
        f"{V1}/jobs/",
        {"workflow": "chain", "input": {"customer": 42, "tier": "gold"}, "business_key": "order 1001"},
        format="json",
        headers={"Idempotency-Key": "k-1"},
    ).json()
    client.post(f"{V1}/jobs/", {"workflow": "chain", "input": {"customer": 7}}, format="json")
    client.post(f"{V1}/jobs/", {"workflow": "other", "input": {"customer": 42}}, format="json")

    def ids(query: str) -> list[str]:
        response = client.get(f"{V1}/jobs/?{query}")
        assert response.status_code == 200, response.json()
        return [j["id"] for j in response.json()["results"]]

    assert ids("business_key=order%201001") == [one["id"]]
    assert ids("idempotency_key=k-1") == [one["id"]]
    assert ids("workflow=chain&input.customer=42") == [one["id"]]
    assert ids("workflow=chain&input.tier=gold") == [one["id"]]
    assert ids("workflow=chain&input.customer=8") == []
    assert one["business_key"] == "order 1001"
    assert client.get(f"{V1}/jobs/?input.customer=42").status_code == 400  # needs a workflow
    assert client.get(f"{V1}/jobs/?workflow=chain&input.a__b=1").status_code == 400
