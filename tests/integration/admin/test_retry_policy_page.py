"""The job page and the list of a job waiting for its retry policy's backoff (issue 34
item 2)."""

from __future__ import annotations

import pytest

from jobs.core.diagnosis import utc_text
from receipts.admin_kit import utc
from tests.integration.admin.conftest import CHANGELIST, job_url, text, words
from tests.integration.jobs.retry_policy_builders import policy_kind, waiting_job
from tests.support import present

pytestmark = pytest.mark.django_db


def test_the_job_page_says_when_a_failed_attempt_is_retried(admin_client):
    with policy_kind():
        job = waiting_job()
        page = admin_client.get(job_url(job.job_id))
    assert page.status_code == 200
    shown = words(page)
    retry_at = job.retry_at
    assert retry_at is not None
    assert f"Backoff retrying at {utc_text(retry_at)} (in " in shown
    assert "after attempt 1 failed: HTTP 503 on attempt 1" in shown
    assert "Scheduled for" not in shown  # not a delayed job


def test_the_list_marks_a_job_waiting_for_its_retry(admin_client):
    with policy_kind():
        job = waiting_job()
        page = text(admin_client.get(CHANGELIST))
    row = page[page.index(job.job_id) :].split("</tr>")[0]
    assert f'title="retrying at {utc(present(job.retry_at))}"' in row
    assert "retry in " in row and "due in" not in row
