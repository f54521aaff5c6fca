"""A small run of the fault campaign, every fault on: the invariants must hold."""

from __future__ import annotations

import pytest

from tests.processes import assert_no_job_lost_and_no_effect_doubled, run_fault_campaign

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.serial,
    pytest.mark.django_db(transaction=True),
    # Above the campaign runner's own 600 s limit, so that its report is what a slow run shows.
    pytest.mark.timeout(900),
]


def test_a_small_campaign_with_every_fault_on_loses_no_job_and_doubles_no_effect() -> None:
    report = run_fault_campaign("fault-campaign", "--jobs", "60", "--duration", "20", "--drain", "90")
    assert_no_job_lost_and_no_effect_doubled(report, jobs=60)
    # The faults really happened.
    faults = report["faults"]
    assert faults["kills"] >= 2
    assert faults["connections_dropped"] >= 1
    assert faults["operator_pairs"] >= 1
    assert faults["operator_pairs_violating"] == 0
    assert faults["broker_restarts"] >= 1
    remote_faults = report["remote_faults"]
    for kind in ("reply_lost", "reply_duplicate", "reply_late", "reply_unknown"):
        assert remote_faults[kind] >= 1, (kind, remote_faults)
