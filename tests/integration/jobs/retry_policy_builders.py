"""A kind with a retry policy and a job waiting for its backoff (issue 34 item 2), for the
API and admin tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from jobs import handlers, queue
from jobs.core import contracts
from jobs.core.retry_policy import RetryPolicy
from jobs.core.state import JobState
from jobs.handler_contract import JobResult
from jobs.runtime import dispatch, driver, worker
from tests.support import present

AGENT = "test-retry-policy"
KIND = "test.retry-policy"
POLICY = RetryPolicy(max_attempts=5, base_ms=3_600_000, cap_ms=3_600_000)  # an hour's wait


def _fails(job: Any, ctx: Any) -> JobResult:
    return JobResult.failure(f"HTTP 503 on attempt {ctx.attempt}")


@contextmanager
def policy_kind() -> Iterator[None]:
    contracts.register_kind(KIND, worker_group="chat", retry=POLICY)
    handlers._HANDLERS[AGENT] = _fails
    try:
        yield
    finally:
        handlers._HANDLERS.pop(AGENT, None)
        contracts.unregister_kind(KIND)


def waiting_job() -> JobState:
    """A job whose first attempt failed and which waits an hour for its retry."""
    job = queue.enqueue(AGENT, {"kind": KIND}).job
    promise = present(dispatch.start_driver(job).promise_id)
    worker.execute(driver.drive(promise)["execute"])
    return present(queue.get(job.job_id))
