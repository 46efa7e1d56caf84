"""A kind's retry policy with real runworker processes (issue 34 item 2): each failed
attempt waits out its backoff (a scheduled delivery the due loop releases), and no
attempt starts before the `retryAt` its failure recorded."""

from __future__ import annotations

import pytest

from jobs.core import contracts, retry_policy
from receipts import store
from tests.runtime.helpers import assert_settled_once, enqueue, wait_status
from tests.runtime.policies import BACKOFF_POLICY

pytestmark = [pytest.mark.runtime, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def backoff_kind():
    """The kind as the workers' handler module registers it, in this process too (its
    enqueue is validated here); the module itself is never imported here."""
    contracts.register_kind("test.backoff", worker_group="chat", retry=BACKOFF_POLICY)
    yield
    contracts.unregister_kind("test.backoff")


def test_a_flaky_job_retries_after_each_backoff_and_never_before_it(stack, backoff_kind):
    stack.start("driver")
    stack.start("chat")
    job = enqueue("test-flaky", kind="test.backoff", failThrough=2)
    assert job.max_attempts == 3  # the kind's policy

    done = wait_status(job.job_id, "completed", "failed", timeout=60)
    assert (done.status, done.attempt, done.retry_at) == ("completed", 3, None)
    receipts = store.read(job.stream)
    failures = [r for r in receipts if r.type == "job.failed"]
    leases = [r for r in receipts if r.type == "job.leased"]
    assert [r.body["attempt"] for r in leases] == [1, 2, 3]
    for failed, next_lease in zip(failures, leases[1:], strict=True):
        attempt = failed.body["attempt"]
        wait = retry_policy.backoff_ms(BACKOFF_POLICY, job.job_id, attempt)
        assert failed.body["retryAt"] == failed.ts + wait
        assert next_lease.ts >= failed.body["retryAt"]  # no attempt before its backoff
    starts = stack.marks("start", job.job_id)
    assert [m["attempt"] for m in starts] == [1, 2, 3]  # each ran once
    for failed, start in zip(failures, starts[1:], strict=True):
        assert start["t"] * 1000 >= failed.body["retryAt"]
    assert_settled_once(job.job_id)
