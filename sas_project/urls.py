"""Root URLs: the admin, the login pages, the REST API and the operator console.

The API's version 1 is served by the app that owns each resource (jobs and workflows: scheduler;
policies and operator actions: supervisor; pools: agents), included here by name so that this
shared layer imports none of them. The OpenAPI schema is at /api/schema/, its browsable
documentation (Swagger UI, from local static files, no inline script) at /api/docs/, and any
other URL under /api/ is a JSON 404. Each error's problem type has its page under /problems/
(sas_project.problems). /healthz, /readyz and /metrics (supervisor.probes) are at
the root, where process managers and Prometheus look for them.
"""

from django.contrib import admin
from django.urls import include, path, re_path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from sas_project.api import NotFoundView
from sas_project.problems import problem_index, problem_page

urlpatterns = [
    path("", RedirectView.as_view(url="/ops/", permanent=False)),
    path("admin/", admin.site.urls),
    path("accounts/tokens/", include("sas_project.tokens.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", include("scheduler.api_urls")),
    path("api/v1/", include("supervisor.api_urls")),
    path("api/v1/", include("agents.api_urls")),
    path("api/v1/", include("sas_project.tokens.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves its start-up script from its own URL: no inline script for the CSP.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    re_path(r"^api/.*$", NotFoundView.as_view(), name="api-not-found"),
    path("problems/", problem_index, name="problems"),
    path("problems/<slug:code>/", problem_page, name="problem"),
    path("ops/", include("supervisor.urls")),
    path("", include("supervisor.probe_urls")),
]

#: A failure under /api/ answers a problem detail like every other error (sas_project.problems).
handler500 = "sas_project.problems.server_error"
