"""A delayed job with real runworker processes (issue 33 item 3, G-3): its delivery waits
for its time and no attempt starts before it; then it runs like any other job."""

from __future__ import annotations

import pytest

from jobs import queue
from jobs.models import DeliveryPromise
from receipts import store
from receipts.clock import now_ms as wall_clock_ms
from tests.integration.jobs.helpers import payload
from tests.runtime.helpers import assert_settled_once, enqueue, wait_status

pytestmark = [pytest.mark.runtime, pytest.mark.django_db(transaction=True)]


def test_a_delayed_job_is_not_started_before_its_time_and_runs_once_after_it(stack):
    stack.start("driver")
    stack.start("chat")
    run_at = wall_clock_ms() + 1_500
    job = queue.enqueue("test-echo", payload(message="later"), run_at=run_at).job
    assert job.run_at == run_at
    plain = enqueue("test-echo", message="now")  # enqueued after it, due at once

    done = wait_status(job.job_id, "completed", timeout=30)
    assert done.result["echo"] == "later"
    leased = next(r for r in store.read(job.stream) if r.type == "job.leased")
    assert leased.ts >= run_at  # the attempt began at its time, not before
    (start,) = stack.marks("start", job.job_id)
    assert start["t"] * 1000 >= run_at
    assert wait_status(plain.job_id, "completed").result["echo"] == "now"
    driver_promise = DeliveryPromise.objects.get(pk=job.job_id)
    assert (driver_promise.due_at, driver_promise.state) == (None, "resolved")  # released
    assert_settled_once(job.job_id)
