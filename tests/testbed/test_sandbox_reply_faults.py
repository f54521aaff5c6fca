"""The sandbox's reply faults under a campaign's faults: the first two reports see every kind
for sure (lost, sent twice, late, and one for an unknown operation), however few reports a loaded
machine makes, and a forced report that could not be made passes its faults to the next one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed.sandbox.async_ import deliver
from testbed.sandbox.core import SandboxConfig
from testbed.sandbox.state import SandboxState

pytestmark = pytest.mark.sqlite

FAULTY = SandboxConfig(
    reply_loss_rate=1e-9,
    reply_duplicate_rate=1e-9,
    reply_late_rate=1e-9,
    reply_unknown_rate=1e-9,
    reply_late_ms=1,
)


def counts(remote: SandboxState) -> dict[str, int]:
    faults = remote.store.stats()["faults"]
    return {k: faults[f"reply_{k}"] for k in ("lost", "duplicate", "late", "unknown")}


def test_two_reports_under_faults_see_every_reply_fault(tmp_path: Path) -> None:
    remote = SandboxState(tmp_path / "s.db", config=FAULTY, reset=True)
    reports: list[Any] = []
    unknown: list[int] = []
    for n in range(2):
        deliver(remote, FAULTY, {"n": n}, report=reports.append, report_unknown=lambda: unknown.append(1))
    assert counts(remote) == {"lost": 1, "duplicate": 1, "late": 1, "unknown": 1}
    assert reports == [{"n": 0}, {"n": 0}] and unknown == [1]


def test_a_forced_report_that_fails_passes_its_faults_to_the_next(tmp_path: Path) -> None:
    remote = SandboxState(tmp_path / "s.db", config=FAULTY, reset=True)

    def down(result: Any) -> None:
        raise ConnectionError("the receiver is down")

    with pytest.raises(ConnectionError):
        deliver(remote, FAULTY, {"n": 0}, report=down, report_unknown=lambda: None)
    assert counts(remote) == {"lost": 0, "duplicate": 0, "late": 0, "unknown": 0}
    reports: list[Any] = []
    deliver(remote, FAULTY, {"n": 1}, report=reports.append, report_unknown=lambda: None)
    assert counts(remote)["duplicate"] == 1 and reports == [{"n": 1}, {"n": 1}]
