"""The console's Pools page (/ops/pools/): each pool's limits, endpoints' health, calls waiting and
in flight (supervisor.selectors.definitions), and its calls' latency over the last hour
(supervisor.selectors.latency, drawn by supervisor.charts)."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render

from scheduler.unit import db_now
from supervisor import selectors
from supervisor.charts import latency_chart
from supervisor.selectors.latency import pool_latency
from supervisor.views import HttpRequest, console_page


@console_page
def pools(request: HttpRequest) -> HttpResponse:
    now = db_now()
    rows, latency = selectors.pool_list(now), pool_latency(now)
    charts = [latency_chart(latency.of(r.pool.name), pool=r.pool.name, bucket=latency.bucket) for r in rows]
    return render(
        request, "ops/pools.html", {"section": "pools", "cards": list(zip(rows, charts, strict=True))}
    )
