"""D-12: diagnose() names every blocker from facts alone."""

from dataclasses import replace

from jobs.core.diagnosis import Facts, PendingDelivery, diagnose
from jobs.core.reducer import fold_job
from receipts.core.chain import seal
from tests.support import present

NOW = 2_000_000_000_000
LIVE = {"driver": 1, "worker-chat": 1, "worker-codex": 1, "worker-control": 1}


def job(**changes):
    body = {
        "type": "job.enqueued",
        "jobId": "j1",
        "agentId": "factory",
        "lane": "collect",
        "payload": {"kind": "factory.run"},
        "maxAttempts": 2,
        "sessionKey": None,
        "singletonMode": "allow",
        "leaseMs": 300_000,
    }
    state = fold_job(
        [seal(stream="jobs/j1", prev=None, body=body, ts=NOW - 60_000, random_hex16="0" * 16)]
    )
    return replace(present(state), **changes)


def codes(**facts):
    base = {"job": job(), "now_ms": NOW, "has_handler": True, "live_processes": LIVE}
    return [b.code for b in diagnose(Facts(**{**base, **facts}))]


def test_unknown_agent_is_named():
    assert "no_handler" in codes(job=job(agent_id="mystery"), has_handler=False)


def test_group_without_live_process_is_named():
    assert "no_live_process" in codes(live_processes={"driver": 1})
    assert "no_live_driver" in codes(live_processes={"worker-chat": 1})


def test_redrive_cooldown_and_min_age_are_named():
    fresh = job(updated_at=NOW - 1_000)
    assert codes(job=fresh) == ["redrive_pending"]
    assert codes(last_driver_start_ms=NOW - 5_000) == ["redrive_pending"]
    assert codes() == ["awaiting_redrive"]


def test_pending_delivery_is_shown_with_its_age():
    pending = (PendingDelivery("j1", "driver", NOW - 2_000, NOW + 118_000),)
    blockers = diagnose(
        Facts(job=job(), now_ms=NOW, has_handler=True, live_processes=LIVE, pending=pending)
    )
    assert [b.code for b in blockers] == ["delivery_pending"]
    assert "pending for 2.0 s" in blockers[0].detail


def test_running_and_expired_leases():
    running = job(status="running", attempt=1, worker_id="chat:h:1", lease_until=NOW + 9_000)
    assert codes(job=running) == ["running"]
    expired = replace(running, lease_until=NOW - 1_000)
    assert codes(job=expired) == ["lease_expired"]


def test_terminal_job_says_why():
    done = job(status="failed", last_error="lease expired")
    blockers = diagnose(Facts(job=done, now_ms=NOW, has_handler=True, live_processes={}))
    assert [b.code for b in blockers] == ["terminal"] and "lease expired" in blockers[0].detail


def test_abort_exhaustion_and_session_peers():
    assert "abort_requested" in codes(job=job(abort_requested=True, abort_reason="x"))
    assert "attempts_exhausted" in codes(job=job(attempt=2))
    assert "singleton_peers" in codes(job=job(session_key="s"), session_peers=("j0",))


def test_long_waits_read_in_human_units():
    from jobs.core.diagnosis import human_ms

    assert [
        human_ms(ms) for ms in (850, 1500, 250_000, 3 * 3_600_000 + 120_000, 5 * 86_400_000, None)
    ] == ["850 ms", "1.5 s", "4m 10s", "3h 02m", "5d 0h", "—"]


def test_a_failed_job_says_a_retry_would_run_it_and_a_completed_one_does_not():
    """Issue 34 item 3."""
    failed = diagnose(
        Facts(
            job=job(status="failed", last_error="boom"),
            now_ms=NOW,
            has_handler=True,
            live_processes=LIVE,
        )
    )
    assert failed[0].detail == "job is failed (boom); it will not run again unless retried"
    done = diagnose(
        Facts(job=job(status="completed"), now_ms=NOW, has_handler=True, live_processes=LIVE)
    )
    assert done[0].detail == "job is completed (completed); it will not run again"


def test_a_retried_job_names_its_retry_until_its_next_attempt_starts():
    retried = job(
        attempt=2,
        max_attempts=2,
        last_error="boom",
        retries=1,
        retried_by="alice",
        retried_at=1_765_022_650_000,  # 2025-12-06 12:04:10 UTC
        retried_after_attempt=2,
    )
    blockers = diagnose(Facts(job=retried, now_ms=NOW, has_handler=True, live_processes=LIVE))
    assert blockers[0].code == "retried"
    assert blockers[0].detail == (
        "retried by alice at 2025-12-06 12:04:10 UTC after attempt 2 (boom); attempts 3 to 4 "
        "are its new budget"
    )
    assert "attempts_exhausted" not in [b.code for b in blockers]  # a fresh budget
    running = replace(
        retried, status="running", attempt=3, worker_id="chat:h:1", lease_until=NOW + 9_000
    )
    assert codes(job=running) == ["running"]
    again = replace(retried, attempt=4, retried_after_attempt=2)
    assert "attempts_exhausted" in codes(job=again)
