"""Delayed jobs and priorities in the admin (issue 33 items 3 and 4): the job page and the
list show when a delayed job is due, and the dashboard counts scheduled jobs apart from
ready ones, on an index."""

from __future__ import annotations

import pytest

from jobs import queue
from jobs.runtime import dispatch
from receipts.admin_kit import utc
from receipts.clock import now_ms as wall_clock_ms
from tests.integration.admin.conftest import CHANGELIST, job_url, payload, text, words

pytestmark = pytest.mark.django_db
HOUR_MS = 3_600_000
DASHBOARD_JSON = "/admin/jobs/job/dashboard.json"


def enqueue(**options) -> str:
    """A job with its driver promise opened, as after the enqueue's commit."""
    result = queue.enqueue("factory", payload(), **options)
    if not result.dispatched:
        dispatch.dispatch_batch([result.job])
    return result.job.job_id


def test_the_job_page_shows_when_a_delayed_job_is_due_and_its_priority(admin_client):
    due = wall_clock_ms() + HOUR_MS
    job_id = enqueue(run_at=due, priority=-20)
    page = admin_client.get(job_url(job_id))
    assert page.status_code == 200
    shown = words(page)
    assert f"Scheduled for {utc(due)} not started before then" in shown
    assert "Priority -20" in shown
    assert "scheduled for" in shown  # the diagnosis says so too
    plain = words(admin_client.get(job_url(enqueue())))
    assert "Scheduled for" not in plain and "Priority 0" in plain


def test_the_list_marks_a_delayed_job_with_its_due_time(admin_client):
    due = wall_clock_ms() + HOUR_MS
    delayed, plain = enqueue(run_at=due), enqueue()
    page = text(admin_client.get(CHANGELIST))
    rows = {job_id: page[page.index(job_id) :][:2000] for job_id in (delayed, plain)}
    assert f'title="scheduled for {utc(due)}"' in rows[delayed]
    assert "due in 59 min" in rows[delayed] or "due in 60 min" in rows[delayed]
    assert "rcpt-scheduled" not in rows[plain].split("</tr>")[0]


def test_the_dashboard_counts_scheduled_jobs_apart_from_ready_ones(admin_client):
    later = wall_clock_ms() + HOUR_MS
    enqueue(run_at=later)
    enqueue(run_at=later + 1)
    canceled = enqueue(run_at=later + 2)
    queue.abort(canceled)  # canceled while it waited: counted nowhere
    enqueue()
    snapshot = admin_client.get(DASHBOARD_JSON).json()
    split = {row["state"]: (row["count"], row["shown"]) for row in snapshot["depth"]["queued"]}
    assert split == {"ready": (1, "1"), "scheduled": (2, "2")}
    queued = next(s for s in snapshot["depth"]["byStatus"] if s["status"] == "queued")
    assert queued["count"] == 3
