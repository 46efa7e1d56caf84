"""Run enqueued jobs to completion in this process, for tests: `run_jobs()`, the pytest
fixture `receipt_worker` (`jobs.testing.pytest_plugin`), and `in_process()` for code that
commits its enqueues before `run_jobs()` is called. docs/testing.md shows them.

No worker processes and no broker: while `run_jobs()` runs, and for the whole of a
`receipt_worker` test or an `in_process()` block, nothing is pushed to a Redis broker
(`transport.held`), whatever thread sends it: the deliveries are promise rows this
process drives itself. Each queued job's delivery is opened (or found) as
the enqueue's wake-up would, driven by the real driver (`jobs.runtime.driver.drive`)
and run by the real worker path (`jobs.runtime.worker.execute`: the begin that leases
and starts the attempt, the handler, the settlement under the fence). The receipts,
retries (up to the job's max attempts), callbacks and results are those of a worker;
only the lease keeper is left out (no heartbeats: a test's handler runs well within its
lease), and a retried attempt runs at once instead of at the queued redrive's pace.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from jobs.core.state import JobState
from jobs.core.wire import job_from_wire
from jobs.models import Job
from jobs.runtime import driver, keeper, transport, worker
from jobs.runtime.dispatch import OUTBOX, start_driver
from jobs.selectors import states
from receipts.clock import now_ms as wall_clock_ms

DEFAULT_MAX_ATTEMPTS = 1000  # attempts one call runs at most: a job that keeps enqueuing
ROUND = 100  # queued jobs read per pass


class StillRunnable(AssertionError):
    """`run_jobs` ran its bound of attempts and jobs were still queued (a task that keeps
    enqueuing itself, say)."""


@dataclass(frozen=True)
class Drained:
    """What `run_jobs` did: the jobs it ran an attempt of, as they ended (JobState), in the
    order it first ran them; how many attempts it ran; the ids (str) of the queued jobs it
    could not start (a delivery it could not drive, a job not yet due), the first ROUND."""

    jobs: tuple[JobState, ...]
    attempts: int
    left: tuple[str, ...]

    def job(self, job_id: str) -> JobState:
        for job in self.jobs:
            if job.job_id == job_id:
                return job
        raise KeyError(f"run_jobs did not run job {job_id}")


def run_jobs(
    *, job_ids: Iterable[str] | None = None, max_attempts: int = DEFAULT_MAX_ATTEMPTS
) -> Drained:
    """Run queued jobs (all of them, or those of `job_ids`) until none that can run is
    left, jobs they enqueue included; StillRunnable past `max_attempts` attempts. What it
    and the jobs it runs send is held in this process (`in_process`)."""
    only = None if job_ids is None else list(job_ids)
    ran: dict[str, None] = {}
    attempts = 0
    left: list[str] = []
    with in_process(), _no_lease_keeper():
        while True:
            OUTBOX.drain()  # the after-commit dispatch of what was enqueued is done first
            batch = _queued(only)
            left = [job.job_id for job in batch]
            progressed = False
            for job in batch:
                if attempts >= max_attempts:
                    raise StillRunnable(
                        f"run_jobs ran {attempts} attempts and jobs are still queued: "
                        f"{', '.join(left[:5])}"
                    )
                if _attempt(job):
                    attempts += 1
                    ran.setdefault(job.job_id)
                    progressed = True
            if not progressed:
                break
    by_id = {job.job_id: job for job in states(ran)}
    return Drained(tuple(by_id[i] for i in ran if i in by_id), attempts, tuple(left))


@contextmanager
def in_process() -> Iterator[None]:
    """Hold every dispatch in this process while the block runs: nothing is pushed to a
    Redis broker, not an enqueue's after-commit send, not a driver's or a worker's task
    (the database broker's tasks are rows of the test's database already). `run_jobs`
    runs the held work. On the way out the block waits for the dispatch pass of what it
    enqueued, so none of it is sent after the hold ends."""
    with transport.held():
        try:
            yield
        finally:
            OUTBOX.drain()


def _queued(only: list[str] | None) -> list[JobState]:
    rows = Job.objects.filter(status="queued")
    if only is not None:
        rows = rows.filter(pk__in=only)
    wires = rows.order_by("created_at", "id").values_list("state", flat=True)[:ROUND]
    return [job_from_wire(wire) for wire in wires]


def _attempt(job: JobState) -> dict[str, Any] | None:
    """One attempt of a queued job through the driver and the worker; None when the
    driver opened no attempt, or the job is not due yet (its delivery stays scheduled, as
    the `due` loop would leave it)."""
    if job.scheduled_for(wall_clock_ms()) is not None:
        return None
    started = start_driver(job)  # the job's open delivery, or a new generation of it
    if started.promise_id is None:
        return None
    driven = driver.drive(started.promise_id)
    execute_id = driven.get("execute")
    if not isinstance(execute_id, str):
        return None
    return worker.execute(execute_id)


@contextmanager
def _no_lease_keeper() -> Iterator[None]:
    """Attempts register with a keeper directory nobody watches, so no keeper thread with
    a connection of its own starts in the test's process (it would not see the test's
    transaction)."""
    if os.environ.get(keeper.DIR_ENV):
        yield
        return
    path = tempfile.mkdtemp(prefix="receipt-run-jobs-")
    os.environ[keeper.DIR_ENV] = path
    try:
        yield
    finally:
        os.environ.pop(keeper.DIR_ENV, None)
        shutil.rmtree(path, ignore_errors=True)
