"""The job page of a job waiting for its retry policy's backoff (issue 34 item 2)."""

from __future__ import annotations

import pytest

from jobs.core.diagnosis import utc_text
from tests.integration.admin.conftest import job_url, words
from tests.integration.jobs.retry_policy_builders import policy_kind, waiting_job

pytestmark = pytest.mark.django_db


def test_the_job_page_says_when_a_failed_attempt_is_retried(admin_client):
    with policy_kind():
        job = waiting_job()
        page = admin_client.get(job_url(job.job_id))
    assert page.status_code == 200
    shown = words(page)
    retry_at = job.retry_at
    assert retry_at is not None
    assert f"Retrying retrying at {utc_text(retry_at)} (in " in shown
    assert "after attempt 1 failed: HTTP 503 on attempt 1" in shown
    assert "Scheduled for" not in shown  # not a delayed job
