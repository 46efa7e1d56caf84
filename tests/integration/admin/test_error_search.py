"""Issue 34 item 6: failed and retrying jobs are found by the start of their last error
(`error:<text>` in the jobs list's search), bounded to its first 100 characters. Issue 35
item 5: flat at a million; on PostgreSQL few matches are a range of the partial index
job_error_prefix, many a newest-first walk of job_errors_newest, and neither index holds
a queued job with no error."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from jobs import index_walks, queue
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


def counted(page: str) -> str:
    return page.split('id="rcpt-result-count">', 1)[1].split("<", 1)[0]


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


def test_many_matches_are_walked_newest_first_with_the_same_answer(admin_client, monkeypatch):
    jobs = [failed(TIMEOUT, at=NOW + 10 * n, retrying=n % 2 == 1) for n in range(5)]
    refused = failed(REFUSED, at=NOW + 100)
    gathered = listed(admin_client, "error:TimeoutError")
    monkeypatch.setattr(changelist.JobPaginator, "filtered_cap", 3)  # 5 matches: walked
    assert changelist.few_errors(Job.objects.all(), "TimeoutError") is None
    assert changelist.few_errors(Job.objects.all(), "Connection") == [refused]
    walked = listed(admin_client, "error:TimeoutError")
    assert walked == gathered == set(jobs)
    page = text(admin_client.get(CHANGELIST, {"q": "error:TimeoutError"}))
    assert [page.index(job_id) for job_id in reversed(jobs)] == sorted(
        page.index(job_id) for job_id in jobs
    )  # newest first
    assert counted(page) == "more than 3"  # known from the gather, not counted again
    failed_only = text(
        admin_client.get(CHANGELIST, {"q": "error:TimeoutError", "status": "failed"})
    )
    assert counted(failed_only) == "3"  # under a filter: counted
    assert listed(admin_client, "error:Connection") == {refused}


def bulk_jobs(status: str, error_sql: str, *, count: int = 5000) -> None:
    """`count` jobs of one status straight into the table, their lastError from
    `error_sql` (an SQL expression of the series number g, or NULL), then statistics."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO jobs_job (id, agent_id, lane, kind, status, worker_group, attempt, "
            "created_at, updated_at, state) SELECT %s || '-' || g, 'factory', 'collect', "
            "'factory.run', %s, 'chat', 1, %s + g, %s + g, "
            f"json_build_object('lastError', {error_sql}) "
            "FROM generate_series(1, %s) AS g",
            [status, status, NOW, NOW, count],
        )
        cursor.execute("ANALYZE jobs_job")


def plan_of(rows) -> str:
    return json.dumps(json.loads(rows.explain(format="json")))


@pytest.mark.postgres_only
def test_few_matches_are_a_range_of_the_prefix_index():
    bulk_jobs("failed", "'ValueError: bad input ' || g")
    with index_walks.walking(index_walks.GATHER):
        plan = plan_of(changelist.errors_starting(Job.objects.all(), "TimeoutError")[:1000])
    assert "job_error_prefix" in plan, plan


@pytest.mark.postgres_only
def test_many_matches_walk_the_newest_jobs_with_an_error_and_sort_nothing():
    bulk_jobs("failed", "'TimeoutError: ' || g")
    assert changelist.few_errors(Job.objects.all(), "TimeoutError") is None
    rows = changelist.errors_starting(Job.objects.all(), "TimeoutError")
    with index_walks.walking():
        plan = plan_of(rows.order_by(*index_walks.NEWEST)[:100])
    assert "job_errors_newest" in plan and '"Sort"' not in plan, plan


@pytest.mark.postgres_only
def test_a_queued_job_with_no_error_adds_no_entry_to_the_error_indexes():
    failed(TIMEOUT)
    bulk_jobs("queued", "NULL")  # its ANALYZE counts each partial index's entries
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, reltuples FROM pg_class WHERE relname IN "
            "('job_error_prefix', 'job_errors_newest', 'job_newest')"
        )
        entries = dict(cursor.fetchall())
    assert entries["job_newest"] >= 5001
    assert entries["job_error_prefix"] == entries["job_errors_newest"] == 1
