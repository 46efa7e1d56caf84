"""The worker's execute-and-settle path (D-5, D-6) as a state machine the simulation
steps: the same queue and promise calls, in the same order, as `jobs/runtime/worker.py`,
but on the virtual clock and without threads, so a seeded action can land between any
two of them.

`worker.execute` cannot be driven directly: it reads the wall clock, runs the handler
in a thread and sleeps in its heartbeat loop. Keep this module in sync with it; the
mapping, line for line:

| jobs/runtime/worker.py                                   | here                          |
|----------------------------------------------------------|-------------------------------|
| execute(): promise lookup, `_running` check and add      | start(); Process.running      |
| worker_id_for(group, dispatch_key, job_id)               | Process.worker_id (D-10)      |
| _execute(): get; terminal; stale attempt; promises.claim;| start()                       |
|   lease(start=True, expect_attempt) or start-fence beat; |                               |
|   outcome map; abort -> cancel; no handler -> failed     |                               |
| _run(): handler thread started, deadline = timeout (K-7) | start() returns an Attempt    |
| _run() loop wakes: deadline passed -> execution_timeout  | beat()                        |
| _run() loop wakes: queue.heartbeat; lost -> lease_lost / | beat()                        |
|   terminal_state; abort requested -> canceled            |                               |
| handler calls ctx.progress / ctx.pull_commands           | report()                      |
| handler returns JobResult ok / failure, or raises        | finish()                      |
| _settle(): re-read, fence check, complete / cancel /     | settle(); `transient` errors  |
|   fail with the D-6 result, in with_storage_retry around |   injected where the          |
|   faults.fail_once("settle_transient")                   |   failpoint is, no-op sleep   |
| _done(): promises.settle(state, result, worker_id)       | _done()                       |
| callbacks.post after a settlement                        | the same call (no URL is      |
|                                                          |   configured during a run)    |
| execute()'s `finally: _running.discard`                  | _end() on every final path    |
| an exception out of execute (tasks._guarded logs it;     | settle() when the storage     |
|   the promise stays pending)                             |   retry gives up              |
| the process is SIGKILLed                                 | World.crash                   |

Not modelled: the handler itself (the seed decides how it ends), `after_complete`, a
handler returning something other than a JobResult, counters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DatabaseError, OperationalError

from jobs import handlers, queue
from jobs.core.reducer import Fence, FenceOutcome
from jobs.core.timing import TimingSettings, execution_timeout_ms
from jobs.queue import Outcome
from jobs.runtime import callbacks, promises
from jobs.runtime.storage_retry import with_storage_retry
from jobs.simulation.world import Attempt, Process, World

HANDLER_ERROR = "simulated handler failure"
HANDLER_EXCEPTION = "RuntimeError: simulated handler exception"  # D-7: type and text


@dataclass(frozen=True)
class Step:
    """What one worker step did: a D-6 status, or `running` / `beat` / `progress` while
    the handler runs, or `error` when an exception left `execute`."""

    status: str
    attempt: Attempt | None = None
    note: str = ""

    def describe(self, label: str) -> str:
        extra = f" ({self.note})" if self.note else ""
        return f"{label} -> {self.status}{extra}"


def _no_sleep(seconds: float) -> None:
    """The storage retry's backoff costs no virtual time: nothing else runs meanwhile."""


def _timing() -> TimingSettings:
    return TimingSettings.from_config(settings.RECEIPT)


def _done(world: World, status: str, *, promise_id: str | None, state: str = "resolved",
          worker_id: str | None = None, **extra: Any) -> Step:
    if promise_id is not None:
        promises.settle(promise_id, state, now_ms=world.clock.now_ms,
                        result={"status": status, **extra}, worker_id=worker_id)
    return Step(status)


def _end(attempt: Attempt) -> None:
    if attempt.process.running.get(attempt.key) is attempt:
        del attempt.process.running[attempt.key]


def start(world: World, process: Process, promise_id: str) -> Step:
    """A delivered execute task: `execute` and `_execute` up to the handler's start."""
    now = world.clock.now_ms
    promise = promises.get(promise_id, now_ms=now)
    if promise is None or promise.function != "execute" or promise.attempt is None:
        return Step("failed", note="unknown execute promise")
    job_id, number = promise.job_id, promise.attempt
    if (job_id, number) in process.running:
        return _done(world, "stale_attempt", promise_id=None)
    worker_id = process.worker_id(promise.dispatch_key, job_id)
    pid = promise.id
    job = queue.get(job_id)
    if job is None:
        return _done(world, "failed", promise_id=pid, state="rejected", error="missing")
    if job.is_terminal:
        return _done(world, "terminal_state", promise_id=pid)
    if job.attempt > number or (job.attempt == number and job.status == "queued"):
        return _done(world, "stale_attempt", promise_id=pid, state="rejected")
    if not promises.claim(pid, worker_id):  # claimed by another worker, or swept (timedout)
        return Step("stale_attempt", note="not claimable")
    fence = Fence(worker_id, number)
    if job.status == "queued":
        if job.attempt != number - 1:
            return _done(world, "stale_attempt", promise_id=pid, state="rejected")
        started = queue.lease(job_id, worker_id=worker_id, start=True, expect_attempt=number,
                              now_ms=now)
    else:
        started = queue.heartbeat(job_id, fence=fence, now_ms=now)
    if not started.applied:
        status = {Outcome.TERMINAL: "terminal_state",
                  Outcome.NOT_QUEUED: "stale_attempt"}.get(started.outcome, "lease_lost")
        return _done(world, status, promise_id=pid, state="rejected")
    job = started.job
    assert job is not None
    lease_ms = job.lease_ms or _timing().job_lease_ms
    attempt = Attempt(process=process, promise=promise, job_index=world.index_of(job_id),
                      job=job, fence=fence, started_ms=now,
                      timeout_ms=execution_timeout_ms(lease_ms, job.kind, _timing()))
    if job.abort_requested:
        return settle(world, attempt, "canceled", reason=job.abort_reason)
    if handlers.handler_for(job.agent_id) is None:
        return settle(world, attempt, "failed", no_retry=True,
                      error=f"No handler for agent '{job.agent_id}'")
    process.running[attempt.key] = attempt
    return Step("running", attempt)


def stop(attempt: Attempt, reason: str) -> None:
    """ctx.stop: the first reason sticks."""
    if attempt.stopped is None:
        attempt.stopped = reason


def beat(world: World, attempt: Attempt) -> Step:
    """The heartbeat loop wakes while the handler is still running."""
    now = world.clock.now_ms
    if now >= attempt.deadline_ms:
        stop(attempt, "execution timeout")
        return settle(world, attempt, "execution_timeout",
                      error=f"execution timeout after {attempt.timeout_ms} ms")
    job, fence = attempt.job, attempt.fence
    written = queue.heartbeat(job.job_id, fence=fence, now_ms=now)
    if not written.applied:
        ended = "terminal_state" if written.outcome is Outcome.TERMINAL else "lease_lost"
        stop(attempt, "lease lost")
        _end(attempt)
        return _done(world, ended, promise_id=attempt.promise.id, state="rejected",
                     worker_id=fence.worker_id)
    if written.job is not None and written.job.abort_requested:
        stop(attempt, written.job.abort_reason or queue.ABORT_REQUESTED_REASON)
        return settle(world, attempt, "canceled", reason=attempt.stopped)
    return Step("beat", attempt)


def report(world: World, attempt: Attempt, *, pull_first: bool) -> Step:
    """The handler reports progress and reads its commands (ctx.progress, ctx.pull_commands)."""
    now = world.clock.now_ms
    job, fence = attempt.job, attempt.fence
    notes = []
    for call in (("pull", "progress") if pull_first else ("progress", "pull")):
        if call == "progress":
            written = queue.progress(job.job_id, {"step": world.step}, fence=fence, now_ms=now)
            if not written.applied:
                stop(attempt, "lease lost")
            notes.append(f"progress {written.outcome.value}")
        else:
            taken = queue.consume_commands(job.job_id, fence=fence, now_ms=now)
            if taken.outcome in (Outcome.FENCE_LOST, Outcome.TERMINAL):
                stop(attempt, "lease lost")
            notes.append(f"pulled {len(taken.commands)}")
    return Step("progress", attempt, note=", ".join(notes))


def finish(world: World, attempt: Attempt, how: str, *, no_retry: bool = False,
           transient: int = 0, crash_after: bool = False) -> Step:
    """The handler returns (`ok`, `fail`) or raises (`raise`); the worker settles."""
    if how == "ok":
        return settle(world, attempt, "completed", result={"simulated": True},
                      transient=transient, crash_after=crash_after)
    if how == "fail":
        return settle(world, attempt, "failed", error=HANDLER_ERROR, no_retry=no_retry,
                      transient=transient, crash_after=crash_after)
    if how == "raise":
        return settle(world, attempt, "failed", error=HANDLER_EXCEPTION,
                      transient=transient, crash_after=crash_after)
    raise ValueError(f"unknown handler ending {how!r}")


def settle(world: World, attempt: Attempt, status: str, *, error: str | None = None,
           no_retry: bool = False, result: Any = None, reason: str | None = None,
           transient: int = 0, crash_after: bool = False) -> Step:
    """`_settle`: re-read, settle under the fence with the storage retry (D-5, D-6).

    `transient` storage errors are raised where worker.py has its `settle_transient`
    failpoint; five of them exhaust the retry. `crash_after` kills the process right
    after the settlement commits, before the promise is settled.
    """
    job, fence = attempt.job, attempt.fence

    def write() -> queue.WriteResult:
        now = world.clock.now_ms
        current = queue.get(job.job_id)
        if current is None or current.is_terminal:
            return queue.WriteResult(Outcome.TERMINAL, current)
        if fence.check(current) is not FenceOutcome.OK:
            return queue.WriteResult(Outcome.FENCE_LOST, current)
        if status == "completed":
            return queue.complete(job.job_id, result, fence=fence, now_ms=now)
        if status == "canceled":
            return queue.cancel(job.job_id, reason=reason or queue.ABORT_REQUESTED_REASON,
                                by=fence.worker_id, fence=fence, now_ms=now)
        will_retry = not no_retry and current.attempt < current.max_attempts
        final = result if result is not None else None
        if not will_retry:  # D-6: a non-retryable failure carries its status in the result
            final = {"status": status, **(result if isinstance(result, dict) else {})}
            if result is not None and not isinstance(result, dict):
                final["value"] = result
        return queue.fail(job.job_id, error or status, fence=fence, no_retry=no_retry,
                          result=final, now_ms=now)

    remaining = [transient]

    def write_with_faults() -> queue.WriteResult:
        if remaining[0] > 0:
            remaining[0] -= 1
            raise OperationalError("database is locked")
        return write()

    try:
        written = with_storage_retry(f"settle {job.job_id}", write_with_faults, sleep=_no_sleep)
    except DatabaseError as exc:  # out of execute(): logged by tasks._guarded, promise pending
        _end(attempt)
        return Step("error", note=f"{type(exc).__name__}: {exc}")
    if crash_after:
        world.crash(attempt.process)
        return Step("crashed", note=f"after {written.outcome.value} settlement")
    _end(attempt)
    if written.outcome is Outcome.TERMINAL:
        return _done(world, "terminal_state", promise_id=attempt.promise.id, state="rejected",
                     worker_id=fence.worker_id)
    if written.outcome is not Outcome.APPLIED:
        return _done(world, "settlement_conflict", promise_id=attempt.promise.id,
                     state="rejected", worker_id=fence.worker_id)
    settled = written.job
    assert settled is not None
    step = _done(world, status, promise_id=attempt.promise.id, worker_id=fence.worker_id,
                 jobStatus=settled.status)
    if settled.status in ("completed", "failed", "canceled"):
        callbacks.post(settled.status, settled, at_ms=world.clock.now_ms)
    retries = f"{transient} storage retries" if transient else ""
    return Step(step.status, note=", ".join(x for x in (f"job {settled.status}", retries) if x))
