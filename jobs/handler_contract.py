"""The handler contract (D-7): `handler(job, ctx) -> JobResult`.

What a handler writes (progress here; results and error text in
`jobs.runtime.attempt.settle`) passes through `receipts.core.storable.storable` on its
way to a receipt: a NUL or a lone surrogate, which no database stores, becomes U+FFFD
instead of failing the write. Beside `jobs.handlers` (the registry): handlers import
this and nothing of the runtime that calls them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jobs.core.state import Command, Fence, JobState
from receipts.core.storable import storable


@dataclass(frozen=True)
class JobResult:
    ok: bool
    result: Any = None
    error: str | None = None
    no_retry: bool = False
    after_complete: Callable[[], None] | None = None

    @classmethod
    def success(
        cls, result: Any = None, *, after_complete: Callable[[], None] | None = None
    ) -> JobResult:
        return cls(ok=True, result=result, after_complete=after_complete)

    @classmethod
    def failure(cls, error: str, *, no_retry: bool = False, result: Any = None) -> JobResult:
        return cls(ok=False, error=error, no_retry=no_retry, result=result)


class HandlerContext:
    """What a running handler may do. Every write goes through the queue under the
    attempt fence, so a superseded attempt's writes are inert (J-3)."""

    def __init__(
        self,
        *,
        job: JobState,
        fence: Fence,
        deadline_monotonic: float,
        pull: Callable[[Sequence[str] | None], list[Command]],
        report: Callable[[Any], bool],
    ) -> None:
        self.job = job
        self.worker_id = fence.worker_id
        self.attempt = fence.attempt
        self.aborted = threading.Event()  # set on abort, lease loss or timeout
        self.abort_reason: str | None = None
        self._deadline = deadline_monotonic
        self._pull = pull
        self._report = report

    @property
    def deadline(self) -> float:
        """time.monotonic() value by which the handler must return."""
        return self._deadline

    def remaining_s(self) -> float:
        return max(0.0, self._deadline - time.monotonic())

    def pull_commands(self, types: Sequence[str] | None = None) -> list[Command]:
        """Pending queue commands (steer/follow_up/abort), marked consumed."""
        return self._pull(types)

    def progress(self, data: Any) -> bool:
        """Record `job.progress`; False when the fence was lost (stop working)."""
        return self._report(storable(data))

    def stop(self, reason: str) -> None:
        if not self.aborted.is_set():
            self.abort_reason = reason
            self.aborted.set()
