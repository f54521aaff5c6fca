"""A small run of the fault campaign, every fault on: the invariants must hold, the waits' too."""

from __future__ import annotations

import pytest

from testbed.campaign_waits import MUST_BE_ZERO
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
    # 24 wait jobs: every card of the wait faults' decks is dealt.
    report = run_fault_campaign(
        "fault-campaign", "--jobs", "60", "--duration", "20", "--drain", "90", "--wait-share", "0.4"
    )
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
    # Waits: no signal, approval or timer taken twice, no wait dispatched, every wait job ended
    # as its definitions say, and each of their faults happened.
    waits = report["waits"]["figures"]
    assert waits["wait_jobs"] == 24
    assert {name: waits[name] for name in MUST_BE_ZERO if waits[name]} == {}
    assert waits["signals_consumed"] == waits["step_signalled_events"] >= 1
    assert waits["duplicate_groups"] >= 1
    assert waits["replays_after_end"] >= 1
    assert waits["signals_after_end"] == waits["signals_after_end_refused"] >= 1
    assert waits["signals_early"] + waits["extra_signals_buffered"] >= 1
    assert (
        waits["approval_pairs"] == waits["approval_pairs_one_applied"] + waits["approval_pairs_none_applied"]
    )
    assert waits["approval_pairs_one_applied"] >= 1
    assert waits["timers_fired"] >= 1
    assert waits["waits_timed_out"] >= 1
    assert faults["cluster_blackouts"] == 1
    assert waits["blackout_timers_due"] >= 1
