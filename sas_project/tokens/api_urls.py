"""REST API URLs of API tokens, under /api/v1/."""

from __future__ import annotations

from django.urls import URLPattern, path

from sas_project.tokens import api

urlpatterns: list[URLPattern] = [
    path("tokens/", api.TokensView.as_view(), name="api-tokens"),
    path("tokens/<int:token_id>/", api.TokenView.as_view(), name="api-token"),
    path("tokens/<int:token_id>/revoke/", api.TokenRevokeView.as_view(), name="api-token-revoke"),
]
