"""Issue 34 item 6: failed and retrying jobs are found by the start of their last error
(`error:<text>` in the jobs list's search), bounded to its first 100 characters and, on
PostgreSQL, a range of the partial index job_error_prefix."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from jobs import queue
from jobs.admin import changelist
from jobs.core.state import Fence
from jobs.models import Job
from tests.integration.admin.conftest import CHANGELIST, NOW, enqueue, text

pytestmark = pytest.mark.django_db

TIMEOUT = "TimeoutError: the model did not answer in 600 s"
REFUSED = "ConnectionRefusedError: upstream refused 50%_of calls"


def failed(error: str, *, retrying: bool = False, at: int = NOW) -> str:
    job_id = enqueue(now_ms=at)
    worker = "chat:h:1"
    assert queue.lease(job_id, worker_id=worker, now_ms=at + 1).applied
    fence = Fence(worker, 1)
    assert queue.fail(job_id, error, fence=fence, no_retry=not retrying, now_ms=at + 2).applied
    return job_id


def listed(admin_client, term: str) -> set[str]:
    page = text(admin_client.get(CHANGELIST, {"q": term}))
    return {
        row.split('title="', 1)[1].split('"', 1)[0] for row in page.split('class="rcpt-id"')[1:]
    }


def test_error_search_finds_failed_and_retrying_jobs_by_the_start_of_their_error(admin_client):
    timed_out = failed(TIMEOUT)
    retrying = failed(TIMEOUT, retrying=True, at=NOW + 10)
    refused = failed(REFUSED, at=NOW + 20)
    completed = enqueue(now_ms=NOW + 30)
    assert queue.get(retrying).status == "queued" and queue.get(timed_out).status == "failed"
    assert listed(admin_client, "error:TimeoutError") == {timed_out, retrying}
    assert listed(admin_client, "error:TimeoutError: the model") == {timed_out, retrying}
    # LIKE's wildcards are the text itself
    assert listed(admin_client, "error:ConnectionRefusedError: upstream refused 50%_") == {refused}
    assert listed(admin_client, "error:Connection%") == set()
    assert listed(admin_client, "error:the model") == set()  # the start, not anywhere
    assert completed not in listed(admin_client, "error:T")


def test_a_long_search_is_cut_to_the_indexed_prefix(admin_client):
    error = "E" * 150
    job_id = failed(error)
    assert listed(admin_client, "error:" + error + "and more") == {job_id}
    assert changelist.ERROR_PREFIX_CHARS == 100


@pytest.mark.postgres_only
def test_the_error_search_is_a_range_of_the_prefix_index():
    now = NOW
    with connection.cursor() as cursor:  # many failed jobs, of other errors, then statistics
        cursor.execute(
            "INSERT INTO jobs_job (id, agent_id, lane, kind, status, worker_group, attempt, "
            "created_at, updated_at, state) SELECT 'bulk-' || g, 'factory', 'collect', "
            "'factory.run', 'failed', 'chat', 1, %s + g, %s + g, "
            "json_build_object('lastError', 'ValueError: bad input ' || g) "
            "FROM generate_series(1, 5000) AS g",
            [now, now],
        )
        cursor.execute("ANALYZE jobs_job")
    found = (
        Job.objects.alias(error_prefix=changelist.error_prefix())
        .filter(changelist.parse_search("error:TimeoutError"))
        .order_by("-created_at", "-id")[:100]
    )
    plan = json.loads(found.explain(format="json"))
    assert "job_error_prefix" in json.dumps(plan), plan
