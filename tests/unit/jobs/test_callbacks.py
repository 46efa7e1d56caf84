"""D-8 callbacks, pure: the event a write causes, the body, the retry schedule."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobs.core import callbacks
from jobs.core.reducer import fold_job
from jobs.core.vocabulary import Status
from receipts.core.chain import seal

T = 1_800_000_000_000


def job(status: Status, attempt: int = 1):
    enqueued = seal(
        stream="jobs/j-1",
        prev=None,
        ts=T,
        random_hex16="0" * 16,
        body={
            "type": "job.enqueued",
            "jobId": "j-1",
            "agentId": "factory",
            "lane": "chat",
            "payload": {"kind": "factory.run"},
            "maxAttempts": 2,
            "sessionKey": None,
            "singletonMode": "allow",
            "leaseMs": 1000,
        },
    )
    state = fold_job([enqueued])
    assert state is not None
    return replace(state, status=status, attempt=attempt, updated_at=T + 5)


@pytest.mark.parametrize(
    ("before", "after", "event"),
    [
        ("running", "completed", "completed"),
        ("running", "failed", "failed"),
        ("queued", "canceled", "canceled"),
        ("leased", "failed", "failed"),  # a lease expiry that used up the attempts
        (None, "canceled", "canceled"),  # settled in the append that created it
        ("running", "queued", None),  # a failure that will be retried settles nothing
        ("queued", "leased", None),
        ("completed", "completed", None),  # an inert write after the settlement
        ("canceled", "canceled", None),
    ],
)
def test_only_the_write_that_settles_a_job_causes_an_event(before, after, event):
    """D-8: completed, failed and canceled, once per job, whoever wrote it."""
    previous = job(before) if before else None
    assert callbacks.settlement_event(previous, job(after)) == event


def test_no_event_without_a_job():
    assert callbacks.settlement_event(None, None) is None


def test_the_body_has_exactly_the_contract_fields():
    """D-8: {event, jobId, stream, status, attempt, agentId, kind, at}."""
    assert callbacks.body("completed", job("completed", 2), at_ms=T + 9) == {
        "event": "completed",
        "jobId": "j-1",
        "stream": "jobs/j-1",
        "status": "completed",
        "attempt": 2,
        "agentId": "factory",
        "kind": "factory.run",
        "at": T + 9,
    }


@pytest.mark.parametrize(
    ("failures", "delay_ms"),
    [
        (0, 1_000),
        (1, 1_000),
        (2, 2_000),
        (3, 4_000),
        (4, 8_000),
        (9, 256_000),
        (10, 300_000),
        (50, 300_000),
    ],
)
def test_retries_back_off_exponentially_up_to_five_minutes(failures, delay_ms):
    assert callbacks.retry_delay_ms(failures) == delay_ms


def test_the_last_try_lands_on_the_deadline_then_it_gives_up():
    assert callbacks.next_try_ms(1, now_ms=T, give_up_at_ms=T + 60_000) == T + 1_000
    assert callbacks.next_try_ms(8, now_ms=T, give_up_at_ms=T + 60_000) == T + 60_000
    assert callbacks.next_try_ms(8, now_ms=T + 60_000, give_up_at_ms=T + 60_000) is None
    assert callbacks.next_try_ms(1, now_ms=T + 61_000, give_up_at_ms=T + 60_000) is None


def test_a_retried_job_posts_its_retries_so_its_cycles_can_be_told_apart():
    """Issue 34 item 3: a job never retried posts D-8's fields exactly (above); after a
    retry the body adds `retries`."""
    retried = replace(job("failed", 2), retries=1)
    body = callbacks.body("failed", retried, at_ms=T)
    assert body["retries"] == 1
    assert set(body) == {
        "event",
        "jobId",
        "stream",
        "status",
        "attempt",
        "agentId",
        "kind",
        "at",
        "retries",
    }
    assert callbacks.settlement_event(job("queued", 1), retried) == "failed"
