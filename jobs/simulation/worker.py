"""A simulated worker process running attempts (D-5, D-6, D-10): the real attempt
machine (`jobs.runtime.attempt`) stepped on the virtual clock, without threads, so a
seeded action can land between any two of its durable steps.

Every durable step is the real one: this module decides nothing about a job or a
promise. It owns what the worker's threads and process own in production: which
attempts this process runs (`Process.running`, the worker's `_running`), the handler's
deadline, the stop the handler was told, how the handler ends (the seed decides), and
the faults a process can meet (transient storage errors, dying after a settlement).

| jobs/runtime/worker.py                                 | here          | real call                |
|--------------------------------------------------------|---------------|--------------------------|
| execute(): read the promise                            | start()       | promises.read_execute    |
| execute(): `_running` check and add                    | start()       | (Process.running)        |
| worker_id_for(group, dispatch_key, job_id)             | start()       | Process.worker_id (D-10) |
| execute(): claim + start the attempt, one transaction  | start()       | attempt.begin            |
| _run(): handler started, deadline = timeout (K-7)      | start()       | returns an Attempt       |
| keeper heartbeats the lease; watcher reads its order   | beat()        | attempt.beat             |
| _watch(): deadline passed -> execution_timeout         | beat()        | attempt.settle           |
| _settle_after(): ended_by canceled                     | beat()        | attempt.settle           |
| _settle_after(): ended_by lease_lost / terminal_state  | beat()        | attempt.abandon          |
| the handler's ctx.progress / ctx.pull_commands         | report()      | queue.progress,          |
|                                                        |               | queue.consume_commands   |
| the handler returns ok / failure or raises;            | finish(),     | attempt.settle           |
|   _settle_after() settles it                           |   settle()    |                          |
| faults.fail_once("settle_transient")                   | settle()      | attempt.settle(inject=)  |
| the storage retry's backoff sleep                      | settle()      | attempt.settle(sleep=)   |
| execute()'s `finally: _running.discard`                | _end()        | (Process.running)        |
| an exception out of execute (the storage retry gave    | settle()      | the promise stays        |
|   up; tasks._guarded logs it)                          |   -> `error`  |   claimed and pending    |
| the process is SIGKILLed                               | World.crash   | lease expiry recovers    |

Where the real worker would let the handler run on after a stop order and settle when
it returns, a step here settles at once: the handler's return value cannot change a
stopped attempt's settlement (`_settle_after` reads `ended_by` first). `beat()` looks at
the deadline before it heartbeats: the watcher woke past the deadline before the
keeper's next beat.

Not modelled: the handler itself (the seed decides how it ends), its transient-error
rerun (`_call_handler`), `after_complete`, a handler returning something other than a
JobResult, counters. A simulated process is a whole runworker with one worker process:
no siblings share its worker id, and a crash replaces it under a new one, so the
keeper's early release of a dead process's lease is left to lease expiry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, OperationalError

from jobs import queue
from jobs.core.timing import execution_timeout_ms
from jobs.queue import Outcome
from jobs.runtime import attempt as attempts
from jobs.runtime import promises
from jobs.simulation.world import Attempt, Process, World
from jobs.timing_config import current_timing

HANDLER_ERROR = "simulated handler failure"
HANDLER_EXCEPTION = "RuntimeError: simulated handler exception"  # D-7: type and text


@dataclass(frozen=True)
class Step:
    """What one worker step did: a D-6 status, or `running` / `beat` / `progress` while
    the handler runs, `crashed` when the process died, or `error` when an exception left
    `execute`."""

    status: str
    attempt: Attempt | None = None
    note: str = ""

    def describe(self, label: str) -> str:
        extra = f" ({self.note})" if self.note else ""
        return f"{label} -> {self.status}{extra}"


def _no_sleep(seconds: float) -> None:
    """The storage retry's backoff costs no virtual time: nothing else runs meanwhile."""


def _end(attempt: Attempt) -> None:
    """`_running.discard`: the process no longer runs this attempt."""
    if attempt.process.running.get(attempt.key) is attempt:
        del attempt.process.running[attempt.key]


def _ended(world: World, ended: attempts.Ended, *, retries: int = 0) -> Step:
    """`_finish`: what a settlement this step wrote leaves behind."""
    settled = ended.job
    notes = []
    if settled is not None:
        notes.append(f"job {settled.status}")
    if retries:
        notes.append(f"{retries} storage retries")
    return Step(ended.status, note=", ".join(notes))


def start(world: World, process: Process, promise_id: str) -> Step:
    """A delivered execute task: `execute` up to the handler's start."""
    known = promises.read_execute(promise_id)
    if known is None:
        return Step("failed", note="unknown execute promise")
    job_id, number, _group, dispatch_key = known
    if (job_id, number) in process.running:  # the same attempt already runs in this process
        return Step("stale_attempt", note="running in this process")
    now = world.clock.now_ms
    begun = attempts.begin(
        promise_id,
        job_id=job_id,
        attempt=number,
        worker_id=process.worker_id(dispatch_key, job_id),
        now_ms=now,
    )
    if isinstance(begun, attempts.Ended):
        return _ended(world, begun)
    job = begun.job
    timing = current_timing()
    attempt = Attempt(
        process=process,
        running=begun,
        job_index=world.index_of(job_id),
        started_ms=now,
        timeout_ms=execution_timeout_ms(job.lease_ms or timing.job_lease_ms, job.kind, timing),
    )
    process.running[attempt.key] = attempt
    return Step("running", attempt)


def stop(attempt: Attempt, reason: str) -> None:
    """ctx.stop: the first reason sticks."""
    if attempt.stopped is None:
        attempt.stopped = reason


def beat(world: World, attempt: Attempt) -> Step:
    """The keeper beats the lease and the watcher wakes while the handler still runs."""
    now = world.clock.now_ms
    if now >= attempt.deadline_ms:
        stop(attempt, "execution timeout")
        return settle(
            world,
            attempt,
            "execution_timeout",
            error=f"execution timeout after {attempt.timeout_ms} ms",
        )
    order = attempts.beat(attempt.job.job_id, attempt.fence, now_ms=now)
    if order.stop is None:
        return Step("beat", attempt)
    stop(attempt, order.stop)
    if order.ended_by == "canceled":
        return settle(world, attempt, "canceled", reason=attempt.stopped)
    _end(attempt)
    return _ended(
        world, attempts.abandon(attempt.running, order.ended_by or "lease_lost", now_ms=now)
    )


def report(world: World, attempt: Attempt, *, pull_first: bool) -> Step:
    """The handler reports progress and reads its commands (ctx.progress, ctx.pull_commands)."""
    now = world.clock.now_ms
    job, fence = attempt.job, attempt.fence
    notes = []
    for call in ("pull", "progress") if pull_first else ("progress", "pull"):
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


def finish(
    world: World,
    attempt: Attempt,
    how: str,
    *,
    no_retry: bool = False,
    transient: int = 0,
    crash_after: bool = False,
) -> Step:
    """The handler returns (`ok`, `fail`) or raises (`raise`); the worker settles."""
    endings: dict[str, dict[str, Any]] = {
        "ok": {"status": "completed", "result": {"simulated": True}},
        "fail": {"status": "failed", "error": HANDLER_ERROR, "no_retry": no_retry},
        "raise": {"status": "failed", "error": HANDLER_EXCEPTION},
    }
    if how not in endings:
        raise ValueError(f"unknown handler ending {how!r}")
    return settle(world, attempt, transient=transient, crash_after=crash_after, **endings[how])


def settle(
    world: World,
    attempt: Attempt,
    status: str,
    *,
    error: str | None = None,
    no_retry: bool = False,
    result: Any = None,
    reason: str | None = None,
    transient: int = 0,
    crash_after: bool = False,
) -> Step:
    """`attempt.settle`: the settlement and the promise in one transaction, under the
    storage retry (D-5, D-6).

    The first `transient` tries fail with a transient storage error (`inject`, where the
    `settle_transient` failpoint is); five of them exhaust the retry and the exception
    leaves `execute`. `crash_after` kills the process right after the settlement
    transaction commits, before the callback.
    """
    remaining = [transient]

    def inject() -> None:
        if remaining[0] > 0:
            remaining[0] -= 1
            raise OperationalError("database is locked")

    try:
        ended = attempts.settle(
            attempt.running,
            status,
            now_ms=lambda: world.clock.now_ms,
            error=error,
            no_retry=no_retry,
            result=result,
            reason=reason,
            sleep=_no_sleep,
            inject=inject,
        )
    except DatabaseError as exc:  # out of execute(): logged by tasks._guarded, promise pending
        _end(attempt)
        return Step("error", note=f"{type(exc).__name__}: {exc}")
    if crash_after:
        world.crash(attempt.process)
        return Step("crashed", note=f"after {ended.status} settlement")
    _end(attempt)
    return _ended(world, ended, retries=transient)
