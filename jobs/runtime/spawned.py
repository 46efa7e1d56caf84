"""What handlers started in this process that outlives a Python call: task commands (C-9).

The worker runs a handler again after a transient error of the platform's database
(`worker._call_handler`). That is only safe while the handler has started nothing: a
command it started may still run, or has already had its effects, and a second call
would start it again within the same attempt. Whatever starts a command reports it
here (`objectives.processes.run`), and the worker compares the count around each call.

Counts are per process, not per handler: a worker process runs one attempt at a time,
and a count that moved for any other reason only makes the worker more careful.
Standard library only.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_started = 0
_live: set[int] = set()


@contextmanager
def command(pid: int) -> Iterator[None]:
    """Around the life of a started command (its pid): counted as started at once, as
    live until the block ends."""
    global _started
    with _lock:
        _started += 1
        _live.add(pid)
    try:
        yield
    finally:
        with _lock:
            _live.discard(pid)


def started() -> int:
    """How many commands this process has started so far."""
    with _lock:
        return _started


def live() -> int:
    """How many commands this process started are still being followed."""
    with _lock:
        return len(_live)
