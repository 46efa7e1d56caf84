"""J-6 to J-11: the queue service on a real database (both backends)."""

from __future__ import annotations

from typing import Any

import pytest

from jobs import queue
from jobs.core.state import Fence
from jobs.errors import InvalidRequest, JobNotFound, JobTerminal
from jobs.models import Job
from jobs.queue import Outcome
from receipts import store
from tests.integration.jobs.helpers import assert_read_model_matches_receipts, payload
from tests.support import present

pytestmark = pytest.mark.django_db
T0 = 1_800_000_000_000


def enqueue(**options):
    options.setdefault("now_ms", T0)
    agent = options.pop("agent_id", "factory")
    body = options.pop("payload", None) or payload()
    return queue.enqueue(agent, body, **options)


def leased(job_id, worker="w1", now=T0 + 10):
    result = queue.lease(job_id, worker_id=worker, now_ms=now)
    assert result.applied
    return Fence(worker, result.job.attempt)


# ---- enqueue -------------------------------------------------------------------------------


def test_enqueue_writes_job_enqueued_and_the_row_in_one_go():
    result = enqueue(lane="chat", session_key="s-1")
    job = result.job
    assert result.created and job.status == "queued" and job.lane == "chat"
    assert job.max_attempts == 2 and job.singleton_mode == "allow"  # J-6 defaults
    [receipt] = store.read(f"jobs/{job.job_id}")
    assert receipt.type == "job.enqueued"
    assert receipt.body["leaseMs"] == 300_000 and receipt.body["agentId"] == "factory"
    assert receipt.context == {"jobId": job.job_id, "organizationId": "org-1"}
    row = Job.objects.get(pk=job.job_id)
    assert (row.status, row.organization_id, row.worker_group, row.kind) == (
        "queued",
        "org-1",
        "chat",
        "factory.run",
    )
    assert_read_model_matches_receipts(job.job_id)


@pytest.mark.parametrize(("given", "stored"), [(0, 1), (-5, 1), (1, 1), (8, 8), (99, 8)])
def test_max_attempts_is_clamped_to_1_through_8(given, stored):
    assert enqueue(max_attempts=given).job.max_attempts == stored


@pytest.mark.parametrize(
    ("options", "code"),
    [
        ({"lane": "fast"}, "invalid_lane"),
        ({"max_attempts": "3"}, "invalid_max_attempts"),
        ({"max_attempts": True}, "invalid_max_attempts"),
        ({"singleton_mode": "replace"}, "invalid_singleton_mode"),
        ({"singleton_mode": "cancel"}, "session_key_required"),
        (
            {"payload": {"kind": "nope", "authContext": {"userId": "u", "organizationId": "o"}}},
            "unknown_kind",
        ),
        ({"payload": {"kind": "factory.run"}}, "auth_context_required"),
        (
            {"payload": {"kind": "factory.run", "authContext": {"userId": "u"}}},
            "auth_context_required",
        ),
        ({"job_id": "has space"}, "invalid_job_id"),
        ({"agent_id": ""}, "invalid_agent_id"),
        ({"payload": payload(blob="x" * 1_100_000)}, "payload_too_large"),
        ({"payload": payload(notes=["ok", "lone \ud800 surrogate"])}, "invalid_payload"),
        ({"payload": {**payload(), "\udfff key": 1}}, "invalid_payload"),
    ],
)
def test_bad_enqueues_are_refused_and_write_nothing(options, code):
    with pytest.raises(InvalidRequest) as caught:
        enqueue(**options)
    assert caught.value.code == code
    assert Job.objects.count() == 0
    assert store.list_streams("jobs/") == []


def test_a_lone_surrogate_in_process_is_refused_with_its_path():
    """Q-3: the API refuses it while parsing; an in-process caller gets the same kind of
    answer (not an encoding error) with where the bad string is."""
    with pytest.raises(InvalidRequest, match=r"lone surrogate.* at \$\.payload\.notes\[1\]"):
        enqueue(payload=payload(notes=["ok", "lone \ud800 surrogate"]))


def test_unknown_kind_error_lists_the_nine_kinds():
    with pytest.raises(InvalidRequest) as caught:
        enqueue(payload={"kind": "x.y", "authContext": {"userId": "u", "organizationId": "o"}})
    assert "factory.task.run" in str(caught.value) and "factory.dispatch" in str(caught.value)


def test_watchdog_kind_needs_no_auth_context():
    assert enqueue(
        agent_id="factory-control", payload={"kind": "factory.objective.watchdog"}
    ).created


def test_deep_payloads_are_refused():
    deep: dict[str, Any] = {}
    current = deep
    for _ in range(40):
        current["n"] = {}
        current = current["n"]
    with pytest.raises(InvalidRequest, match="nesting deeper"):
        enqueue(payload=payload(deep=deep))


def test_explicit_job_id_is_idempotent_and_never_disturbs_the_job():
    first = enqueue(job_id="job-1", lane="chat")
    again = enqueue(
        job_id="job-1", lane="steer", payload=payload(kind="factory.dispatch"), max_attempts=5
    )
    assert first.created and not again.created
    assert again.job == first.job
    assert store.stream_info("jobs/job-1").count == 1


def test_unknown_agent_is_accepted_with_a_warning():
    result = enqueue(agent_id="mystery")
    assert result.created
    assert result.warnings and "No handler for agent 'mystery'" in result.warnings[0]
    assert enqueue(agent_id="codex", payload=payload(kind="factory.task.run")).warnings == []


def test_lease_policy_is_applied_at_enqueue():
    job = enqueue(
        agent_id="codex", payload=payload(kind="factory.task.run", timeoutMs=1_200_000)
    ).job
    assert job.lease_ms == 1_500_000  # K-6: max(900000, min(timeout + 300000, 3600000))


# ---- singleton (J-7 to J-9) ----------------------------------------------------------------


def test_singleton_cancel_cancels_queued_and_aborts_running_jobs_on_the_key():
    queued = enqueue(session_key="k").job
    running = enqueue(session_key="k", now_ms=T0 + 1).job
    other_key = enqueue(session_key="other", now_ms=T0 + 2).job
    fence = leased(running.job_id)
    queue.heartbeat(running.job_id, fence=fence, now_ms=T0 + 20)
    new = enqueue(session_key="k", singleton_mode="cancel", now_ms=T0 + 30)
    assert new.created
    q = queue.get(queued.job_id)
    assert q.status == "canceled" and q.cancel_reason == "singleton cancel"
    r = queue.get(running.job_id)
    assert r.status == "running" and r.abort_requested and r.abort_reason == "singleton cancel"
    assert r.commands[-1].command == "abort"
    assert queue.get(other_key.job_id).status == "queued"
    for job_id in (queued.job_id, running.job_id, new.job.job_id):
        assert_read_model_matches_receipts(job_id)


def test_singleton_steer_steers_the_most_recent_active_job_and_returns_it():
    enqueue(session_key="k", now_ms=T0)
    newest = enqueue(session_key="k", now_ms=T0 + 5).job
    result = enqueue(
        session_key="k",
        singleton_mode="steer",
        payload=payload(message="turn left"),
        now_ms=T0 + 10,
    )
    assert not result.created and result.steered and result.job.job_id == newest.job_id
    command = result.job.commands[-1]
    assert command.command == "steer" and command.lane == "steer"
    assert command.payload["message"] == "turn left"
    assert command.payload["fromSessionKey"] == "k" and command.payload["fromEnqueue"] is True
    assert Job.objects.count() == 2


def test_singleton_steer_without_an_active_job_creates_one():
    done = enqueue(session_key="k").job
    queue.cancel(done.job_id, reason="x")
    result = enqueue(session_key="k", singleton_mode="steer", now_ms=T0 + 1)
    assert result.created and not result.steered


def test_expired_lease_is_evaluated_before_a_steer():
    dead = enqueue(session_key="k", max_attempts=1).job
    leased(dead.job_id, now=T0 + 1)  # lease until T0 + 1 + 300000
    later = T0 + 400_000
    result = enqueue(session_key="k", singleton_mode="steer", now_ms=later)
    dead_now = queue.get(dead.job_id)
    assert dead_now.status == "failed" and dead_now.last_error == "lease expired"
    assert result.created and not result.steered  # the dead job did not swallow the steer


def test_expired_lease_with_attempts_left_requeues_and_then_takes_the_steer():
    job = enqueue(session_key="k", max_attempts=2).job
    leased(job.job_id, now=T0 + 1)
    result = enqueue(session_key="k", singleton_mode="steer", now_ms=T0 + 400_000)
    assert result.steered and result.job.job_id == job.job_id
    assert result.job.status == "queued" and result.job.commands[-1].command == "steer"


# ---- commands (J-10) -----------------------------------------------------------------------


def test_abort_on_a_queued_job_cancels_it_outright():
    job = enqueue().job
    result = queue.abort(job.job_id, reason="not needed", by="ops")
    assert result.canceled and result.job.status == "canceled"
    assert result.job.cancel_reason == "not needed"
    last = store.read(f"jobs/{job.job_id}")[-1]
    assert last.type == "job.canceled" and last.body["by"] == "ops"
    assert present(last.context)["actor"] == "ops"


def test_abort_without_reason_uses_abort_requested():
    job = enqueue().job
    assert queue.abort(job.job_id).job.cancel_reason == "abort requested"


def test_abort_on_a_running_job_appends_the_command_for_the_worker():
    job = enqueue().job
    fence = leased(job.job_id)
    result = queue.abort(job.job_id, reason="stop", by="ops")
    assert not result.canceled and result.job.status == "leased"
    assert result.job.abort_requested and result.command["command"] == "abort"
    assert result.command["payload"] == {"reason": "stop"} and result.command["by"] == "ops"
    # the worker sees it on its next heartbeat and settles as canceled under its fence
    beat = queue.heartbeat(job.job_id, fence=fence, now_ms=T0 + 50)
    assert beat.job.abort_requested
    done = queue.cancel(job.job_id, reason="stop", fence=fence, now_ms=T0 + 60)
    assert done.applied and done.job.status == "canceled"


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("steer", "job is completed; continue through its objective"),
        ("follow_up", "job is completed; continue through its objective"),
        ("abort", "is already completed; nothing to abort"),
    ],
)
def test_commands_on_a_terminal_job_are_refused(command, message):
    job = enqueue().job
    fence = leased(job.job_id)
    queue.complete(job.job_id, {"ok": 1}, fence=fence)
    with pytest.raises(JobTerminal, match=message):
        queue.command(job.job_id, command, {"x": 1})


def test_commands_on_a_missing_job_are_not_found_and_leave_no_stream():
    with pytest.raises(JobNotFound, match="job ghost not found"):
        queue.steer("ghost", {"x": 1})
    assert store.stream_info("jobs/ghost") is None


def test_steer_and_follow_up_use_their_lanes_and_are_consumed_under_the_fence():
    job = enqueue().job
    fence = leased(job.job_id)
    steer = queue.steer(job.job_id, {"go": "left"}, by="alice").command
    follow = queue.follow_up(job.job_id, {"then": "stop"}).command
    assert (steer["lane"], follow["lane"]) == ("steer", "follow_up")
    stale = queue.consume_commands(job.job_id, fence=Fence("w1", 99))
    assert stale.outcome is Outcome.FENCE_LOST and stale.commands == ()
    only_steer = queue.consume_commands(job.job_id, fence=fence, types=["steer"], now_ms=T0 + 70)
    assert [c.id for c in only_steer.commands] == [steer["id"]]
    rest = queue.consume_commands(job.job_id, fence=fence, now_ms=T0 + 80)
    assert [c.id for c in rest.commands] == [follow["id"]]
    assert queue.consume_commands(job.job_id, fence=fence).commands == ()
    consumed = {c.id: c.consumed_at for c in queue.get(job.job_id).commands}
    assert consumed == {steer["id"]: T0 + 70, follow["id"]: T0 + 80}
    assert_read_model_matches_receipts(job.job_id)


# ---- worker-side writes (J-3, J-4, J-11) -----------------------------------------------------


def test_lease_heartbeat_progress_complete_under_the_fence():
    job = enqueue().job
    lease = queue.lease(job.job_id, worker_id="w1", now_ms=T0 + 10)
    assert lease.applied and lease.job.status == "leased" and lease.job.attempt == 1
    assert lease.job.lease_until == T0 + 10 + 300_000
    fence = Fence("w1", 1)
    assert queue.heartbeat(job.job_id, fence=fence, now_ms=T0 + 20).job.status == "running"
    assert queue.progress(job.job_id, {"pct": 50}, fence=fence).applied
    done = queue.complete(job.job_id, {"answer": 42}, fence=fence)
    assert done.applied and done.job.status == "completed" and done.job.result == {"answer": 42}
    assert_read_model_matches_receipts(job.job_id)


def test_second_lease_is_refused_as_not_queued():
    job = enqueue().job
    leased(job.job_id)
    again = queue.lease(job.job_id, worker_id="w2")
    assert again.outcome is Outcome.NOT_QUEUED and again.job.worker_id == "w1"


def test_writes_from_a_superseded_attempt_report_fence_lost_and_write_nothing():
    job = enqueue().job
    old = leased(job.job_id)
    queue.fail(job.job_id, "boom", fence=old)  # attempt 1 of 2: requeued
    new = leased(job.job_id, worker="w2")
    count = store.stream_info(f"jobs/{job.job_id}").count
    for write in (
        lambda: queue.heartbeat(job.job_id, fence=old),
        lambda: queue.progress(job.job_id, {}, fence=old),
        lambda: queue.complete(job.job_id, {}, fence=old),
        lambda: queue.fail(job.job_id, "late", fence=old),
        lambda: queue.cancel(job.job_id, reason="late", fence=old),
    ):
        assert write().outcome is Outcome.FENCE_LOST
    assert store.stream_info(f"jobs/{job.job_id}").count == count
    assert queue.complete(job.job_id, "ok", fence=new).applied


def test_a_settlement_given_the_job_as_its_worker_knew_it_checks_the_stream_first():
    """A worker settles with the job as it last wrote it (no read when the stream still
    ends there); a stream that moved on since is read, so a superseded attempt is refused
    exactly as without it, and a command that arrived meanwhile is in the fold."""
    job = enqueue().job
    old = leased(job.job_id)
    known = queue.get(job.job_id)
    queue.fail(job.job_id, "boom", fence=old)  # attempt 1 of 2: requeued
    new = leased(job.job_id, worker="w2")
    stale = queue.complete(job.job_id, {}, fence=old, known=known)
    assert stale.outcome is Outcome.FENCE_LOST and stale.job.attempt == 2

    current = queue.get(job.job_id)
    queue.steer(job.job_id, {"text": "also this"})  # appended after `current`
    done = queue.complete(job.job_id, "ok", fence=new, known=current)
    assert done.applied and [c.command for c in done.job.commands] == ["steer"]
    assert_read_model_matches_receipts(job.job_id)

    unchanged = enqueue().job
    fence = leased(unchanged.job_id)
    as_leased = queue.get(unchanged.job_id)
    settled = queue.complete(unchanged.job_id, {"n": 1}, fence=fence, known=as_leased)
    assert settled.applied and settled.job.result == {"n": 1}
    assert_read_model_matches_receipts(unchanged.job_id)


def test_retryable_failure_requeues_until_attempts_run_out():
    job = enqueue(max_attempts=2).job
    first = queue.fail(job.job_id, "flaky", fence=leased(job.job_id))
    assert first.job.status == "queued" and first.job.last_error == "flaky"
    assert store.read(f"jobs/{job.job_id}")[-1].body["willRetry"] is True
    second = queue.fail(job.job_id, "flaky again", fence=leased(job.job_id))
    assert second.job.status == "failed" and second.job.attempt == 2
    assert store.read(f"jobs/{job.job_id}")[-1].body["willRetry"] is False


def test_non_retryable_failure_fails_at_once_with_its_result():
    job = enqueue(max_attempts=5).job
    out = queue.fail(
        job.job_id,
        "No handler for agent 'x'",
        no_retry=True,
        result={"status": "failed"},
        fence=leased(job.job_id),
    )
    assert out.job.status == "failed" and out.job.result == {"status": "failed"}


def test_settled_jobs_report_terminal_and_settle_once():
    job = enqueue().job
    fence = leased(job.job_id)
    assert queue.complete(job.job_id, 1, fence=fence).applied
    assert queue.complete(job.job_id, 2, fence=fence).outcome is Outcome.TERMINAL
    assert queue.fail(job.job_id, "x", fence=fence).outcome is Outcome.TERMINAL
    assert queue.lease(job.job_id, worker_id="w9").outcome is Outcome.TERMINAL
    assert queue.get(job.job_id).result == 1


def test_missing_job_outcomes():
    assert queue.lease("nope", worker_id="w").outcome is Outcome.MISSING
    assert queue.complete("nope", 1, fence=Fence("w", 1)).outcome is Outcome.MISSING
    assert queue.expire_lease("nope").outcome is Outcome.MISSING
    assert store.stream_info("jobs/nope") is None


def test_expire_lease_requeues_then_fails_when_attempts_are_used_up():
    job = enqueue(max_attempts=2).job
    leased(job.job_id, now=T0)
    assert queue.expire_lease(job.job_id, now_ms=T0 + 1000).outcome is Outcome.NOT_DUE
    first = queue.expire_lease(job.job_id, now_ms=T0 + 400_000)
    assert first.applied and first.job.status == "queued"
    leased(job.job_id, worker="w2", now=T0 + 400_001)
    second = queue.expire_lease(job.job_id, now_ms=T0 + 800_000)
    assert second.job.status == "failed" and second.job.last_error == "lease expired"
    assert_read_model_matches_receipts(job.job_id)


def test_unfenced_cancel_refuses_work_in_flight():
    job = enqueue().job
    leased(job.job_id)
    assert queue.cancel(job.job_id, reason="x").outcome is Outcome.NOT_QUEUED


def test_batch_enqueue_is_one_transaction():
    requests = [queue.build_request("factory", payload(), job_id=f"b-{i}") for i in range(20)]
    results = queue.enqueue_many(requests)
    assert all(r.created for r in results) and Job.objects.count() == 20


def test_replay_of_a_job_stream_reports_drift_of_a_damaged_row():
    job = enqueue().job
    Job.objects.filter(pk=job.job_id).update(status="completed")
    report = store.replay(f"jobs/{job.job_id}")
    assert [d.stream for d in report.drift] == [f"jobs/{job.job_id}"]
    assert report.drift[0].fields == ["status"]
    assert Job.objects.get(pk=job.job_id).status == "queued"
    assert_read_model_matches_receipts(job.job_id)


def test_lease_with_start_is_running_in_one_append():
    job = enqueue().job
    started = queue.lease(job.job_id, worker_id="w1", now_ms=T0 + 5, start=True)
    assert started.job.status == "running"
    assert [r.type for r in store.read(job.stream)][-2:] == ["job.leased", "job.heartbeat"]
    assert_read_model_matches_receipts(job.job_id)


def test_lease_for_an_expected_attempt_refuses_another_number():
    job = enqueue(max_attempts=3).job
    assert queue.lease(job.job_id, worker_id="w", expect_attempt=2).outcome is Outcome.NOT_QUEUED
    assert queue.lease(job.job_id, worker_id="w", expect_attempt=1).applied
