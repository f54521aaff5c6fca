"""Health, readiness and metrics at the root (/healthz, /readyz, /supervisorz, /metrics)."""

from __future__ import annotations

from django.urls import path

from supervisor import probes

urlpatterns = [
    path("healthz", probes.healthz, name="healthz"),
    path("readyz", probes.readyz, name="readyz"),
    path("supervisorz", probes.supervisorz, name="supervisorz"),
    path("metrics", probes.metrics, name="metrics"),
]
