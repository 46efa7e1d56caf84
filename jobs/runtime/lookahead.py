"""The next task of a worker process, seen before the current one returns.

django-q2's worker loop takes its tasks from the cluster's queue one at a time. Each
worker process of Receipt's clusters reads that queue through `Lookahead`, so an attempt
that is settling can look at the task its process runs next: the worker then settles the
one and begins the other in one statement (`jobs.runtime.worker`). A task looked at is
held by this process and is the next its loop gets; nothing is taken out of turn.
"""

from __future__ import annotations

import queue
from typing import Any

from django_q.conf import Conf

_current: list[Lookahead] = []  # this worker process's, once its loop started


class Lookahead:
    """A worker's view of its cluster's task queue (`get`, as django-q2's loop calls it)."""

    def __init__(self, tasks: Any) -> None:
        self._tasks = tasks
        self._held: list[Any] = []
        self.taken = 0  # tasks handed to the loop: django-q2 recycles the process at RECYCLE

    def get(self) -> Any:
        self.taken += 1
        return self._held.pop() if self._held else self._tasks.get()

    def peek(self) -> Any:
        """The task the loop gets next, if one is already waiting; None otherwise."""
        if not self._held:
            try:
                self._held.append(self._tasks.get_nowait())
            except queue.Empty:
                return None
        return self._held[0]


def worker(task_queue: Any, result_queue: Any, timer: Any, timeout: Any = None) -> None:
    """django-q2's worker loop over a `Lookahead` of its queue."""
    from django_q.worker import worker as q_worker  # its import sets Django up: only here

    _current[:] = [Lookahead(task_queue)]
    q_worker(_current[0], result_queue, timer, Conf.TIMEOUT if timeout is None else timeout)


def next_task() -> dict[str, Any] | None:
    """The task this process runs next, when one is waiting and the loop will get to it
    (the process is not about to be recycled)."""
    from django_q.worker import rss_check  # its import sets Django up: only here

    if not _current:
        return None
    ahead = _current[0]
    if (Conf.RECYCLE and ahead.taken + 1 >= Conf.RECYCLE) or rss_check():
        return None
    task = ahead.peek()
    return task if isinstance(task, dict) else None  # "STOP" ends the loop
