"""The fan-out through the API: a job shows its fan-out step with its items' counts (never the
items as job rows), and the items are pages at /api/v1/jobs/{id}/steps/{step_name}/items/."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agents.fake import FakeRemote
from scheduler.models import Step
from tests.api.support import V1, client_for, make_user, submit
from tests.factories import make_workflow, step

pytestmark = pytest.mark.django_db


def fan_out() -> None:
    make_workflow(
        "order",
        step("reserve"),
        {**step("ship", "reserve"), "for_each": "input.lines", "item_key": "item.sku", "max_parallel": 2},
    )


@pytest.mark.sqlite
def test_a_job_shows_its_fan_out_step_with_counts_and_its_items_page_by_page(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    fan_out()
    sam = client_for(make_user("sam", "submitters"))
    lines = [{"sku": f"S-{n}"} for n in range(5)]
    job_id = submit(sam, "order", {"lines": lines}).json()["id"]
    drain()
    job = sam.get(f"{V1}/jobs/{job_id}/").json()
    assert job["status"] == "succeeded"
    assert [s["name"] for s in job["steps"]] == ["reserve", "ship"]
    ship = job["steps"][1]
    assert ship["items"] == {"total": 5, "succeeded": 5}
    assert job["steps"][0]["items"] is None
    first = sam.get(f"{V1}/jobs/{job_id}/steps/ship/items/?page_size=2").json()
    assert first["count"] == 5 and first["next"] and first["previous"] is None
    assert [(i["index"], i["item"], i["status"]) for i in first["results"]] == [
        (0, {"sku": "S-0"}, "succeeded"),
        (1, {"sku": "S-1"}, "succeeded"),
    ]
    assert first["results"][0]["operation_id"] == f"{ship['operation_id']}:S-0"
    assert first["results"][0]["compensation"] is None
    last = sam.get(f"{V1}/jobs/{job_id}/steps/ship/items/?page=3&page_size=2").json()
    assert [i["index"] for i in last["results"]] == [4]


def test_the_items_of_another_submitters_job_or_of_a_step_without_items_are_a_404(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    fan_out()
    sam = client_for(make_user("sam", "submitters"))
    eve = client_for(make_user("eve", "submitters"))
    olga = client_for(make_user("olga", "operators"))
    job_id = submit(sam, "order", {"lines": [{"sku": "A"}]}).json()["id"]
    drain()
    assert eve.get(f"{V1}/jobs/{job_id}/steps/ship/items/").status_code == 404
    assert olga.get(f"{V1}/jobs/{job_id}/steps/ship/items/").json()["count"] == 1
    answer = sam.get(f"{V1}/jobs/{job_id}/steps/reserve/items/")
    assert answer.status_code == 404
    assert "not a fan-out" in answer.json()["detail"]
    assert sam.get(f"{V1}/jobs/{job_id}/steps/nope/items/").status_code == 404
    assert Step.objects.filter(job_id=job_id).count() == 3  # reserve, ship, ship[0]
