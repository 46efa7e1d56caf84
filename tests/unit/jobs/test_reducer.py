"""The job fold (J-2, J-3, J-4): given receipts, expect state. No database, no Django."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.core.reducer import LEASE_EXPIRED_ERROR, InvariantError, fold_job, reduce
from jobs.core.state import Command, Fence, FenceOutcome, JobState, evolve
from jobs.core.vocabulary import RECEIPT_TYPES, TERMINAL_STATUSES, job_stream
from receipts.core.chain import Receipt, seal, verify

JOB = "job-1"
STREAM = job_stream(JOB)
BOOKKEEPING = {"receipt_count", "head", "updated_at"}
_ABSENT = object()


# --- receipt bodies (J-2) --------------------------------------------------------------


def enqueued(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "job.enqueued",
        "jobId": JOB,
        "agentId": "codex",
        "lane": "collect",
        "payload": {
            "kind": "factory.task.run",
            "authContext": {"userId": "u-1", "organizationId": "org-1"},
            "objectiveId": "obj-1",
            "taskId": "task-1",
        },
        "maxAttempts": 2,
        "sessionKey": "session-1",
        "singletonMode": "allow",
        "leaseMs": 900_000,
    }
    body.update(overrides)
    return body


def leased(worker: str = "w1", attempt: int = 1, lease_until: int = 10_000) -> dict[str, Any]:
    return {
        "type": "job.leased",
        "jobId": JOB,
        "workerId": worker,
        "attempt": attempt,
        "leaseUntil": lease_until,
    }


def heartbeat(worker: str = "w1", attempt: int = 1, lease_until: int = 20_000) -> dict[str, Any]:
    return {
        "type": "job.heartbeat",
        "jobId": JOB,
        "workerId": worker,
        "attempt": attempt,
        "leaseUntil": lease_until,
    }


def progress(worker: str = "w1", attempt: int = 1) -> dict[str, Any]:
    return {
        "type": "job.progress",
        "jobId": JOB,
        "workerId": worker,
        "attempt": attempt,
        "progress": {"step": 1},
    }


def completed(worker: str = "w1", attempt: int = 1, result: Any = "done") -> dict[str, Any]:
    return {
        "type": "job.completed",
        "jobId": JOB,
        "workerId": worker,
        "attempt": attempt,
        "result": result,
    }


def failed(
    worker: str = "w1",
    attempt: int = 1,
    *,
    error: Any = "boom",
    will_retry: bool = False,
    result: Any = _ABSENT,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "job.failed",
        "jobId": JOB,
        "workerId": worker,
        "attempt": attempt,
        "error": error,
        "noRetry": not will_retry,
        "willRetry": will_retry,
    }
    if result is not _ABSENT:
        body["result"] = result
    return body


def canceled(
    reason: str = "stop", *, worker: str | None = None, attempt: int | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "job.canceled", "jobId": JOB, "reason": reason, "by": "op"}
    if worker is not None:
        body["workerId"] = worker
    if attempt is not None:
        body["attempt"] = attempt
    return body


def command(
    command_id: str = "c1", kind: str = "steer", payload: Any = None, **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "queue.command",
        "jobId": JOB,
        "commandId": command_id,
        "command": kind,
        "payload": {"text": "go left"} if payload is None else payload,
        "by": "user-1",
    }
    if kind in ("steer", "follow_up"):
        body["lane"] = kind
    body.update(extra)
    return body


def consumed(*ids: str, worker: str = "w1", attempt: int = 1) -> dict[str, Any]:
    return {
        "type": "queue.command.consumed",
        "jobId": JOB,
        "commandIds": list(ids),
        "workerId": worker,
        "attempt": attempt,
    }


def lease_expired(worker: str = "w1", attempt: int = 1) -> dict[str, Any]:
    return {
        "type": "job.lease_expired",
        "jobId": JOB,
        "workerId": worker,
        "attempt": attempt,
        "willRetry": True,
    }


def retried(
    retry: int = 1, after: int = 1, *, by: str = "ops@example.com", reason: str | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "job.retried",
        "jobId": JOB,
        "retry": retry,
        "afterAttempt": after,
        "fromStatus": "failed",
        "by": by,
    }
    if reason is not None:
        body["reason"] = reason
    return body


def chain(*bodies: dict[str, Any], start_ts: int = 1_000, step: int = 10) -> list[Receipt]:
    receipts: list[Receipt] = []
    prev: str | None = None
    for index, body in enumerate(bodies):
        receipt = seal(
            stream=STREAM, prev=prev, body=body, ts=start_ts + index * step, random_hex16="0" * 16
        )
        receipts.append(receipt)
        prev = receipt.hash
    return receipts


def fold(*bodies: dict[str, Any]) -> JobState:
    state = fold_job(chain(*bodies))
    assert state is not None
    return state


def then(state: JobState, body: dict[str, Any], ts: int = 99_000) -> JobState:
    """Apply one more receipt after `state`."""
    receipt = seal(stream=STREAM, prev=state.head, body=body, ts=ts, random_hex16="0" * 16)
    after = reduce(state, receipt)
    assert after is not None
    return after


def without_bookkeeping(state: JobState) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(state).items() if k not in BOOKKEEPING}


def assert_inert(before: JobState, after: JobState) -> None:
    """Only the stream bookkeeping moved."""
    assert without_bookkeeping(after) == without_bookkeeping(before)
    assert after.receipt_count == before.receipt_count + 1
    assert after.head != before.head


# --- job.enqueued ----------------------------------------------------------------------


def test_enqueued_creates_a_queued_job_from_its_body() -> None:
    """J-2 / J-3: job.enqueued is the only receipt that creates a job."""
    [receipt] = chain(enqueued())
    job = reduce(None, receipt)
    assert job == JobState(
        job_id=JOB,
        agent_id="codex",
        lane="collect",
        kind="factory.task.run",
        status="queued",
        attempt=0,
        max_attempts=2,
        session_key="session-1",
        singleton_mode="allow",
        payload=enqueued()["payload"],
        worker_id=None,
        lease_until=None,
        lease_ms=900_000,
        abort_requested=False,
        abort_reason=None,
        commands=(),
        result=None,
        last_error=None,
        created_at=1_000,
        updated_at=1_000,
        organization_id="org-1",
        objective_id="obj-1",
        task_id="task-1",
        receipt_count=1,
        head=receipt.hash,
        settled_by=None,
        cancel_reason=None,
    )


@pytest.mark.parametrize(
    ("payload", "kind", "organization_id", "objective_id", "task_id"),
    [
        ({"kind": "factory.run"}, "factory.run", None, None, None),
        ({"kind": 7, "objectiveId": 1, "taskId": None}, None, None, None, None),
        ({"authContext": "nope"}, None, None, None, None),
        ({"authContext": {"organizationId": "o"}, "objectiveId": "b"}, None, "o", "b", None),
        (["not", "an", "object"], None, None, None, None),
        ("text", None, None, None, None),
        (None, None, None, None, None),
    ],
)
def test_enqueued_derives_kind_and_scope_from_the_payload_when_present(
    payload: Any,
    kind: str | None,
    organization_id: str | None,
    objective_id: str | None,
    task_id: str | None,
) -> None:
    job = fold(enqueued(payload=payload))
    assert (job.kind, job.organization_id, job.objective_id, job.task_id) == (
        kind,
        organization_id,
        objective_id,
        task_id,
    )
    assert job.payload == payload


def test_enqueued_without_options_takes_the_queue_defaults() -> None:
    """J-1 default lane collect; J-6 maxAttempts 2, singletonMode allow."""
    body = {"type": "job.enqueued", "jobId": JOB, "agentId": "a", "payload": {}}
    job = fold(body)
    assert (job.lane, job.max_attempts, job.singleton_mode) == ("collect", 2, "allow")
    assert (job.session_key, job.lease_ms) == (None, None)


def test_second_enqueued_never_disturbs_the_existing_job() -> None:
    """J-6: an explicit jobId that exists returns the job unchanged."""
    first = fold(enqueued())
    again = then(first, enqueued(agentId="other", lane="chat", payload={"kind": "x"}))
    assert_inert(first, again)


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"agentId": None}, "agentId must be a string, got None"),
        ({"lane": 3}, "lane must be a string or null, got 3"),
        ({"maxAttempts": "2"}, "maxAttempts must be an integer or null, got '2'"),
        ({"maxAttempts": True}, "maxAttempts must be an integer or null, got True"),
        ({"jobId": "bad id"}, "jobId: job id 'bad id' may contain only"),
    ],
)
def test_malformed_enqueue_raises_an_invariant_naming_the_field(
    overrides: dict[str, Any], problem: str
) -> None:
    """A projector failure rolls back the append (S-5), so a bad body is never written."""
    [receipt] = chain(enqueued(**overrides))
    with pytest.raises(InvariantError) as err:
        reduce(None, receipt)
    assert str(err.value).startswith("Invariant: malformed job.enqueued for job ")
    assert problem in str(err.value)


# --- events for a job that does not exist (J-3) ----------------------------------------

_FATAL_WHEN_MISSING = [
    leased(),
    heartbeat(),
    progress(),
    completed(),
    canceled(),
    command(),
    consumed("c1"),
    {"type": "job.custom_note", "jobId": JOB},
]


@pytest.mark.parametrize("body", _FATAL_WHEN_MISSING, ids=lambda b: b["type"])
def test_event_for_a_missing_job_raises_the_invariant_with_exact_text(body: dict[str, Any]) -> None:
    """J-3: `Invariant: no job <jobId> for <type>`."""
    [receipt] = chain(body)
    with pytest.raises(InvariantError) as err:
        reduce(None, receipt)
    assert str(err.value) == f"Invariant: no job {JOB} for {body['type']}"
    assert (err.value.job_id, err.value.receipt_type) == (JOB, body["type"])


def test_invariant_names_the_stream_job_when_the_body_lacks_a_job_id() -> None:
    [receipt] = chain({"type": "job.heartbeat", "workerId": "w1", "attempt": 1})
    with pytest.raises(InvariantError, match=f"^Invariant: no job {JOB} for job.heartbeat$"):
        reduce(None, receipt)


@pytest.mark.parametrize("body", [failed(), lease_expired()], ids=lambda b: b["type"])
def test_failed_and_lease_expired_for_a_missing_job_are_ignored(body: dict[str, Any]) -> None:
    """J-3: the two exceptions; a late settlement cannot break a fold."""
    [receipt] = chain(body)
    assert reduce(None, receipt) is None
    assert fold_job(chain(body, body)) is None


def test_fold_of_no_receipts_is_no_job() -> None:
    assert fold_job([]) is None


def test_every_j2_receipt_type_is_handled_by_the_fold() -> None:
    """J-2: ten types; each one folds onto a leased job without raising. The eleventh,
    `job.retried`, folds onto a failed job (issue 34 item 3; refused on a leased one, below)."""
    bodies = {
        "job.enqueued": enqueued(),
        "job.leased": leased(),
        "job.heartbeat": heartbeat(),
        "job.progress": progress(),
        "job.completed": completed(),
        "job.failed": failed(),
        "job.canceled": canceled(),
        "queue.command": command(),
        "queue.command.consumed": consumed("c1"),
        "job.lease_expired": lease_expired(),
    }
    assert set(bodies) | {"job.retried"} == set(RECEIPT_TYPES)
    base = fold(enqueued(), leased())
    for body in bodies.values():
        assert then(base, body).receipt_count == 3
    failed_job = fold(enqueued(maxAttempts=1), leased(), failed())
    assert then(failed_job, retried()).receipt_count == 4


# --- job.leased (J-3) ------------------------------------------------------------------


def test_lease_on_a_queued_job_records_worker_attempt_and_lease() -> None:
    job = fold(enqueued(), leased("w1", 1, 55_000))
    assert (job.status, job.worker_id, job.attempt, job.lease_until) == (
        "leased",
        "w1",
        1,
        55_000,
    )


@pytest.mark.parametrize(
    "history",
    [
        [leased()],
        [leased(), heartbeat()],
        [leased(), completed()],
        [leased(), failed()],
        [canceled()],
    ],
    ids=["leased", "running", "completed", "failed", "canceled"],
)
def test_second_lease_changes_nothing_unless_the_job_is_queued(
    history: list[dict[str, Any]],
) -> None:
    """J-3: job.leased is ignored unless the job is queued."""
    before = fold(enqueued(), *history)
    assert_inert(before, then(before, leased("w2", 2, 77_000)))


@pytest.mark.parametrize("attempt", [0, 1], ids=["first-attempt-zero", "reused-attempt"])
def test_lease_that_does_not_advance_the_attempt_is_refused(attempt: int) -> None:
    """The fence (workerId, attempt) must be new, or a superseded attempt's late writes
    would match it; the projector's error rolls the append back (S-5)."""
    history = [leased("w1", 1), failed("w1", 1, will_retry=True)] if attempt else []
    with pytest.raises(InvariantError) as err:
        fold(enqueued(), *history, leased("w1", attempt))
    assert str(err.value) == (
        f"Invariant: malformed job.leased for job job-1: attempt {attempt} must exceed "
        f"the job's attempt {1 if attempt else 0}"
    )


def test_next_attempt_may_skip_numbers_but_never_goes_back() -> None:
    job = fold(enqueued(), leased("w1", 1), failed("w1", 1, will_retry=True), leased("w1", 3))
    assert (job.status, job.attempt) == ("leased", 3)


def test_malformed_lease_on_a_queued_job_raises() -> None:
    body = leased()
    del body["attempt"]
    with pytest.raises(InvariantError) as err:
        fold(enqueued(), body)
    assert str(err.value) == (
        "Invariant: malformed job.leased for job job-1: attempt must be an integer, got None"
    )


# --- the active-lease check (J-3) ------------------------------------------------------

_FENCED = {
    "heartbeat": heartbeat,
    "progress": progress,
    "completed": completed,
    "failed": failed,
    "lease_expired": lease_expired,
    "canceled_fenced": lambda worker, attempt: canceled(worker=worker, attempt=attempt),
}


@pytest.mark.parametrize("make", list(_FENCED.values()), ids=list(_FENCED))
@pytest.mark.parametrize(
    ("history", "worker", "attempt"),
    [
        ([leased("w1", 1)], "w2", 1),  # another worker
        ([leased("w1", 1)], "w1", 2),  # an attempt that never started
        ([leased("w1", 1), failed("w1", 1, will_retry=True), leased("w2", 2)], "w1", 1),
        ([leased("w1", 1), heartbeat("w1", 1), lease_expired("w1", 1), leased("w1", 2)], "w1", 1),
        ([], "w1", 0),  # queued: nobody holds a lease
        ([leased("w1", 1), failed("w1", 1, will_retry=True)], "w1", 1),  # requeued
    ],
    ids=[
        "other-worker",
        "future-attempt",
        "superseded",
        "superseded-expired",
        "queued",
        "requeued",
    ],
)
def test_write_that_does_not_match_the_active_lease_is_inert(
    make: Any, history: list[dict[str, Any]], worker: str, attempt: int
) -> None:
    """J-3: heartbeat, progress, completed, failed (and lease_expired, fenced cancel) need
    the workerId and attempt of the active lease."""
    before = fold(enqueued(maxAttempts=3), *history)
    assert_inert(before, then(before, make(worker, attempt)))


def test_heartbeat_from_superseded_attempt_is_inert() -> None:
    before = fold(enqueued(), leased("w1", 1), failed("w1", 1, will_retry=True), leased("w1", 2))
    after = then(before, heartbeat("w1", 1, 99_999))
    assert_inert(before, after)
    assert (after.status, after.attempt, after.lease_until) == ("leased", 2, 10_000)


@pytest.mark.parametrize("drop", ["workerId", "attempt"])
def test_write_without_a_fence_is_inert(drop: str) -> None:
    before = fold(enqueued(), leased())
    body = completed()
    del body[drop]
    assert_inert(before, then(before, body))


def test_boolean_attempt_never_matches_a_fence() -> None:
    before = fold(enqueued(), leased("w1", 1))
    assert_inert(before, then(before, completed("w1", True)))


# --- job.heartbeat / job.progress ------------------------------------------------------


def test_heartbeat_promotes_leased_to_running_and_extends_the_lease() -> None:
    job = fold(enqueued(), leased("w1", 1, 10_000), heartbeat("w1", 1, 40_000))
    assert (job.status, job.lease_until) == ("running", 40_000)


def test_heartbeat_never_shortens_the_lease() -> None:
    """A skewed clock on another machine must not pull a lease in."""
    job = fold(enqueued(), leased("w1", 1, 50_000), heartbeat("w1", 1, 30_000))
    assert (job.status, job.lease_until) == ("running", 50_000)


def test_heartbeat_with_a_matching_fence_but_no_lease_until_raises() -> None:
    body = heartbeat()
    body["leaseUntil"] = "soon"
    with pytest.raises(InvariantError, match="leaseUntil must be an integer"):
        fold(enqueued(), leased(), body)


def test_progress_from_the_active_lease_marks_running_without_extending() -> None:
    job = fold(enqueued(), leased("w1", 1, 10_000), progress("w1", 1))
    assert (job.status, job.lease_until) == ("running", 10_000)


# --- settlement: completed, failed (J-4) -----------------------------------------------


def test_completed_settles_with_result_and_releases_the_lease() -> None:
    job = fold(enqueued(), leased(), heartbeat(), completed(result={"ok": 1}))
    assert (job.status, job.result, job.settled_by) == ("completed", {"ok": 1}, "job.completed")
    assert (job.worker_id, job.lease_until, job.attempt) == ("w1", None, 1)


def test_failed_with_will_retry_returns_the_job_to_the_queue() -> None:
    """J-4: attempt kept, lease cleared, lastError set."""
    job = fold(enqueued(), leased("w1", 1), heartbeat("w1", 1), failed(error="x", will_retry=True))
    assert (job.status, job.attempt, job.worker_id, job.lease_until) == ("queued", 1, None, None)
    assert (job.last_error, job.settled_by, job.result) == ("x", None, None)


def test_requeued_job_can_be_leased_by_the_next_attempt_and_completed() -> None:
    job = fold(
        enqueued(),
        leased("w1", 1),
        failed("w1", 1, error="flaky", will_retry=True),
        leased("w2", 2, 30_000),
        completed("w2", 2, result="second time"),
    )
    assert (job.status, job.attempt, job.worker_id, job.result) == (
        "completed",
        2,
        "w2",
        "second time",
    )
    assert job.last_error == "flaky"  # an earlier attempt's error stays on record


@pytest.mark.parametrize(
    ("failure", "last_error", "result"),
    [
        (failed(error="boom"), "boom", None),
        (
            failed(error="boom", result={"status": "execution_timeout"}),
            "boom",
            {"status": "execution_timeout"},
        ),
        (failed(error={"code": 1}), '{"code":1}', None),
        (failed(error=None), None, None),
    ],
    ids=["plain", "with-result", "non-string-error", "no-error"],
)
def test_failed_without_retry_settles_as_failed(
    failure: dict[str, Any], last_error: str | None, result: Any
) -> None:
    """J-4 / D-6: a non-retryable failure may carry its status in result."""
    job = fold(enqueued(), leased(), failure)
    assert (job.status, job.last_error, job.result) == ("failed", last_error, result)
    assert (job.settled_by, job.lease_until) == ("job.failed", None)


def test_will_retry_must_be_literally_true_to_requeue() -> None:
    body = failed()
    body["willRetry"] = "yes"
    assert fold(enqueued(), leased(), body).status == "failed"


# --- job.lease_expired (J-4) -----------------------------------------------------------


def test_lease_expired_with_attempts_remaining_requeues() -> None:
    job = fold(enqueued(maxAttempts=2), leased("w1", 1), lease_expired("w1", 1))
    assert (job.status, job.attempt, job.worker_id, job.lease_until) == ("queued", 1, None, None)
    assert (job.last_error, job.settled_by) == (LEASE_EXPIRED_ERROR, None)


def test_lease_expired_on_the_last_attempt_fails_the_job() -> None:
    job = fold(
        enqueued(maxAttempts=2),
        leased("w1", 1),
        lease_expired("w1", 1),
        leased("w2", 2),
        heartbeat("w2", 2),
        lease_expired("w2", 2),
    )
    assert (job.status, job.last_error, job.settled_by) == (
        "failed",
        "lease expired",
        "job.lease_expired",
    )
    assert (job.attempt, job.lease_until) == (2, None)


def test_lease_expired_with_a_single_attempt_fails_at_once() -> None:
    job = fold(enqueued(maxAttempts=1), leased("w1", 1), lease_expired("w1", 1))
    assert (job.status, job.last_error) == ("failed", "lease expired")


def test_lease_expiry_decides_from_attempts_not_from_the_body() -> None:
    """J-4 says `attempt < maxAttempts`; willRetry in the body is informational."""
    body = lease_expired("w1", 1)
    body["willRetry"] = False
    assert fold(enqueued(maxAttempts=3), leased("w1", 1), body).status == "queued"


# --- job.canceled ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "history",
    [[], [leased()], [leased(), heartbeat()]],
    ids=["queued", "leased", "running"],
)
def test_cancel_without_a_fence_settles_any_active_job(history: list[dict[str, Any]]) -> None:
    """J-7 / J-10 / D-4: queue, operator and driver cancels carry no fence."""
    job = fold(enqueued(), *history, canceled("singleton cancel"))
    assert (job.status, job.cancel_reason, job.settled_by) == (
        "canceled",
        "singleton cancel",
        "job.canceled",
    )
    assert job.lease_until is None


def test_cancel_by_the_worker_holding_the_lease_settles_the_job() -> None:
    job = fold(enqueued(), leased("w1", 1), canceled("abort requested", worker="w1", attempt=1))
    assert (job.status, job.cancel_reason, job.worker_id) == ("canceled", "abort requested", "w1")


def test_cancel_with_only_a_worker_id_is_fenced_and_inert() -> None:
    before = fold(enqueued(), leased("w1", 1))
    assert_inert(before, then(before, canceled(worker="w1")))


# --- queue.command / queue.command.consumed (J-4, J-10) --------------------------------


def test_command_is_appended_unconsumed() -> None:
    job = fold(enqueued(), leased(), command("c1", "steer", {"text": "left"}))
    assert job.commands == (
        Command(
            id="c1",
            command="steer",
            lane="steer",
            payload={"text": "left"},
            by="user-1",
            created_at=1_020,
            consumed_at=None,
        ),
    )
    assert job.pending_commands == job.commands
    assert job.abort_requested is False


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (command("a1", "abort", {"reason": "singleton cancel"}), "singleton cancel"),
        (command("a1", "abort", {}, reason="from body"), "from body"),
        (command("a1", "abort", {}), None),
    ],
    ids=["payload-reason", "body-reason", "no-reason"],
)
def test_abort_command_requests_abort_with_its_reason(
    body: dict[str, Any], reason: str | None
) -> None:
    """J-4: queue.command of type abort sets abortRequested."""
    job = fold(enqueued(), leased(), body)
    assert (job.abort_requested, job.abort_reason) == (True, reason)
    assert job.status == "leased"  # only the worker stops work in flight (J-7)


def test_later_abort_without_reason_keeps_the_first_reason() -> None:
    job = fold(
        enqueued(), leased(), command("a1", "abort", {"reason": "r1"}), command("a2", "abort", {})
    )
    assert (job.abort_reason, len(job.commands)) == ("r1", 2)


def test_repeated_command_id_is_one_command() -> None:
    before = fold(enqueued(), command("c1", "steer", {"n": 1}))
    after = then(before, command("c1", "follow_up", {"n": 2}))
    assert_inert(before, after)


def test_consumption_stamps_listed_commands_with_the_receipt_time() -> None:
    job = fold(
        enqueued(),  # ts 1000
        leased(),  # 1010
        command("c1"),  # 1020
        command("c2", "follow_up"),  # 1030
        consumed("c1", "unknown"),  # 1040
    )
    assert [(c.id, c.consumed_at) for c in job.commands] == [("c1", 1_040), ("c2", None)]
    assert [c.id for c in job.pending_commands] == ["c2"]


def test_consuming_twice_keeps_the_first_consumption_time() -> None:
    job = fold(enqueued(), leased(), command("c1"), consumed("c1"), consumed("c1"))
    assert job.commands[0].consumed_at == 1_030


def test_consumption_with_malformed_ids_raises() -> None:
    body = consumed()
    body["commandIds"] = "c1"
    with pytest.raises(InvariantError, match="commandIds must be a list of strings"):
        fold(enqueued(), body)


# --- terminal immutability (J-3: a job settles exactly once) ---------------------------

_SETTLED = {
    "completed": [leased(), heartbeat(), completed(result="first")],
    "failed": [leased(), failed(error="first", result="first")],
    "canceled": [leased(), canceled("first")],
    "expired": [leased("w1", 1), lease_expired("w1", 1)],
}
_LATER = [
    completed(result="second"),
    failed(error="second", result="second"),
    failed(error="second", will_retry=True),
    canceled("second"),
    canceled("second", worker="w1", attempt=1),
    lease_expired(),
    leased("w9", 9),
    heartbeat(),
    progress(),
    command("late", "abort", {"reason": "late"}),
    consumed("late"),
    enqueued(agentId="other"),
    {"type": "job.unknown", "jobId": JOB},
]


@pytest.mark.parametrize("later", _LATER, ids=lambda b: b["type"])
@pytest.mark.parametrize("history", list(_SETTLED.values()), ids=list(_SETTLED))
def test_receipts_after_settlement_change_only_bookkeeping(
    history: list[dict[str, Any]], later: dict[str, Any]
) -> None:
    settled = fold(enqueued(maxAttempts=1), *history)
    assert settled.status in TERMINAL_STATUSES
    assert_inert(settled, then(settled, later))


def test_second_terminal_receipt_never_changes_status_or_result() -> None:
    job = fold(
        enqueued(),
        leased(),
        completed(result="first"),
        failed(error="late", result="second"),
        canceled("late"),
    )
    assert (job.status, job.result, job.settled_by) == ("completed", "first", "job.completed")
    assert (job.last_error, job.cancel_reason) == (None, None)


# --- bookkeeping -----------------------------------------------------------------------


def test_bookkeeping_describes_the_stream_including_inert_receipts() -> None:
    receipts = chain(
        enqueued(),
        leased(),
        leased("w2", 2),  # ignored
        heartbeat("w2", 1),  # inert
        {"type": "job.annotated", "jobId": JOB},  # unknown
        completed(),
        completed(),  # after settlement
    )
    job = fold_job(receipts)
    assert job is not None
    assert job.receipt_count == len(receipts) == 7
    assert job.head == receipts[-1].hash == verify(STREAM, receipts).head
    assert (job.created_at, job.updated_at) == (receipts[0].ts, receipts[-1].ts)


def test_reduce_leaves_the_input_state_untouched() -> None:
    before = fold(enqueued(), leased())
    snapshot = dataclasses.asdict(before)
    then(before, completed())
    assert dataclasses.asdict(before) == snapshot


# --- Fence ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("history", "fence", "outcome"),
    [
        (None, Fence("w1", 1), FenceOutcome.MISSING),
        ([], Fence("w1", 1), FenceOutcome.LOST),
        ([leased("w1", 1)], Fence("w1", 1), FenceOutcome.OK),
        ([leased("w1", 1), heartbeat("w1", 1)], Fence("w1", 1), FenceOutcome.OK),
        ([leased("w1", 1)], Fence("w2", 1), FenceOutcome.LOST),
        ([leased("w1", 1)], Fence("w1", 2), FenceOutcome.LOST),
        (
            [leased("w1", 1), failed("w1", 1, will_retry=True), leased("w2", 2)],
            Fence("w1", 1),
            FenceOutcome.LOST,
        ),
        ([leased("w1", 1), completed("w1", 1)], Fence("w1", 1), FenceOutcome.TERMINAL),
        ([canceled()], Fence("w1", 0), FenceOutcome.TERMINAL),
    ],
    ids=[
        "missing",
        "queued",
        "leased",
        "running",
        "other-worker",
        "other-attempt",
        "superseded",
        "completed",
        "canceled",
    ],
)
def test_fence_check_reports_an_outcome_instead_of_raising(
    history: list[dict[str, Any]] | None, fence: Fence, outcome: FenceOutcome
) -> None:
    """J-11: a lost fence is an outcome."""
    job = None if history is None else fold(enqueued(), *history)
    assert fence.check(job) is outcome


def test_fence_body_and_from_body_round_trip() -> None:
    fence = Fence("chat:host:1", 3)
    assert fence.body() == {"workerId": "chat:host:1", "attempt": 3}
    assert Fence.from_body({"type": "x", **fence.body()}) == fence
    assert Fence.from_body({"workerId": "w"}) is None
    assert Fence.from_body({"workerId": "w", "attempt": "1"}) is None
    assert str(FenceOutcome.LOST) == "lost"


# --- properties over random histories --------------------------------------------------

_workers = st.sampled_from(["w1", "w2"])
_attempts = st.integers(min_value=0, max_value=3)
_event = st.one_of(
    st.builds(leased, _workers, _attempts, st.integers(0, 10**6)),
    st.builds(heartbeat, _workers, _attempts, st.integers(0, 10**6)),
    st.builds(progress, _workers, _attempts),
    st.builds(completed, _workers, _attempts, st.integers()),
    st.builds(lambda w, a, r: failed(w, a, will_retry=r), _workers, _attempts, st.booleans()),
    st.builds(lease_expired, _workers, _attempts),
    st.builds(lambda r: canceled(r), st.text(max_size=5)),
    st.builds(
        lambda w, a: canceled(worker=w, attempt=a),
        _workers,
        _attempts,
    ),
    st.builds(
        command,
        st.sampled_from(["c1", "c2", "c3"]),
        st.sampled_from(["steer", "follow_up", "abort"]),
        st.fixed_dictionaries({"reason": st.text(max_size=3)}),
    ),
    st.builds(lambda ids: consumed(*ids), st.lists(st.sampled_from(["c1", "c2", "c3"]))),
    st.just(enqueued(agentId="again")),
)


@settings(max_examples=300, deadline=None)
@given(history=st.lists(_event, max_size=25), max_attempts=st.integers(1, 3))
def test_random_histories_keep_the_fold_invariants(
    history: list[dict[str, Any]], max_attempts: int
) -> None:
    """J-3 / J-4 over arbitrary histories: one settlement, the attempt never goes down, a
    lease is held only in leased/running, bookkeeping counts the receipts kept. The only
    refusal is a lease that does not advance the attempt; like the store, whose append
    rolls back when the projector raises (S-5), the model then drops that receipt."""
    receipts = chain(enqueued(maxAttempts=max_attempts), *history)
    state: JobState | None = None
    settled: dict[str, Any] | None = None
    kept: list[Receipt] = []
    for receipt in receipts:
        previous = state
        try:
            state = reduce(state, receipt)
        except InvariantError:
            assert previous is not None and previous.status == "queued"
            assert receipt.type == "job.leased" and receipt.body["attempt"] <= previous.attempt
            state = previous
            continue
        kept.append(receipt)
        assert state is not None
        if previous is not None:
            assert state.attempt >= previous.attempt
        if settled is not None:
            assert without_bookkeeping(state) == settled
        elif state.status in TERMINAL_STATUSES:
            settled = without_bookkeeping(state)
            assert state.settled_by is not None
        assert (state.lease_until is not None) == (state.status in ("leased", "running"))
        if state.status in ("leased", "running"):
            assert state.worker_id is not None
    assert state is not None
    assert state.receipt_count == len(kept)
    assert state.head == kept[-1].hash


_STATE_FIELDS = [f.name for f in dataclasses.fields(JobState)]


@settings(max_examples=200, deadline=None)
@given(
    history=st.lists(_event, max_size=1),
    changed=st.lists(st.sampled_from(_STATE_FIELDS), unique=True, max_size=6),
    value=st.one_of(st.none(), st.integers(), st.text(max_size=4), st.booleans()),
)
def test_evolve_is_replace(history: list[dict[str, Any]], changed: list[str], value: Any) -> None:
    """The fold's fast copy gives exactly `dataclasses.replace`'s state, every field kept
    or changed as asked (a field added to JobState is covered without a change here)."""
    try:
        state = fold_job(chain(enqueued(), *history))
    except InvariantError:  # a lease that does not advance the attempt: not a state
        return
    assert state is not None
    changes = {name: value for name in changed}
    assert evolve(state, changes) == dataclasses.replace(state, **changes)
    assert evolve(state, {}) == state and evolve(state, {}) is not state


# --- the worker group an enqueue chose (issue 33 item 5) ----------------------------------


def test_an_enqueue_without_queue_folds_to_the_default_route():
    assert fold(enqueued()).queue is None


def test_the_queue_of_an_enqueue_is_folded_and_kept_through_the_attempts():
    job = fold(enqueued(agentId="mailer", queue="emails"), leased(), completed())
    assert (job.queue, job.status) == ("emails", "completed")


def test_a_malformed_queue_is_refused_by_the_fold():
    with pytest.raises(InvariantError, match="queue must be a string"):
        fold(enqueued(queue=7))


# --- job.retried (issue 34 item 3: retrying failed jobs) ----------------------------------

_RETRYABLE = {
    "failed by its handler": [leased(), failed(error="boom")],
    "failed by lease expiry": [leased(), lease_expired()],
    "canceled while queued": [canceled("stop")],
    "canceled by an abort": [
        leased(),
        command("a1", "abort", {"reason": "halt"}),
        canceled("halt", worker="w1", attempt=1),
    ],
}


@pytest.mark.parametrize("history", list(_RETRYABLE.values()), ids=list(_RETRYABLE))
def test_a_retry_returns_a_failed_or_canceled_job_to_the_queue(
    history: list[dict[str, Any]],
) -> None:
    settled = fold(enqueued(maxAttempts=1), *history)
    assert settled.status in ("failed", "canceled")
    job = then(settled, retried(after=settled.attempt), ts=50_000)
    assert (job.status, job.attempt, job.attempts_used) == ("queued", settled.attempt, 0)
    assert (job.retries, job.retried_by, job.retried_at) == (1, "ops@example.com", 50_000)
    assert job.retried_after_attempt == settled.attempt
    assert (job.worker_id, job.lease_until, job.result, job.settled_by) == (None, None, None, None)
    assert (job.cancel_reason, job.abort_requested, job.abort_reason) == (None, False, None)
    assert job.last_error == settled.last_error  # why it needed a retry stays in view
    assert job.commands == settled.commands  # the history of commands is kept


@pytest.mark.parametrize(
    ("history", "status"),
    [
        ([], "queued"),
        ([leased()], "leased"),
        ([leased(), heartbeat()], "running"),
        ([leased(), completed()], "completed"),
    ],
    ids=["queued", "leased", "running", "completed"],
)
def test_a_retry_of_a_job_that_is_not_failed_or_canceled_is_refused(
    history: list[dict[str, Any]], status: str
) -> None:
    job = fold(enqueued(), *history)
    with pytest.raises(InvariantError) as err:
        then(job, retried(after=job.attempt))
    assert str(err.value) == (
        f"Invariant: malformed job.retried for job {JOB}: only a failed or canceled job is "
        f"retried, not a {status} one"
    )
    assert err.value.receipt_type == "job.retried"


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (retried(retry=2), "retry 2 must be 1"),
        (retried(retry=0), "retry 0 must be 1"),
        ({**retried(), "retry": "1"}, "retry must be an integer, got '1'"),
        (retried(after=0), "afterAttempt 0 must be 1"),
        (retried(after=2), "afterAttempt 2 must be 1"),
        ({**retried(), "by": None}, "by must be a string, got None"),
    ],
    ids=[
        "skips-a-cycle",
        "repeats-a-cycle",
        "retry-not-int",
        "after-behind",
        "after-ahead",
        "no-by",
    ],
)
def test_a_malformed_retry_is_refused_naming_the_field(body: dict[str, Any], problem: str) -> None:
    job = fold(enqueued(maxAttempts=1), leased(), failed())
    with pytest.raises(InvariantError, match=f"job.retried for job {JOB}: {problem}$"):
        then(job, body)


def test_a_retried_job_gets_a_fresh_budget_and_its_attempts_keep_counting_up() -> None:
    """maxAttempts 2: attempts 1-2 fail, the retry allows attempts 3-4; lease expiry
    decides from the attempts since the retry."""
    job = fold(
        enqueued(maxAttempts=2),
        leased("w1", 1),
        failed("w1", 1, will_retry=True),
        leased("w2", 2),
        failed("w2", 2, error="second"),
        retried(after=2),
    )
    assert (job.status, job.attempt, job.attempts_used, job.last_error) == (
        "queued",
        2,
        0,
        "second",
    )
    with pytest.raises(InvariantError, match="attempt 2 must exceed the job's attempt 2"):
        then(job, leased("w3", 2))  # a fence of the last cycle is never reused
    job = then(job, leased("w3", 3))
    job = then(job, lease_expired("w3", 3))
    assert (job.status, job.attempts_used) == ("queued", 1)  # one attempt of two used
    job = then(job, leased("w4", 4))
    job = then(job, lease_expired("w4", 4))
    assert (job.status, job.attempts_used, job.settled_by) == ("failed", 2, "job.lease_expired")


def test_writes_of_an_attempt_before_the_retry_stay_inert() -> None:
    job = fold(enqueued(maxAttempts=1), leased("w1", 1), failed("w1", 1), retried())
    for late in (heartbeat("w1", 1), completed("w1", 1), failed("w1", 1), lease_expired("w1", 1)):
        assert_inert(job, then(job, late))
    job = then(job, leased("w2", 2))
    assert_inert(job, then(job, completed("w1", 1)))
    assert then(job, completed("w2", 2)).status == "completed"


def test_a_retried_job_settles_once_per_cycle_and_may_be_retried_again() -> None:
    job = fold(
        enqueued(maxAttempts=1),
        leased("w1", 1),
        failed("w1", 1, error="first"),
        retried(by="alice"),
        leased("w2", 2),
        failed("w2", 2, error="second"),
    )
    assert (job.status, job.settled_by, job.last_error) == ("failed", "job.failed", "second")
    assert_inert(job, then(job, completed("w2", 2)))  # settled: once in this cycle
    again = then(job, retried(retry=2, after=2, by="bob"), ts=70_000)
    assert (again.status, again.retries, again.retried_by, again.retried_at) == (
        "queued",
        2,
        "bob",
        70_000,
    )
    done = then(then(again, leased("w3", 3)), completed("w3", 3, result="third"))
    assert (done.status, done.result, done.attempt) == ("completed", "third", 3)
    with pytest.raises(InvariantError, match="not a completed one"):
        then(done, retried(retry=3, after=3))


# Filled in from the state when folded: the next valid retry, the next attempt's lease, and
# a settlement under the live fence, so random histories reach retries often.
_RETRY_NEXT: dict[str, Any] = {"type": "retry-next"}
_LEASE_NEXT: dict[str, Any] = {"type": "lease-next"}
_FAIL_LIVE: dict[str, Any] = {"type": "fail-live"}
_retry_event = st.one_of(
    st.just(_RETRY_NEXT),
    st.builds(
        lambda n, a: retried(retry=n, after=a), st.integers(0, 4), st.integers(0, 5)
    ),  # mostly malformed
)


@settings(max_examples=300, deadline=None)
@given(
    history=st.lists(
        st.one_of(_event, _retry_event, _retry_event, st.sampled_from([_LEASE_NEXT, _FAIL_LIVE])),
        max_size=30,
    ),
    max_attempts=st.integers(1, 3),
)
def test_random_histories_with_retries_keep_the_chain_invariants(
    history: list[dict[str, Any]], max_attempts: int
) -> None:
    """Over arbitrary histories with retries: a retry applies only to a failed or canceled
    job and starts the next cycle; each cycle settles at most once; leases take strictly
    increasing attempts across every cycle. A refused receipt is dropped, as the store
    rolls back its append (S-5)."""
    state = fold(enqueued(maxAttempts=max_attempts))
    leased_attempts: list[int] = []
    settlements = 0
    for ts, event in enumerate(history, start=2_000):
        if event is _RETRY_NEXT:
            event = retried(retry=state.retries + 1, after=state.attempt)
        elif event is _LEASE_NEXT:
            event = leased("w1", state.attempt + 1)
        elif event is _FAIL_LIVE:
            event = failed(state.worker_id or "w1", state.attempt)
        receipt = seal(stream=STREAM, prev=state.head, body=event, ts=ts, random_hex16="0" * 16)
        try:
            after = reduce(state, receipt)
        except InvariantError:
            assert receipt.type in ("job.leased", "job.retried")
            if receipt.type == "job.retried":
                assert (
                    state.status not in ("failed", "canceled")
                    or event["retry"] != state.retries + 1
                    or event["afterAttempt"] != state.attempt
                )
            continue
        assert after is not None
        if receipt.type == "job.retried":
            assert state.status in ("failed", "canceled") and after.status == "queued"
            assert (after.retries, after.attempts_used) == (state.retries + 1, 0)
            settlements = 0
        if after.attempt != state.attempt:
            leased_attempts.append(after.attempt)
        if after.is_terminal and not state.is_terminal:
            settlements += 1
        assert settlements <= 1
        state = after
    assert leased_attempts == sorted(set(leased_attempts))
