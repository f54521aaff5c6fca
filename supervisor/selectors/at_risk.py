"""The At risk page: the live jobs the scan flagged likely to miss their workflow's SLA
(supervisor.sla), with when each is due and how late or how close it is."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from django.db.models import OuterRef, Subquery

from scheduler.models import JOB_LIVE, Event, EventKind, Job

#: Jobs listed (newest first); the rest are in the jobs list, `?at_risk=true` on the API.
AT_RISK_SHOWN = 200


@dataclass(frozen=True)
class AtRiskRow:
    job_id: uuid.UUID
    workflow: str
    status: str
    created_at: dt.datetime
    due_at: dt.datetime
    #: Seconds past its due time (negative: still that long to go).
    late_seconds: float
    #: Which rule flagged it ("clock" or "projection") and when its remaining steps were projected
    #: to end, as its `job_at_risk` event recorded them.
    rule: str
    projected_finish: dt.datetime | None

    @property
    def lateness(self) -> str:
        """How late it is, or how close to its due time, in words: "late by 2m 5s", "due in 40s"."""
        seconds = round(abs(self.late_seconds))
        hours, rest = divmod(seconds, 3600)
        minutes, seconds = divmod(rest, 60)
        parts = [f"{hours}h"] if hours else []
        parts += [f"{minutes}m"] if minutes else []
        text = " ".join([*parts, f"{seconds}s"] if seconds or not parts else parts)
        return f"late by {text}" if self.late_seconds >= 0 else f"due in {text}"


def _instant(value: Any) -> dt.datetime | None:
    return dt.datetime.fromisoformat(value) if isinstance(value, str) else None


def at_risk_jobs(now: dt.datetime) -> list[AtRiskRow]:
    """The live jobs flagged at risk, newest first, with their flagging event's rule and
    projection: one query (job_at_risk_idx, and each job's event through event_job_idx)."""
    flagged = Event.objects.filter(job_id=OuterRef("pk"), kind=EventKind.JOB_AT_RISK).order_by("-id")
    rows = (
        Job.objects.filter(at_risk=True, status__in=sorted(JOB_LIVE))
        .annotate(flag=Subquery(flagged.values("data")[:1]))
        .order_by("-created_at", "-id")
        .values_list("pk", "workflow__name", "status", "created_at", "workflow__sla_seconds", "flag")
    )
    found = []
    for pk, workflow, status, created, sla_seconds, flag in rows[:AT_RISK_SHOWN]:
        due = created + dt.timedelta(seconds=sla_seconds or 0)
        data = flag if isinstance(flag, dict) else {}
        found.append(
            AtRiskRow(
                job_id=pk,
                workflow=workflow,
                status=status,
                created_at=created,
                due_at=due,
                late_seconds=(now - due).total_seconds(),
                rule=str(data.get("rule", "")),
                projected_finish=_instant(data.get("projected_finish")),
            )
        )
    return found
