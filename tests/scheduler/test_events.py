"""Inbound events (scheduler.services.events, `POST /api/v1/events/`): workflows' triggers start
one job per event, a duplicate is answered with the first answer, and a step waiting for an event
takes only the events its `match` holds for."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone

from agents.fake import FakeRemote
from scheduler.admin import StepDefinitionForm
from scheduler.definitions import validate_steps
from scheduler.models import InboundEvent, Job, Signal, Step, StepStatus
from scheduler.services.events import inbound_events_prune
from tests.api.support import V1, client_for, make_user
from tests.factories import make_workflow, step

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]
S = StepStatus

PLACED = {
    "event": "order.placed",
    "when": "event.data.amount > `0`",
    "input": {"order.$": "event.data.order_id", "amount.$": "event.data.amount", "channel": "shop"},
    "business_key": "event.data.order_id",
}


def fulfil_workflow(*triggers: dict[str, Any], name: str = "fulfil") -> None:
    make_workflow(name, step("reserve"), triggers=list(triggers) or [PLACED])


def order_workflow(name: str = "order") -> None:
    """reserve -> [paid: waits for the order's order.paid event] -> ship."""
    make_workflow(
        name,
        step("reserve"),
        {
            "name": "paid",
            "kind": "signal",
            "event": "order.paid",
            "match": "event.data.order_id == input.order_id",
            "depends_on": ["reserve"],
        },
        step("ship", "paid"),
    )


def post(client: Any, event_id: str, data: Any, *, type: str = "order.placed", source: str = "shop") -> Any:
    return client.post(
        f"{V1}/events/", {"type": type, "id": event_id, "source": source, "data": data}, format="json"
    )


@pytest.fixture
def olga() -> Any:
    return client_for(make_user("olga", "operators"))


def test_a_trigger_starts_one_job_per_event_with_its_input_mapping_and_business_key(
    fake_remote: FakeRemote, olga: Any
) -> None:
    fulfil_workflow()
    answer = post(olga, "e-1", {"order_id": "A-1", "amount": 5})
    assert answer.status_code == 202, answer.content
    body = answer.json()
    assert body["duplicate"] is False and body["signalled"] == [] and body["refused"] == []
    assert body["event"] == InboundEvent.objects.get().pk
    (job_id,) = body["started"]
    job = Job.objects.get(pk=job_id)
    assert job.input == {"order": "A-1", "amount": 5, "channel": "shop"}
    assert job.business_key == "A-1" and job.submitter is not None and job.submitter.username == "olga"
    assert job.workflow.name == "fulfil"
    # The job names the event that started it (as the API shows it, on either database).
    assert job.started_by_event == body["event"]
    assert olga.get(f"{V1}/jobs/{job_id}/").json()["started_by_event"] == body["event"]
    from django.contrib.auth.models import User

    from scheduler import selectors
    from scheduler.serializers import JobSerializer

    light = selectors.job_for_reading(user=User.objects.get(username="olga"), job_id=job.pk)
    assert JobSerializer(light).data == JobSerializer(job).data
    other = post(olga, "e-2", {"order_id": "A-2", "amount": 7}).json()
    assert len(other["started"]) == 1 and other["started"] != body["started"]
    assert Job.objects.count() == 2


def test_the_same_event_posted_again_is_a_duplicate_answered_with_the_first_answer(
    fake_remote: FakeRemote, olga: Any
) -> None:
    fulfil_workflow()
    first = post(olga, "e-1", {"order_id": "A-1", "amount": 5})
    again = post(client_for(make_user("sam", "submitters")), "e-1", {"order_id": "A-9", "amount": 1})
    assert again.status_code == 200
    assert again.json() == {**first.json(), "duplicate": True}
    assert Job.objects.count() == 1 and InboundEvent.objects.count() == 1
    # The same id from another source is another event.
    assert post(olga, "e-1", {"order_id": "A-1", "amount": 5}, source="pos").status_code == 202


def test_a_trigger_whose_when_is_false_starts_nothing(fake_remote: FakeRemote, olga: Any) -> None:
    fulfil_workflow()
    answer = post(olga, "e-1", {"order_id": "A-1", "amount": 0})
    assert answer.status_code == 202
    assert answer.json()["started"] == [] and answer.json()["refused"] == []
    assert not Job.objects.exists()


def test_a_trigger_takes_only_its_own_event_type_and_the_latest_version(
    fake_remote: FakeRemote, olga: Any
) -> None:
    fulfil_workflow()
    fulfil_workflow({"event": "order.cancelled"})  # version 2 no longer takes order.placed
    assert post(olga, "e-1", {"order_id": "A-1", "amount": 5}).json()["started"] == []
    started = post(olga, "e-2", {"order_id": "A-1"}, type="order.cancelled").json()["started"]
    # Without an input mapping the job's input is the event's data.
    assert Job.objects.get(pk=started[0]).input == {"order_id": "A-1"}


def test_triggers_that_cannot_start_their_job_are_reported_and_the_others_go_on(
    fake_remote: FakeRemote, olga: Any
) -> None:
    fulfil_workflow(
        {"event": "order.placed"},  # the data is a list: no input
        {"event": "order.placed", "input": "abs(event.data[0])"},  # abs of a string
        {
            "event": "order.placed",
            "input": {"n.$": "length(event.data)"},
            "business_key": "length(event.data)",
        },
        {"event": "order.placed", "input": {"n.$": "length(event.data)"}},
    )
    answer = post(olga, "e-1", ["x", "y"])
    assert answer.status_code == 202
    body = answer.json()
    assert [(r["workflow"], r["trigger"]) for r in body["refused"]] == [
        ("fulfil", 0),
        ("fulfil", 1),
        ("fulfil", 2),
    ]
    assert "must be a JSON object" in body["refused"][0]["reason"]
    assert "cannot be evaluated" in body["refused"][1]["reason"]
    assert "business_key must be a string" in body["refused"][2]["reason"]
    (job_id,) = body["started"]
    assert Job.objects.get(pk=job_id).input == {"n": 2}


def test_a_trigger_refused_by_the_workflows_contract_is_reported(fake_remote: FakeRemote, olga: Any) -> None:
    make_workflow(
        "strict",
        step("reserve"),
        input_schema={"type": "object", "required": ["order_id"]},
        triggers=[{"event": "order.placed"}],
    )
    body = post(olga, "e-1", {"amount": 1}).json()
    assert body["started"] == [] and body["refused"][0]["workflow"] == "strict"
    assert not Job.objects.exists()


def test_an_event_wait_with_a_match_takes_its_own_orders_event_and_ignores_the_others(
    fake_remote: FakeRemote, drain: Callable[[], int], olga: Any
) -> None:
    order_workflow()
    jobs = {
        order: olga.post(
            f"{V1}/jobs/", {"workflow": "order", "input": {"order_id": order}}, format="json"
        ).json()["id"]
        for order in ("A-1", "A-2")
    }
    drain()
    assert Step.objects.get(job_id=jobs["A-1"], name="paid").status == S.WAITING
    answer = post(olga, "p-2", {"order_id": "A-2", "amount": 7}, type="order.paid", source="payments")
    assert answer.status_code == 202 and answer.json()["signalled"] == [jobs["A-2"]]
    assert answer.json()["started"] == []
    paid = Step.objects.get(job_id=jobs["A-2"], name="paid")
    assert paid.status == S.SUCCEEDED and paid.output == {"order_id": "A-2", "amount": 7}
    assert Step.objects.get(job_id=jobs["A-1"], name="paid").status == S.WAITING
    assert not Signal.objects.filter(job_id=jobs["A-1"]).exists()
    # An event for an order no job waits for reaches none.
    assert (
        post(olga, "p-9", {"order_id": "A-9"}, type="order.paid", source="payments").json()["signalled"] == []
    )
    drain()
    assert Job.objects.get(pk=jobs["A-2"]).status == "succeeded"
    assert Job.objects.get(pk=jobs["A-1"]).status == "running"


def test_an_event_that_comes_before_its_step_waits_is_kept_and_taken_when_it_waits(
    fake_remote: FakeRemote, drain: Callable[[], int], olga: Any
) -> None:
    order_workflow()
    job = olga.post(f"{V1}/jobs/", {"workflow": "order", "input": {"order_id": "A-1"}}, format="json").json()[
        "id"
    ]
    assert Step.objects.get(job_id=job, name="paid").status == S.PENDING
    answer = post(olga, "p-1", {"order_id": "A-1"}, type="order.paid", source="payments")
    assert answer.json()["signalled"] == [job]
    signal = Signal.objects.get(job_id=job)
    assert signal.name == "event:order.paid" and signal.consumed_at is None
    drain()
    paid = Step.objects.get(job_id=job, name="paid")
    assert paid.status == S.SUCCEEDED and paid.output == {"order_id": "A-1"}
    assert Job.objects.get(pk=job).status == "succeeded"


def test_a_submitters_event_reaches_only_its_own_jobs(
    fake_remote: FakeRemote, drain: Callable[[], int]
) -> None:
    order_workflow()
    sam, sue = client_for(make_user("sam", "submitters")), client_for(make_user("sue", "submitters"))
    body = {"workflow": "order", "input": {"order_id": "A-1"}}
    sams = sam.post(f"{V1}/jobs/", body, format="json").json()["id"]
    sue.post(f"{V1}/jobs/", body, format="json")
    answer = post(sam, "p-1", {"order_id": "A-1"}, type="order.paid", source="payments")
    assert answer.json()["signalled"] == [sams]


def test_a_bad_event_is_a_400_and_nothing_is_kept(olga: Any) -> None:
    for bad in (
        {"type": "order paid", "id": "e", "source": "shop"},
        {"type": "order.paid", "id": "", "source": "shop"},
        {"type": "order.paid", "id": "a\nb", "source": "shop"},
        {"type": "order.paid", "id": "e", "source": "x" * 101},
        {"type": "order.paid", "id": "e", "source": "shop", "data": {"text": "nul \x00"}},
        {"type": "order.paid", "id": "e", "source": "shop", "extra": 1},
    ):
        assert olga.post(f"{V1}/events/", bad, format="json").status_code == 400, bad
    assert not InboundEvent.objects.exists()


def test_viewers_may_not_post_events() -> None:
    viewer = client_for(make_user("vera", "viewers"))
    answer = viewer.post(f"{V1}/events/", {"type": "t", "id": "e", "source": "s"}, format="json")
    assert answer.status_code == 403


@pytest.mark.parametrize(
    ("triggers", "message"),
    [
        ([{"event": "order placed"}], "triggers[0].event"),
        ([{"event": "order.placed", "when": "input.amount"}], "reads 'input'"),
        ([{"event": "order.placed", "input": {"a.$": "event.data.("}}], "not a JMESPath"),
        ([{"event": "order.placed", "business_key": ""}, {"event": "x", "whenever": 1}], "Unknown field"),
        ("order.placed", "triggers"),
    ],
)
def test_bad_triggers_are_refused_when_the_workflow_is_saved(
    fake_remote: FakeRemote, triggers: Any, message: str
) -> None:
    make_workflow("base", step("reserve"))
    admin = client_for(make_user("ada", "administrators"))
    answer = admin.patch(f"{V1}/workflows/base/", {"triggers": triggers}, format="json")
    assert answer.status_code == 400, answer.content
    assert message in answer.content.decode()


@pytest.mark.parametrize(
    ("wait", "message"),
    [
        ({"event": "order.paid"}, "needs match"),
        ({"event": "order.paid", "signal": "paid", "match": "`true`"}, "either a signal or an event"),
        ({"event": "order.paid", "match": "results.reserve.id"}, "reads 'results'"),
        ({"signal": "paid", "match": "`true`"}, "match goes with event"),
        ({"event": "order paid", "match": "`true`"}, "event must be"),
    ],
)
def test_bad_event_waits_are_refused_when_the_workflow_is_saved(
    fake_remote: FakeRemote, wait: dict[str, Any], message: str
) -> None:
    make_workflow("base", step("reserve"))
    admin = client_for(make_user("ada", "administrators"))
    steps = [step("reserve"), {"name": "paid", "kind": "signal", "depends_on": ["reserve"], **wait}]
    answer = admin.patch(f"{V1}/workflows/base/", {"steps": steps}, format="json")
    assert answer.status_code == 400, answer.content
    assert message in answer.content.decode()


def test_the_workflow_api_shows_triggers_and_event_waits_and_patch_keeps_them(
    fake_remote: FakeRemote,
) -> None:
    make_workflow("plain", step("reserve"))
    order_workflow()
    admin = client_for(make_user("ada", "administrators"))
    assert admin.get(f"{V1}/workflows/plain/").json()["triggers"] is None
    changed = admin.patch(f"{V1}/workflows/order/", {"triggers": [{"event": "order.placed"}]}, format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["triggers"] == [
        {"event": "order.placed", "when": None, "input": None, "business_key": None}
    ]
    paid = next(s for s in changed.json()["steps"] if s["name"] == "paid")
    assert paid["event"] == "order.paid" and paid["match"] == "event.data.order_id == input.order_id"
    assert "signal" not in paid
    again = admin.patch(f"{V1}/workflows/order/", {"description": "v3"}, format="json").json()
    assert again["version"] == 3 and again["triggers"] == changed.json()["triggers"]
    assert next(s for s in again["steps"] if s["name"] == "paid")["event"] == "order.paid"


def test_events_past_their_retention_are_pruned(fake_remote: FakeRemote, olga: Any, settings: Any) -> None:
    settings.SAS_EVENT_RETENTION_HOURS = 168
    post(olga, "old", None)
    post(olga, "new", None)
    InboundEvent.objects.filter(event_id="old").update(received_at=timezone.now() - dt.timedelta(hours=169))
    assert inbound_events_prune() == 1
    assert list(InboundEvent.objects.values_list("event_id", flat=True)) == ["new"]


def test_the_admin_step_form_writes_an_event_wait_as_the_api_does() -> None:
    make_workflow("base", step("reserve"))
    form = StepDefinitionForm(
        data={
            "name": "paid",
            "kind": "signal",
            "signal": "event:order.paid",
            "event_match": "event.data.order_id == input.order_id",
            "depends_on": "",
        }
    )
    assert form.is_valid(), form.errors
    spec = form.spec()
    assert (spec["event"], spec["signal"]) == ("order.paid", "")
    assert spec["match"] == "event.data.order_id == input.order_id"
    assert validate_steps([spec])[0]["signal"] == "event:order.paid"


def test_a_null_trigger_is_a_400_not_a_failure() -> None:
    from tests.api.support import V1, client_for, make_user
    from tests.factories import make_policy, make_pool, step

    make_pool()
    make_policy()
    admin = client_for(make_user("ada-null", "administrators"))
    answer = admin.post(
        f"{V1}/workflows/", {"name": "w-null", "steps": [step("s")], "triggers": [None]}, format="json"
    )
    assert answer.status_code == 400, answer.content
    assert "triggers" in answer.content.decode()


def test_the_console_lists_the_events_and_a_job_names_the_event_that_started_it(
    fake_remote: FakeRemote, olga: Any, client: Any
) -> None:
    from scheduler.services.correlation import signals_by_key

    fulfil_workflow()
    body = post(olga, "e-7", {"order_id": "A-7", "amount": 5}).json()
    (job_id,) = body["started"]
    from django.contrib.auth.models import User

    make_workflow("paying", {"name": "paid", "kind": "signal", "signal": "payment"})
    operator = User.objects.get(username="olga")
    signals_by_key(business_key="nobody", name="payment", payload=None, sender=operator)
    client.force_login(operator)
    page = client.get("/ops/events/").content.decode()
    assert f'data-event="{body["event"]}"' in page and f"/ops/jobs/{job_id}/" in page
    assert 'data-keyed="' in page and "waiting until" in page
    job_page = client.get(f"/ops/jobs/{job_id}/").content.decode()
    assert 'id="job-started-by-event"' in job_page and "e-7" in job_page
