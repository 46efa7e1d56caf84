"""One attempt's durable steps (D-5, D-6): begin, beat, settle. No threads, no clock of
its own: the real worker (`jobs.runtime.worker`, with the lease keeper) and the
deterministic simulation (`jobs.simulation`) drive these same functions.

- `begin`: claim the execute promise and start the attempt in ONE transaction (claim,
  lease with its first heartbeat or a start-fence heartbeat for redelivered work; a
  pending abort cancels and a missing handler fails in the same transaction).
- `beat`: the heartbeat of a running attempt; says whether to stop (abort, lease lost).
- `settle`: complete, fail or cancel under the fence and settle the promise in ONE
  transaction, under the storage retry. The handler's result and error text go through
  `storable` first (NUL and lone surrogates become U+FFFD; see `jobs.handler_contract`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, OperationalError, connection

from jobs import handlers, limits, queue
from jobs.core import bodies, retry_policy
from jobs.core.state import Fence, JobState
from jobs.queue import Outcome, Start
from jobs.runtime import dispatch, faults, promises
from jobs.runtime.storage_retry import with_storage_retry
from observability.logs import log_event
from receipts.core.storable import storable
from receipts.db import AssumptionRefused, one_statement, pipelined_transaction
from receipts.db.one_statement import available as one_statement_available

logger = logging.getLogger("receipt.delivery")

_START_STATUS = {
    Start.MISSING: ("failed", "rejected"),
    Start.TERMINAL: ("terminal_state", "resolved"),
    Start.STALE: ("stale_attempt", "rejected"),
    Start.LEASE_LOST: ("lease_lost", "rejected"),
}


@dataclass(frozen=True)
class Ended:
    """A final D-6 status and what the task returns; `job` is the job after a settlement
    this step wrote (for callbacks), else None."""

    status: str
    outcome: dict[str, Any]
    job: JobState | None = None


@dataclass(frozen=True)
class Running:
    """The attempt holds its fence: run the handler."""

    promise_id: str
    job: JobState
    fence: Fence


def _outcome(status: str, job_id: str, attempt: int, **extra: Any) -> dict[str, Any]:
    return {"status": status, "jobId": job_id, "attempt": attempt, **extra}


def _settle_promise(
    promise_id: str,
    status: str,
    state: str,
    *,
    now_ms: int,
    worker_id: str | None = None,
    **extra: Any,
) -> None:
    promises.settle_with_transaction(
        promise_id, state, now_ms=now_ms, result={"status": status, **extra}, worker_id=worker_id
    )


def begin(
    promise_id: str,
    *,
    job_id: str,
    attempt: int,
    worker_id: str,
    now_ms: int,
    seen: JobState | None = None,
    clock: Callable[[], int] | None = None,
) -> Ended | Running:
    """Claim the promise and start the attempt: one transaction, retried as a unit on a
    transient storage error (the platform's outage never costs the job an attempt).

    `seen`: the job as the delivery read it. When it is plainly queued for this attempt,
    the begin assumes it still is and sends everything with the COMMIT (one round trip);
    if the claim is refused or the stream moved since, that transaction fails whole and
    the begin reads and decides as without it.

    `clock`: read again once a cap's key is locked (`queue.start_attempt`): a start that
    waited there for a stopping job is stamped after that job's end."""
    if seen is not None and seen.job_id == job_id and _assumable(seen, attempt):
        try:
            return with_storage_retry(
                f"begin {job_id}",
                lambda: _begin_seen(
                    promise_id, seen, attempt=attempt, worker_id=worker_id, now_ms=now_ms
                ),
            )
        except AssumptionRefused:
            pass  # the claim or the stream was not as seen: read and decide afresh
    return with_storage_retry(
        f"begin {job_id}",
        lambda: _begin(
            promise_id,
            job_id=job_id,
            attempt=attempt,
            worker_id=worker_id,
            now_ms=now_ms,
            clock=clock,
        ),
    )


def _begin(
    promise_id: str,
    *,
    job_id: str,
    attempt: int,
    worker_id: str,
    now_ms: int,
    clock: Callable[[], int] | None,
) -> Ended | Running:
    held: list[limits.Hold] = []

    def gate(job: JobState) -> str | None | limits.Hold:  # the job's limits, under its lock
        found = limits.governing(job)
        verdict = limits.acquire(found, now_ms=now_ms) if found else None
        if isinstance(verdict, limits.Hold):
            held.append(verdict)
        return verdict

    with pipelined_transaction():
        # the claim travels with the job's lock and read; known before anything is decided
        claimed = promises.send_claim(promise_id, worker_id)
        start, job = queue.start_attempt(
            job_id,
            worker_id=worker_id,
            attempt=attempt,
            now_ms=now_ms,
            claimed=claimed,
            gate=gate,
            clock=clock,
        )
        if start is Start.UNCLAIMED:  # the same delivery is running elsewhere
            return Ended("stale_attempt", _outcome("stale_attempt", job_id, attempt))
        if start is Start.HELD:  # stays queued; its delivery waits for the limit
            limits.hold(promise_id, held[0], now_ms=now_ms)
            holding = {"heldBy": held[0].held_by, "dueAt": held[0].due_at}
            return Ended("held", _outcome("held", job_id, attempt, **holding))
        if start in _START_STATUS:
            status, state = _START_STATUS[start]
            extra = {"error": "missing"} if start is Start.MISSING else {}
            _settle_promise(promise_id, status, state, now_ms=now_ms, **extra)
            return Ended(status, _outcome(status, job_id, attempt, **extra))
        assert job is not None
        fence = Fence(worker_id, attempt)
        if job.abort_requested:
            return _write_settlement(
                promise_id, job, fence, "canceled", now_ms=now_ms, reason=job.abort_reason
            )
        if handlers.handler_for(job.agent_id) is None:
            return _write_settlement(
                promise_id,
                job,
                fence,
                "failed",
                now_ms=now_ms,
                no_retry=True,
                error=f"No handler for agent '{job.agent_id}'",
            )
        return Running(promise_id, job, fence)


def _assumable(seen: JobState, attempt: int) -> bool:
    """A begin that can only lease: on PostgreSQL, the job queued for this attempt with
    no abort asked and a handler here (anything else is decided after reading)."""
    return (
        connection.vendor == "postgresql"
        and seen.status == "queued"
        and seen.attempt == attempt - 1
        and not seen.abort_requested
        and seen.head is not None
        and handlers.handler_for(seen.agent_id) is not None
        and not limits.governing(seen)  # a limited start counts and may hold: read first
    )


def _begin_seen(
    promise_id: str, seen: JobState, *, attempt: int, worker_id: str, now_ms: int
) -> Running:
    with _one_transaction():
        return _lease_seen(promise_id, seen, attempt=attempt, worker_id=worker_id, now_ms=now_ms)


def _lease_seen(
    promise_id: str, seen: JobState, *, attempt: int, worker_id: str, now_ms: int
) -> Running:
    promises.send_claim_held(promise_id, worker_id)
    start, job = queue.start_attempt(
        seen.job_id, worker_id=worker_id, attempt=attempt, now_ms=now_ms, assumed=seen
    )
    assert start is Start.LEASED and job is not None  # what `_assumable` guarantees
    return Running(promise_id, job, Fence(worker_id, attempt))


@dataclass(frozen=True)
class Next:
    """A delivery this process runs next, as its task says: what `begin` takes."""

    promise_id: str
    attempt: int
    worker_id: str
    seen: JobState


def complete_then_begin(
    running: Running, following: Next, *, now_ms: Callable[[], int], result: Any = None
) -> tuple[Ended, Running | None]:
    """Complete this attempt and begin the next delivery in ONE statement, where both can
    be sent as such (`_one_statement_settles`, `_assumable`): a worker draining its queue
    pays one round trip between two handlers instead of two. Anything else (a refused
    assumption, an error) settles this attempt alone, as `settle` does, and leaves the
    next to its own begin (None)."""
    if _one_statement_settles(running.job) and _assumable(following.seen, following.attempt):
        at = now_ms()
        try:
            faults.fail_once("settle_transient", OperationalError("database is locked"))
            with one_statement() as gathered:
                ended = _settlement(
                    running.promise_id, running.job, running.fence, "completed", at,
                    None, False, storable(result), None,
                )  # fmt: skip
                if not gathered.requires:
                    raise AssumptionRefused("a settlement that appends nothing is read first")
                begun = _lease_seen(
                    following.promise_id,
                    following.seen,
                    attempt=following.attempt,
                    worker_id=following.worker_id,
                    now_ms=at,
                )
            return ended, begun
        except AssumptionRefused:
            pass  # as if never tried: each goes its own way
        except DatabaseError as error:
            log_event(
                logger,
                "delivery.chained_begin_failed",
                f"completing {running.job.job_id} with the next begin failed: {error}",
                level=logging.WARNING,
                jobId=running.job.job_id,
            )
    return settle(running, "completed", now_ms=now_ms, result=result), None


@dataclass(frozen=True)
class Beat:
    stop: str | None  # None: carry on; else why the handler must stop
    ended_by: str | None  # lease_lost / terminal_state / canceled


def beat(job_id: str, fence: Fence, *, now_ms: int) -> Beat:
    written = queue.heartbeat(job_id, fence=fence, now_ms=now_ms)
    if not written.applied:
        ended = "terminal_state" if written.outcome is Outcome.TERMINAL else "lease_lost"
        return Beat("lease lost", ended)
    if written.job is not None and written.job.abort_requested:
        return Beat(written.job.abort_reason or queue.ABORT_REQUESTED_REASON, "canceled")
    return Beat(None, None)


def abandon(running: Running, status: str, *, now_ms: int) -> Ended:
    """The attempt lost its fence (lease_lost / terminal_state): reject the promise only."""
    _settle_promise(
        running.promise_id, status, "rejected", now_ms=now_ms, worker_id=running.fence.worker_id
    )
    return Ended(status, _outcome(status, running.job.job_id, running.fence.attempt))


def settle(
    running: Running,
    status: str,
    *,
    now_ms: Callable[[], int],
    error: str | None = None,
    no_retry: bool = False,
    result: Any = None,
    reason: str | None = None,
    sleep: Callable[[float], None] | None = None,
    inject: Callable[[], None] | None = None,
) -> Ended:
    """Settle under the fence with the storage retry (D-5, D-6): one transaction for the
    job's receipt and the promise. `inject` lets fault tests fail a try."""
    error, result, reason = storable(error), storable(result), storable(reason)

    def once() -> Ended:
        faults.fail_once("settle_transient", OperationalError("database is locked"))
        if inject is not None:
            inject()
        return _write_settlement(
            running.promise_id,
            running.job,
            running.fence,
            status,
            now_ms=now_ms(),
            error=error,
            no_retry=no_retry,
            result=result,
            reason=reason,
        )

    kwargs = {"sleep": sleep} if sleep is not None else {}
    ended = with_storage_retry(f"settle {running.job.job_id}", once, **kwargs)
    _open_backoff_delivery(ended)
    return ended


def _open_backoff_delivery(ended: Ended) -> None:
    """A failed attempt retried after a backoff: open its next delivery now, scheduled
    for `retry_at` (the due loop releases it then), instead of waiting for the queued
    redrive to find the job. The redrive's own key, so the two never both open one; if
    this fails, the redrive opens it later, scheduled just the same."""
    job = ended.job
    if job is None or job.status != "queued" or job.retry_at is None:
        return
    try:
        dispatch.start_driver(job, dispatch_key=dispatch.redrive_key(job))
    except Exception as error:  # the queued redrive (L-1) owns the rest
        log_event(
            logger,
            "delivery.retry_schedule_error",
            f"scheduling the retry of {job.job_id} failed: {error}",
            level=logging.WARNING,
            jobId=job.job_id,
        )


def _final_result(job: JobState, status: str, result: Any, no_retry: bool) -> Any:
    """D-6: a non-retryable failure carries its status in the job's result."""
    if bodies.will_retry(job, no_retry=no_retry):
        return result
    final = {"status": status, **(result if isinstance(result, dict) else {})}
    if result is not None and not isinstance(result, dict):
        final["value"] = result
    return final


def retry_decision(
    job: JobState, error: str, no_retry: bool, *, now_ms: int
) -> tuple[bool, int | None]:
    """The job's retry policy applied to a failed attempt: whether its error is not to be
    retried, and when the next attempt may start (None: at once, or never)."""
    policy = retry_policy.policy_for(job.kind, job.payload)
    if policy is None:
        return no_retry, None
    if not retry_policy.has_own_policy(job.payload):  # a task's handler judged its exception
        no_retry = no_retry or not retry_policy.retries_error(policy, error)
    if not bodies.will_retry(job, no_retry=no_retry):
        return no_retry, None
    return no_retry, retry_policy.retry_at(policy, job.job_id, job.attempt, failed_at_ms=now_ms)


def _write_settlement(
    promise_id: str,
    job: JobState,
    fence: Fence,
    status: str,
    *,
    now_ms: int,
    error: str | None = None,
    no_retry: bool = False,
    result: Any = None,
    reason: str | None = None,
) -> Ended:
    settling = (promise_id, job, fence, status, now_ms, error, no_retry, result, reason)
    if _one_statement_settles(job):
        try:
            with one_statement() as gathered:
                ended = _settlement(*settling)
                if not gathered.requires:  # nothing appended: decided on the state alone
                    raise AssumptionRefused("a settlement that appends nothing is read first")
            return ended
        except AssumptionRefused:
            pass  # the job was written since the worker last saw it: lock and read it
    # inside begin's transaction (no savepoint: a failed settlement fails the begin), or
    # its own (its writes and its commit pipelined)
    with pipelined_transaction(savepoint=False):
        return _settlement(*settling)


def _one_transaction() -> Any:
    """A begin or settlement of known state: one statement where it can be (no
    transaction open: `receipts.db.one_statement`), else pipelined."""
    return one_statement() if one_statement_available() else pipelined_transaction()


def _one_statement_settles(job: JobState) -> bool:
    """A settlement sent as one statement on the state the worker holds: PostgreSQL, no
    transaction open, and nothing it writes outside that statement (a limit's wake)."""
    return one_statement_available() and job.limit_key is None and job.head is not None


def _settlement(
    promise_id: str,
    job: JobState,
    fence: Fence,
    status: str,
    now_ms: int,
    error: str | None,
    no_retry: bool,
    result: Any,
    reason: str | None,
) -> Ended:
    job_id = job.job_id
    if status == "completed":
        written = queue.complete(job_id, result, fence=fence, now_ms=now_ms, known=job)
    elif status == "canceled":
        written = queue.cancel(
            job_id,
            reason=reason or queue.ABORT_REQUESTED_REASON,
            by=fence.worker_id,
            fence=fence,
            now_ms=now_ms,
            known=job,
        )
    else:
        no_retry, retry_at = retry_decision(job, error or status, no_retry, now_ms=now_ms)
        written = queue.fail(
            job_id,
            error or status,
            fence=fence,
            no_retry=no_retry,
            result=_final_result(job, status, result, no_retry),
            now_ms=now_ms,
            known=job,
            retry_at=retry_at,
        )
    if written.outcome is Outcome.TERMINAL:
        status, state, settled = "terminal_state", "rejected", None
    elif written.outcome is not Outcome.APPLIED:
        status, state, settled = "settlement_conflict", "rejected", None
    else:
        state, settled = "resolved", written.job
    extra = {"jobStatus": settled.status} if settled is not None else {}
    _settle_promise(promise_id, status, state, now_ms=now_ms, worker_id=fence.worker_id, **extra)
    return Ended(status, _outcome(status, job_id, fence.attempt, **extra), settled)
