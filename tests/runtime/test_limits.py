"""Rate limits and per-key caps with two real runworkers of the group (issue 34 item 4):
a key's cap is never exceeded, and no job waits while a slot of its key is free (a
stopping job wakes the next one at once, not a periodic pass); a rate's N starts per
window hold across both processes."""

from __future__ import annotations

import itertools
import json

import pytest

from jobs.core import contracts
from receipts import store
from tests.runtime.helpers import assert_settled_once, enqueue, wait_status

pytestmark = [pytest.mark.runtime, pytest.mark.django_db(transaction=True)]

CAP = 2
LIMITS = [
    {"name": "per-customer", "kinds": ["factory.run"], "concurrency": CAP, "key": "customer"},
    {"name": "provider", "kinds": ["test.rated"], "rate": "2/2s"},
]
# Longest a job may wait with a slot of its key free: delivery from the wake (the broker's
# poll and a hop), far below the keeper's pass (10 s) that would otherwise free it.
WAKE_BOUND_MS = 3_000


@pytest.fixture
def rated_kind():
    contracts.register_kind("test.rated", worker_group="chat")  # as the workers' module does
    yield
    contracts.unregister_kind("test.rated")


def _interval(job_id: str) -> tuple[int, int, int]:
    """(enqueued, leased, settled) times of a job that ran once, from its receipts."""
    receipts = store.read(f"jobs/{job_id}")
    leases = [r for r in receipts if r.type == "job.leased"]
    assert len(leases) == 1, [r.type for r in receipts]
    return receipts[0].ts, leases[0].ts, receipts[-1].ts


def _running_at(intervals: list[tuple[int, int, int]], t: float) -> int:
    return sum(1 for _, start, end in intervals if start <= t < end)


def test_two_runworkers_keep_each_key_under_its_cap_and_wake_the_next_at_once(stack, rated_kind):
    # two slots a runworker: both keys at their caps (2 + 2) need both processes
    env = {"RECEIPT_LIMITS": json.dumps(LIMITS), "CHAT_JOB_CONCURRENCY": "2"}
    stack.start("driver")
    stack.start("chat", **env)
    stack.start("chat", name="chat-b", **env)
    by_key = {
        key: [
            enqueue("test-sleep", kind="factory.run", customer=key, sleepMs=700).job_id
            for _ in range(count)
        ]
        for key, count in (("acme", 6), ("globex", 3))
    }
    rated = [enqueue("test-sleep", kind="test.rated", sleepMs=10).job_id for _ in range(3)]
    for job_id in [*by_key["acme"], *by_key["globex"], *rated]:
        assert wait_status(job_id, "completed", "failed", timeout=90).status == "completed"
        assert_settled_once(job_id)

    for key, job_ids in by_key.items():
        intervals = [_interval(job_id) for job_id in job_ids]
        # the cap is never exceeded: at every start, at most CAP run
        assert max(_running_at(intervals, start) for _, start, _ in intervals) <= CAP, key
        for enqueued, start, _ in intervals:
            # every moment this job waited with a free slot of its key, summed per gap
            edges = sorted({enqueued, start, *(t for i in intervals for t in i[1:])})
            free = [
                (a, b)
                for a, b in itertools.pairwise(edges)
                if enqueued <= a < start and _running_at(intervals, a) < CAP
            ]
            waited = sum(b - a for a, b in free)
            assert waited <= WAKE_BOUND_MS, (key, waited, free)
        leases = [r for job_id in job_ids for r in store.read(f"jobs/{job_id}")]
        keys = {r.body.get("limitKey") for r in leases if r.type == "job.leased"}
        assert keys == {f"per-customer:{key}"}  # each start recorded the key it ran under
    capped = {*by_key["acme"], *by_key["globex"]}
    runworkers = {m["workerId"] for m in stack.marks("start") if m["jobId"] in capped}
    assert len(runworkers) == 2  # both processes ran capped jobs, under the same caps

    starts = sorted(_interval(job_id)[1] for job_id in rated)
    for i in range(len(starts) - 2):  # at most 2 starts in any 2 s, across both processes
        assert starts[i + 2] - starts[i] >= 2_000, starts
