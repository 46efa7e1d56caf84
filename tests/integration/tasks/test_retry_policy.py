"""A task's retry policy (issue 34 item 2): `receipt_options(task, retry=RetryPolicy(...))`
travels in the job's payload; the worker retries by the exception's class (and bases),
after the policy's backoff, up to the policy's attempts (past the client clamp)."""

from __future__ import annotations

import pytest

from jobs import queue
from jobs.core import retry_policy
from jobs.core.retry_policy import RetryPolicy
from jobs.tasks import receipt_options
from jobs.tasks.framework import InvalidTask, TaskResultStatus
from tests.integration.tasks import defs
from tests.support import present

pytestmark = pytest.mark.django_db
CUSTOM = "tests.integration.tasks.defs.CustomError"


def test_an_exception_the_policy_never_retries_fails_the_task_on_its_first_attempt(
    receipt_worker,
):
    never = RetryPolicy(base_ms=0, never_retry=(CUSTOM,))
    result = receipt_options(defs.raise_custom, retry=never).enqueue()
    receipt_worker.run()
    result.refresh()
    assert (result.status, result.attempts) == (TaskResultStatus.FAILED, 1)
    by_base = RetryPolicy(base_ms=0, never_retry=("builtins.Exception",))  # a base class
    result = receipt_options(defs.raise_custom, retry=by_base).enqueue()
    receipt_worker.run()
    result.refresh()
    assert (result.status, result.attempts) == (TaskResultStatus.FAILED, 1)


def test_retry_on_retries_only_the_exceptions_it_names(receipt_worker):
    only_runtime = RetryPolicy(base_ms=0, retry_on=("builtins.RuntimeError",))
    other = receipt_options(defs.boom, retry=only_runtime).enqueue("bad")  # ValueError
    named = receipt_options(defs.attempt_number, retry=only_runtime).enqueue(fail_until=1)
    receipt_worker.run()
    other.refresh()
    named.refresh()
    assert (other.status, other.attempts) == (TaskResultStatus.FAILED, 1)
    assert (named.status, named.attempts) == (TaskResultStatus.SUCCESSFUL, 2)


def test_a_policy_in_code_may_allow_more_attempts_than_the_clamp(receipt_worker):
    many = RetryPolicy(max_attempts=10, base_ms=0)
    result = receipt_options(defs.attempt_number, retry=many).enqueue(fail_until=9)
    assert present(queue.get(result.id)).max_attempts == 10
    receipt_worker.run()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert present(result.return_value)["attempt"] == 10
    clamped = receipt_options(defs.add, retry=many, max_attempts=20).enqueue(1, 2)
    assert present(queue.get(clamped.id)).max_attempts == 8  # an explicit one is clamped


def test_a_failed_attempt_waits_for_its_backoff_before_the_next(receipt_worker):
    slow = RetryPolicy(base_ms=20_000)
    result = receipt_options(defs.boom, retry=slow).enqueue("later")
    job = present(queue.get(result.id))
    assert job.payload[retry_policy.PAYLOAD_KEY] == {"baseMs": 20_000}
    drained = receipt_worker.run()
    assert drained.attempts == 1 and drained.left == (result.id,)  # not due: not run
    waiting = present(queue.get(result.id))
    assert waiting.status == "queued" and waiting.retry_at is not None
    assert waiting.retry_at >= waiting.updated_at + 10_000  # half the backoff at least
    result.refresh()
    assert result.status == TaskResultStatus.READY


def test_the_option_is_checked_where_it_is_set():
    with pytest.raises(InvalidTask, match="retry must be a RetryPolicy"):
        receipt_options(defs.add, retry={"baseMs": 1})  # type: ignore[arg-type]
