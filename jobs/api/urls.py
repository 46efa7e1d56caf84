"""Routes of the jobs API (SPEC 9). Live events (/jobs/<id>/events, /jobs/<id>/wait,
/receipt/stream, /receipt/callback) live in jobs.live.urls."""

from django.urls import path

from jobs.api import batch, limits, log_views, queues, retry, schedules, views

urlpatterns = [
    path("agents/<str:agent_id>/jobs", views.EnqueueView.as_view(), name="job-enqueue"),
    path(
        "agents/<str:agent_id>/jobs/batch",
        batch.BatchEnqueueView.as_view(),
        name="job-enqueue-batch",
    ),
    path("jobs", views.JobListView.as_view(), name="job-list"),
    path("kinds", views.KindsView.as_view(), name="kind-list"),
    path("schedules", schedules.ScheduleListView.as_view(), name="schedule-list"),
    path("queues", queues.QueueListView.as_view(), name="queue-list"),
    path("limits", limits.LimitListView.as_view(), name="limit-list"),
    path("queues/<str:group>/pause", queues.QueuePauseView.as_view(), name="queue-pause"),
    path("queues/<str:group>/resume", queues.QueueResumeView.as_view(), name="queue-resume"),
    # before the job detail: POST retries many; GET still reads a job named "retry"
    path("jobs/retry", retry.RetryJobsView.as_view(), name="job-retry-many"),
    path("jobs/<str:job_id>", views.JobDetailView.as_view(), name="job-detail"),
    path("jobs/<str:job_id>/receipts", views.JobReceiptsView.as_view(), name="job-receipts"),
    path("jobs/<str:job_id>/state", views.JobStateView.as_view(), name="job-state"),
    path("jobs/<str:job_id>/diagnosis", views.JobDiagnosisView.as_view(), name="job-diagnosis"),
    path("jobs/<str:job_id>/callbacks", views.JobCallbacksView.as_view(), name="job-callbacks"),
    path("jobs/<str:job_id>/steer", views.SteerView.as_view(), name="job-steer"),
    path("jobs/<str:job_id>/follow-up", views.FollowUpView.as_view(), name="job-follow-up"),
    path("jobs/<str:job_id>/abort", views.AbortView.as_view(), name="job-abort"),
    path("jobs/<str:job_id>/retry", retry.RetryJobView.as_view(), name="job-retry"),
    path(
        "jobs/<str:job_id>/receipts/<str:n>/inclusion",
        log_views.JobReceiptInclusionView.as_view(),
        name="job-receipt-inclusion",
    ),
    path("log/checkpoint", log_views.CheckpointView.as_view(), name="log-checkpoint"),
    path("log/consistency", log_views.ConsistencyView.as_view(), name="log-consistency"),
    path("log/inclusion", log_views.LogInclusionView.as_view(), name="log-inclusion"),
    path("log/key", log_views.PublicKeyView.as_view(), name="log-key"),
]
