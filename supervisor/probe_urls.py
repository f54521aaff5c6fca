"""Health, readiness and metrics at the root (/healthz, /readyz, /supervisorz, /metrics), and the
route the canary calls (/canaryz, supervisor.canary)."""

from __future__ import annotations

from django.urls import path

from supervisor import canary, probes

# Each is served at its own name, which is also its URL name.
urlpatterns = [
    path(view.__name__, view, name=view.__name__)
    for view in (probes.healthz, probes.readyz, probes.supervisorz, probes.metrics, canary.canaryz)
]
