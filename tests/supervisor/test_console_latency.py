"""Call latency per pool over time (supervisor.selectors.latency, drawn by supervisor.charts): p50,
p90 and p99 per pool and 5-minute bucket of the last hour, on the Pools page, with axes in ms or s
and UTC times; the same figures on PostgreSQL (percentile_cont) and SQLite (computed in Python)."""

from __future__ import annotations

import datetime as dt
import itertools
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from agents.fake import FakeRemote
from scheduler.models import Attempt
from scheduler.services import job_submit
from supervisor.charts import latency_chart, latency_scale, ms_text, tick_text
from supervisor.selectors.latency import LATENCY_BUCKET, LatencyBucket, pool_latency, window_starts
from tests.api.support import make_user
from tests.factories import make_pool, make_workflow, step

pytestmark = pytest.mark.sqlite

NOW = dt.datetime(2025, 3, 4, 10, 17, 30, tzinfo=dt.UTC)
FIVE = dt.timedelta(minutes=5)


def buckets(figures: dict[int, tuple[float, float, float]], *, calls: int = 3) -> list[LatencyBucket]:
    starts = window_starts(NOW, window=dt.timedelta(hours=1), bucket=FIVE)
    return [
        LatencyBucket(start, calls, *figures[i]) if i in figures else LatencyBucket(start)
        for i, start in enumerate(starts)
    ]


# --- the chart, drawn from figures ----------------------------------------------------------------


def test_the_window_is_twelve_buckets_on_whole_five_minutes_the_last_holding_now() -> None:
    starts = window_starts(NOW, window=dt.timedelta(hours=1), bucket=FIVE)
    assert len(starts) == 12
    assert starts[-1] == dt.datetime(2025, 3, 4, 10, 15, tzinfo=dt.UTC)
    assert starts[0] == dt.datetime(2025, 3, 4, 9, 20, tzinfo=dt.UTC)
    assert all(b - a == FIVE for a, b in itertools.pairwise(starts))


@pytest.mark.parametrize(
    ("peak", "top", "ticks"),
    [
        (240, 250, [0, 50, 100, 150, 200, 250]),
        (1800, 2000, [0, 500, 1000, 1500, 2000]),
        (5, 5, [0, 1, 2, 3, 4, 5]),
        (0, 1, [0, 0.2, 0.4, 0.6, 0.8, 1.0]),
    ],
)
def test_the_latency_axis_steps_by_one_two_or_five_and_covers_the_peak(
    peak: float, top: float, ticks: list[float]
) -> None:
    got_top, got_ticks = latency_scale(peak)
    assert got_top == pytest.approx(top)
    assert got_ticks == pytest.approx(ticks)
    assert got_top >= peak and len(got_ticks) <= 6


def test_latencies_read_in_ms_below_a_second_and_in_s_above() -> None:
    assert ms_text(7.5) == "7.5 ms"
    assert ms_text(240.4) == "240 ms"
    assert ms_text(1250) == "1.25 s"
    assert tick_text(500, seconds=True) == "0.5 s"
    assert tick_text(50, seconds=False) == "50 ms"


def test_the_chart_draws_three_percentiles_with_gaps_where_no_call_finished() -> None:
    data = buckets({0: (10, 20, 40), 1: (12, 25, 60), 2: (11, 22, 50), 5: (30, 90, 240), 6: (20, 40, 80)})
    svg = str(latency_chart(data, pool="payments", bucket=FIVE))
    assert svg.startswith('<svg class="latency-chart"') and 'data-pool="payments"' in svg
    # Each percentile: one line over buckets 0-2, one over 5-6 (the empty 3-4 leave a gap).
    for name in ("p50", "p90", "p99"):
        assert len(re.findall(rf'<polyline class="lat-line lat-{name}"', svg)) == 2
        assert f">{name}</text>" in svg  # the key
    # A dot per percentile and bucket with calls, carrying its value.
    assert len(re.findall(r'<g class="lat-bucket"', svg)) == 5
    assert 'data-percentile="p99" data-ms="240.0"' in svg
    assert "09:45-09:50 UTC: 3 calls, p50 30 ms, p90 90 ms, p99 240 ms" in svg
    # The latency axis in ms up to 250, the time axis in UTC every other bucket.
    assert ">0 ms</text>" in svg and ">250 ms</text>" in svg
    labels = re.findall(
        r'class="chart-text tick" x="[\d.]+" y="[\d.]+" text-anchor="middle"[^>]*>([^<]+)<', svg
    )
    assert labels == ["09:20", "09:30", "09:40", "09:50", "10:00", "10:10"]
    assert "Time (UTC)" in svg
    # Colours come from the stylesheet or the card's ink: no fill or stroke is a colour code.
    assert not re.search(r'(fill|stroke)="#', svg)


def test_a_chart_above_a_second_reads_its_axis_in_seconds() -> None:
    svg = str(latency_chart(buckets({11: (400, 900, 1800)}), pool="slow", bucket=FIVE))
    assert ">2 s</text>" in svg and ">0.5 s</text>" in svg and " ms</text>" not in svg
    # One bucket: dots, no line.
    assert "<polyline" not in svg and svg.count('class="lat-dot') == 3


def test_no_call_in_the_window_says_so_and_the_pool_name_is_escaped() -> None:
    empty = str(latency_chart(buckets({}), pool="p", bucket=FIVE))
    assert "<svg" not in empty and "No call finished with a latency in the last 60 minutes" in empty
    svg = str(latency_chart(buckets({0: (1, 2, 3)}), pool='<b>"x"', bucket=FIVE))
    assert "<b>" not in svg and "&lt;b&gt;" in svg


# --- the figures, from the database --------------------------------------------------------------


def finished_calls(drain: Callable[[], int], *, workflow: str, n: int) -> list[Attempt]:
    for i in range(n):
        job_submit(workflow=workflow, input={"i": i})
    drain()
    return list(Attempt.objects.filter(step__job__workflow__name=workflow).order_by("pk"))


def place(attempt: Attempt, *, at: dt.datetime, latency_ms: int | None) -> None:
    Attempt.objects.filter(pk=attempt.pk).update(finished_at=at, latency_ms=latency_ms)


@pytest.mark.django_db
def test_percentiles_per_pool_and_bucket_over_the_last_hour_only(
    drain: Callable[[], int], fake_remote: FakeRemote
) -> None:
    make_pool("other")
    make_workflow("fast", step("s1"))
    make_workflow("slow", step("s1", pool="other"))
    starts = window_starts(NOW, window=dt.timedelta(hours=1), bucket=LATENCY_BUCKET)
    fast = finished_calls(drain, workflow="fast", n=22)
    slow = finished_calls(drain, workflow="slow", n=3)
    # Twenty calls of 10, 20, ... 200 ms in the fourth bucket; one older than the window; one
    # cut off without an answer (no latency).
    for k, attempt in enumerate(fast[:20]):
        place(attempt, at=starts[3] + dt.timedelta(seconds=10 + k), latency_ms=10 * (k + 1))
    place(fast[20], at=starts[0] - dt.timedelta(seconds=1), latency_ms=99_000)
    place(fast[21], at=starts[3] + dt.timedelta(seconds=50), latency_ms=None)
    for k, attempt in enumerate(slow):
        place(attempt, at=NOW - dt.timedelta(seconds=k), latency_ms=1000 * (k + 1))

    latency = pool_latency(NOW)

    assert latency.starts == starts
    local = latency.of("local")
    assert len(local) == 12 and [b.calls for b in local] == [0, 0, 0, 20] + [0] * 8
    fourth = local[3]
    # percentile_cont's interpolation between closest ranks, whichever database computed it.
    assert (fourth.p50_ms, fourth.p90_ms, fourth.p99_ms) == pytest.approx((105, 181, 198.1))
    assert local[0].p50_ms is None
    last = latency.of("other")[-1]
    assert last.calls == 3 and (last.p50_ms, last.p99_ms) == pytest.approx((2000, 2980))
    assert latency.of("nothing") == [LatencyBucket(s) for s in starts]


@pytest.mark.django_db
def test_the_pools_page_draws_each_pool_s_latency_in_a_bounded_number_of_queries(
    client: Client, drain: Callable[[], int], fake_remote: FakeRemote, django_assert_max_num_queries: Any
) -> None:
    make_pool("idle")
    make_workflow("fast", step("s1"))
    for k, attempt in enumerate(finished_calls(drain, workflow="fast", n=4)):
        Attempt.objects.filter(pk=attempt.pk).update(latency_ms=100 * (k + 1))
    client.force_login(make_user("vic", "viewers"))
    # The pools page's eight, and the charts' one aggregate, however many pools and calls.
    with django_assert_max_num_queries(9):
        html = client.get("/ops/pools/").content.decode()
    local = re.search(r'<section class="card" id="pool-local".*?</section>', html, re.S)
    idle = re.search(r'<section class="card" id="pool-idle".*?</section>', html, re.S)
    assert local and idle
    assert '<svg class="latency-chart"' in local.group(0) and 'data-calls="4"' in local.group(0)
    assert 'data-percentile="p50" data-ms="250.0"' in local.group(0)
    assert "<svg" not in idle.group(0) and "No call finished with a latency" in idle.group(0)
