"""Health, readiness and metrics at the root (/healthz, /readyz, /supervisorz, /metrics), and the
route the canary calls (/canaryz, supervisor.canary)."""

from __future__ import annotations

from django.urls import path

from supervisor import canary, probes

urlpatterns = [
    path("healthz", probes.healthz, name="healthz"),
    path("readyz", probes.readyz, name="readyz"),
    path("supervisorz", probes.supervisorz, name="supervisorz"),
    path("metrics", probes.metrics, name="metrics"),
    path("canaryz", canary.canaryz, name="canaryz"),
]
