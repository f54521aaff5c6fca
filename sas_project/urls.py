"""Root URLs: the admin, the login pages, the REST API and the operator console."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("", RedirectView.as_view(url="/ops/", permanent=False)),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/", include("scheduler.api_urls")),
    path("ops/", include("supervisor.urls")),
]
