"""Job reads shared by the followers of one job.

When a receipt of a job becomes final, every client following that job wakes at once
and wants the job's new state. They share one query: a follower joins a read of the
same job that started after its own poll (so the read sees the receipt it was woken
for) and only starts a new one otherwise.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
import weakref
from typing import NamedTuple

from jobs import queue
from jobs.core.state import JobState
from receipts.live import db


class _Read(NamedTuple):
    started: float
    task: asyncio.Task[JobState | None]


class JobReads:
    def __init__(self) -> None:
        self._inflight: dict[str, _Read] = {}

    async def get(self, job_id: str, *, since: float) -> JobState | None:
        """The job as read by a query that started at or after `since` (monotonic)."""
        current = self._inflight.get(job_id)
        if current is None or current.started < since:
            started = time.monotonic()
            # Its own task: a follower that disconnects must not cancel the others' read.
            task = asyncio.get_running_loop().create_task(
                db.run(queue.get, job_id), context=contextvars.Context()
            )
            current = self._inflight[job_id] = _Read(started, task)
            task.add_done_callback(functools.partial(self._finished, job_id, current))
        return await asyncio.shield(current.task)

    def _finished(self, job_id: str, read: _Read, _task: object = None) -> None:
        if self._inflight.get(job_id) is read:
            del self._inflight[job_id]
        if not read.task.cancelled():
            read.task.exception()  # retrieved here, so an unawaited failure is not logged twice


_per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, JobReads] = (
    weakref.WeakKeyDictionary()
)


async def job(job_id: str, *, since: float) -> JobState | None:
    loop = asyncio.get_running_loop()
    shared = _per_loop.get(loop)
    if shared is None:
        shared = _per_loop[loop] = JobReads()
    return await shared.get(job_id, since=since)
