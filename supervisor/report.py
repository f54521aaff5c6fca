"""What one pass of the supervisor's scan did (`ScanReport`), and what the scan and its sweeps
share: the lease's fence and the counting of decisions and quarantines."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from scheduler.services.quarantine import LoopStopped
from supervisor.lease import LeaseGrant, lease_fence


@dataclass
class ScanReport:
    acted: bool
    holder: str
    token: int | None = None
    examined: int = 0
    remediated: int = 0
    timed_out: int = 0
    batches: int = 0
    lag_ms: int = 0
    duration_ms: int = 0
    lost_lease: bool = False
    decisions: dict[str, int] = field(default_factory=dict)
    #: The scanning loop's previous pass, all its work included, and its longest since it started.
    pass_ms: int = 0
    longest_pass_ms: int = 0
    #: Items set aside this scan because handling them raised (scheduler.services.quarantine).
    quarantined: int = 0

    def figures(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("acted")
        return data

    def snapshot(self) -> dict[str, Any]:
        """The counters now, to undo what a batch that rolled back had counted."""
        data = asdict(self)
        data["decisions"] = dict(self.decisions)
        return data

    def restore(self, snapshot: dict[str, Any]) -> None:
        for name, value in snapshot.items():
            setattr(self, name, dict(value) if name == "decisions" else value)


def fence(grant: LeaseGrant) -> None:
    """Inside a transaction: renew the lease, or stop the scan (LoopStopped) when it was lost."""
    if not lease_fence(grant):
        raise LoopStopped("the lease was lost")


def source_of(grant: LeaseGrant) -> str:
    return f"supervisor:{grant.holder}"


def quarantined(report: ScanReport) -> None:
    report.quarantined += 1
    tally(report, "quarantined")


def tally(report: ScanReport, what: str) -> None:
    report.decisions[what] = report.decisions.get(what, 0) + 1
