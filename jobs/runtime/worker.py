"""The worker's execute-and-settle path (D-5, D-6, D-10): the second hop.

In order: refuse a superseded attempt; lease a queued job; take a start-fence heartbeat
(a redelivered attempt that no longer holds the lease ends `lease_lost`); cancel on a
pending abort; run the handler in a thread while this thread heartbeats (each beat
extends the lease and checks for an abort) and watches the execution timeout; re-read
the job; settle under the attempt fence with the storage retry; settle the promise,
post the callback and run `after_complete` only after a real completion.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import OperationalError, close_old_connections

from jobs import handlers, queue
from jobs.core.reducer import Command, Fence, FenceOutcome, JobState
from jobs.core.timing import TimingSettings, execution_timeout_ms, heartbeat_interval_ms
from jobs.queue import Outcome
from jobs.runtime import callbacks, counters, faults, promises
from jobs.runtime.context import HandlerContext, JobResult
from jobs.runtime.storage_retry import with_storage_retry
from receipt_site.logs import log_event
from receipts.clock import now_ms as wall_clock_ms

logger = logging.getLogger("receipt.worker")
STOP_GRACE_S = 5.0  # how long a stopped handler gets to return before we settle anyway

# Attempts running in this process: a duplicate delivery to the same process must not
# run beside the original under the same fence.
_running: set[tuple[str, int]] = set()
_running_lock = threading.Lock()


def worker_id_for(group: str, dispatch_key: str, job_id: str) -> str:
    """D-10: `<group>:<host>:<pid>`, suffixed per dispatch key when it is not the job id."""
    base = f"{group}:{socket.gethostname()}:{os.getpid()}"
    if dispatch_key == job_id:
        return base
    return f"{base}:delivery:{hashlib.sha256(dispatch_key.encode()).hexdigest()[:16]}"


def running_attempts() -> list[tuple[str, int]]:
    with _running_lock:
        return sorted(_running)


@dataclass
class _Run:
    result: JobResult | None = None
    error: BaseException | None = None


def execute(promise_id: str) -> dict[str, Any]:
    now = wall_clock_ms()
    promise = promises.get(promise_id, now_ms=now)
    if promise is None or promise.function != "execute" or promise.attempt is None:
        return {"status": "failed", "error": f"unknown execute promise {promise_id}"}
    job_id, attempt = promise.job_id, promise.attempt
    key = (job_id, attempt)
    with _running_lock:
        if key in _running:
            return _done("stale_attempt", job_id, attempt, promise_id=None)
        _running.add(key)
    try:
        return _execute(promise, worker_id_for(promise.target_group, promise.dispatch_key, job_id))
    finally:
        with _running_lock:
            _running.discard(key)
        counters.flush()  # at most every few seconds


def _done(status: str, job_id: str, attempt: int, *, promise_id: str | None,
          state: str = "resolved", worker_id: str | None = None, **extra: Any) -> dict[str, Any]:
    if promise_id is not None:
        promises.settle(promise_id, state, now_ms=wall_clock_ms(),
                        result={"status": status, **extra}, worker_id=worker_id)
    counters.incr("receipt_attempt_outcomes_total", status=status)
    return {"status": status, "jobId": job_id, "attempt": attempt, **extra}


def _execute(promise: promises.PromiseView, worker_id: str) -> dict[str, Any]:
    job_id, attempt, pid = promise.job_id, promise.attempt, promise.id
    assert attempt is not None
    job = queue.get(job_id)
    if job is None:
        return _done("failed", job_id, attempt, promise_id=pid, state="rejected", error="missing")
    if job.is_terminal:
        return _done("terminal_state", job_id, attempt, promise_id=pid)
    if job.attempt > attempt or (job.attempt == attempt and job.status == "queued"):
        return _done("stale_attempt", job_id, attempt, promise_id=pid, state="rejected")
    if not promises.claim(pid, worker_id):  # the same delivery is running elsewhere
        return {"status": "stale_attempt", "jobId": job_id, "attempt": attempt}
    fence = Fence(worker_id, attempt)
    if job.status == "queued":
        if job.attempt != attempt - 1:
            return _done("stale_attempt", job_id, attempt, promise_id=pid, state="rejected")
        # Lease and first heartbeat in one append: the job is running under our fence.
        started = queue.lease(job_id, worker_id=worker_id, start=True, expect_attempt=attempt)
    else:
        # Redelivered work: a start-fence heartbeat proves we still hold the attempt.
        started = queue.heartbeat(job_id, fence=fence)
    if not started.applied:
        status = {Outcome.TERMINAL: "terminal_state",
                  Outcome.NOT_QUEUED: "stale_attempt"}.get(started.outcome, "lease_lost")
        return _done(status, job_id, attempt, promise_id=pid, state="rejected")
    job = started.job
    assert job is not None
    if job.abort_requested:
        return _settle(promise, job, fence, "canceled", reason=job.abort_reason)
    handler = handlers.handler_for(job.agent_id)
    if handler is None:
        return _settle(promise, job, fence, "failed", error=f"No handler for agent '{job.agent_id}'",
                       no_retry=True)
    return _run(promise, job, fence, handler)


def _run(promise: promises.PromiseView, job: JobState, fence: Fence,
         handler: handlers.Handler) -> dict[str, Any]:
    timing = TimingSettings.from_config(settings.RECEIPT)
    lease_ms = job.lease_ms or timing.job_lease_ms
    timeout_s = execution_timeout_ms(lease_ms, job.kind, timing) / 1000
    cadence_s = heartbeat_interval_ms(lease_ms, timing) / 1000
    deadline = time.monotonic() + timeout_s
    grace_s = min(cadence_s, STOP_GRACE_S)

    def pull(types: Sequence[str] | None) -> list[Command]:
        taken = queue.consume_commands(job.job_id, fence=fence, types=types)
        if taken.outcome in (Outcome.FENCE_LOST, Outcome.TERMINAL):
            ctx.stop("lease lost")
        return list(taken.commands)

    def report(data: Any) -> bool:
        written = queue.progress(job.job_id, data, fence=fence)
        if not written.applied:
            ctx.stop("lease lost")
        return written.applied

    ctx = HandlerContext(job=job, fence=fence, deadline_monotonic=deadline, pull=pull, report=report)
    run = _Run()

    def target() -> None:
        try:
            run.result = handler(job, ctx)
        except BaseException as error:  # a handler exception is a retryable failure (D-7)
            run.error = error
        finally:
            close_old_connections()

    thread = threading.Thread(target=target, name=f"handler:{job.job_id}", daemon=True)
    thread.start()
    ended_by: str | None = None
    while thread.is_alive():
        thread.join(timeout=max(0.0, min(cadence_s, deadline - time.monotonic())))
        if not thread.is_alive():
            break
        if time.monotonic() >= deadline:
            ended_by = "execution_timeout"
            ctx.stop("execution timeout")
            thread.join(grace_s)  # within one cadence, so the lease still holds when we settle
            break
        beat = queue.heartbeat(job.job_id, fence=fence)
        if not beat.applied:
            ended_by = "terminal_state" if beat.outcome is Outcome.TERMINAL else "lease_lost"
            ctx.stop("lease lost")
            break
        if beat.job is not None and beat.job.abort_requested:
            ended_by = "canceled"
            ctx.stop(beat.job.abort_reason or queue.ABORT_REQUESTED_REASON)
            thread.join(grace_s)
            break
    if ended_by in ("lease_lost", "terminal_state"):
        return _done(ended_by, job.job_id, fence.attempt, promise_id=promise.id, state="rejected",
                     worker_id=fence.worker_id)
    if ended_by == "execution_timeout":
        return _settle(promise, job, fence, "execution_timeout",
                       error=f"execution timeout after {int(timeout_s * 1000)} ms")
    if ended_by == "canceled":
        return _settle(promise, job, fence, "canceled", reason=ctx.abort_reason)
    if run.error is not None:
        return _settle(promise, job, fence, "failed", error=f"{type(run.error).__name__}: {run.error}")
    result = run.result
    if not isinstance(result, JobResult):
        return _settle(promise, job, fence, "failed", no_retry=True,
                       error=f"handler for agent '{job.agent_id}' returned {type(result).__name__}, "
                             "not JobResult")
    if result.ok:
        return _settle(promise, job, fence, "completed", result=result.result,
                       after_complete=result.after_complete)
    return _settle(promise, job, fence, "failed", error=result.error or "handler failed",
                   no_retry=result.no_retry, result=result.result)


def _settle(promise: promises.PromiseView, job: JobState, fence: Fence, status: str, *,
            error: str | None = None, no_retry: bool = False, result: Any = None,
            reason: str | None = None, after_complete: Any = None) -> dict[str, Any]:
    """Re-read, then settle under the fence (storage retry); D-5 and D-6."""

    def write() -> queue.WriteResult:
        current = queue.get(job.job_id)
        if current is None or current.is_terminal:
            return queue.WriteResult(Outcome.TERMINAL, current)
        if fence.check(current) is not FenceOutcome.OK:
            return queue.WriteResult(Outcome.FENCE_LOST, current)
        if status == "completed":
            return queue.complete(job.job_id, result, fence=fence)
        if status == "canceled":
            return queue.cancel(job.job_id, reason=reason or queue.ABORT_REQUESTED_REASON,
                                by=fence.worker_id, fence=fence)
        will_retry = not no_retry and current.attempt < current.max_attempts
        final = result if result is not None else None
        if not will_retry:  # D-6: a non-retryable failure carries its status in the result
            final = {"status": status, **(result if isinstance(result, dict) else {})}
            if result is not None and not isinstance(result, dict):
                final["value"] = result
        return queue.fail(job.job_id, error or status, fence=fence, no_retry=no_retry,
                          result=final)

    def write_with_faults() -> queue.WriteResult:
        faults.fail_once("settle_transient", OperationalError("database is locked"))
        return write()

    written = with_storage_retry(f"settle {job.job_id}", write_with_faults)
    if written.outcome is Outcome.TERMINAL:
        return _done("terminal_state", job.job_id, fence.attempt, promise_id=promise.id,
                     state="rejected", worker_id=fence.worker_id)
    if written.outcome is not Outcome.APPLIED:
        return _done("settlement_conflict", job.job_id, fence.attempt, promise_id=promise.id,
                     state="rejected", worker_id=fence.worker_id)
    settled = written.job
    assert settled is not None
    outcome = _done(status, job.job_id, fence.attempt, promise_id=promise.id,
                    worker_id=fence.worker_id, jobStatus=settled.status)
    now = wall_clock_ms()
    if settled.status in ("completed", "failed", "canceled"):
        callbacks.post(settled.status, settled, at_ms=now)
    if settled.status == "completed" and after_complete is not None:
        try:
            after_complete()
        except Exception as hook_error:  # the job is settled; the hook cannot undo it
            log_event(logger, "worker.after_complete_failed",
                      f"after_complete of {job.job_id} failed: {hook_error}",
                      level=logging.WARNING, jobId=job.job_id)
    return outcome
