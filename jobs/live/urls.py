"""Live events routes (SPEC 10, A-6, A-7); included before the DRF API's routes."""

from django.urls import path

from jobs.live import views

urlpatterns = [
    path("jobs/<str:job_id>/events", views.job_events, name="job-events"),
    path("jobs/<str:job_id>/wait", views.wait_job, name="job-wait"),
    path("receipt/stream", views.receipt_stream, name="receipt-stream"),
    path("receipt/callback", views.receipt_callback, name="receipt-callback"),
]
