"""Exact texts and rules of the delivery path that clients and operators read: D-3's
starter answers, D-4's stale-lease failure, D-5's storage retry on the real settle path."""

from __future__ import annotations

import pytest
from django.db import connection

from jobs import queue
from jobs.runtime import attempt, driver, promises, storage_retry
from jobs.runtime.dispatch import DeliveryRecoveryExceeded, start_driver
from receipts import store
from tests.integration.jobs.helpers import assert_read_model_matches_receipts, payload
from tests.support import present

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("undispatched")]
T0 = 1_800_000_000_000


def _job():
    return queue.enqueue("factory", payload("factory.dispatch"), now_ms=T0).job


def test_a_pending_delivery_answers_active_delivery_and_creates_nothing():
    """D-3: a pending promise under the key means the delivery is under way."""
    job = _job()
    first = start_driver(job, now_ms=T0)
    assert (first.created, first.promise_id, first.reason) == (True, job.job_id, None)
    again = start_driver(job, now_ms=T0 + 1)
    assert (again.created, again.promise_id, again.reason) == (False, job.job_id, "active_delivery")
    assert promises.get(job.job_id, now_ms=T0 + 1).pending


def test_settled_deliveries_advance_generations_and_stop_after_32():
    """D-3: `<jobId>:recovery:<g>` for g = 1..32, then the exact refusal."""
    job = _job()
    opened = []
    for _ in range(33):
        started = start_driver(job, now_ms=T0)
        assert started.created
        opened.append(started.promise_id)
        promises.settle(
            present(started.promise_id), "resolved", now_ms=T0, result={"status": "test"}
        )
    assert opened == [job.job_id] + [f"{job.job_id}:recovery:{g}" for g in range(1, 33)]
    with pytest.raises(DeliveryRecoveryExceeded) as refused:
        start_driver(job, now_ms=T0)
    assert str(refused.value) == f"delivery recovery exceeded 32 generations for {job.job_id}"


def test_a_lapsed_lease_is_failed_under_its_own_fence_with_the_exact_text():
    """D-4: the driver fails the attempt whose lease passed, then stops."""
    job = _job()
    queue.lease(job.job_id, worker_id="w-gone", lease_ms=1_000, now_ms=T0)
    promise_id = present(start_driver(job, now_ms=T0).promise_id)
    outcome = driver.drive(promise_id, now_ms=T0 + 5_000)
    assert outcome == {"status": "stale_lease_failed", "jobId": job.job_id}
    after = queue.get(job.job_id)
    retried = after.attempt < after.max_attempts  # J-4 decides what follows
    assert after.status == ("queued" if retried else "failed") and after.attempt == 1
    failed = [r.body for r in store.read(f"jobs/{job.job_id}") if r.type == "job.failed"]
    assert failed[-1]["error"] == "stale active job lost execution; retrying through driver"
    assert failed[-1]["workerId"] == "w-gone" and failed[-1]["attempt"] == 1
    assert_read_model_matches_receipts(job.job_id)


def _running(job_id: str) -> attempt.Running:
    start_driver(present(queue.get(job_id)), now_ms=T0)
    driver.drive(job_id, now_ms=T0)
    began = attempt.begin(
        f"{job_id}:attempt:1", job_id=job_id, attempt=1, worker_id="w-1", now_ms=T0
    )
    assert isinstance(began, attempt.Running)
    return began


def test_the_storage_retry_is_five_tries_with_150_ms_times_the_try():
    """D-5: 5 attempts, backoff 150 ms x attempt, then the error propagates."""
    from django.db import OperationalError

    naps: list[float] = []

    def always_busy():
        raise OperationalError("database is locked")

    with pytest.raises(OperationalError):
        storage_retry.with_storage_retry("t", always_busy, sleep=naps.append)
    assert naps == pytest.approx([0.15, 0.30, 0.45, 0.60])


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)  # the settlement commits as in production
@pytest.mark.parametrize("sqlstate", ["40001", "40P01"])  # serialization failure, deadlock
def test_postgres_transient_sqlstates_on_the_real_settle_path_are_retried(sqlstate, monkeypatch):
    """D-5: a serialization failure or deadlock raised by PostgreSQL inside the settlement
    transaction (after the job's receipt was appended) rolls it back and is retried; the
    job completes once, on its first attempt."""
    job = _job()
    running = _running(job.job_id)
    real_settle_promise = attempt._settle_promise
    tries: list[int] = []

    def server_raises(*args, **kwargs) -> None:
        tries.append(1)
        if len(tries) <= 2:
            with connection.cursor() as cursor:
                cursor.execute(
                    f"DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '{sqlstate}'; END $$"
                )
        real_settle_promise(*args, **kwargs)

    monkeypatch.setattr(attempt, "_settle_promise", server_raises)
    naps: list[float] = []
    ended = attempt.settle(
        running, "completed", now_ms=lambda: T0 + 10, result={"ok": 1}, sleep=naps.append
    )
    assert ended.status == "completed" and len(tries) == 3
    assert naps == pytest.approx([0.15, 0.30])
    after = queue.get(job.job_id)
    assert after.status == "completed" and after.attempt == 1 and after.result == {"ok": 1}
    assert [r.type for r in store.read(f"jobs/{job.job_id}")].count("job.completed") == 1
    assert promises.get(running.promise_id, now_ms=T0 + 10).state == "resolved"
    assert_read_model_matches_receipts(job.job_id)


def test_a_refusal_on_the_settle_path_is_not_retried():
    """D-5: only transient errors are retried; anything else propagates at once."""
    job = _job()
    running = _running(job.job_id)
    tries: list[int] = []

    def refuse() -> None:
        tries.append(1)
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        attempt.settle(
            running, "completed", now_ms=lambda: T0 + 10, sleep=lambda s: None, inject=refuse
        )
    assert len(tries) == 1 and queue.get(job.job_id).status == "running"
