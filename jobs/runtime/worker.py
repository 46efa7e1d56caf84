"""The worker's execute-and-settle path (D-5, D-6, D-10): the second hop.

`attempt.begin` claims the promise and starts the attempt in one transaction. The
handler then runs in this thread, on this process's one database connection, while
the runworker's lease keeper (`jobs.runtime.keeper`) heartbeats the lease and watches
for aborts; one watcher thread per worker process (no database) turns the keeper's stop
order or the execution timeout into `ctx.aborted`. When the handler returns, `attempt.settle`
writes the settlement and the promise in one transaction (the D-8 callback is recorded
with it, and posted by the runworker's sender: no attempt waits on a receiver), and
`after_complete` runs only after a real completion.

A handler that ignores a stop for longer than its grace is not waited for: the watcher
settles the attempt itself (on a connection of its own, closed right after) and the
handler's late return changes nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import DatabaseError, OperationalError, close_old_connections, connection

from jobs import handlers, queue, queues
from jobs.core.contracts import routed_group
from jobs.core.state import Command, Fence, JobState
from jobs.core.timing import execution_timeout_ms, heartbeat_interval_ms
from jobs.core.wire import job_from_wire
from jobs.handler_contract import HandlerContext, JobResult
from jobs.queue import Outcome
from jobs.runtime import attempt as attempts
from jobs.runtime import (
    counters,
    faults,
    keeper,
    lookahead,
    processes,
    promisebroker,
    promises,
    spawned,
)
from jobs.runtime.storage_retry import is_transient
from jobs.timing_config import current_timing
from observability.logs import log_event
from receipts import wire_json
from receipts.clock import now_ms as wall_clock_ms

logger = logging.getLogger("receipt.worker")
STOP_GRACE_S = 5.0  # how long a stopped handler gets to return before we settle anyway
WATCH_S = 0.1  # how often the watcher looks at the keeper's stop order and the deadline
TRANSIENT_HANDLER_RETRIES = 3  # platform database errors inside a handler: run it again
PROGRESS_TRIES = 3  # a progress write after a transient error; then that report is dropped
PROGRESS_BACKOFF_S = 0.1  # x try: short, a handler waits on its own report

# Attempts running in this process: a duplicate delivery to the same process must not
# run beside the original under the same fence.
_running: set[tuple[str, int]] = set()
_running_lock = threading.Lock()
# Deliveries this process began with the settlement before them (`_following`), by promise:
# their task, next in this process's loop, runs the handler without a begin of its own.
_begun: dict[str, attempts.Running] = {}


def worker_id_for(group: str, dispatch_key: str, job_id: str) -> str:
    """D-10: `<group>:<host>:<runworker pid>`, suffixed per dispatch key when it is not
    the job id."""
    base = f"{group}:{socket.gethostname()}:{processes.holder_pid()}"
    if dispatch_key == job_id:
        return base
    return f"{base}:delivery:{hashlib.sha256(dispatch_key.encode()).hexdigest()[:16]}"


def execute(
    promise_id: str,
    *,
    job_id: str | None = None,
    attempt: int | None = None,
    dispatch_key: str | None = None,
    target_group: str | None = None,
    state: Any = None,
) -> dict[str, Any]:
    """Run one execute promise. The database broker passes what it read with the take, the
    driver what it knew with a Redis task; a task without them (sent by an older release)
    has its promise read here. `state`: the job's read-model state as the take or the
    driver read it, which the begin assumes instead of waiting for the job's lock."""
    group = target_group  # not `group`: django-q2 takes that keyword for its own
    if job_id is None or attempt is None or dispatch_key is None or group is None:
        known = promises.read_execute(promise_id)
        if known is None:
            return {"status": "failed", "error": f"unknown execute promise {promise_id}"}
        job_id, attempt, group, dispatch_key = known
    if not settings.Q_CLUSTER.get("orm") and queues.is_paused(group):
        # Redis: the task left the list before the pause; its promise stays unclaimed
        # and the redelivery pass pushes it again once the group is resumed.
        return _count({"status": "paused", "jobId": job_id, "group": group})
    key = (job_id, attempt)
    with _running_lock:
        if key in _running:
            return _count({"status": "stale_attempt", "jobId": job_id, "attempt": attempt})
        _running.add(key)
    try:
        chained = _begun.pop(promise_id, None)
        if chained is not None and (chained.job.job_id, chained.fence.attempt) == key:
            return _run(chained)
        begun = attempts.begin(
            promise_id,
            job_id=job_id,
            attempt=attempt,
            worker_id=worker_id_for(group, dispatch_key, job_id),
            now_ms=wall_clock_ms(),
            seen=_seen(state),
            clock=wall_clock_ms,
        )
        if isinstance(begun, attempts.Ended):
            return _finish(begun)
        return _run(begun)
    finally:
        with _running_lock:
            _running.discard(key)
        counters.flush()  # at most every few seconds


def _seen(state: Any) -> JobState | None:
    """The job as its delivery read it (a read-model `state`, as JSON text or decoded);
    None when absent or unreadable: the begin then reads the job itself."""
    if state is None:
        return None
    try:
        return job_from_wire(wire_json.loads(state) if isinstance(state, str | bytes) else state)
    except Exception:  # a malformed hint costs the round trip it was meant to save
        return None


def _following() -> attempts.Next | None:
    """The delivery this process runs next, when its task says all a begin needs (the
    database broker's take: the job's state with it) and the job may only lease."""
    task = lookahead.next_task()
    if task is None or not promisebroker.is_execute(task) or not settings.Q_CLUSTER.get("orm"):
        return None
    known = task["kwargs"]
    job_id, attempt = known.get("job_id"), known.get("attempt")
    key, group = known.get("dispatch_key"), known.get("target_group")
    seen = _seen(known.get("state"))
    if seen is None or seen.job_id != job_id or key is None or group is None:
        return None
    if not isinstance(attempt, int) or (job_id, attempt) in _running:
        return None
    worker_id = worker_id_for(group, key, job_id)
    return attempts.Next(task["args"][0], attempt, worker_id, seen)


def _count(outcome: dict[str, Any]) -> dict[str, Any]:
    counters.incr("receipt_attempt_outcomes_total", status=outcome["status"])
    return outcome


def _finish(ended: attempts.Ended, after_complete: Any = None) -> dict[str, Any]:
    settled = ended.job  # its callback was recorded with it; the runworker's sender posts it
    if settled is not None and settled.status == "completed" and after_complete is not None:
        try:
            after_complete()
        except Exception as hook_error:  # the job is settled; the hook cannot undo it
            log_event(
                logger,
                "worker.after_complete_failed",
                f"after_complete of {settled.job_id} failed: {hook_error}",
                level=logging.WARNING,
                jobId=settled.job_id,
            )
    return _count(ended.outcome)


class _Attempt:
    """The handler's run: who ended it, and who settles it (exactly one thread does)."""

    def __init__(self, running: attempts.Running, timeout_s: float, grace_s: float) -> None:
        self.running = running
        self.timeout_s = timeout_s
        self.grace_s = grace_s
        self.deadline = time.monotonic() + timeout_s
        self.ended_by: str | None = None
        self.stop_at: float | None = None  # when the handler was told to stop
        self.done = threading.Event()  # the handler returned
        self._settle_lock = threading.Lock()
        self._settled = False

    def settle_once(self, decide: Any) -> dict[str, Any] | None:
        with self._settle_lock:
            if self._settled:
                return None
            self._settled = True
        return decide()


def _run(running: attempts.Running) -> dict[str, Any]:
    job, fence = running.job, running.fence
    timing = current_timing()
    lease_ms = job.lease_ms or timing.job_lease_ms
    cadence_ms = heartbeat_interval_ms(lease_ms, timing)
    run = _Attempt(
        running,
        execution_timeout_ms(
            lease_ms, job.kind, timing, group=routed_group(job.agent_id, job.kind, job.queue)
        )
        / 1000,
        min(cadence_ms / 1000, STOP_GRACE_S),
    )

    def pull(types: Sequence[str] | None) -> list[Command]:
        taken = queue.consume_commands(job.job_id, fence=fence, types=types)
        if taken.outcome in (Outcome.FENCE_LOST, Outcome.TERMINAL):
            ctx.stop("lease lost")
        return list(taken.commands)

    def report(data: Any) -> bool:
        written = _write_progress(job.job_id, data, fence, ctx)
        if written is None:  # dropped: the next report replaces it
            return True
        if not written.applied:
            ctx.stop("lease lost")
        return written.applied

    ctx = HandlerContext(
        job=job, fence=fence, deadline_monotonic=run.deadline, pull=pull, report=report
    )
    lease = keeper.Lease(running, cadence_ms)
    _WATCHER.watch(run, ctx, lease)
    result: Any = None
    error: BaseException | None = None
    try:
        result, error = _call_handler(job, ctx)
    finally:
        run.done.set()
        lease.release()
    settled = run.settle_once(lambda: _settle_after(run, ctx, result, error, chain=True))
    if settled is None:  # the watcher settled it while the handler overran its grace
        return {
            "status": run.ended_by or "settled_by_watcher",
            "jobId": job.job_id,
            "attempt": fence.attempt,
        }
    return settled


def _write_progress(
    job_id: str, data: Any, fence: Fence, ctx: HandlerContext
) -> queue.WriteResult | None:
    """A progress write, tried again after a transient storage error; None when it still
    fails, or the handler was stopped meanwhile: the report is dropped and logged. It
    never raises a transient error into the handler, whose command would be left running
    while the handler is run again (C-9)."""
    for attempt in range(1, PROGRESS_TRIES + 1):
        try:
            faults.fail_once("progress_transient", OperationalError("database is locked"))
            return queue.progress(job_id, data, fence=fence)
        except DatabaseError as error:
            if not is_transient(error):
                raise
            if connection.connection is not None and not connection.in_atomic_block:
                connection.close()  # a broken connection is replaced by the next try
            if attempt == PROGRESS_TRIES or ctx.aborted.wait(PROGRESS_BACKOFF_S * attempt):
                log_event(
                    logger,
                    "worker.progress_dropped",
                    f"progress report of {job_id} dropped after {attempt} tries: {error}",
                    level=logging.WARNING,
                    jobId=job_id,
                )
                return None
            log_event(
                logger,
                "worker.progress_retry",
                f"progress report of {job_id} hit a transient database error: {error}",
                level=logging.WARNING,
                jobId=job_id,
            )
    raise AssertionError("unreachable")


def _call_handler(job: Any, ctx: HandlerContext) -> tuple[Any, BaseException | None]:
    """Run the handler. A transient error of the platform's own database (too many
    clients, a dropped connection) is not the handler's failure: it runs again, so a job
    never spends its attempts on it; but only while the failed call started no command
    (`jobs.runtime.spawned`). A command it started may still run, or has had its effects:
    running the handler again would run it twice within the attempt (C-9). The error then
    fails the attempt, retryable, and the next attempt starts afresh."""
    handler = handlers.handler_for(job.agent_id)
    assert handler is not None  # begin() failed the attempt otherwise
    for retry in range(TRANSIENT_HANDLER_RETRIES + 1):
        commands_before = spawned.started()
        try:
            return handler(job, ctx), None
        except BaseException as error:  # a handler exception is a retryable failure (D-7)
            if (
                retry == TRANSIENT_HANDLER_RETRIES
                or not is_transient(error)
                or ctx.aborted.is_set()
            ):
                return None, error
            if spawned.started() != commands_before or spawned.live():
                log_event(
                    logger,
                    "worker.handler_not_rerun",
                    f"handler of {job.job_id} hit a transient database error after it "
                    f"started a command; not running it again in this attempt: {error}",
                    level=logging.WARNING,
                    jobId=job.job_id,
                )
                return None, error
            log_event(
                logger,
                "worker.handler_storage_retry",
                f"handler of {job.job_id} hit a transient database error: {error}",
                level=logging.WARNING,
                jobId=job.job_id,
            )
            close_old_connections()
            connection.close()
            time.sleep(0.2 * (retry + 1))
    raise AssertionError("unreachable")


class _Watcher:
    """One thread per worker process (started on first use, again after a fork) that
    turns the keeper's stop order or the deadline into ctx.aborted for the attempts
    running in this process, and past their grace settles them without the handler."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[int, tuple[_Attempt, HandlerContext, keeper.Lease]] = {}
        self._pid = 0

    def watch(self, run: _Attempt, ctx: HandlerContext, lease: keeper.Lease) -> None:
        with self._lock:
            self._watched[id(run)] = (run, ctx, lease)
            if self._pid != os.getpid():
                self._pid = os.getpid()
                threading.Thread(target=self._loop, name="attempt-watcher", daemon=True).start()

    def _loop(self) -> None:
        while True:
            time.sleep(WATCH_S)
            with self._lock:
                watched = list(self._watched.values())
            for run, ctx, lease in watched:
                if run.done.is_set():
                    self._forget(run)
                elif run.stop_at is None:
                    self._check(run, ctx, lease)
                elif time.monotonic() >= run.stop_at + run.grace_s:
                    self._forget(run)
                    _settle_overrun(run, ctx)

    def _forget(self, run: _Attempt) -> None:
        with self._lock:
            self._watched.pop(id(run), None)

    @staticmethod
    def _check(run: _Attempt, ctx: HandlerContext, lease: keeper.Lease) -> None:
        order = lease.stop_order()
        if order is not None:
            run.ended_by = order[1]
            ctx.stop(order[0])
        elif time.monotonic() >= run.deadline:
            run.ended_by = "execution_timeout"
            ctx.stop("execution timeout")
        else:
            return
        run.stop_at = time.monotonic()


_WATCHER = _Watcher()


def _settle_overrun(run: _Attempt, ctx: HandlerContext) -> None:
    """The handler ignored its stop past the grace: settle without it, on a connection of
    this thread's own that exists only for this settlement."""
    try:
        outcome = run.settle_once(lambda: _settle_after(run, ctx, None, None))
        if outcome is not None:
            log_event(
                logger,
                "worker.handler_overran",
                f"handler of {run.running.job.job_id} ignored its stop for "
                f"{run.grace_s:.0f}s; settled {outcome['status']}",
                level=logging.WARNING,
                jobId=run.running.job.job_id,
            )
    except Exception as error:  # the lease keeper or expiry recovers the attempt
        log_event(
            logger,
            "worker.overrun_settle_failed",
            f"settling {run.running.job.job_id} without its handler failed: {error}",
            level=logging.WARNING,
            jobId=run.running.job.job_id,
        )
    finally:
        connection.close()


def _settle_after(
    run: _Attempt,
    ctx: HandlerContext,
    result: Any,
    error: BaseException | None,
    *,
    chain: bool = False,
) -> dict[str, Any]:
    """The attempt's settlement as its end says. `chain` (the handler's own thread): a
    completion also begins the delivery this process runs next, in the same statement."""
    running = run.running
    ended_by = run.ended_by
    if ended_by in ("lease_lost", "terminal_state"):
        return _finish(attempts.abandon(running, ended_by, now_ms=wall_clock_ms()))

    def settle(status: str, **outcome: Any) -> attempts.Ended:
        return attempts.settle(running, status, now_ms=wall_clock_ms, **outcome)

    if ended_by == "execution_timeout":
        timeout_ms = int(run.timeout_s * 1000)
        return _finish(
            settle("execution_timeout", error=f"execution timeout after {timeout_ms} ms")
        )
    if ended_by == "canceled":
        return _finish(settle("canceled", reason=ctx.abort_reason))
    if error is not None:
        return _finish(settle("failed", error=f"{type(error).__name__}: {error}"))
    if not isinstance(result, JobResult):
        returned = f"handler for agent '{running.job.agent_id}' returned {type(result).__name__}"
        return _finish(settle("failed", no_retry=True, error=f"{returned}, not JobResult"))
    if result.ok:
        following = _following() if chain else None
        if following is None:
            return _finish(settle("completed", result=result.result), result.after_complete)
        ended, begun = attempts.complete_then_begin(
            running, following, now_ms=wall_clock_ms, result=result.result
        )
        if begun is not None:
            _begun[begun.promise_id] = begun
        return _finish(ended, result.after_complete)
    return _finish(
        settle(
            "failed",
            error=result.error or "handler failed",
            no_retry=result.no_retry,
            result=result.result,
        )
    )
