"""A job waiting for its retry policy's backoff on the API (issue 34 item 2): its JSON
carries `retryAt` and its diagnosis says when it retries, after which attempt, and why."""

from __future__ import annotations

import pytest

from jobs.core.diagnosis import utc_text
from tests.integration.api.conftest import payload, written
from tests.integration.jobs.retry_policy_builders import policy_kind, waiting_job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def registered():
    with policy_kind():
        yield


def test_a_job_waiting_for_its_retry_shows_retry_at_and_diagnosis_says_why(api):
    job = waiting_job()
    assert job.retry_at is not None
    status, read = api.get(f"/jobs/{job.job_id}")
    assert status == 200
    body = read.get("job", read)
    assert (body["status"], body["retryAt"], body["attempt"]) == ("queued", job.retry_at, 1)
    _, diagnosis = api.get(f"/jobs/{job.job_id}/diagnosis")
    (retrying,) = [b for b in diagnosis["blockers"] if b["code"] == "retrying"]
    assert retrying["detail"].startswith(f"retrying at {utc_text(job.retry_at)} (in ")
    assert retrying["detail"].endswith("after attempt 1 failed: HTTP 503 on attempt 1")
    assert diagnosis["facts"]["retryAt"] == job.retry_at


def test_a_job_without_a_backoff_reads_retry_at_null(api):
    job = api.enqueue()["job"]
    assert job["retryAt"] is None


def test_a_clients_payload_may_not_carry_a_retry_policy(api):
    before = written()
    body = {"payload": payload(retryPolicy={"maxAttempts": 100})}
    status, out = api.post("/agents/factory/jobs", body)
    assert (status, out["error"]) == (400, "invalid_payload"), out
    assert "payload.retryPolicy" in out["detail"]
    assert written() == before
