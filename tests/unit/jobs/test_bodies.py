"""The queue's receipt bodies and the retry rule they carry (J-1 to J-11, J-4): each
builder gives the exact body, keys in their stored order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from jobs.core import bodies
from jobs.core.state import Fence, JobState

FENCE = Fence("w1", 2)


def job(**overrides: Any) -> JobState:
    fields: dict[str, Any] = {
        "job_id": "job-1",
        "agent_id": "codex",
        "lane": "collect",
        "kind": "factory.run",
        "status": "running",
        "attempt": 2,
        "max_attempts": 3,
        "session_key": None,
        "singleton_mode": "allow",
        "payload": {},
        "worker_id": "w1",
        "lease_until": 10_000,
        "lease_ms": 5_000,
        "abort_requested": False,
        "abort_reason": None,
        "commands": (),
        "result": None,
        "last_error": None,
        "created_at": 1,
        "updated_at": 2,
        "organization_id": None,
        "objective_id": None,
        "task_id": None,
        "receipt_count": 3,
        "head": "h",
        "settled_by": None,
        "cancel_reason": None,
    }
    return JobState(**{**fields, **overrides})


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "no_retry", "expected"),
    [
        (1, 3, False, True),
        (2, 3, False, True),
        (3, 3, False, False),  # attempts used up
        (4, 3, False, False),
        (1, 3, True, False),  # the handler said not to
        (1, 1, False, False),
    ],
)
def test_will_retry(attempt: int, max_attempts: int, no_retry: bool, expected: bool) -> None:
    state = job(attempt=attempt, max_attempts=max_attempts)
    assert bodies.will_retry(state, no_retry=no_retry) is expected


W1 = {"workerId": "w1", "attempt": 2}
CASES: list[tuple[str, Callable[[], Any], Any]] = [
    (
        "enqueued",
        lambda: bodies.enqueued(
            "job-1",
            agent_id="codex",
            lane="collect",
            payload={"kind": "k"},
            max_attempts=3,
            session_key=None,
            singleton_mode="allow",
            lease_ms=900,
        ),
        {
            "type": "job.enqueued",
            "jobId": "job-1",
            "agentId": "codex",
            "lane": "collect",
            "payload": {"kind": "k"},
            "maxAttempts": 3,
            "sessionKey": None,
            "singletonMode": "allow",
            "leaseMs": 900,
        },
    ),
    (
        "leased",
        lambda: bodies.leased("job-1", FENCE, lease_until=9, start=False),
        [{"type": "job.leased", "jobId": "job-1", **W1, "leaseUntil": 9}],
    ),
    (
        "leased and started",
        lambda: bodies.leased("job-1", FENCE, lease_until=9, start=True),
        [
            {"type": "job.leased", "jobId": "job-1", **W1, "leaseUntil": 9},
            {"type": "job.heartbeat", "jobId": "job-1", **W1, "leaseUntil": 9},
        ],
    ),
    (
        "heartbeat",
        lambda: bodies.heartbeat("job-1", FENCE, lease_until=9),
        {"type": "job.heartbeat", "jobId": "job-1", **W1, "leaseUntil": 9},
    ),
    (
        "progress",
        lambda: bodies.progress("job-1", FENCE, {"p": 1}),
        {"type": "job.progress", "jobId": "job-1", **W1, "progress": {"p": 1}},
    ),
    (
        "completed",
        lambda: bodies.completed("job-1", FENCE, None),
        {"type": "job.completed", "jobId": "job-1", **W1, "result": None},
    ),
    (
        "failed, retried",
        lambda: bodies.failed(job(), FENCE, "boom", no_retry=False),
        {
            "type": "job.failed",
            "jobId": "job-1",
            **W1,
            "error": "boom",
            "noRetry": False,
            "willRetry": True,
        },
    ),
    (
        "failed for good, with a result and a long error",
        lambda: bodies.failed(job(attempt=3), FENCE, "x" * 9000, no_retry=False, result=[1]),
        {
            "type": "job.failed",
            "jobId": "job-1",
            **W1,
            "error": "x" * 8000,
            "noRetry": False,
            "willRetry": False,
            "result": [1],
        },
    ),
    (
        "failed, no retry asked",
        lambda: bodies.failed(job(), FENCE, "boom", no_retry=True),
        {
            "type": "job.failed",
            "jobId": "job-1",
            **W1,
            "error": "boom",
            "noRetry": True,
            "willRetry": False,
        },
    ),
    (
        "canceled, unfenced",
        lambda: bodies.canceled("job-1", reason="r", by="ops"),
        {"type": "job.canceled", "jobId": "job-1", "reason": "r", "by": "ops"},
    ),
    (
        "canceled by the worker",
        lambda: bodies.canceled("job-1", reason="r", by=None, fence=FENCE),
        {"type": "job.canceled", "jobId": "job-1", "reason": "r", "by": None, **W1},
    ),
    (
        "lease expired",
        lambda: bodies.lease_expired(job()),
        {
            "type": "job.lease_expired",
            "jobId": "job-1",
            **W1,
            "willRetry": True,
        },
    ),
    (
        "lease released, holder gone, last attempt",
        lambda: bodies.lease_expired(job(attempt=3), reason="gone"),
        {
            "type": "job.lease_expired",
            "jobId": "job-1",
            "workerId": "w1",
            "attempt": 3,
            "willRetry": False,
            "reason": "gone",
        },
    ),
    (
        "command",
        lambda: bodies.command("job-1", command_id="c1", command="abort", payload=None, by="ops"),
        {
            "type": "queue.command",
            "jobId": "job-1",
            "commandId": "c1",
            "command": "abort",
            "payload": None,
            "by": "ops",
        },
    ),
    (
        "command on a lane",
        lambda: bodies.command("job-1", command_id="c1", command="steer", payload={}, by=None),
        {
            "type": "queue.command",
            "jobId": "job-1",
            "commandId": "c1",
            "command": "steer",
            "payload": {},
            "by": None,
            "lane": "steer",
        },
    ),
    (
        "commands consumed",
        lambda: bodies.commands_consumed("job-1", FENCE, ["c1", "c2"]),
        {"type": "queue.command.consumed", "jobId": "job-1", "commandIds": ["c1", "c2"], **W1},
    ),
]


def _ordered(value: Any) -> Any:
    if isinstance(value, dict):
        return [(key, _ordered(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [_ordered(item) for item in value]
    return value


@pytest.mark.parametrize(("name", "build", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_body_is_exactly_what_the_queue_appends(
    name: str, build: Callable[[], Any], expected: Any
) -> None:
    assert _ordered(build()) == _ordered(expected)


def test_an_enqueued_body_names_a_queue_only_when_one_was_chosen():
    """Issue 33 item 5: every body without a chosen queue, and its hash, is as before."""
    common: dict[str, Any] = {
        "agent_id": "mailer",
        "lane": "collect",
        "payload": {"kind": "acme.mail"},
        "max_attempts": 2,
        "session_key": None,
        "singleton_mode": "allow",
        "lease_ms": 60_000,
    }
    plain = bodies.enqueued("j-1", **common)
    assert "queue" not in plain and list(plain)[-1] == "leaseMs"
    routed = bodies.enqueued("j-1", **common, queue="emails")
    assert list(routed)[-1] == "queue" and routed["queue"] == "emails"
    assert {k: v for k, v in routed.items() if k != "queue"} == plain


# ---- an operator's retry (issue 34 item 3) ----------------------------------------------------


@pytest.mark.parametrize(
    ("attempt", "retried_after", "max_attempts", "expected"),
    [
        (3, 3, 3, True),  # retried after attempt 3: none of the fresh budget used yet
        (4, 3, 3, True),
        (5, 3, 3, True),
        (6, 3, 3, False),  # the fresh budget used up too
        (2, 1, 1, False),
    ],
)
def test_will_retry_counts_the_attempts_since_the_latest_retry(
    attempt: int, retried_after: int, max_attempts: int, expected: bool
) -> None:
    state = job(attempt=attempt, max_attempts=max_attempts, retried_after_attempt=retried_after)
    assert bodies.will_retry(state) is expected


@pytest.mark.parametrize(
    ("changes", "include_canceled", "refusal"),
    [
        ({"status": "failed"}, False, None),
        ({"status": "failed"}, True, None),
        ({"status": "canceled"}, False, "canceled"),
        ({"status": "canceled"}, True, None),
        ({"status": "completed"}, True, "completed"),
        ({"status": "queued"}, True, "active"),
        ({"status": "leased"}, True, "active"),
        ({"status": "running"}, True, "active"),
        ({"status": "failed", "objective_id": "obj-1"}, True, "objective"),
    ],
)
def test_retry_refusal(
    changes: dict[str, Any], include_canceled: bool, refusal: str | None
) -> None:
    assert bodies.retry_refusal(job(**changes), include_canceled=include_canceled) == refusal


def test_a_retry_body_numbers_its_cycle_and_the_attempt_it_follows() -> None:
    failed = job(status="failed", attempt=3, retries=1)
    assert bodies.retried(failed, by="alice") == {
        "type": "job.retried",
        "jobId": "job-1",
        "retry": 2,
        "afterAttempt": 3,
        "fromStatus": "failed",
        "by": "alice",
    }
    assert bodies.retried(failed, by="alice", reason="why")["reason"] == "why"
