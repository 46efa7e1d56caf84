"""The dispatch pass that enqueue wakes after commit (D-2), run by one background thread
per process so the caller does not wait for it and a burst of enqueues is dispatched
many jobs per transaction.

Nothing is lost if the process dies before the pass runs: the jobs are queued receipts
and the queued redrive (L-1) starts them. `drain()` runs at interpreter exit so a short
CLI process still dispatches what it enqueued.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable

from django.db import close_old_connections, connection

from jobs.core.state import JobState
from observability.logs import log_event

logger = logging.getLogger("receipt.delivery")
BATCH = 200


class Outbox:
    def __init__(self, dispatch_batch: Callable[[list[JobState]], None]) -> None:
        self._dispatch_batch = dispatch_batch
        self._pending: deque[JobState] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._busy = 0
        self._thread: threading.Thread | None = None
        self._pid: int | None = None
        self._stopping = False

    def submit(self, jobs: list[JobState]) -> None:
        with self._lock:
            self._pending.extend(jobs)
            self._ensure_thread()
            self._wake.notify()

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive() and self._pid == os.getpid():
            return
        self._pid = os.getpid()  # a forked child starts its own thread
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="dispatch-outbox", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._stopping:
                    self._wake.wait(timeout=5)
                    if not self._pending:
                        self._release_connection()
                if self._stopping and not self._pending:
                    self._release_connection()
                    return
                batch = [self._pending.popleft() for _ in range(min(BATCH, len(self._pending)))]
                self._busy = len(batch)
            try:
                self._dispatch_batch(batch)
            except Exception as error:  # never let the thread die; L-1 recovers the jobs
                log_event(
                    logger,
                    "delivery.dispatch_error",
                    f"dispatch pass failed: {error}",
                    level=logging.WARNING,
                    jobs=len(batch),
                )
            finally:
                with self._lock:
                    self._busy = 0
                    self._wake.notify_all()

    @staticmethod
    def _release_connection() -> None:
        # Idle: give the connection back (tests drop their database; servers recycle).
        try:
            connection.close()
        except Exception:
            close_old_connections()

    def drain(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything submitted so far was dispatched; True if it was."""
        with self._lock:
            if self._thread is None or self._pid != os.getpid():
                return not self._pending
            return self._wake.wait_for(
                lambda: not self._pending and not self._busy, timeout=timeout_s
            )

    def stop(self, timeout_s: float = 10.0) -> None:
        self.drain(timeout_s)
        with self._lock:
            self._stopping = True
            self._wake.notify_all()
            thread = self._thread
        if thread is not None and thread.is_alive() and self._pid == os.getpid():
            thread.join(timeout_s)
