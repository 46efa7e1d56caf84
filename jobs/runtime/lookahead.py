"""django-q2's worker loop over Receipt's views of its two queues.

- Tasks: the loop takes its tasks from the cluster's queue one at a time, through
  `Lookahead`, so an attempt that is settling can look at the task its process runs next:
  the worker then settles the one and begins the other in one statement
  (`jobs.runtime.worker`). A task looked at is held by this process and is the next its
  loop gets; nothing is taken out of turn.
- Results: the loop hands every finished task to the cluster's monitor, which for a
  success on Receipt's clusters does nothing but drop it (`Results`).
"""

from __future__ import annotations

import queue
from typing import Any

from django.utils.module_loading import import_string
from django_q.conf import Conf

from jobs.runtime.promisebroker import PromiseBroker

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


class Results:
    """The monitor's queue as the worker loop sees it (`put`, as django-q2's loop calls it).

    The monitor saves a finished task, acknowledges it with the broker and sends
    `post_execute`. For a success on Receipt's clusters none of that does anything:
    successes are not saved (save_limit < 0), Receipt's brokers acknowledge nothing (the
    promise broker's claim and settle are the acknowledgement; a task popped from Redis is
    gone), and when no receiver listens to `post_execute` such a task is not sent at all.
    Its pickling, the queue's feeder thread and the monitor's unpickling were about a
    sixth of a draining runworker's CPU. Failures go to the monitor as before.
    """

    def __init__(self, results: Any, *, drops_successes: bool) -> None:
        # django-q2's signals module imports its models: only once Django's apps are loaded
        from django_q.signals import post_execute

        self._results = results
        self._drops_successes = drops_successes
        self._post_execute = post_execute

    def put(self, task: Any) -> None:
        if not (self._drops_successes and self._only_dropped(task)):
            self._results.put(task)

    def _only_dropped(self, task: Any) -> bool:
        """Whether the monitor would do nothing with this finished task but drop it."""
        return (
            isinstance(task, dict)
            and task.get("success") is True
            and not task.get("cached")
            and not task.get("save", Conf.SAVE_LIMIT >= 0)
            and not self._post_execute.has_listeners("django_q")
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._results, name)


def acknowledges_nothing() -> bool:
    """Whether this process's broker acknowledges nothing: Receipt's promise broker, or
    django-q2's Redis broker (the broker of a cluster that names no other one)."""
    if Conf.BROKER_CLASS:
        return import_string(Conf.BROKER_CLASS) is PromiseBroker
    return not (Conf.ORM or Conf.SQS or Conf.IRON_MQ or Conf.MONGO)


def worker(task_queue: Any, result_queue: Any, timer: Any, timeout: Any = None) -> None:
    """django-q2's worker loop over a `Lookahead` of its tasks and `Results`."""
    from django_q.worker import worker as q_worker  # its import sets Django up: only here

    _current[:] = [Lookahead(task_queue)]
    results = Results(result_queue, drops_successes=acknowledges_nothing())
    q_worker(_current[0], results, timer, Conf.TIMEOUT if timeout is None else timeout)


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
