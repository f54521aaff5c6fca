"""The Timeouts page (timeout calibration) flags an action whose calls time out and never
succeed: its percentiles are over successes, so without this it would read "ok"."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.test import Client

from agents.fake import FakeRemote
from agents.outcome import CallResult
from scheduler.models import Outcome
from scheduler.services import job_submit
from supervisor.selectors import calibration
from tests.api.support import make_user
from tests.factories import make_policy, make_workflow, step

pytestmark = pytest.mark.django_db


def test_calls_that_time_out_without_a_success_are_flagged(drain: Callable, fake_remote: FakeRemote) -> None:
    make_policy("one-try", max_attempts=1, on_exhausted="fail")
    make_workflow("cal", step("fine"), step("lost", policy="one-try"))
    for n in range(6):
        fake_remote.script("fine", CallResult(Outcome.SUCCEEDED, output={}, latency_ms=100))
        fake_remote.script("lost", CallResult(Outcome.NO_ANSWER, error="no answer in time", latency_ms=1000))
        job_submit(workflow="cal", input={"n": n})
        drain()
    rows = {r.step: r for r in calibration().rows}
    assert rows["lost"].calls == 6 and rows["lost"].successes == 0 and rows["lost"].timeouts == 6
    assert rows["lost"].flagged and rows["lost"].timing_out_without_success
    assert not rows["fine"].flagged and rows["fine"].timeouts == 0
    client = Client()
    client.force_login(make_user("vera", "viewers"))
    html = client.get("/ops/calibration/").content.decode()
    lost = re.search(r'<tr class="flagged" data-step="lost" data-flagged="yes">.*?</tr>', html, re.S)
    assert lost, html
    assert "times out, never succeeds" in lost.group(0) and ">ok<" not in lost.group(0)
    assert '<td class="num timeouts">6</td>' in lost.group(0)
    assert re.search(r'data-step="fine" data-flagged="no">.*?>ok<', html, re.S)
