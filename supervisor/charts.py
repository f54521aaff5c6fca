"""A pool's call latency over time as inline SVG, drawn on the server (as the DAG and the timeline
are: no JavaScript): p50, p90 and p99 per bucket (supervisor.selectors.latency) as three lines over
a time axis in UTC, with a latency axis in ms or s.

Colours come from the console's stylesheet (classes and CSS variables, one set per theme); text
and axes also say `currentColor`, the card's ink, so they read on either background. A bucket
with no call leaves a gap in the lines. Every piece of text is escaped.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

if TYPE_CHECKING:
    from supervisor.selectors.latency import LatencyBucket

LEFT = 64
PLOT_W = 600
PLOT_H = 150
TOP = 28
RIGHT = 16
AXIS_H = 36
#: The percentiles drawn, each with the attribute of a bucket holding it.
SERIES = (("p50", "p50_ms"), ("p90", "p90_ms"), ("p99", "p99_ms"))
#: At most this many labelled ticks on the latency axis, above zero.
Y_TICKS = 5


def ms_text(value: float) -> str:
    """A latency as people read it: "7.5 ms", "240 ms", "1.25 s"."""
    if value >= 1000:
        return f"{value / 1000:.3g} s"
    if value >= 10:
        return f"{value:.0f} ms"
    return f"{value:.2g} ms"


def latency_scale(peak: float) -> tuple[float, list[float]]:
    """The axis's top and its ticks (0 first) for a largest value of `peak` ms: a step of 1, 2 or
    5 times a power of ten, at most Y_TICKS ticks above zero, the top a whole number of steps."""
    peak = max(peak, 1.0)
    magnitude = 10 ** math.floor(math.log10(peak / Y_TICKS))
    step = next(m * magnitude for m in (1, 2, 5, 10) if peak / (m * magnitude) <= Y_TICKS)
    count = max(1, math.ceil(peak / step - 1e-9))
    return step * count, [step * i for i in range(count + 1)]


def tick_text(value: float, *, seconds: bool) -> str:
    """A tick of the latency axis, all in ms or all in s (whichever the top calls for)."""
    if seconds:
        return f"{value / 1000:g} s"
    return f"{value:g} ms"


def latency_chart(buckets: Sequence[LatencyBucket], *, pool: str, bucket: dt.timedelta) -> SafeString:
    """The chart of one pool (see the module's docstring); a sentence when no call finished."""
    if not buckets or not any(b.calls for b in buckets):
        minutes = int(len(buckets) * bucket.total_seconds() // 60)
        return mark_safe(  # noqa: S308 - a number only
            '<p class="muted small latency-empty">No call finished with a latency in the last '
            f"{minutes} minutes.</p>"
        )
    peak = max(getattr(b, attr) or 0.0 for b in buckets for _, attr in SERIES)
    top, ticks = latency_scale(peak)
    seconds = top >= 1000
    width = LEFT + PLOT_W + RIGHT
    height = TOP + PLOT_H + AXIS_H
    slot = PLOT_W / len(buckets)
    base = TOP + PLOT_H

    def x(index: float) -> float:
        return LEFT + index * slot

    def y(ms: float) -> float:
        return base - ms / top * PLOT_H

    parts = [
        f'<svg class="latency-chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" data-pool="{escape(pool)}" '
        f'aria-label="Call latency of pool {escape(pool)}: p50, p90 and p99 per '
        f'{bucket.total_seconds() / 60:g} minutes">'
    ]
    for tick in ticks:
        ty = y(tick)
        parts.append(
            f'<line class="chart-grid" x1="{LEFT}" x2="{LEFT + PLOT_W}" y1="{ty:.1f}" y2="{ty:.1f}" '
            'stroke="currentColor" stroke-opacity="0.25" />'
        )
        parts.append(
            f'<text class="chart-text tick" x="{LEFT - 6}" y="{ty + 4:.1f}" text-anchor="end" font-size="11" '
            f'fill="currentColor">{tick_text(tick, seconds=seconds)}</text>'
        )
    parts.append(
        f'<line class="chart-axis" x1="{LEFT}" x2="{LEFT + PLOT_W}" y1="{base}" y2="{base}" '
        'stroke="currentColor" />'
        f'<line class="chart-axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{base}" stroke="currentColor" />'
    )
    for i, b in enumerate(buckets):
        if i % 2 == 0:
            parts.append(
                f'<line class="chart-axis" x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{base}" y2="{base + 4}" '
                'stroke="currentColor" />'
                f'<text class="chart-text tick" x="{x(i):.1f}" y="{base + 16}" text-anchor="middle" '
                f'font-size="11" fill="currentColor">{b.start.astimezone(dt.UTC):%H:%M}</text>'
            )
    parts.append(
        f'<text class="chart-text axis" x="{LEFT}" y="{base + 32}" font-size="11" fill="currentColor">'
        f"Time (UTC); each point the calls that finished in the {bucket.total_seconds() / 60:g} minutes "
        "from the tick before it</text>"
    )
    for n, (name, attr) in enumerate(SERIES):
        lx = LEFT + n * 64
        parts.append(
            f'<line class="lat-line lat-{name}" x1="{lx}" x2="{lx + 16}" y1="{TOP - 16}" y2="{TOP - 16}" />'
            f'<text class="chart-text key" x="{lx + 20}" y="{TOP - 12}" font-size="11" '
            f'fill="currentColor">{name}</text>'
        )
        runs: list[list[str]] = [[]]
        for i, b in enumerate(buckets):
            value = getattr(b, attr)
            if value is None:
                runs.append([])
                continue
            runs[-1].append(f"{x(i + 0.5):.1f},{y(value):.1f}")
        for run in runs:
            if len(run) > 1:
                parts.append(f'<polyline class="lat-line lat-{name}" points="{" ".join(run)}" />')
    for i, b in enumerate(buckets):
        if not b.calls:
            continue
        until = b.start + bucket
        said = ", ".join(f"{name} {ms_text(getattr(b, attr) or 0.0)}" for name, attr in SERIES)
        title = (
            f"{b.start.astimezone(dt.UTC):%H:%M}-{until.astimezone(dt.UTC):%H:%M} UTC: "
            f"{b.calls} call{'s' if b.calls != 1 else ''}, {said}"
        )
        dots = "".join(
            f'<circle class="lat-dot lat-{name}" data-percentile="{name}" data-ms="{getattr(b, attr):.1f}" '
            f'cx="{x(i + 0.5):.1f}" cy="{y(getattr(b, attr)):.1f}" r="3" />'
            for name, attr in SERIES
            if getattr(b, attr) is not None
        )
        parts.append(
            f'<g class="lat-bucket" data-start="{b.start.astimezone(dt.UTC):%H:%M}" data-calls="{b.calls}">'
            f"<title>{escape(title)}</title>{dots}</g>"
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every text above is escaped or a number
