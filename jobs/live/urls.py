"""Live events routes (SPEC 10, A-6, A-7); included before the DRF API's routes."""

from django.urls import path

from jobs.live import callback, streams, wait

urlpatterns = [
    path("jobs/<str:job_id>/events", streams.job_events, name="job-events"),
    path("jobs/<str:job_id>/wait", wait.wait_job, name="job-wait"),
    path("receipt/stream", streams.receipt_stream, name="receipt-stream"),
    path("receipt/callback", callback.receipt_callback, name="receipt-callback"),
]
