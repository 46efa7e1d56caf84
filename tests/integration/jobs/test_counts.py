"""Bounded counts (jobs.counts) behind the dashboard, /metrics and /healthz, and the keyset
page's start at its cursor: reads whose cost must not grow with the number of jobs."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import counts, queue, selectors
from jobs.core.state import Fence
from tests.integration.jobs.helpers import payload

pytestmark = pytest.mark.django_db
MINUTE = 60_000
NOW = 1_900_000_000_000


def enqueue(agent: str = "factory", *, at: int, lane: str = "collect", org: str = "org-1") -> str:
    body = dict(payload(), authContext={"userId": "u-1", "organizationId": org})
    return queue.enqueue(agent, body, lane=lane, now_ms=at).job.job_id


def test_count_reads_at_least_past_its_cap():
    assert counts.Count.of(5, 10) == counts.Count(5, False)
    assert counts.Count.of(11, 10) == counts.Count(10, True)
    assert counts.Count(1_000, True).shown == "1,000+" and counts.Count(999).shown == "999"
    assert counts.Count(3) + counts.Count(100, True) == counts.Count(103, True)


def test_active_cells_stop_at_the_cap_and_name_the_oldest_queued_job():
    first = enqueue(at=NOW)
    enqueue(at=NOW + MINUTE)
    enqueue(at=NOW + 2 * MINUTE)
    steer = enqueue(at=NOW + 3 * MINUTE, lane="steer")
    leased = enqueue(at=NOW + 4 * MINUTE)
    assert queue.lease(leased, worker_id="chat:h:1", now_ms=NOW + 5 * MINUTE).applied
    done = enqueue(at=NOW)
    assert queue.lease(done, worker_id="chat:h:1", now_ms=NOW + MINUTE).applied
    assert queue.complete(done, {}, fence=Fence("chat:h:1", 1), now_ms=NOW + 2 * MINUTE).applied
    cells = {(c.status, c.lane, c.group): c for c in counts.active_cells(cap=2)}
    assert set(cells) == {
        ("queued", "collect", "chat"),
        ("queued", "steer", "chat"),
        ("leased", "collect", "chat"),
    }
    collect = cells["queued", "collect", "chat"]
    assert collect.count == counts.Count(2, True)  # three queued: at least two
    assert (collect.oldest_created_at, collect.oldest_id) == (NOW, first)
    assert cells["queued", "steer", "chat"].oldest_id == steer
    assert cells["leased", "collect", "chat"].count == counts.Count(1)
    assert cells["leased", "collect", "chat"].oldest_id is None  # only queued cells
    exact = {(c.status, c.lane): c.count.value for c in counts.active_cells()}
    assert exact == {("queued", "collect"): 3, ("queued", "steer"): 1, ("leased", "collect"): 1}


def test_active_cells_of_one_organization():
    enqueue(at=NOW, org="org-1")
    enqueue(at=NOW, org="org-2")
    enqueue(at=NOW + MINUTE, org="org-2")
    [cell] = counts.active_cells(organization_id="org-2")
    assert cell.count == counts.Count(2) and cell.oldest_created_at == NOW
    assert counts.by_status(["queued"], organization_id="org-1") == {"queued": counts.Count(1)}


def test_status_counts_stop_at_the_cap_and_windows_count_recent_settlements():
    for i in range(3):
        enqueue(at=NOW + i)
    old, recent = enqueue(at=NOW), enqueue(at=NOW)
    queue.cancel(old, reason="t", now_ms=NOW + 5 * MINUTE)
    queue.cancel(recent, reason="t", now_ms=NOW + 70 * MINUTE)
    assert counts.by_status(["queued", "running"], cap=2) == {
        "queued": counts.Count(2, True),
        "running": counts.Count(0),
    }
    since = NOW + 70 * MINUTE - 60 * MINUTE
    assert counts.by_status(["canceled"], updated_since_ms=since) == {"canceled": counts.Count(1)}


def test_every_count_reads_a_limited_range():
    enqueue(at=NOW)
    with CaptureQueriesContext(connection) as queries:
        counts.active_cells()
        counts.by_status(["queued"], updated_since_ms=NOW)
    reads = job_reads(queries)  # (on PostgreSQL also the setting that turns bitmaps off)
    assert len(reads) == 2
    for q in reads:
        sql = q["sql"].upper()
        assert "COUNT(*) FROM (SELECT 1 FROM JOBS_JOB" in sql and "LIMIT" in sql
        assert "GROUP BY" not in sql


def test_a_keyset_page_starts_its_index_range_at_the_cursor():
    """A later page bounds created_at from above as a plain range (not only inside the OR
    of the tie-break), so its scan starts at the cursor instead of at the newest job."""
    ids = [enqueue(at=NOW + (i // 2) * MINUTE) for i in range(6)]  # pairs share created_at
    first = selectors.page({}, limit=3)
    with CaptureQueriesContext(connection) as queries:
        second = selectors.page({}, limit=3, cursor=first.next_cursor)
    (read,) = job_reads(queries)
    assert '"created_at" <=' in read["sql"]
    seen = [j.job_id for j in first.jobs + second.jobs]
    created = {job_id: created_at(job_id) for job_id in ids}
    assert seen == sorted(ids, key=lambda job_id: (created[job_id], job_id), reverse=True)


def job_reads(queries: CaptureQueriesContext) -> list[dict[str, str]]:
    return [q for q in queries.captured_queries if "jobs_job" in q["sql"].lower()]


def created_at(job_id: str) -> int:
    state = queue.get(job_id)
    assert state is not None
    return state.created_at
