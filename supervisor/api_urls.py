"""REST API URLs of the supervisor's resources, under /api/v1/: operator actions on jobs and
steps, policies by name, and alert subscriptions by name."""

from __future__ import annotations

from django.urls import URLPattern, path

from supervisor import api

urlpatterns: list[URLPattern] = [
    path("jobs/<uuid:job_id>/cancel/", api.JobCancelView.as_view(), name="api-job-cancel"),
    path("jobs/<uuid:job_id>/compensate/", api.JobCompensateView.as_view(), name="api-job-compensate"),
    path("jobs/<uuid:job_id>/pause/", api.JobPauseView.as_view(), name="api-job-pause"),
    path("jobs/<uuid:job_id>/resume/", api.JobResumeView.as_view(), name="api-job-resume"),
    path("jobs/<uuid:job_id>/rerun/", api.JobRerunView.as_view(), name="api-job-rerun"),
    path("attention/", api.AttentionView.as_view(), name="api-attention"),
    path("attention/bulk/", api.AttentionBulkView.as_view(), name="api-attention-bulk"),
    path("supervisor/", api.SupervisorView.as_view(), name="api-supervisor"),
    path("steps/<int:step_id>/retry/", api.StepRetryView.as_view(), name="api-step-retry"),
    path("steps/<int:step_id>/resolve/", api.StepResolveView.as_view(), name="api-step-resolve"),
    path("policies/", api.PoliciesView.as_view(), name="api-policies"),
    path("policies/<slug:name>/", api.PolicyView.as_view(), name="api-policy"),
    path("policies/<slug:name>/revisions/", api.PolicyRevisionsView.as_view(), name="api-policy-revisions"),
    path("alerts/", api.AlertsView.as_view(), name="api-alerts"),
    path("alerts/<slug:name>/", api.AlertView.as_view(), name="api-alert"),
    path("callback-secret/", api.CallbackSecretView.as_view(), name="api-callback-secret"),
    path(
        "callback-secret/rotate/", api.CallbackSecretRotateView.as_view(), name="api-callback-secret-rotate"
    ),
]
