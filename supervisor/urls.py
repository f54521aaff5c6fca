"""Operator console URLs (/ops/)."""

from __future__ import annotations

from django.urls import path

from supervisor import pool_views, views

app_name = "ops"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("attention/", views.attention, name="attention"),
    path("attention/bulk/", views.attention_bulk, name="attention_bulk"),
    path("steps/<int:step_id>/retry/", views.step_retry, name="step_retry"),
    path("steps/<int:step_id>/resolve/", views.step_resolve, name="step_resolve"),
    path("steps/<int:step_id>/decide/", views.step_decide, name="step_decide"),
    path("jobs/", views.jobs, name="jobs"),
    path("jobs/<uuid:job_id>/", views.job, name="job"),
    path("jobs/<uuid:job_id>/act/", views.job_action, name="job_action"),
    path("jobs/<uuid:job_id>/steps/<slug:step_name>/items/", views.job_items, name="job_items"),
    path("jobs/<uuid:job_id>/rerun/", views.job_rerun, name="job_rerun"),
    path("jobs/<uuid:job_id>/signal/", views.job_signal, name="job_signal"),
    path("schedules/", views.schedules, name="schedules"),
    path("keys/", views.keys, name="keys"),
    path("at-risk/", views.at_risk, name="at_risk"),
    path("events/", views.events, name="events"),
    path("events/<int:event_id>/replay/", views.event_replay, name="event_replay"),
    path("schedules/<slug:name>/act/", views.schedule_action, name="schedule_action"),
    path("schedules/<slug:name>/backfill/", views.schedule_backfill_view, name="schedule_backfill"),
    path("calibration/", views.calibration, name="calibration"),
    path("workflows/", views.workflows, name="workflows"),
    path("workflows/<slug:name>/", views.workflow, name="workflow"),
    path("pools/", pool_views.pools, name="pools"),
    path("policies/", views.policies, name="policies"),
    path("policies/<slug:name>/", views.policy, name="policy"),
]
