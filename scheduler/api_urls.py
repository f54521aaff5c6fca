"""REST API URLs of the scheduler's resources, under /api/v1/: jobs by UUID, workflows by name,
attempts' callback URLs by signed token."""

from __future__ import annotations

from django.urls import URLPattern, path

from scheduler import api, callback_api, events_api, schedules_api

urlpatterns: list[URLPattern] = [
    path("jobs/", api.JobsView.as_view(), name="api-jobs"),
    path("jobs/batch/", api.JobsBatchView.as_view(), name="api-jobs-batch"),
    path("jobs/<uuid:job_id>/", api.JobView.as_view(), name="api-job"),
    path("jobs/<uuid:job_id>/events/", api.JobEventsView.as_view(), name="api-job-events"),
    path("jobs/<uuid:job_id>/signals/", api.JobSignalsView.as_view(), name="api-job-signals"),
    path(
        "jobs/<uuid:job_id>/steps/<slug:step_name>/items/",
        api.StepItemsView.as_view(),
        name="api-job-step-items",
    ),
    path(
        "jobs/<uuid:job_id>/steps/<slug:step_name>/approve/",
        api.StepApproveView.as_view(),
        name="api-job-step-approve",
    ),
    path(
        "jobs/<uuid:job_id>/steps/<slug:step_name>/reject/",
        api.StepRejectView.as_view(),
        name="api-job-step-reject",
    ),
    path("signals/", api.KeyedSignalsView.as_view(), name="api-signals"),
    path("events/", events_api.EventsView.as_view(), name="api-events"),
    path("events/<str:source>/", events_api.SourceEventsView.as_view(), name="api-events-signed"),
    path("events/<int:event>/replay/", events_api.EventReplayView.as_view(), name="api-event-replay"),
    path("workflows/", api.WorkflowsView.as_view(), name="api-workflows"),
    path("workflows/<slug:name>/", api.WorkflowView.as_view(), name="api-workflow"),
    path("callbacks/<str:token>/", callback_api.AttemptCallbackView.as_view(), name="api-attempt-callback"),
    path(
        "callbacks/<str:token>/heartbeat/",
        callback_api.AttemptHeartbeatView.as_view(),
        name="api-attempt-heartbeat",
    ),
    path("schedules/", api.SchedulesView.as_view(), name="api-schedules"),
    path("schedules/<slug:name>/", api.ScheduleView.as_view(), name="api-schedule"),
    path("schedules/<slug:name>/pause/", api.ScheduleStopView.as_view(), name="api-schedule-pause"),
    path("schedules/<slug:name>/resume/", api.ScheduleResumeView.as_view(), name="api-schedule-resume"),
    path(
        "schedules/<slug:name>/backfill/",
        schedules_api.ScheduleBackfillView.as_view(),
        name="api-schedule-backfill",
    ),
]
