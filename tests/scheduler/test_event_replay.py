"""An operator's replay of a received event (scheduler.services.events.event_replay, `POST
/api/v1/events/{id}/replay/`, the Events page's Replay): the event acted on again as today's
workflows and jobs take it, as a row of its own naming the operator and the reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User

from agents.fake import FakeRemote
from scheduler.models import Event, EventKind, InboundEvent, Job, Signal, Step, StepStatus
from scheduler.services.events import inbound_events_prune
from tests.api.support import V1, client_for, make_user
from tests.scheduler.test_events import fulfil_workflow, order_workflow, post

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]
S = StepStatus


@pytest.fixture
def olga() -> Any:
    return client_for(make_user("olga", "operators"))


def replay(client: Any, event: int, reason: str = "the trigger was fixed", **headers: str) -> Any:
    return client.post(f"{V1}/events/{event}/replay/", {"reason": reason}, format="json", headers=headers)


def counts() -> tuple[int, int, int, int]:
    return (InboundEvent.objects.count(), Job.objects.count(), Signal.objects.count(), Event.objects.count())


def test_a_replay_starts_a_new_job_from_the_trigger_and_names_the_operator(
    fake_remote: FakeRemote, olga: Any, client: Any
) -> None:
    fulfil_workflow()
    sam = client_for(make_user("sam", "submitters"))
    first = post(sam, "e-1", {"order_id": "A-1", "amount": 5}).json()
    answer = replay(olga, first["event"])
    assert answer.status_code == 202, answer.content
    body = answer.json()
    assert body["replay_of"] == first["event"] and body["replayed_by"] == "olga"
    assert body["reason"] == "the trigger was fixed" and body["duplicate"] is False
    (job_id,) = body["started"]
    assert job_id not in first["started"] and Job.objects.count() == 2
    job = Job.objects.get(pk=job_id)
    # Submitted by the event's sender, as the first job was; started by the replay's row.
    assert job.submitter is not None and job.submitter.username == "sam"
    assert job.started_by_event == body["event"] != first["event"]
    row = InboundEvent.objects.get(pk=body["event"])
    assert (row.replay_of_id, row.replayed_by.username if row.replayed_by else None) == (
        first["event"],
        "olga",
    )
    assert (row.source, row.event_id, row.type) == ("shop", "e-1", "order.placed")
    client.force_login(User.objects.get(username="olga"))
    page = client.get(f"/ops/jobs/{job_id}/").content.decode()
    assert "replayed by olga" in page and "the trigger was fixed" in page
    # The event posted again is still a duplicate of the first, answered with its answer.
    again = post(sam, "e-1", {"order_id": "A-1", "amount": 5})
    assert again.status_code == 200 and again.json() == {**first, "duplicate": True}


def test_a_replay_reaches_a_job_that_waits_for_the_event_now_and_its_history_names_the_operator(
    fake_remote: FakeRemote, drain: Callable[[], int], olga: Any
) -> None:
    order_workflow()
    # Paid before any job of the order existed: it reached none.
    early = post(olga, "p-1", {"order_id": "A-1"}, type="order.paid", source="payments").json()
    assert early["signalled"] == []
    job = olga.post(f"{V1}/jobs/", {"workflow": "order", "input": {"order_id": "A-1"}}, format="json").json()[
        "id"
    ]
    other = olga.post(
        f"{V1}/jobs/", {"workflow": "order", "input": {"order_id": "A-2"}}, format="json"
    ).json()["id"]
    drain()
    assert Step.objects.get(job_id=job, name="paid").status == S.WAITING
    body = replay(olga, early["event"], reason="the payment came before the order").json()
    assert body["signalled"] == [job] and body["started"] == []
    paid = Step.objects.get(job_id=job, name="paid")
    assert paid.status == S.SUCCEEDED and paid.output == {"order_id": "A-1"}
    received = Event.objects.get(job_id=job, kind=EventKind.SIGNAL_RECEIVED)
    assert received.actor is not None and received.actor.username == "olga"
    assert received.source == "operator:olga" and "replayed" in received.reason
    assert Step.objects.get(job_id=other, name="paid").status == S.WAITING
    # A second replay finds no step waiting for it any more.
    assert replay(olga, early["event"]).json()["signalled"] == []
    assert Signal.objects.filter(job_id=job).count() == 1


def test_the_same_idempotency_key_replays_once(fake_remote: FakeRemote, olga: Any) -> None:
    fulfil_workflow()
    first = post(olga, "e-1", {"order_id": "A-1", "amount": 5}).json()
    one = replay(olga, first["event"], **{"Idempotency-Key": "replay-1"})
    two = replay(olga, first["event"], **{"Idempotency-Key": "replay-1"})
    assert one.status_code == two.status_code == 202
    assert one.json() == two.json() and two.headers.get("Idempotent-Replayed") == "true"
    assert Job.objects.count() == 2 and InboundEvent.objects.count() == 2


def test_only_operators_replay_and_a_refused_replay_changes_nothing(
    fake_remote: FakeRemote, olga: Any
) -> None:
    fulfil_workflow()
    first = post(olga, "e-1", {"order_id": "A-1", "amount": 5}).json()
    before = counts()
    for role in ("submitters", "viewers", "event-senders"):
        answer = replay(client_for(make_user(f"u-{role}", role)), first["event"])
        assert answer.status_code == 403, (role, answer.content)
    assert replay(olga, 999_999).status_code == 404
    assert replay(olga, first["event"], reason="x" * 501).status_code == 400
    extra = olga.post(f"{V1}/events/{first['event']}/replay/", {"reason": "", "more": 1}, format="json")
    assert extra.status_code == 400
    assert counts() == before
    made = replay(olga, first["event"]).json()
    before = counts()
    twice = replay(olga, made["event"])
    assert twice.status_code == 400 and "replay that one" in twice.json()["detail"]
    assert counts() == before


def test_an_events_replays_go_with_it_when_it_is_pruned(
    fake_remote: FakeRemote, olga: Any, settings: Any
) -> None:
    import datetime as dt

    from django.utils import timezone

    fulfil_workflow()
    first = post(olga, "e-1", {"order_id": "A-1", "amount": 5}).json()
    replay(olga, first["event"])
    InboundEvent.objects.filter(pk=first["event"]).update(received_at=timezone.now() - dt.timedelta(days=30))
    inbound_events_prune()
    assert not InboundEvent.objects.exists()
    assert Job.objects.count() == 2  # the jobs stay


def test_the_events_page_offers_replay_to_operators_only_and_says_what_it_did(
    fake_remote: FakeRemote, olga: Any, client: Any
) -> None:
    fulfil_workflow()
    first = post(olga, "e-1", {"order_id": "A-1", "amount": 5}).json()
    url = f"/ops/events/{first['event']}/replay/"
    client.force_login(make_user("vic", "viewers"))
    assert url not in client.get("/ops/events/").content.decode()
    before = counts()
    assert client.post(url, {"reason": "no"}).status_code == 403
    assert counts() == before
    client.force_login(User.objects.get(username="olga"))
    assert url in client.get("/ops/events/").content.decode()
    answer = client.post(url, {"reason": "customer asked again"}, follow=True)
    page = answer.content.decode()
    assert answer.status_code == 200
    assert f"Replayed event {first['event']}" in page and "started 1 job(s)" in page
    assert "replay of" in page and "customer asked again" in page
    assert Job.objects.count() == 2
    # A replay is not offered a replay of its own; a bad reason changes nothing.
    made = InboundEvent.objects.get(replay_of__isnull=False)
    assert f"/ops/events/{made.pk}/replay/" not in page
    before = counts()
    assert "at most 500" in client.post(url, {"reason": "x" * 600}, follow=True).content.decode()
    assert counts() == before
