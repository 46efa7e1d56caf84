"""Races that must settle once (J-6, J-7, J-11), with real threads and connections.

These run on both backends; PostgreSQL is where row locks and the session advisory lock
really interleave, SQLite serialises writers with IMMEDIATE transactions.
"""

from __future__ import annotations

import pytest

from jobs import queue
from jobs.core.state import Fence
from jobs.models import Job
from jobs.queue import Outcome
from receipts import store
from tests.conftest import run_in_threads
from tests.integration.jobs.helpers import (
    assert_read_model_matches_receipts,
    payload,
    terminal_receipts,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_concurrent_enqueues_with_one_job_id_create_one_job():
    results = run_in_threads(6, lambda i: queue.enqueue("factory", payload(n=i), job_id="same"))
    assert sum(r.created for r in results) == 1
    assert Job.objects.filter(pk="same").count() == 1
    assert store.stream_info("jobs/same").count == 1
    assert len({r.job.payload["n"] for r in results}) == 1  # everyone got the one job


def test_concurrent_singleton_cancel_enqueues_leave_exactly_one_active_job():
    queue.enqueue("factory", payload(), session_key="k")
    results = run_in_threads(
        5,
        lambda i: queue.enqueue("factory", payload(n=i), session_key="k", singleton_mode="cancel"),
    )
    assert all(r.created for r in results)
    active = Job.objects.filter(session_key="k", status__in=["queued", "leased", "running"])
    assert active.count() == 1
    assert Job.objects.filter(session_key="k", status="canceled").count() == 5
    for job_id in Job.objects.values_list("id", flat=True):
        assert_read_model_matches_receipts(job_id)


def test_concurrent_settlements_from_a_stale_and_a_live_attempt_settle_once():
    job = queue.enqueue("factory", payload(), max_attempts=3).job
    queue.lease(job.job_id, worker_id="old")
    queue.fail(job.job_id, "lost", fence=Fence("old", 1))
    queue.lease(job.job_id, worker_id="new")
    writers = [
        lambda: queue.complete(job.job_id, "stale", fence=Fence("old", 1)),
        lambda: queue.fail(job.job_id, "stale", no_retry=True, fence=Fence("old", 1)),
        lambda: queue.complete(job.job_id, "live", fence=Fence("new", 2)),
        lambda: queue.fail(job.job_id, "live", no_retry=True, fence=Fence("new", 2)),
    ]
    outcomes = run_in_threads(len(writers), lambda i: writers[i]().outcome)
    # a stale write never applies: it finds the fence lost, or the job already settled
    assert {outcomes[0], outcomes[1]} <= {Outcome.FENCE_LOST, Outcome.TERMINAL}
    assert sorted(outcomes[2:]) == sorted([Outcome.APPLIED, Outcome.TERMINAL])
    assert len(terminal_receipts(job.job_id)) == 1
    final = queue.get(job.job_id)
    assert final.status in ("completed", "failed") and final.result != "stale"
    assert_read_model_matches_receipts(job.job_id)


def test_concurrent_leases_give_the_attempt_to_one_worker():
    job = queue.enqueue("factory", payload()).job
    outcomes = run_in_threads(4, lambda i: queue.lease(job.job_id, worker_id=f"w{i}").outcome)
    assert outcomes.count(Outcome.APPLIED) == 1
    assert outcomes.count(Outcome.NOT_QUEUED) == 3
    assert queue.get(job.job_id).attempt == 1
