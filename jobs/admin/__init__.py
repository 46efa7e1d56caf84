"""Operator admin for jobs (U-1, U-2, U-3, U-6, U-7): `JobAdmin`, put together from
`changelist` (the list and the dashboard), `job_page` (one job) and `actions` (what an
operator does to jobs, on the job page and in bulk); the Schedules page in `schedules`,
the Queues page in `queues`.
Other apps add to the job page through `jobs.page_sections`, never by importing this.
"""

from __future__ import annotations

from django.contrib import admin

from jobs.admin import queues as queues  # registers the Queues page
from jobs.admin import schedules as schedules  # registers the Schedules page
from jobs.admin.changelist import JobList
from jobs.admin.job_page import JobPage
from jobs.models import Job


@admin.register(Job)
class JobAdmin(JobList, JobPage):
    """Staff only; viewing needs `jobs.view_job`, acting `jobs.change_job` (U-7). Jobs are
    enqueued through the API or the queue service, and a job row is the projection of
    receipts that are never deleted: no add, no delete."""

    class Media:
        css = {"all": ("receipt/admin.css", "receipt/jobs.css")}
