"""REST API URLs of the agents' resources, under /api/v1/: pools by name."""

from __future__ import annotations

from django.urls import URLPattern, path

from agents import api

urlpatterns: list[URLPattern] = [
    path("pools/", api.PoolsView.as_view(), name="api-pools"),
    path("pools/<slug:name>/", api.PoolView.as_view(), name="api-pool"),
]
