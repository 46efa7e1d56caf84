"""A job's attempts from its receipts (issue 33 item 2: task results show every attempt,
the fold only the latest). Pure: given receipts, expect the history."""

from __future__ import annotations

from jobs.core.attempts import Attempt, attempt_history
from tests.unit.jobs.test_reducer import (
    canceled,
    chain,
    completed,
    enqueued,
    failed,
    heartbeat,
    lease_expired,
    leased,
    progress,
)


def test_an_attempt_runs_from_its_lease_to_the_receipt_that_ends_it():
    receipts = chain(enqueued(), leased("w1"), heartbeat("w1"), completed("w1", result=5))
    history = attempt_history(receipts)
    assert history.job is not None and history.job.status == "completed"
    assert history.attempts == (
        Attempt(
            attempt=1,
            worker_id="w1",
            started_at=receipts[1].ts,
            ended_at=receipts[3].ts,
            ended_by="job.completed",
        ),
    )
    assert history.settled_at == receipts[3].ts


def test_every_attempt_keeps_its_worker_times_and_how_it_ended():
    detail = {"exceptionClassPath": "builtins.ValueError", "traceback": "tb"}
    receipts = chain(
        enqueued(maxAttempts=3),
        leased("w1", 1),
        failed("w1", 1, error="ValueError: one", will_retry=True, result=detail),
        leased("w2", 2),
        lease_expired("w2", 2),
        leased("w3", 3),
        completed("w3", 3),
        start_ts=5_000,
    )
    history = attempt_history(receipts)
    one, two, three = history.attempts
    assert (one.worker_id, one.started_at, one.ended_at) == ("w1", 5_010, 5_020)
    assert (one.ended_by, one.error, one.detail) == ("job.failed", "ValueError: one", detail)
    assert (two.worker_id, two.ended_by, two.error) == ("w2", "job.lease_expired", "lease expired")
    assert (three.attempt, three.ended_by, three.error) == (3, "job.completed", None)
    assert history.settled_at == receipts[-1].ts


def test_a_superseded_attempts_late_writes_change_nothing():
    """The fold's fence decides: a write of attempt 1 after attempt 2 leased is inert."""
    receipts = chain(
        enqueued(),
        leased("w1", 1),
        lease_expired("w1", 1),
        leased("w2", 2),
        failed("w1", 1, error="late"),
        progress("w1", 1),
    )
    history = attempt_history(receipts)
    assert [(a.worker_id, a.ended_by) for a in history.attempts] == [
        ("w1", "job.lease_expired"),
        ("w2", None),
    ]
    assert history.job.status == "leased" and history.settled_at is None


def test_a_release_names_the_gone_holder_in_the_attempts_error():
    gone = {**lease_expired("w1", 1), "reason": "chat:host:7 is gone"}
    history = attempt_history(chain(enqueued(), leased("w1", 1), gone))
    assert history.attempts[0].error == "lease expired: chat:host:7 is gone"


def test_a_worker_cancel_ends_the_attempt_and_a_queued_cancel_ends_none():
    running = attempt_history(
        chain(enqueued(), leased("w1", 1), canceled("abort requested", worker="w1", attempt=1))
    )
    assert running.attempts[0].ended_by == "job.canceled"
    assert running.attempts[0].error == "abort requested"
    queued = attempt_history(chain(enqueued(), canceled("singleton cancel")))
    assert queued.attempts == () and queued.job.status == "canceled"
    assert queued.settled_at is not None


def test_no_receipts_no_job():
    history = attempt_history([])
    assert history.job is None and history.attempts == () and history.settled_at is None
