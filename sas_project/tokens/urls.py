"""The console's API tokens page (/accounts/tokens/)."""

from __future__ import annotations

from django.urls import path

from sas_project.tokens import views

app_name = "tokens"

urlpatterns = [
    path("", views.tokens, name="list"),
    path("new/", views.token_make, name="make"),
    path("<int:token_id>/revoke/", views.token_revoke_view, name="revoke"),
]
