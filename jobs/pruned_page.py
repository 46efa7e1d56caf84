"""The admin page of a pruned job: its tombstone instead of the job page (U-2).

The job page (jobs.admin) hands a missing job here; a job that retention removed gets
this small page, answered 410 like the API, and any other id stays a 404.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse

from jobs import retention
from receipts.admin_kit import stream_url, utc


def page(admin: Any, request: HttpRequest, job_id: str) -> TemplateResponse | None:
    """The page for `job_id` when it was pruned, else None (the caller's 404)."""
    tombstone = retention.pruned(job_id, may_see=lambda organization_id: True)  # staff see all
    if tombstone is None:
        return None
    context = {
        **admin.admin_site.each_context(request),
        "title": f"Job {job_id} (pruned)",
        "opts": admin.opts,
        "job_id": job_id,
        "tombstone": tombstone,
        "summary": retention.describe_pruned(job_id, tombstone),
        "pruned_utc": utc(tombstone.pruned_at_ms),
        "settled_utc": utc(tombstone.settled_at_ms),
        "changelist_url": reverse("admin:jobs_job_changelist"),
        "retention_stream": retention.RETENTION_STREAM,
        "retention_url": stream_url(retention.RETENTION_STREAM),
    }
    return TemplateResponse(request, "admin/jobs/job/pruned.html", context, status=410)
