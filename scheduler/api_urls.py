"""REST API URLs: version 1 under /api/v1/, the OpenAPI schema at /api/schema/ and its browsable
documentation (Swagger UI, served from local static files) at /api/docs/.

Definitions are addressed by name (`/api/v1/policies/standard/`), jobs by UUID, steps by number.
Any other URL under /api/ is a JSON 404.
"""

from __future__ import annotations

from django.urls import URLPattern, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from scheduler import api

app_name = "api"

urlpatterns: list[URLPattern] = [
    path("v1/jobs/", api.JobsView.as_view(), name="jobs"),
    path("v1/jobs/<uuid:job_id>/", api.JobView.as_view(), name="job"),
    path("v1/jobs/<uuid:job_id>/events/", api.JobEventsView.as_view(), name="job-events"),
    path("v1/jobs/<uuid:job_id>/cancel/", api.JobCancelView.as_view(), name="job-cancel"),
    path("v1/jobs/<uuid:job_id>/compensate/", api.JobCompensateView.as_view(), name="job-compensate"),
    path("v1/jobs/<uuid:job_id>/pause/", api.JobPauseView.as_view(), name="job-pause"),
    path("v1/jobs/<uuid:job_id>/resume/", api.JobResumeView.as_view(), name="job-resume"),
    path("v1/steps/<int:step_id>/retry/", api.StepRetryView.as_view(), name="step-retry"),
    path("v1/steps/<int:step_id>/resolve/", api.StepResolveView.as_view(), name="step-resolve"),
    path("v1/policies/", api.PoliciesView.as_view(), name="policies"),
    path("v1/policies/<slug:name>/", api.PolicyView.as_view(), name="policy"),
    path("v1/policies/<slug:name>/revisions/", api.PolicyRevisionsView.as_view(), name="policy-revisions"),
    path("v1/pools/", api.PoolsView.as_view(), name="pools"),
    path("v1/pools/<slug:name>/", api.PoolView.as_view(), name="pool"),
    path("v1/workflows/", api.WorkflowsView.as_view(), name="workflows"),
    path("v1/workflows/<slug:name>/", api.WorkflowView.as_view(), name="workflow"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    re_path(r"^.*$", api.NotFoundView.as_view(), name="not-found"),
]
