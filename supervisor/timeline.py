"""A job's attempts on one time axis, as inline SVG drawn on the server (as the DAG is: no
JavaScript). One lane per step, actions first then compensations; in each lane every call as a
bar from when it went out (`started_at`, else `dispatched_at`) to its answer (or now, while in
flight), coloured by its outcome; the backoff between two calls as a dotted line; a wait step's
wait as a hatched bar. The axis counts seconds (or minutes, hours) from the job's submission, with
its start's UTC time, so a backoff's growth and a wait's length read off the ticks. Every piece of
text is escaped. Labels, lanes and the axis take their colours from the stylesheet, or else the
card's ink (`currentColor`), so they read in either theme; the bars' fills are mid-tones that read
on both.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

if TYPE_CHECKING:
    from scheduler.models import Job
    from supervisor.selectors import StepRow

LABEL_W = 150
PLOT_W = 640
LANE_H = 22
BAR_H = 12
PAD = 12
AXIS_H = 34
NAME_CHARS = 20

#: outcome -> fill (a call still in flight has none yet).
OUTCOME_FILL: dict[str, str] = {
    "succeeded": "#16a34a",
    "business_failure": "#b91c1c",
    "transient_failure": "#ea580c",
    "not_happened": "#9ca3af",
    "no_answer": "#d97706",
}
IN_FLIGHT = "#2563eb"
WAIT_FILL = "#0891b2"
COMPENSATION_FILL = "#7c3aed"
#: Tick spacings the axis may use, in seconds: the first giving at most eight ticks.
STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)


@dataclass(frozen=True)
class Bar:
    lane: int
    start: dt.datetime
    end: dt.datetime
    fill: str
    title: str
    kind: str  # "call", "wait", "backoff"
    attempt: int | None = None


def _unit(span: float) -> tuple[str, float]:
    """How the ticks read: seconds, minutes or hours."""
    if span >= 3 * 3600:
        return "h", 3600.0
    if span >= 180:
        return "min", 60.0
    return "s", 1.0


def _ticks(span: float) -> list[float]:
    step = next((s for s in STEPS if span / s <= 8), STEPS[-1])
    return [i * step for i in range(int(span // step) + 1)]


def _bars(rows: Sequence[StepRow], *, offset: int, now: dt.datetime, compensation: bool) -> list[Bar]:
    bars: list[Bar] = []
    for lane, row in enumerate(rows, start=offset):
        step = row.step
        calls = sorted((a for a in row.attempts if a.number > 0), key=lambda a: a.number)
        previous_end: dt.datetime | None = None
        for attempt in calls:
            begun = attempt.started_at or attempt.dispatched_at
            if begun is None:
                continue
            if previous_end is not None and attempt.dispatched_at and attempt.dispatched_at > previous_end:
                gap = (attempt.dispatched_at - previous_end).total_seconds()
                bars.append(
                    Bar(
                        lane,
                        previous_end,
                        attempt.dispatched_at,
                        "currentColor",
                        f"backoff {gap:.1f} s",
                        "backoff",
                    )
                )
            ended = attempt.finished_at or now
            outcome = attempt.outcome or ""
            fill = (
                COMPENSATION_FILL
                if compensation and outcome == "succeeded"
                else OUTCOME_FILL.get(outcome, IN_FLIGHT)
            )
            took = (ended - begun).total_seconds()
            said = outcome.replace("_", " ") if outcome else "in flight"
            bars.append(
                Bar(
                    lane,
                    begun,
                    ended,
                    fill,
                    f"{step.name}: {attempt.kind} {attempt.number}, {said}, {took:.2f} s",
                    "call",
                    attempt.number,
                )
            )
            previous_end = ended
        if step.definition.waits:
            began = step.waiting_since or (step.first_dispatched_at if step.first_dispatched_at else None)
            began = began or (step.updated_at if step.status == "waiting" else None)
            if began is not None:
                ended = step.finished_at or now
                bars.append(
                    Bar(lane, began, ended, WAIT_FILL, f"{step.name}: waiting ({step.status})", "wait")
                )
    return bars


def job_timeline(
    job: Job, actions: Sequence[StepRow], compensations: Sequence[StepRow], *, now: dt.datetime
) -> SafeString:
    """The job's calls, backoffs and waits on one axis (see the module's docstring)."""
    rows = [*actions, *compensations]
    bars = _bars(actions, offset=0, now=now, compensation=False)
    bars += _bars(compensations, offset=len(actions), now=now, compensation=True)
    if not bars:
        return mark_safe('<p class="muted small">Nothing has run yet: no call, no wait.</p>')
    start = job.created_at
    end = max([job.finished_at or now, *(b.end for b in bars)])
    span = max((end - start).total_seconds(), 1.0)
    unit, per = _unit(span)
    height = PAD * 2 + len(rows) * LANE_H + AXIS_H
    width = LABEL_W + PLOT_W + PAD * 2

    def x(moment: dt.datetime) -> float:
        return LABEL_W + PAD + max(0.0, (moment - start).total_seconds()) / span * PLOT_W

    parts = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="Timeline of the job\'s calls and waits">'
    ]
    for lane, row in enumerate(rows):
        y = PAD + lane * LANE_H
        name = row.step.name if lane < len(actions) else f"undo {row.step.name}"
        short = name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "\u2026"
        parts.append(
            f'<text class="lane chart-ink" x="{LABEL_W}" y="{y + LANE_H / 2 + 4:.1f}" text-anchor="end" '
            f'font-size="11" fill="currentColor">{escape(short)}</text>'
        )
        parts.append(
            f'<line class="chart-grid" x1="{LABEL_W + PAD}" x2="{LABEL_W + PAD + PLOT_W}" '
            f'y1="{y + LANE_H / 2:.1f}" y2="{y + LANE_H / 2:.1f}" stroke="currentColor" '
            'stroke-opacity="0.25" />'
        )
    for bar in bars:
        top = PAD + bar.lane * LANE_H + (LANE_H - BAR_H) / 2
        x0, x1 = x(bar.start), x(bar.end)
        title = f"<title>{escape(bar.title)}</title>"
        if bar.kind == "backoff":
            parts.append(
                f'<line class="backoff" x1="{x0:.1f}" x2="{x1:.1f}" y1="{top + BAR_H / 2:.1f}" '
                f'y2="{top + BAR_H / 2:.1f}" stroke="{bar.fill}" stroke-dasharray="2 3">{title}</line>'
            )
            continue
        number = f' data-attempt="{bar.attempt}"' if bar.attempt is not None else ""
        style = ' fill-opacity="0.35" stroke-dasharray="4 2"' if bar.kind == "wait" else ""
        parts.append(
            f'<rect class="{bar.kind}"{number} x="{x0:.1f}" y="{top:.1f}" width="{max(x1 - x0, 2.0):.1f}" '
            f'height="{BAR_H}" fill="{bar.fill}" stroke="{bar.fill}"{style} rx="2">{title}</rect>'
        )
    axis_y = PAD + len(rows) * LANE_H + 4
    parts.append(
        f'<line class="chart-axis" x1="{LABEL_W + PAD}" x2="{LABEL_W + PAD + PLOT_W}" y1="{axis_y}" '
        f'y2="{axis_y}" stroke="currentColor" />'
    )
    for tick in _ticks(span):
        tx = LABEL_W + PAD + tick / span * PLOT_W
        label = f"{tick / per:g} {unit}"
        parts.append(
            f'<line class="chart-axis" x1="{tx:.1f}" x2="{tx:.1f}" y1="{axis_y}" y2="{axis_y + 4}" '
            'stroke="currentColor" />'
        )
        parts.append(
            f'<text class="chart-text tick" x="{tx:.1f}" y="{axis_y + 15}" text-anchor="middle" '
            f'font-size="10" fill="currentColor">{label}</text>'
        )
    parts.append(
        f'<text class="chart-text axis" x="{LABEL_W + PAD}" y="{axis_y + 29}" font-size="10" '
        'fill="currentColor">time since submission '
        f"({start.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S} UTC)</text>"
    )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every text above is escaped or a number
