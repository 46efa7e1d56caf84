"""Retry policies (issue 34 item 2) through the real driver and worker functions, on real
times: a failed attempt's `job.failed` carries `retryAt`, its next delivery is opened
scheduled for it, and no attempt starts before it (the lease's ts is never earlier);
the queued redrive leaves it alone; errors the policy never retries fail the job; a
kind's policy may allow more attempts than a client's clamp."""

from __future__ import annotations

from typing import Any

import pytest

from jobs import handlers, queue
from jobs.core import contracts, retry_policy
from jobs.core.retry_policy import RetryPolicy
from jobs.diagnosis import diagnosis
from jobs.handler_contract import JobResult
from jobs.models import DeliveryPromise
from jobs.presenters import job_json
from jobs.runtime import driver, due, recovery, worker
from receipts import store
from receipts.clock import now_ms as wall_clock_ms
from tests.conftest import wait_for
from tests.integration.jobs.helpers import payload
from tests.support import present

pytestmark = pytest.mark.django_db

AGENT = "test-retry-policy"
KIND = "test.retry-policy"
POLICY = RetryPolicy(
    max_attempts=12, base_ms=300, factor=2, cap_ms=5_000, never_retry_matching=r"^fatal"
)


def flaky(job: Any, ctx: Any) -> JobResult:
    """Fails its attempts up to `failThrough` with the payload's `error`."""
    if ctx.attempt <= job.payload.get("failThrough", 0):
        return JobResult.failure(f"{job.payload.get('error', 'flaky')} on attempt {ctx.attempt}")
    return JobResult.success({"attempt": ctx.attempt})


@pytest.fixture(autouse=True)
def policy_kind(monkeypatch):
    contracts.register_kind(KIND, worker_group="chat", retry=POLICY)
    monkeypatch.setitem(handlers._HANDLERS, AGENT, flaky)
    yield
    contracts.unregister_kind(KIND)


def enqueue(**fields: Any) -> str:
    result = queue.enqueue(AGENT, {"kind": KIND, **fields})
    return result.job.job_id


def run_delivery(promise_id: str) -> dict[str, Any]:
    """The driver's decision on a delivery, then the worker's attempt it opened."""
    return worker.execute(driver.drive(promise_id)["execute"])


def first_delivery(job_id: str) -> str:
    from jobs.runtime import dispatch

    return present(dispatch.start_driver(present(queue.get(job_id))).promise_id)


def receipts_of(job_id: str, kind: str) -> list[Any]:
    return [r for r in store.read(f"jobs/{job_id}") if r.type == kind]


def scheduled_delivery(job_id: str) -> DeliveryPromise:
    return DeliveryPromise.objects.get(job_id=job_id, function="driver", settled_at__isnull=True)


def test_no_attempt_starts_before_its_backoff_and_the_waits_grow():
    job_id = enqueue(failThrough=2, error="HTTP 503")
    assert present(queue.get(job_id)).max_attempts == 12  # the kind's policy, past the clamp
    assert run_delivery(first_delivery(job_id))["status"] == "failed"

    for attempt in (1, 2):
        failed = receipts_of(job_id, "job.failed")[-1]
        retry_at = failed.body["retryAt"]
        assert failed.body["willRetry"] is True
        assert retry_at == failed.ts + retry_policy.backoff_ms(POLICY, job_id, attempt)
        assert retry_at - failed.ts >= 300 * 2 ** (attempt - 1) // 2  # equal jitter: half at least
        job = present(queue.get(job_id))
        assert (job.status, job.retry_at, job.attempt) == ("queued", retry_at, attempt)
        assert job_json(job)["retryAt"] == retry_at
        # its next delivery is already open, scheduled for the retry: no take reads it
        promise = scheduled_delivery(job_id)
        assert promise.due_at == retry_at
        assert due.release_due(now_ms=retry_at - 1).acted == 0
        # the queued redrive finds a delivery under way and starts nothing early
        assert recovery.redrive_queued(now_ms=retry_at - 1, min_age_ms=0, cooldown_ms=0).acted == 0
        # diagnosis, asked just before the retry time
        blockers = diagnosis(job_id, now_ms=retry_at - 1)["blockers"]
        retrying = [b["detail"] for b in blockers if b["code"] == "retrying"]
        assert f"after attempt {attempt} failed: HTTP 503 on attempt {attempt}" in retrying[0]

        wait_for(lambda: wall_clock_ms() >= retry_at, timeout=10, message="the retry time")  # noqa: B023
        assert due.release_due(now_ms=wall_clock_ms()).acted == 1
        outcome = run_delivery(promise.pk)
        lease = receipts_of(job_id, "job.leased")[-1]
        assert lease.body["attempt"] == attempt + 1
        assert lease.ts >= retry_at  # no attempt starts before its backoff
        assert outcome["status"] == ("failed" if attempt == 1 else "completed")

    done = present(queue.get(job_id))
    assert (done.status, done.attempt, done.retry_at) == ("completed", 3, None)


def test_an_error_the_policy_never_retries_fails_the_job_at_once():
    job_id = enqueue(failThrough=5, error="fatal: bad input")
    assert run_delivery(first_delivery(job_id))["status"] == "failed"
    failed = receipts_of(job_id, "job.failed")[-1]
    assert (failed.body["willRetry"], failed.body["noRetry"]) == (False, True)
    assert "retryAt" not in failed.body
    assert present(queue.get(job_id)).status == "failed"


def test_a_lost_retry_delivery_is_reopened_scheduled_by_the_queued_redrive():
    job_id = enqueue(failThrough=5, error="HTTP 503")
    run_delivery(first_delivery(job_id))
    retry_at = present(queue.get(job_id)).retry_at
    assert retry_at is not None
    scheduled_delivery(job_id).delete()  # lost (a crash between settle and open, a restore)
    assert recovery.redrive_queued(now_ms=retry_at - 1, min_age_ms=0, cooldown_ms=0).acted == 1
    assert scheduled_delivery(job_id).due_at == retry_at


def test_an_explicit_max_attempts_is_still_clamped_and_a_kind_without_policy_is_unchanged():
    job_id = enqueue()
    assert present(queue.get(job_id)).max_attempts == 12
    asked = queue.enqueue(AGENT, {"kind": KIND}, max_attempts=20).job
    assert asked.max_attempts == 8  # a client's maxAttempts keeps the 1..8 clamp
    plain = queue.enqueue("nobody", payload("factory.run")).job
    assert plain.max_attempts == 2
