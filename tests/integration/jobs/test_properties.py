"""C-1: random interleavings of queue operations from several workers, stale attempts
included. After every step the read model equals the fold of the receipts, no job has
two terminal receipts, and every chain verifies."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs import queue
from jobs.core.state import Fence
from jobs.errors import JobsError
from tests.integration.jobs.helpers import (
    assert_read_model_matches_receipts,
    payload,
    terminal_receipts,
)

pytestmark = pytest.mark.django_db
_run = itertools.count()

operations = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "lease",
                "heartbeat",
                "progress",
                "complete",
                "fail",
                "fail_final",
                "cancel",
                "abort",
                "steer",
                "consume",
                "expire",
            ]
        ),
        st.integers(0, 2),  # job
        st.integers(0, 2),  # worker
        st.integers(0, 2),  # attempt offset: 0 = current attempt, else a stale/future one
        st.integers(0, 700_000),  # clock advance (ms)
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=operations, max_attempts=st.integers(1, 3))
def test_random_interleavings_keep_every_invariant(ops, max_attempts):
    run = next(_run)
    now = 1_900_000_000_000
    job_ids = [
        queue.enqueue(
            "factory", payload(), job_id=f"p{run}-{j}", max_attempts=max_attempts, now_ms=now
        ).job.job_id
        for j in range(3)
    ]
    for op, j, w, offset, advance in ops:
        now += advance
        job_id = job_ids[j]
        current = queue.get(job_id)
        fence = Fence(f"w{w}", max(0, current.attempt - offset))
        try:
            if op == "lease":
                queue.lease(job_id, worker_id=f"w{w}", now_ms=now)
            elif op == "heartbeat":
                queue.heartbeat(job_id, fence=fence, now_ms=now)
            elif op == "progress":
                queue.progress(job_id, {"at": now}, fence=fence, now_ms=now)
            elif op == "complete":
                queue.complete(job_id, {"by": w}, fence=fence, now_ms=now)
            elif op == "fail":
                queue.fail(job_id, "boom", fence=fence, now_ms=now)
            elif op == "fail_final":
                queue.fail(job_id, "fatal", no_retry=True, fence=fence, now_ms=now)
            elif op == "cancel":
                queue.cancel(job_id, reason="stop", fence=fence, now_ms=now)
            elif op == "abort":
                queue.command(job_id, "abort", None, reason="ops", now_ms=now)
            elif op == "steer":
                queue.command(job_id, "steer", {"n": now}, now_ms=now)
            elif op == "consume":
                queue.consume_commands(job_id, fence=fence, now_ms=now)
            elif op == "expire":
                queue.expire_lease(job_id, now_ms=now)
        except JobsError:
            pass  # refusals (terminal job) are part of the contract; they write nothing
        for checked in job_ids:
            assert_read_model_matches_receipts(checked)
            assert len(terminal_receipts(checked)) <= 1
